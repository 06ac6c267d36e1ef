"""A savepoint's operator state in memory: the rows of a converted kg snapshot, Flink's bytes back.

The savepoint -> savepoint route holds it without a kg manifest and writes it back with
``flink.write.rescaled`` from the header bytes the opened savepoint read (#21).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kg_fixture_state import CANONICAL_CASES, FLINK_FIXTURES

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.operator_tables import read_operator_state
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.savepoint import open_savepoint
from keygroup_cli.flink.write.rescaled import RescaledOperator, write_rescaled
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.parquet import read_operator_file


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_tables_hold_what_a_converted_snapshot_holds(case: str, tmp_path: Path) -> None:
    held = read_operator_state(read_flink_metadata(FLINK_FIXTURES / case))
    savepoint_to_snapshot(FLINK_FIXTURES / case, tmp_path / "ops.kg", keyed=False)
    snapshot = open_snapshot(tmp_path / "ops.kg")
    assert len(held) == len(snapshot.manifest.operators)
    compared = 0
    for mem, disk in zip(held.values(), snapshot.manifest.operators, strict=True):
        assert (mem.operator_id, mem.operator.uid, mem.operator.parallelism) == (
            disk.operator_id,
            disk.uid,
            disk.parallelism,
        )
        # The states the handles name, in their modes: what the converted snapshot records.
        assert [(s.name, s.kind) for s in mem.states] == [(s.name, s.kind) for s in disk.states]
        assert [(i, t.num_rows) for i, t in sorted(mem.tables.items())] == [
            (f.subtask, f.rows) for f in disk.operator_files
        ]
        for f in disk.operator_files:
            assert mem.tables[f.subtask].equals(read_operator_file(snapshot, f))
            compared += 1
        assert [sum(per.values()) for i, per in enumerate(mem.counts()) if i in mem.tables] == [
            f.rows for f in disk.operator_files
        ]
    assert compared > 0


@pytest.mark.parametrize("case", ["heap-files-p3-maxp128-long", "rocksdb-canonical-snappy-p2-maxp256-string"])
def test_tables_written_back_are_flinks_own_operator_state_bytes(case: str, tmp_path: Path) -> None:
    original = open_savepoint(FLINK_FIXTURES / case)
    held = read_operator_state(original)
    unchanged = []
    for state in held.values():
        op = state.operator
        unchanged.append(RescaledOperator(op.operator_id, op.parallelism, op.max_parallelism, state.tables))
    (tmp_path / "sp").mkdir()
    written = write_rescaled(original, unchanged, {}, tmp_path / "sp")
    assert written.operator_rows > 0 and written.metadata.checkpoint_id == original.metadata.checkpoint_id
    assert written.metadata.master_states == original.metadata.master_states
    by_id = {op.operator_id: op for op in written.metadata.operators}
    compared = 0
    for op in original.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_operator_state
            if handle is None:
                continue
            new = by_id[op.operator_id].subtasks[sub.index].managed_operator_state
            assert new is not None
            assert by_id[op.operator_id].coordinator_state == op.coordinator_state
            assert set(new.states) == set(handle.states)  # the same offsets of the same states
            src = local_path(handle.delegate, original.directory)  # type: ignore[union-attr]
            out = local_path(new.delegate, tmp_path / "sp")  # type: ignore[union-attr]
            assert src is not None and out is not None
            assert out.read_bytes() == src.read_bytes()
            compared += 1
    assert compared >= 4  # op-state and async-wait subtasks, the source
