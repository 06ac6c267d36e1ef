"""The one task model (``execution.jobs.model``): both routes compile into it, and how it is run never shows.

What must hold, for a kg snapshot's jobs as for a savepoint's (``test_keyed_pipeline``):
- a narrow job written straight from its read tasks and the same job sent through the shuffle write the
  same bytes (the shuffle keeps input order within a key group);
- any cut of the old files into read tasks (whole files, row groups) writes the same bytes;
- an engine runs copies through the same entry, and leaves no spill behind;
- jobs pickle (Spark ships them to its Python workers).
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from keygroup_cli.execution.engines.local import SPILL_DIR, LocalExecutor
from keygroup_cli.execution.jobs.model import MIN_READ_TASK_BYTES, CopyJob, KeyedJob
from keygroup_cli.execution.jobs.snapshot import WrittenParquetFile, plan_snapshot_jobs
from keygroup_cli.planning.plan import plan_rescale
from keygroup_cli.snapshot import open_snapshot
from tests.execution.snapshots import generate


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(
        tmp_path_factory.mktemp("pipeline") / "in",
        ("counter", "string", 1500, 3, 128),
        ("ids", "long", 800, 2, 128),
    )


def _written(root: Path, run: dict[str, list[WrittenParquetFile]]) -> dict[tuple[str, int], bytes | None]:
    return {
        (op_id, f.subtask): None if f.keyed_file is None else (root / f.keyed_file.path).read_bytes()
        for op_id, files in run.items()
        for f in files
    }


def test_a_narrow_job_and_the_shuffle_write_the_same_bytes(source: Path, tmp_path: Path) -> None:
    snapshot = open_snapshot(source)
    plan = plan_rescale(snapshot, 4, ["counter"])
    (job,) = (j for j in plan_snapshot_jobs(plan, snapshot, tmp_path / "a") if isinstance(j, KeyedJob))
    assert job.feeds is not None and not job.rehash
    narrow = LocalExecutor().run([job], tmp_path / "a")
    shuffled_job = replace(
        job, feeds=None, writes=tuple(replace(w, root=str(tmp_path / "b")) for w in job.writes)
    )
    shuffled = LocalExecutor().run([shuffled_job], tmp_path / "b")
    written = _written(tmp_path / "a", narrow)
    assert written and written == _written(tmp_path / "b", shuffled)
    assert sum(f.rows for f in narrow[job.operator_id]) == snapshot.manifest.operator("counter").keyed_rows


def test_row_group_read_tasks_write_what_whole_files_write(source: Path, tmp_path: Path) -> None:
    snapshot = open_snapshot(source)
    plan = plan_rescale(snapshot, 5, None, 1024)
    runs, reads = [], []
    for pieces in (1, 4):
        jobs = plan_snapshot_jobs(plan, snapshot, tmp_path / f"p{pieces}", pieces=pieces)
        runs.append(_written(tmp_path / f"p{pieces}", LocalExecutor(batch_rows=97).run(jobs, tmp_path)))
        reads.append([len(j.reads) for j in jobs if isinstance(j, KeyedJob)])
    # One read task per old file, or up to 4 runs of row groups per file (the fixture's files hold several).
    assert reads[0] == [3, 2] and all(many > few for few, many in zip(*reads, strict=True))
    assert runs[0] and runs[0] == runs[1]
    assert not (tmp_path / SPILL_DIR).exists()


def test_copies_run_through_the_same_entry(source: Path, tmp_path: Path) -> None:
    snapshot = open_snapshot(source)
    plan = plan_rescale(snapshot, 4, ["counter"])
    jobs = plan_snapshot_jobs(plan, snapshot, tmp_path / "out")
    (copy,) = (j for j in jobs if isinstance(j, CopyJob))
    ids = snapshot.manifest.operator("ids")
    assert copy.operator_id == ids.operator_id and copy.stage is None
    stages: list[tuple[str, int, int | None]] = []
    written = LocalExecutor().run(jobs, tmp_path / "out", lambda *event: stages.append(event))
    assert ids.operator_id not in written  # copies describe no new file
    for f in (*ids.keyed_files, *ids.operator_files):
        assert (tmp_path / "out" / f.path).read_bytes() == snapshot.resolve(f.path).read_bytes()
    rows = snapshot.manifest.operator("counter").keyed_rows
    assert stages[0] == ("counter: keyed rows", 0, rows) and stages[-1] == ("counter: keyed rows", rows, rows)


def test_jobs_pickle(source: Path, tmp_path: Path) -> None:
    snapshot = open_snapshot(source)
    for plan in (plan_rescale(snapshot, 4), plan_rescale(snapshot, 4, None, 256)):
        jobs = plan_snapshot_jobs(plan, snapshot, tmp_path, pieces=4)
        assert pickle.loads(pickle.dumps(jobs)) == jobs


def test_a_small_snapshot_is_read_in_one_task_per_file_on_an_engine_that_cuts_pieces(
    source: Path, tmp_path: Path
) -> None:
    # A Spark task's fixed start is paid only for enough bytes: the fixture's files are far below 8 MiB.
    snapshot = open_snapshot(source)
    plan = plan_rescale(snapshot, 5, None, 1024)
    jobs = plan_snapshot_jobs(plan, snapshot, tmp_path, pieces=16, min_piece_bytes=MIN_READ_TASK_BYTES)
    keyed = [j for j in jobs if isinstance(j, KeyedJob)]
    assert [len(j.reads) for j in keyed] == [3, 2]
    assert all(len(r.row_groups) > 1 for j in keyed for r in j.reads)
