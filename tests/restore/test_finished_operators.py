"""Real Flink 2.3 restores kg's rescale of savepoints with FINISHED operators as it restores its own rescale.

Fixtures (``fixtures/flink/2.3/README-finished.md``, ``kg.fixtures.FinishedJob``):

- ``finished-fully-source-p3`` (CANONICAL savepoint) and ``finished-fully-source-checkpoint-p3`` (retained
  HashMap checkpoint): a bounded source at p 3 (``bounded-source`` with ``bounded-tag`` chained) that has
  finished, so both are ``FullyFinishedOperatorState``; an idle ``live-source`` (p 1) and ``keyed-sum`` (p 3)
  keep running.
- ``finished-partially-source-p2``: ``partial-source`` (p 2) whose subtask 0 finished, ``partial-tag`` behind
  it on a POINTWISE (``rescale()``) edge with its subtask 0 finished too, and ``keyed-sum`` (p 2).

Each kg rescale is restored by Flink at the new parallelism, and so is the original (Flink's own rescale):
the two dumps must be identical (every vertex's task states, the readers each source created and the records
they emitted, keyed-sum's restored keys and its state once the job settled). A finished source must not run
again. Where Flink refuses its own rescale for a changed job (an operator added to the finished chain;
``rebalance()`` instead of ``rescale()`` before the partially finished tag), it must refuse kg's output with
the same message. One JVM for all restores of this module (marker ``flink``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.restore.harness import CASES, Dump, restore_error, run_finished_restores

pytestmark = pytest.mark.flink

FULLY = CASES / "finished-fully-source-p3"
FULLY_CHECKPOINT = next((CASES / "finished-fully-source-checkpoint-p3").glob("*/chk-*"))
PARTIALLY = CASES / "finished-partially-source-p2"
FULLY_P4 = {"bounded-source": 4, "keyed-sum": 4}

#: name -> (input, kg rescale options or None for Flink's own rescale of the input, restore request)
RestoreCase = tuple[Path, dict[str, Any] | None, dict[str, Any]]


def _cases() -> dict[str, RestoreCase]:
    fully = {"job": "fully", "parallelism": FULLY_P4}
    partial_all = {"job": "partially", "parallelism": {"partial-source": 3, "partial-tag": 3, "keyed-sum": 3}}
    partial_src = {"job": "partially", "parallelism": {"partial-source": 3, "partial-tag": 2, "keyed-sum": 2}}
    from3 = {"new_parallelism": 4, "from_parallelism": 3}
    to3 = {"new_parallelism": 3}
    source_only = {"new_parallelism": 3, "operators": ["partial-source"]}
    cases: dict[str, RestoreCase] = {}
    for name, source, kg, request in (
        ("fully", FULLY, from3, fully),
        ("fully-checkpoint", FULLY_CHECKPOINT, from3, fully),
        ("fully-added-operator", FULLY, from3, {**fully, "added_operator": True}),
        ("partially", PARTIALLY, to3, partial_all),
        ("partially-source-only", PARTIALLY, source_only, partial_src),
        ("partially-rebalance", PARTIALLY, to3, {**partial_all, "tag_edge": "rebalance"}),
    ):
        cases[f"flink-{name}"] = (source, None, request)
        cases[f"kg-{name}"] = (source, kg, request)
    return cases


@pytest.fixture(scope="module")
def kg_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """kg's rescales of the fixtures, one per distinct (input, options)."""
    out = tmp_path_factory.mktemp("finished")
    written: dict[str, Path] = {}
    for name, (source, kg, _request) in _cases().items():
        if kg is None:
            continue
        dest = out / name
        rescale(source, dest, engine="local", **kg)
        written[name] = dest
    return written


@pytest.fixture(scope="module")
def restored(
    flink_classpath: str, kg_outputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Dump]:
    cases = _cases()
    requests = [
        {**request, "savepoint": kg_outputs.get(name, source)} for name, (source, _, request) in cases.items()
    ]
    dumps = run_finished_restores(requests, tmp_path_factory.mktemp("finished-restore"), flink_classpath)
    return dict(zip(cases, dumps, strict=True))


def _comparable(dump: Dump) -> Dump:
    return {k: v for k, v in dump.items() if k != "request"}


def _expected_state(ids: list[int], keys: int) -> dict[str, list[int]]:
    """keyed-sum's state per key (``"%05d"``): [sum of the key's ids, their count]."""
    state: dict[str, list[int]] = {}
    for i in ids:
        entry = state.setdefault(f"{i % keys:05d}", [0, 0])
        entry[0] += i
        entry[1] += 1
    return state


