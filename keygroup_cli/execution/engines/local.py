"""The local engine: runs the jobs of ``execution.jobs.model`` with pyarrow in this process, streaming.

Peak memory is bounded by a few batches and one row group (narrow jobs), or by one re-hash bucket
(jobs with a shuffle), never by the state's size:

- a narrow job (parallelism change of a kg snapshot) writes new subtasks one after the other, each
  streaming its read tasks into its writer;
- a job with a shuffle runs every read task in input order, appending each ``(new subtask, bucket)``'s
  rows to an Arrow IPC spill file under ``scratch``; then it writes each new subtask bucket by bucket,
  stably sorted by key group; the spill files are removed before the engine returns;
- a job of the byte route (``parts``) does the same with the parts its read tasks pack, in worker
  threads (``keygroup_cli.core.workers``): each worker appends plain bytes to its own spill file per
  ``(new subtask, bucket)`` and notes which read task wrote which stretch; a writer reads a bucket's
  stretches back in read-task order (so the bytes are those of one thread), and new subtasks are written
  by the workers at once. Memory: a read task's window and batch, and a bucket, per worker;
- a copy job copies its files.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.core.workers import ordered_map, worker_count, workers_within_open_files
from keygroup_cli.execution.engines.spill import Stretch, read_stretches, write_all
from keygroup_cli.execution.jobs import model as pipeline
from keygroup_cli.execution.jobs.model import CopyJob, KeyedJob, Progress, W
from keygroup_cli.snapshot.parquet import DEFAULT_BATCH_ROWS
from keygroup_cli.storage import background

SPILL_DIR = ".kg-spill"


class LocalExecutor:
    """Rescale with pyarrow in this process (no JVM)."""

    name = "local"

    def __init__(self, batch_rows: int = DEFAULT_BATCH_ROWS, workers: int | None = None) -> None:
        self.batch_rows = batch_rows
        #: Threads of the byte route (``keygroup_cli.core.workers``); the row routes run in the caller's.
        self.workers = worker_count(workers)

    def read_pieces(self) -> int:
        """Return the workers: read tasks of the byte route run that many at once (1: one per file)."""
        return self.workers

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
                elif job.parts:
                    written[job.operator_id] = self._shuffled_parts(
                        job, scratch / SPILL_DIR / job.operator_id, progress
                    )
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
        return pipeline.checked_written(job, rows, files)

    def _shuffled(self, job: KeyedJob[W], spill: Path, progress: Progress) -> list[W]:
        """Route every read task's rows into spill files, one per (new subtask, bucket); then write them.

        Each spill file is an Arrow IPC stream appended in input order, so memory is bounded by a batch while
        routing and by one bucket while writing.
        """
        workers_within_open_files(
            pipeline.spill_keys(job.new_max_parallelism, job.new_parallelism, job.buckets), 1
        )
        spill.mkdir(parents=True)
        outs: dict[tuple[int, int], pa.ipc.RecordBatchStreamWriter] = {}
        routed = 0
        try:
            for task in job.reads:
                for new_subtask, bucket, rows in pipeline.route(job, task, self.batch_rows):
                    out = outs.get((new_subtask, bucket))
                    if out is None:
                        path = _spill_file(spill, new_subtask, bucket, ".arrow")
                        out = outs[(new_subtask, bucket)] = pa.ipc.new_stream(str(path), rows.schema)
                    out.write_table(rows)
                    routed += rows.num_rows
                progress.advance(job.stage, task.weight)
            for out in outs.values():
                out.close()
            outs.clear()
            files = [
                pipeline.write(job, j, _read_spilled(spill, j, write.key_groups, job))
                for j, write in enumerate(job.writes)
            ]
        finally:
            for out in outs.values():
                out.close()
            shutil.rmtree(spill, ignore_errors=True)
        return pipeline.checked_written(job, routed, files)

    def _shuffled_parts(self, job: KeyedJob[W], spill: Path, progress: Progress) -> list[W]:
        """The byte route's shuffle: read tasks, then new subtasks, each ``self.workers`` at a time.

        Each worker appends to its own spill files (``_PartSpill``); a bucket is read back as its
        stretches in read-task order, so the written bytes do not depend on which worker ran what.
        """
        # Each reader keeps a spill file open per (new subtask, bucket): as many read at once as fit.
        readers = workers_within_open_files(
            pipeline.spill_keys(job.new_max_parallelism, job.new_parallelism, job.buckets), self.workers
        )
        spill.mkdir(parents=True)
        parts = _PartSpill(spill)
        lock = threading.Lock()
        stop = threading.Event()  # set when the map ends early: running tasks end at their next part

        def read(indexed: tuple[int, Any]) -> int:
            index, task = indexed
            routed = _spill_parts(job, index, task, self.batch_rows, parts, stop)
            with lock:
                progress.advance(job.stage, task.weight)
            return routed

        def write(indexed: tuple[int, Any]) -> W:
            j, target = indexed
            return pipeline.write_parts(job, j, _spilled_buckets(job, j, target.key_groups, parts, stop))

        try:
            routed = sum(ordered_map(read, list(enumerate(job.reads)), readers, stop))
            parts.close()
            files = list(ordered_map(write, list(enumerate(job.writes)), self.workers, stop))
        finally:
            parts.close()
            parts.settle()
            shutil.rmtree(spill, ignore_errors=True)
        return pipeline.checked_written(job, routed, files)


def _spill_parts(
    job: KeyedJob[W],
    index: int,
    task: pipeline.ReadTask,
    batch_rows: int,
    parts: _PartSpill,
    stop: threading.Event,
) -> int:
    """Route read task ``index``'s parts into this thread's spill files; return the entries routed."""
    routed = 0
    files = parts.files()
    began: dict[tuple[int, int], int] = {}
    for new_subtask, bucket, part, entries in pipeline.route_parts(job, task, batch_rows):
        if stop.is_set():
            raise _Stopped
        key = (new_subtask, bucket)
        out = files.get(key)
        if out is None:
            out = parts.open(new_subtask, bucket)
        if key not in began:
            began[key] = out.tell()
        write_all(out, part)
        del part  # a part is a view of its batch's buffer: let the buffer go with the batch
        routed += entries
    parts.record(index, began)
    return routed


def _spilled_buckets(
    job: KeyedJob[W], new_subtask: int, key_groups: KeyGroupRange, parts: _PartSpill, stop: threading.Event
) -> Iterator[memoryview]:
    """Yield new subtask ``new_subtask``'s spilled buckets in order, each freed once the next is asked for."""
    for bucket in pipeline.buckets_for(key_groups, job.new_max_parallelism, job.buckets):
        if stop.is_set():
            raise _Stopped
        if parts.has(new_subtask, bucket):
            yield parts.read(new_subtask, bucket)
            parts.release(new_subtask, bucket)  # freed in the background while the next is framed


