"""The savepoint rescale's keyed pipeline: read tasks, routing, write tasks, on both engines.

What must hold, whatever engine runs the tasks and however it cuts the input:
- the bytes written are those of the former convert → rescale → convert route (kg snapshots in between);
- no kg snapshot holds keyed state on the way;
- the local engine, Spark, and any number of read tasks per file write identical files;
- read tasks cover every block of a file exactly once, in order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint
from keygroup_cli.execution.engines import get_executor
from keygroup_cli.execution.jobs.savepoint import plan_keyed_jobs
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, key_group_extents
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.write.keyed_tasks import read_tasks
from keygroup_cli.flink.write.regroup import keyed_handles
from keygroup_cli.snapshot.writer import SnapshotWriter

FIXTURES = Path(__file__).parents[3] / "fixtures" / "flink" / "2.3"
CASES = ("heap-files-p3-maxp128-long", "rocksdb-canonical-snappy-p2-maxp256-string")
#: A SQL job's savepoint: its BinaryRowData (``row``) keys are re-keyed by the row route.
SQL_CASE = "sql-rocksdb-canonical-p2"


def keyed_files(savepoint: Path) -> dict[tuple[str, int], tuple[int, tuple[int, ...], bytes]]:
    """Return every keyed file by (operator id, subtask): first key group, offsets and bytes."""
    out = {}
    snapshot = read_flink_metadata(savepoint)
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if isinstance(handle, KeyGroupsHandle):
                data = (savepoint / handle.delegate.relative_path).read_bytes()
                out[(op.operator_id, sub.index)] = (handle.key_group_start, handle.offsets, data)
    return out


@pytest.mark.parametrize("case", [*CASES, SQL_CASE])
def test_same_bytes_as_the_route_through_kg_snapshots(case: str, tmp_path: Path) -> None:
    source = FIXTURES / case
    new = rescale(source, tmp_path / "new", 4, new_max_parallelism=1024, engine="local")
    # The former route, spelled out: decode everything, rescale the kg snapshot, encode it back.
    savepoint_to_snapshot(source, tmp_path / "in.kg")
    local = get_executor("local")
    rescale(tmp_path / "in.kg", tmp_path / "out.kg", 4, new_max_parallelism=1024, executor=local)
    snapshot_to_savepoint(tmp_path / "out.kg", tmp_path / "old")
    assert new.keyed_rows and sum(map(sum, new.keyed_rows.values())) > 0
    written = keyed_files(tmp_path / "new")
    assert written and written == keyed_files(tmp_path / "old")


def test_no_kg_snapshot_holds_keyed_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("keyed state was written into a kg snapshot")

    monkeypatch.setattr(SnapshotWriter, "write_keyed", refuse)
    result = rescale(FIXTURES / CASES[0], tmp_path / "new", 4, new_max_parallelism=1024, engine="local")
    assert result.keyed_rows is not None
    assert read_flink_metadata(tmp_path / "new").metadata.operators


@pytest.mark.parametrize("pieces", [1, 2, 5, 1000])
def test_read_tasks_cover_every_block_once_in_order(pieces: int) -> None:
    savepoint = read_flink_metadata(FIXTURES / CASES[0])
    for op in savepoint.metadata.operators:
        for handle in keyed_handles(op):
            tasks = read_tasks("root", handle, op.max_parallelism, 3, pieces)
            assert 1 <= len(tasks) <= pieces
            assert tasks[0].key_groups.start == handle.key_group_start
            assert tasks[-1].key_groups.end == handle.key_group_end
            for a, b in zip(tasks, tasks[1:], strict=False):
                assert b.key_groups.start == a.key_groups.end + 1 and b.order == a.order + 1
            extents = key_group_extents(handle, handle.size)
            assert sum(t.bytes for t in tasks) == sum(end - start for _, start, end in extents)
            for task in tasks:
                inside = [e for e in extents if e[0] in task.key_groups]
                assert task.bytes == sum(end - start for _, start, end in inside)


def test_read_tasks_get_at_least_min_bytes_of_blocks() -> None:
    # A task costs a Spark engine about 0.1 s to start: small files are not cut into many.
    savepoint = read_flink_metadata(FIXTURES / CASES[0])
    handles = [h for op in savepoint.metadata.operators for h in keyed_handles(op)]
    handle = max(handles, key=lambda h: h.size)
    total = sum(end - start for _, start, end in key_group_extents(handle, handle.size))
    assert len(read_tasks("root", handle, 128, 3, 8, min_bytes=total + 1)) == 1
    halves = read_tasks("root", handle, 128, 3, 8, min_bytes=total // 2)
    assert len(halves) == 2 and [t.order for t in halves] == [24, 25]
    uncut = read_tasks("root", handle, 128, 3, 8)
    assert len(read_tasks("root", handle, 128, 3, 8, min_bytes=1)) == len(uncut)


@pytest.mark.parametrize("case", CASES)
def test_more_read_tasks_write_the_same_files(case: str, tmp_path: Path) -> None:
    savepoint = read_flink_metadata(FIXTURES / case)
    targets = {op.operator_id: (4, 1024) for op in savepoint.metadata.operators}
    local = get_executor("local")
    results = []
    for pieces in (1, 3):
        out = tmp_path / f"p{pieces}"
        out.mkdir()
        jobs = plan_keyed_jobs(savepoint, targets, str(out), pieces=pieces)
        # Same file names in both plans, so the written files compare byte for byte.
        jobs = [_renamed(job) for job in jobs]
        written = local.run(jobs, tmp_path / f"spill{pieces}")
        results.append(
            {
                (op_id, f.subtask): (f.handle.offsets, (out / f.handle.delegate.relative_path).read_bytes())
                for op_id, files in written.items()
                for f in files
            }
        )
    assert results[0] and results[0] == results[1]


def _renamed(job):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    writes = tuple(replace(w, name=f"{job.operator_id}-{w.subtask}") for w in job.writes)
    return replace(job, writes=writes)


@pytest.mark.spark
@pytest.mark.parametrize("case", [*CASES, SQL_CASE])
def test_spark_writes_what_the_local_engine_writes(case: str, spark: object, tmp_path: Path) -> None:
    from keygroup_cli.execution.engines.spark import SparkExecutor

    executor = SparkExecutor(session=spark)
    assert executor.read_pieces() >= 2  # files are cut into several read tasks on Spark
    local = rescale(FIXTURES / case, tmp_path / "local", 4, new_max_parallelism=1024, engine="local")
    on_spark = rescale(FIXTURES / case, tmp_path / "spark", 4, new_max_parallelism=1024, executor=executor)
    assert on_spark.engine == "spark" and on_spark.keyed_rows == local.keyed_rows
    assert keyed_files(tmp_path / "spark") == keyed_files(tmp_path / "local")
