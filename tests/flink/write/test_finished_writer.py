"""Finished operators (FLIP-147) in the savepoints kg writes (``flink.write.finished``, ``savepoint_writer``).

The fixtures are Flink 2.3's own (``fixtures/flink/2.3/README-finished.md``): a fully finished bounded source
(savepoint and retained checkpoint) and a partially finished one. Real-Flink restores of kg's output are in
``tests/restore/test_finished_operators.py``; these tests pin what kg writes, without Java.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.reader import OperatorState, SubtaskState, parse_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from keygroup_cli.flink.write.finished import FINISHED_SUBTASK_NOT_KEPT, finished_markers, keyed_receivers

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "flink" / "2.3"
FULLY = FIXTURES / "finished-fully-source-p3"
FULLY_CHECKPOINT = next((FIXTURES / "finished-fully-source-checkpoint-p3").glob("*/chk-*"))
PARTIALLY = FIXTURES / "finished-partially-source-p2"
FINISHED_CHAIN = ("bounded-source", "bounded-tag")


def _operators(savepoint: Path) -> dict[str, OperatorState]:
    return {op.uid or op.operator_id: op for op in read_flink_metadata(savepoint).metadata.operators}


def _finished(op: OperatorState) -> list[int]:
    return [s.index for s in op.subtasks if s.finished]


def _referenced(savepoint: Path) -> set[str]:
    names = set()
    for op in read_flink_metadata(savepoint).metadata.operators:
        for sub in op.subtasks:
            for handle in (sub.managed_keyed_state, sub.managed_operator_state):
                delegate = getattr(handle, "delegate", None)
                if delegate is not None and hasattr(delegate, "relative_path"):
                    names.add(delegate.relative_path)
    return names


def test_the_fixtures_hold_what_flink_wrote() -> None:
    for source in (FULLY, FULLY_CHECKPOINT):
        ops = _operators(source)
        for uid in FINISHED_CHAIN:
            assert (ops[uid].fully_finished, ops[uid].parallelism, ops[uid].subtasks) == (True, 3, ())
        assert not ops["keyed-sum"].fully_finished and not _finished(ops["keyed-sum"])
    ops = _operators(PARTIALLY)
    assert _finished(ops["partial-source"]) == [0] and _finished(ops["partial-tag"]) == [0]
    assert not _finished(ops["keyed-sum"])


@pytest.mark.parametrize("source", [FULLY, FULLY_CHECKPOINT], ids=["savepoint", "checkpoint"])
@pytest.mark.parametrize(("new_p", "new_max"), [(4, None), (2, 256)])
def test_a_fully_finished_operator_stays_fully_finished_at_any_layout(
    source: Path, new_p: int, new_max: int | None, tmp_path: Path
) -> None:
    rescale(source, tmp_path / "out", new_p, from_parallelism=3, new_max_parallelism=new_max, engine="local")
    ops = _operators(tmp_path / "out")
    for uid in FINISHED_CHAIN:
        op = ops[uid]
        assert (op.fully_finished, op.subtasks, op.coordinator_state) == (True, (), None)
        assert (op.parallelism, op.max_parallelism) == (new_p, new_max or 128)
    assert ops["keyed-sum"].parallelism == new_p and not ops["keyed-sum"].fully_finished


def test_the_kg_snapshot_route_keeps_a_fully_finished_operator(tmp_path: Path) -> None:
    savepoint_to_snapshot(FULLY, tmp_path / "kg")
    rescale(tmp_path / "kg", tmp_path / "kg4", 4, from_parallelism=3, engine="local")
    snapshot_to_savepoint(tmp_path / "kg4", tmp_path / "sp4")
    ops = _operators(tmp_path / "sp4")
    assert all(ops[uid].fully_finished and ops[uid].parallelism == 4 for uid in FINISHED_CHAIN)


def test_an_unchanged_layout_keeps_flinks_markers_and_bytes(tmp_path: Path) -> None:
    savepoint_to_snapshot(PARTIALLY, tmp_path / "kg")
    snapshot_to_savepoint(tmp_path / "kg", tmp_path / "back")
    ops = _operators(tmp_path / "back")
    assert _finished(ops["partial-source"]) == [0] and _finished(ops["partial-tag"]) == [0]
    original = parse_metadata((FULLY / "_metadata").read_bytes())
    assert write_metadata(original) == (FULLY / "_metadata").read_bytes()


@pytest.mark.parametrize(("operators", "tag_p"), [(None, 3), (["partial-source"], 2)])
def test_a_partially_finished_operator_keeps_a_marker_at_a_new_parallelism(
    operators: list[str] | None, tag_p: int, tmp_path: Path
) -> None:
    rescale(PARTIALLY, tmp_path / "out", 3, operators=operators, engine="local")
    ops = _operators(tmp_path / "out")
    assert ops["partial-source"].parallelism == 3 and ops["partial-tag"].parallelism == tag_p
    # No subtask of either gets state (the source's split list is empty): subtask 0 keeps its marker.
    assert _finished(ops["partial-source"]) == [0] and _finished(ops["partial-tag"]) == [0]


def _partially_finished_keyed(tmp_path: Path) -> Path:
    """PARTIALLY with keyed-sum's subtask 1 finished too (its keys dropped, as Flink drops them)."""
    dest = tmp_path / "keyed-finished"
    shutil.copytree(PARTIALLY, dest)
    md = parse_metadata((dest / "_metadata").read_bytes())
    ops = tuple(
        replace(op, subtasks=(op.subtasks[0], SubtaskState(1, finished=True)))
        if op.uid == "keyed-sum"
        else op
        for op in md.operators
    )
    (dest / "_metadata").write_bytes(write_metadata(replace(md, operators=ops)))
    return dest