class _Stopped(Exception):
    """A worker's task ended early because the map it ran in had already failed."""


@dataclass
class _PartSpill:
    """The byte route's spill: one file per (worker thread, new subtask, bucket), and what lies where.

    A worker appends only to its own files, and runs one read task at a time, so a task's parts in one
    file are one stretch. ``record`` notes, per (new subtask, bucket), ``(read task, file, start, end)``.
    """

    root: Path
    _open: list[BinaryIO] = field(default_factory=list)
    _stretches: dict[tuple[int, int], list[tuple[int, Path, int, int]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _mine: threading.local = field(default_factory=threading.local)
    _slots: list[int] = field(default_factory=lambda: [0])
    _removals: list[Future[None]] = field(default_factory=list)

    def files(self) -> dict[tuple[int, int], BinaryIO]:
        """Return this thread's open spill files by (new subtask, bucket)."""
        files: dict[tuple[int, int], BinaryIO] | None = getattr(self._mine, "files", None)
        if files is None:
            with self._lock:
                self._mine.slot = self._slots[0]
                self._slots[0] += 1
            files = self._mine.files = {}
        return files

    def open(self, new_subtask: int, bucket: int) -> BinaryIO:
        """Open this thread's spill file of ``(new_subtask, bucket)``."""
        path = _spill_file(self.root, new_subtask, bucket, f".{self._mine.slot}.parts")
        out = path.open("wb", buffering=0)  # parts are larger than a buffer: no 8 KiB per file
        self._mine.files[(new_subtask, bucket)] = out
        with self._lock:
            self._open.append(out)
        return out

    def record(self, task: int, began: dict[tuple[int, int], int]) -> None:
        """Note where read task ``task`` (this thread's) wrote: from ``began`` to each file's end."""
        files = self.files()
        with self._lock:
            for key, start in began.items():
                out = files[key]
                self._stretches.setdefault(key, []).append((task, Path(out.name), start, out.tell()))

    def close(self) -> None:
        """Close every spill file (idempotent)."""
        with self._lock:
            files, self._open = self._open, []
        for out in files:
            out.close()

    def has(self, new_subtask: int, bucket: int) -> bool:
        """Return whether any part went to ``(new_subtask, bucket)``."""
        return (new_subtask, bucket) in self._stretches

    def release(self, new_subtask: int, bucket: int) -> None:
        """Start removing the files of ``(new_subtask, bucket)``, read back in full (they hold only it)."""
        paths = {path for _task, path, _start, _end in self._stretches[(new_subtask, bucket)]}
        removal = background.submit(background.remove_files, sorted(paths))
        with self._lock:
            self._removals.append(removal)

    def settle(self) -> None:
        """Wait for the removals started (their errors do not matter: the spill directory goes next)."""
        with self._lock:
            removals, self._removals = self._removals, []
        wait(removals)

    def read(self, new_subtask: int, bucket: int) -> memoryview:
        """Return the bucket's parts back to back, in read-task order."""
        stretches = sorted(self._stretches[(new_subtask, bucket)], key=lambda s: s[0])
        return read_stretches(Stretch(str(path), start, end - start) for _task, path, start, end in stretches)


def _read_spilled(
    spill: Path, new_subtask: int, key_groups: KeyGroupRange, job: KeyedJob[Any]
) -> Iterator[pa.Table]:
    """Yield a new subtask's spilled rows that exist, by bucket, each read when reached (memory: one)."""
    for bucket in pipeline.buckets_for(key_groups, job.new_max_parallelism, job.buckets):
        path = _spill_file(spill, new_subtask, bucket, ".arrow")
        if path.exists():
            with pa.OSFile(str(path)) as fh:
                yield pa.ipc.open_stream(fh).read_all()


def _spill_file(spill: Path, new_subtask: int, bucket: int, suffix: str) -> Path:
    return spill / f"{new_subtask:05d}-{bucket:05d}{suffix}"


__all__ = ["SPILL_DIR", "LocalExecutor"]
