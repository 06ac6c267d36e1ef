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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

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

    def _shuffled(self, job: KeyedJob[W], spill: Path, progress: Progress) -> list[W]:
        """Route every read task into spill files, one per (new subtask, bucket); then write each subtask.

        Each spill file is appended in input order (Arrow IPC streams of rows, or the byte route's parts:
        ``_Spill``), so memory is bounded by a batch while routing and by one bucket while writing.
        """
        kind = _PARTS if job.parts else _ROWS
        spill.mkdir(parents=True)
        outs: dict[tuple[int, int], Any] = {}
        routed = 0
        try:
            for task in job.reads:
                for new_subtask, bucket, item in kind.route(job, task, self.batch_rows):
                    out = outs.get((new_subtask, bucket))
                    if out is None:
                        path = _spill_file(spill, new_subtask, bucket, kind.suffix)
                        out = outs[(new_subtask, bucket)] = kind.open(path, item)
                    routed += kind.append(out, item)
                progress.advance(job.stage, task.weight)
            for out in outs.values():
                out.close()
            outs.clear()
            files = [
                kind.write(job, j, _read_spilled(kind, spill, j, write.key_groups, job.new_max_parallelism))
                for j, write in enumerate(job.writes)
            ]
        finally:
            for out in outs.values():
                out.close()
            shutil.rmtree(spill, ignore_errors=True)
        return pipeline.check_counts(job, routed, files)


@dataclass(frozen=True, slots=True)
class _Spill:
    """How one kind of job's routed items are spilled and read back: what differs between the two shuffles."""

    #: The spill files' suffix.
    suffix: str
    #: ``(job, task, batch rows)`` -> ``(new subtask, bucket, item)`` for every routed item of a read task.
    route: Callable[[KeyedJob[Any], Any, int], Iterator[tuple[int, int, Any]]]
    #: ``(path, first item)`` -> an open spill file (anything with ``close()``).
    open: Callable[[Path, Any], Any]
    #: ``(spill file, item)`` -> the rows or entries appended.
    append: Callable[[Any, Any], int]
    #: ``path`` -> a bucket as its write task takes it.
    read: Callable[[Path], Any]
    #: ``(job, new subtask, buckets)`` -> the written file.
    write: Callable[[KeyedJob[Any], int, Iterator[Any]], Any]


def _route_parts(job: KeyedJob[Any], task: Any, batch_rows: int) -> Iterator[tuple[int, int, Any]]:
    for new_subtask, bucket, part, entries in pipeline.route_parts(job, task, batch_rows):
        yield new_subtask, bucket, (part, entries)


def _append_part(out: BinaryIO, item: tuple[bytes, int]) -> int:
    out.write(item[0])
    return item[1]


def _append_rows(writer: pa.ipc.RecordBatchStreamWriter, rows: pa.Table) -> int:
    writer.write_table(rows)
    return int(rows.num_rows)


def _read_rows(path: Path) -> pa.Table:
    with pa.OSFile(str(path)) as fh:
        return pa.ipc.open_stream(fh).read_all()


#: Rows: one Arrow IPC stream per (new subtask, bucket).
_ROWS = _Spill(
    ".arrow",
    pipeline.route,
    lambda path, rows: pa.ipc.new_stream(str(path), rows.schema),
    _append_rows,
    _read_rows,
    pipeline.write,
)
#: The byte route: its parts (``entry_parts``) back to back, a bucket's file read whole.
_PARTS = _Spill(
    ".parts",
    _route_parts,
    lambda path, _part: path.open("wb"),
    _append_part,
    Path.read_bytes,
    pipeline.write_parts,
)


def _read_spilled(
    kind: _Spill, spill: Path, new_subtask: int, key_groups: KeyGroupRange, new_max: int
) -> Iterator[Any]:
    """Yield a new subtask's spill files that exist, by bucket, each read when reached (memory: one)."""
    for bucket in pipeline.buckets_for(key_groups, new_max):
        path = _spill_file(spill, new_subtask, bucket, kind.suffix)
        if path.exists():
            yield kind.read(path)


def _spill_file(spill: Path, new_subtask: int, bucket: int, suffix: str) -> Path:
    return spill / f"{new_subtask:05d}-{bucket:05d}{suffix}"


__all__ = ["SPILL_DIR", "LocalExecutor"]