def test_a_marker_moves_to_a_new_subtask_without_state_and_no_file_is_left(tmp_path: Path) -> None:
    source = _partially_finished_keyed(tmp_path)
    keyed = _operators(source)["keyed-sum"]
    receives = keyed_receivers(keyed, 3, 128)
    assert receives.count(False) >= 1, receives
    rescale(source, tmp_path / "out", 3, operators=["keyed-sum"], engine="local")
    out = _operators(tmp_path / "out")["keyed-sum"]
    assert _finished(out) == [receives.index(False)]
    assert all(s.has_state for s in out.subtasks if not s.finished)
    on_disk = {p.name for p in (tmp_path / "out").iterdir()} - {"_metadata"}
    assert on_disk == _referenced(tmp_path / "out")


@pytest.mark.parametrize(("new_p", "new_max"), [(1, None), (2, 256)])
def test_a_partially_finished_operator_whose_every_subtask_gets_state_is_refused(
    new_p: int, new_max: int | None, tmp_path: Path
) -> None:
    source = _partially_finished_keyed(tmp_path)
    with pytest.raises(InvalidArgumentError) as err:
        rescale(
            source,
            tmp_path / "out",
            new_p,
            operators=["keyed-sum", "sum-sink"],  # its chain; the others keep (2, 128)
            new_max_parallelism=new_max,
            engine="local",
        )
    assert err.value.code == FINISHED_SUBTASK_NOT_KEPT
    assert "'keyed-sum' is partially finished (subtasks [1] finished)" in err.value.message
    assert "\n" not in err.value.message
    assert not (tmp_path / "out").exists()


def test_the_kg_snapshot_route_refuses_before_writing(tmp_path: Path) -> None:
    savepoint_to_snapshot(_partially_finished_keyed(tmp_path), tmp_path / "kg")
    rescale(tmp_path / "kg", tmp_path / "kg1", 1, operators=["keyed-sum"], engine="local")
    with pytest.raises(InvalidArgumentError) as err:
        snapshot_to_savepoint(tmp_path / "kg1", tmp_path / "sp1")
    assert err.value.code == FINISHED_SUBTASK_NOT_KEPT
    assert not (tmp_path / "sp1").exists()


def test_finished_markers() -> None:
    assert finished_markers("op", [], [True, True]) == ()
    assert finished_markers("op", [1], [True, False, False]) == (1,)
    assert finished_markers("op", [0, 3], [False, True, False]) == (0,)
    assert finished_markers("op", [0], [True, True, False]) == (2,)
    with pytest.raises(InvalidArgumentError, match="at parallelism 2 and maxParallelism 64 every subtask"):
        finished_markers("op", [0], [True, True], max_parallelism=64)
