"""The local engine: runs the jobs of ``execution.pipeline`` with pyarrow in this process, streaming.

Peak memory is bounded by a few batches and one row group (narrow jobs), or by one re-hash bucket
(jobs with a shuffle), never by the state's size:

- a narrow job (parallelism change of a kg snapshot) writes new subtasks one after the other, each
  streaming its read tasks into its writer;
- a job with a shuffle runs every read task in input order, appending each ``(new subtask, bucket)``'s
  rows to an Arrow IPC spill file under ``scratch``; then it writes each new subtask bucket by bucket,
  stably sorted by key group; the spill files are removed before the engine returns;
- a job of the byte route (``parts``) does the same with the parts its read tasks pack: plain bytes
  appended to one spill file per ``(new subtask, bucket)``, each bucket's read back whole by its writer;
- a copy job copies its files.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from keygroup_cli.execution import OnProgress, pipeline
from keygroup_cli.execution.pipeline import CopyJob, KeyedJob, Progress, W
from keygroup_cli.keygroups import KeyGroupRange
from keygroup_cli.snapshot.parquet import DEFAULT_BATCH_ROWS

SPILL_DIR = ".kg-spill"


class LocalExecutor:
    """Rescale with pyarrow in this process (no JVM)."""

    name = "local"

    def __init__(self, batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        self.batch_rows = batch_rows

    def read_pieces(self) -> int:
        """Return 1: this engine runs read tasks one after the other, so one per file is enough."""
        return 1

    def run(
        self,
        jobs: Sequence[KeyedJob[W] | CopyJob],
        scratch: Path,
        on_progress: OnProgress | None = None,
    ) -> dict[str, list[W]]:
        """Run every job in this process; return each keyed job's written files by operator id.

        ``scratch`` is a local directory the spill files go under (in ``.kg-spill``, removed here).
        """
        progress = Progress(jobs, on_progress)
        written: dict[str, list[W]] = {}
        try:
            for job in jobs:
                progress.begin(job.stage)
                if isinstance(job, CopyJob):
                    job.copy()
                    progress.advance(job.stage, job.weight)
                elif job.feeds is not None:
                    written[job.operator_id] = self._narrow(job, progress)
                else:
                    written[job.operator_id] = self._shuffled(
                        job, scratch / SPILL_DIR / job.operator_id, progress
                    )
        finally:
            shutil.rmtree(scratch / SPILL_DIR, ignore_errors=True)
        return written

    def _narrow(self, job: KeyedJob[W], progress: Progress) -> list[W]:
        """Write each new subtask straight from its read tasks."""
        files, rows = [], 0
        for j in range(job.new_parallelism):
            file, read = pipeline.stream(
                job, j, self.batch_rows, on_read=lambda task: progress.advance(job.stage, task.weight)
            )
            files.append(file)
            rows += read
        return pipeline.check_counts(job, rows, files)

    def _parts(self, job: KeyedJob[W], spill: Path, progress: Progress) -> list[W]:
        """The byte route's shuffle: each (new subtask, bucket)'s parts appended to a spill file of its own.

        Then each new subtask is written bucket by bucket, a bucket's file read whole (memory: one bucket).
        """
        spill.mkdir(parents=True)
        files: dict[tuple[int, int], BinaryIO] = {}
        routed = 0
        try:
            for task in job.reads:
                for new_subtask, bucket, part, entries in pipeline.route_parts(job, task, self.batch_rows):
                    out = files.get((new_subtask, bucket))
                    if out is None:
                        path = _spill_file(spill, new_subtask, bucket).with_suffix(".parts")
                        out = files[(new_subtask, bucket)] = path.open("wb")
                    out.write(part)
                    routed += entries
                progress.advance(job.stage, task.weight)
            for out in files.values():
                out.close()
            files.clear()
            written = [
                pipeline.write_parts(job, j, _read_parts(spill, j, write.key_groups, job.new_max_parallelism))
                for j, write in enumerate(job.writes)
            ]
        finally:
            for out in files.values():
                out.close()
            shutil.rmtree(spill, ignore_errors=True)
        return pipeline.check_counts(job, routed, written)

    def _shuffled(self, job: KeyedJob[W], spill: Path, progress: Progress) -> list[W]:
        """Route every read task into spill files, one per (new subtask, bucket); then write each subtask.

        The spill holds one Arrow IPC stream per (new subtask, bucket), appended in input order, so memory
        is bounded by a batch while routing and by one bucket while writing.
        """
        if job.parts:
            return self._parts(job, spill, progress)
        spill.mkdir(parents=True)
        writers: dict[tuple[int, int], pa.ipc.RecordBatchStreamWriter] = {}
        routed = 0
        try:
            for task in job.reads:
                for new_subtask, bucket, rows in pipeline.route(job, task, self.batch_rows):
                    writer = writers.get((new_subtask, bucket))
                    if writer is None:
                        path = _spill_file(spill, new_subtask, bucket)
                        writer = writers[(new_subtask, bucket)] = pa.ipc.new_stream(path, rows.schema)
                    writer.write_table(rows)
                    routed += rows.num_rows
                progress.advance(job.stage, task.weight)
            for writer in writers.values():
                writer.close()
            writers.clear()
            files = [
                pipeline.write(job, j, _read_spilled(spill, j, write.key_groups, job.new_max_parallelism))
                for j, write in enumerate(job.writes)
            ]
        finally:
            for writer in writers.values():
                writer.close()
            shutil.rmtree(spill, ignore_errors=True)
        return pipeline.check_counts(job, routed, files)


def _read_spilled(
    spill: Path, new_subtask: int, key_groups: KeyGroupRange, new_max: int
) -> Iterator[pa.Table]:
    """Yield a new subtask's spill files that exist, by bucket, each read when reached (memory: one)."""
    for bucket in pipeline.buckets_for(key_groups, new_max):
        path = _spill_file(spill, new_subtask, bucket)
        if path.exists():
            with pa.OSFile(str(path)) as fh:
                yield pa.ipc.open_stream(fh).read_all()


def _read_parts(spill: Path, new_subtask: int, key_groups: KeyGroupRange, new_max: int) -> Iterator[bytes]:
    """Yield a new subtask's part files that exist, by bucket, each read whole when reached (memory: one)."""
    for bucket in pipeline.buckets_for(key_groups, new_max):
        path = _spill_file(spill, new_subtask, bucket).with_suffix(".parts")
        if path.exists():
            yield path.read_bytes()


def _spill_file(spill: Path, new_subtask: int, bucket: int) -> Path:
    return spill / f"{new_subtask:05d}-{bucket:05d}.arrow"


__all__ = ["SPILL_DIR", "LocalExecutor"]