#: bounded-source's ids 0..299 and live-source's 1000..1299 by i % 30; partial-source's 0..199 by i % 20.
FULLY_STATE = _expected_state([*range(300), *range(1000, 1300)], 30)
PARTIALLY_STATE = _expected_state(list(range(200)), 20)


def _restored_state(dump: Dump) -> dict[str, list[int]]:
    return {f"{k['key']:05d}": [k["sum"], k["count"]] for k in dump["restoredKeys"]}


@pytest.mark.parametrize("case", ["fully", "fully-checkpoint"])
def test_kg_keeps_a_finished_source_finished_at_the_new_parallelism(
    case: str, kg_outputs: dict[str, Path]
) -> None:
    operators = {op.uid: op for op in read_flink_metadata(kg_outputs[f"kg-{case}"]).metadata.operators}
    for uid in ("bounded-source", "bounded-tag"):
        op = operators[uid]
        assert (op.fully_finished, op.parallelism, op.max_parallelism, op.subtasks) == (True, 4, 128, ())
        assert op.coordinator_state is None
    assert not operators["keyed-sum"].fully_finished and operators["keyed-sum"].parallelism == 4


@pytest.mark.parametrize("case", ["fully", "fully-checkpoint"])
def test_flink_restores_kg_rescale_of_a_finished_source_as_its_own_rescale(
    case: str, restored: dict[str, Dump]
) -> None:
    own, kg = restored[f"flink-{case}"], restored[f"kg-{case}"]
    assert restore_error(own) is None and restore_error(kg) is None, (own.get("error"), kg.get("error"))
    assert _comparable(kg) == _comparable(own)
    # Flink deploys the finished vertex FINISHED_ON_RESTORE at p 4: its source never reads again.
    assert kg["vertices"]["Source: bounded-source -> bounded-tag"] == ["FINISHED"] * 4
    assert kg["emitted"] == {"bounded-source": 0, "live-source": 0}
    assert kg["processedAfterRestore"] == 0
    assert _restored_state(kg) == FULLY_STATE
    assert kg["finalState"] == FULLY_STATE
    assert len(kg["keyGroupRanges"]) == 4


@pytest.mark.parametrize("case", ["partially", "partially-source-only"])
def test_flink_restores_kg_rescale_of_a_partially_finished_source_as_its_own_rescale(
    case: str, kg_outputs: dict[str, Path], restored: dict[str, Dump]
) -> None:
    own, kg = restored[f"flink-{case}"], restored[f"kg-{case}"]
    assert restore_error(own) is None and restore_error(kg) is None, (own.get("error"), kg.get("error"))
    assert _comparable(kg) == _comparable(own)
    # Every subtask of a partially finished vertex runs again; subtask 0's reader finishes again at once.
    assert kg["vertices"]["Source: partial-source"] == ["FINISHED", "RUNNING", "RUNNING"]
    assert kg["readers"] == {"partial-source": {"0": "finished", "1": "idle", "2": "idle"}}
    assert kg["emitted"] == {"partial-source": 0}
    assert _restored_state(kg) == PARTIALLY_STATE == kg["finalState"]
    # kg keeps both operators partially finished: one new subtask without state carries the marker.
    operators = {op.uid: op for op in read_flink_metadata(kg_outputs[f"kg-{case}"]).metadata.operators}
    tag_p = 3 if case == "partially" else 2
    assert [s.index for s in operators["partial-source"].subtasks if s.finished] == [0]
    assert [s.index for s in operators["partial-tag"].subtasks if s.finished] == [0]
    assert operators["partial-tag"].parallelism == tag_p


def _cause(dump: Dump) -> str:
    error = restore_error(dump)
    assert error is not None, "Flink restored it"
    return error.splitlines()[-1]


MIXED = "which contain mixed operator finished state: [ALL_RUNNING, FULLY_FINISHED]"
ALL_TO_ALL = (
    "Cannot run a program with partially finished vertices predeceased with running or partially "
    "finished ones and connected via the ALL_TO_ALL edges"
)


@pytest.mark.parametrize(
    ("case", "message"), [("fully-added-operator", MIXED), ("partially-rebalance", ALL_TO_ALL)]
)
def test_flink_refuses_kg_output_where_it_refuses_its_own_rescale(
    case: str, message: str, restored: dict[str, Dump]
) -> None:
    own, kg = _cause(restored[f"flink-{case}"]), _cause(restored[f"kg-{case}"])
    assert own == kg
    assert "org.apache.flink.util.FlinkRuntimeException" in own and message in own
