"""A savepoint's operator state in memory: the rows of a converted kg snapshot, Flink's bytes back.

The savepoint -> savepoint route holds it without a kg manifest and writes it back with ``flink.write.rescaled``
from the header bytes the opened savepoint read (#21).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kg_fixture_state import CANONICAL_CASES, FLINK_FIXTURES

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.operator_tables import read_operator_tables
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.savepoint import open_savepoint
from keygroup_cli.flink.write.rescaled import RescaledOperator, write_rescaled
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.parquet import read_operator_file


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_tables_hold_what_a_converted_snapshot_holds(case: str, tmp_path: Path) -> None:
    state = read_operator_tables(read_flink_metadata(FLINK_FIXTURES / case))
    savepoint_to_snapshot(FLINK_FIXTURES / case, tmp_path / "ops.kg", keyed=False)
    snapshot = open_snapshot(tmp_path / "ops.kg")
    assert state.snapshot_id == snapshot.manifest.snapshot_id
    assert len(state.operators) == len(snapshot.manifest.operators)
    compared = 0
    for mem, disk in zip(state.operators, snapshot.manifest.operators, strict=True):
        assert (mem.operator_id, mem.uid, mem.parallelism, mem.max_parallelism) == (
            disk.operator_id,
            disk.uid,
            disk.parallelism,
            disk.max_parallelism,
        )
        assert mem.states == disk.states and not mem.extensions
        assert not mem.keyed_files and not disk.keyed_files
        assert [(f.subtask, f.rows) for f in mem.operator_files] == [
            (f.subtask, f.rows) for f in disk.operator_files
        ]
        for a, b in zip(mem.operator_files, disk.operator_files, strict=True):
            assert state.operator_table(a).equals(read_operator_file(snapshot, b))
            compared += 1
    assert compared > 0
    counts = state.state_counts()
    op_state = state.operator("op-state")
    assert op_state is not None
    assert [sum(per.values()) for per in counts[op_state.operator_id]] == [
        f.rows for f in op_state.operator_files
    ]


@pytest.mark.parametrize("case", ["heap-files-p3-maxp128-long", "rocksdb-canonical-snappy-p2-maxp256-string"])
def test_tables_written_back_are_flinks_own_operator_state_bytes(case: str, tmp_path: Path) -> None:
    original = open_savepoint(FLINK_FIXTURES / case)
    state = read_operator_tables(original)
    unchanged = []
    for op in state.operators:
        tables = state.subtask_tables(op.operator_id)
        unchanged.append(RescaledOperator(op.operator_id, op.parallelism, op.max_parallelism, tables))
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
