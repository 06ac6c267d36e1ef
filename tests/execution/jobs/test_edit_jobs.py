"""``execution.jobs.state_edit``: an edit as the engines' task model (pickled tasks, a re-hash shuffle)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import KeyGroupRange, key_group_for_hash
from keygroup_cli.execution.engines import get_executor
from keygroup_cli.execution.jobs.state_edit import FlinkEditedRead, plan_edit_job
from keygroup_cli.flink import KeyedEdit, KeyedReadTask, find_operator, open_savepoint, read_keyed_task
from keygroup_cli.planning.state_edit import edit_in_range
from tests.kg_fixture_state import FLINK_FIXTURES

HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"


def _job(tmp_path: Path, new_max: int):  # type: ignore[no-untyped-def]
    sp = open_savepoint(HEAP)
    op = find_operator(sp, "keyed-state")
    streams = sorted(sp.keyed_streams[op.operator_id], key=lambda s: s.handle.key_group_start)
    matches = pa.table({"key_group": pa.array([0], pa.int32()), "state": ["sum"], "key": ["key-165"]})
    edit = KeyedEdit(frozenset({"sum", "ids"}), matches=matches)
    job = plan_edit_job(op, streams, streams[0], edit, str(HEAP), str(tmp_path), new_max, edit_in_range)
    return sp, op, streams, job


def test_read_tasks_carry_their_slice_of_the_edit_and_pickle(tmp_path: Path) -> None:
    _sp, _op, streams, job = _job(tmp_path, 128)
    assert len(job.reads) == len(streams) and all(isinstance(r, FlinkEditedRead) for r in job.reads)
    carried = [r.edit.matches.num_rows for r in job.reads]
    assert sorted(carried) == [0, 0, 1]  # key-165's key group is in one file's range only
    task = pickle.loads(pickle.dumps(job.reads[carried.index(1)]))
    rows = pa.concat_tables(task.read(job, 1000))
    original = pa.concat_tables(pa.Table.from_batches([b]) for b in read_keyed_task(task, job.state_names))
    sums = pc.equal(rows.column("state").cast(pa.string()), "sum")
    assert "key-165" not in rows.filter(sums).column("key").to_pylist()
    assert rows.num_rows == original.num_rows - 1  # key-165's sum entry


def test_the_local_engine_rehashes_edited_rows_into_new_key_groups(tmp_path: Path) -> None:
    sp, op, streams, job = _job(tmp_path, 256)
    assert job.rehash and job.new_max_parallelism == 256
    written = get_executor("local").run([job], tmp_path / "scratch")[op.operator_id]
    assert [f.subtask for f in written] == [0, 1, 2]
    rows = []
    for f in written:
        span = KeyGroupRange(f.handle.key_group_start, f.handle.key_group_start + len(f.handle.offsets) - 1)
        assert (span.start, span.end) == {0: (0, 85), 1: (86, 170), 2: (171, 255)}[f.subtask]
        task = KeyedReadTask(str(tmp_path), f.handle, 256, span, 0, f.size, streams[0].raw_header)
        rows += pa.Table.from_batches(list(read_keyed_task(task, job.state_names))).to_pylist()
    original = sum(
        pa.Table.from_batches(list(read_keyed_task(r, job.state_names))).num_rows for r in job.reads
    )
    assert len(rows) == original - 1  # key-165's sum (the matches name that state)
    assert all(r["key_group"] == key_group_for_hash(hash_code(r["key"], "string"), 256) for r in rows)
    assert ("key-165", "sum") not in {(r["key"], r["state"]) for r in rows}
    assert sp.metadata.checkpoint_id == 1
