"""A savepoint's operator state in memory: the rows of a converted kg snapshot, Flink's bytes back."""

from __future__ import annotations

from pathlib import Path

import pytest
from kg_fixture_state import CANONICAL_CASES, FLINK_FIXTURES

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.operator_tables import read_operator_tables
from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.parquet import read_operator_file


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_tables_hold_what_a_converted_snapshot_holds(case: str, tmp_path: Path) -> None:
    state = read_operator_tables(read_flink_metadata(FLINK_FIXTURES / case))
    savepoint_to_snapshot(FLINK_FIXTURES / case, tmp_path / "ops.kg", keyed=False)
    snapshot = open_snapshot(tmp_path / "ops.kg")
    assert len(state.manifest.operators) == len(snapshot.manifest.operators)
    compared = 0
    for mem, disk in zip(state.manifest.operators, snapshot.manifest.operators, strict=True):
        assert (mem.operator_id, mem.uid, mem.parallelism, mem.max_parallelism) == (
            disk.operator_id,
            disk.uid,
            disk.parallelism,
            disk.max_parallelism,
        )
        assert mem.states == disk.states and mem.extensions == disk.extensions
        assert not mem.keyed_files and not disk.keyed_files
        assert [(f.subtask, f.rows) for f in mem.operator_files] == [
            (f.subtask, f.rows) for f in disk.operator_files
        ]
        for a, b in zip(mem.operator_files, disk.operator_files, strict=True):
            assert state.operator_table(a).equals(read_operator_file(snapshot, b))
            compared += 1
    assert compared > 0
    counts = state.state_counts()
    op_state = state.manifest.operator("op-state")
    assert op_state is not None
    assert [sum(per.values()) for per in counts[op_state.operator_id]] == [
        f.rows for f in op_state.operator_files
    ]


@pytest.mark.parametrize("case", ["heap-files-p3-maxp128-long", "rocksdb-canonical-snappy-p2-maxp256-string"])
def test_tables_written_back_are_flinks_own_operator_state_bytes(case: str, tmp_path: Path) -> None:
    original = read_flink_metadata(FLINK_FIXTURES / case)
    written = snapshot_to_savepoint(read_operator_tables(original), tmp_path / "sp")
    assert written.metadata is not None and written.operator_rows > 0
    again = read_flink_metadata(tmp_path / "sp")
    by_id = {op.operator_id: op for op in again.metadata.operators}
    compared = 0
    for op in original.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_operator_state
            if handle is None:
                continue
            new = by_id[op.operator_id].subtasks[sub.index].managed_operator_state
            assert new is not None
            assert set(new.states) == set(handle.states)  # the same offsets of the same states
            src = local_path(handle.delegate, original.directory)  # type: ignore[union-attr]
            out = local_path(new.delegate, again.directory)  # type: ignore[union-attr]
            assert src is not None and out is not None
            assert out.read_bytes() == src.read_bytes()
            compared += 1
    assert compared >= 4  # op-state and async-wait subtasks, the source
