"""The one task model both engines run, whatever the input's format: read tasks, a shuffle, write tasks.

A route compiles its plan into jobs (``keyed_pipeline.plan_keyed_jobs`` for a Flink savepoint,
``tasks.plan_snapshot_jobs`` for a kg snapshot); an engine only runs them (``Executor.run``):

- a ``KeyedJob`` is one operator's keyed state. Its **read tasks** yield Arrow rows in kg's keyed schema
  whose ``key_group`` is already the new one (a task re-keys them when maxParallelism changes: Java
  ``hashCode`` → murmur → ``% maxP'``). ``route`` gives each row its new subtask and *bucket* (a
  contiguous range of new key groups, ``bucket_of``); the engine groups rows by new subtask, keeping
  input order (read task, then row); each **write task** encodes one new subtask's buckets, ascending,
  each stably sorted by key group (``write``), and returns a descriptor of the file it wrote.
  A *narrow* job (``feeds``: no maxParallelism change, read tasks cut at new-subtask boundaries) needs no
  shuffle: each write task consumes its read tasks' rows as they come (``stream``), as Flink's own
  restore intersects key-group ranges.
- a ``CopyJob`` is files kept byte for byte (no maxParallelism change), copied by the engine in its own
  process.

Read and write tasks are polymorphic over the format (a key-group range of a Flink keyed file or a kg
Parquet file; a Flink keyed file or a kg Parquet file) and hold nothing tied to a process, so they pickle
to Spark executors. Rows of a new key group keep input order whatever engine ran the tasks and however it
cut them, and writers make bytes a pure function of rows, so every engine writes the same bytes.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.core.keygroups import KeyGroupRange, key_groups_for_hashes, operator_indexes_for_key_groups

if TYPE_CHECKING:
    from keygroup_cli.core.progress import OnProgress

#: Re-hash buckets at least (fewer only when maxParallelism is smaller): a bucket is what a write task holds.
MAX_BUCKETS = 256
#: The byte route's bucket at most, where maxParallelism allows: more buckets for a larger state, so what a
#: write task holds stays bounded whatever the state's size (a bucket is at least one key group).
BUCKET_BYTES = 8 << 20
#: The least bytes a read task gets when an engine cuts files into pieces (a Spark task's fixed start, about
#: 0.1 s, is worth paying only for enough bytes): blocks of a savepoint, row groups (uncompressed) of a kg
#: snapshot.
MIN_READ_TASK_BYTES = 8 << 20

#: Rows as read tasks yield them and write tasks take them.
Rows: TypeAlias = pa.Table | pa.RecordBatch


class Written(Protocol):
    """What a write task returns: the new subtask it wrote and how many rows (the format adds the rest)."""

    @property
    def subtask(self) -> int:
        """Return the new subtask."""
        ...

    @property
    def rows(self) -> int:
        """Return the rows written."""
        ...


W = TypeVar("W", bound=Written)
W_co = TypeVar("W_co", bound=Written, covariant=True)


class ReadTask(Protocol):
    """A piece of an operator's old keyed state (a key-group range of a file, a file, a row group)."""

    @property
    def weight(self) -> int:
        """Return what the task counts for in progress (bytes or rows, the job's ``stage`` says)."""
        ...

    def read(self, job: KeyedJob[Any], batch_rows: int) -> Iterator[Rows]:
        """Yield the task's rows in kg's keyed schema with their new key group, key groups ascending.

        Raises:
            InvalidInputError: A missing or corrupt file, or a key stored in the wrong key group.
        """
        ...


class PartReadTask(ReadTask, Protocol):
    """A read task of the byte route: its entries packed into parts (``flink.keyed.entry_parts``)."""

    def parts(
        self, job: KeyedJob[Any], batch_rows: int
    ) -> Iterator[tuple[int, int, bytes | memoryview, int]]:
        """Yield ``(new subtask, bucket, part, entries)``, buckets ascending per batch, in input order.

        Raises:
            InvalidInputError: A missing or corrupt file, or a key stored in the wrong key group.
        """
        ...


class WriteTask(Protocol[W_co]):
    """One new subtask's keyed file."""

    @property
    def name(self) -> str:
        """Return the file's path relative to the root it is written under."""
        ...

    @property
    def subtask(self) -> int:
        """Return the new subtask."""
        ...

    @property
    def key_groups(self) -> KeyGroupRange:
        """Return the new subtask's key-group range."""
        ...

    def write(self, rows: Iterable[Rows]) -> W_co:
        """Encode ``rows`` (ascending by key group, all within ``key_groups``) and describe the file."""
        ...


@dataclass(frozen=True, slots=True)
class KeyedJob(Generic[W]):
    """One keyed operator's rescale: what to read, what to write, and how rows go from one to the other."""

    operator_id: str
    label: str
    key_type: str
    #: Every keyed state of the operator, in the order of the ``state`` dictionary of the rows.
    state_names: tuple[str, ...]
    old_max_parallelism: int
    new_max_parallelism: int
    new_parallelism: int
    reads: tuple[ReadTask, ...]
    writes: tuple[WriteTask[W], ...]
    #: The progress stage the reads count in (jobs of one stage add up).
    stage: str
    #: A narrow job: the read tasks (indexes into ``reads``, in order) of each new subtask; None: shuffle.
    feeds: tuple[tuple[int, ...], ...] | None = None
    #: The byte route: read tasks pack entries into parts (``PartReadTask``), write tasks frame a bucket's
    #: parts (bytes back to back); no Arrow rows cross the shuffle (``route_parts``, ``write_parts``).
    parts: bool = False

    @property
    def weight(self) -> int:
        """Return the progress units of all read tasks."""
        return sum(r.weight for r in self.reads)

    @property
    def buckets(self) -> int:
        """Return how many re-hash buckets the new key groups are cut into (the byte route: by its bytes)."""
        return bucket_count(self.new_max_parallelism, self.weight if self.parts else 0)

    @property
    def rehash(self) -> bool:
        """Return whether keys get new key groups (maxParallelism changes)."""
        return self.new_max_parallelism != self.old_max_parallelism


@dataclass(frozen=True, slots=True)
class CopyJob:
    """Files of one operator that stay as they are: copied byte for byte by the engine's process."""

    operator_id: str
    #: ``(from, to)`` absolute paths.
    files: tuple[tuple[str, str], ...]
    #: The progress stage the copy counts in (None: not shown), and its weight there.
    stage: str | None = None
    weight: int = 0

    def copy(self) -> None:
        """Copy every file, creating directories as needed."""
        for source, target in self.files:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


#: What an engine runs.
Job: TypeAlias = KeyedJob[W] | CopyJob


# -- Buckets ------------------------------------------------------------------------------------------------


def bucket_count(new_max_parallelism: int, state_bytes: int = 0) -> int:
    """Return how many re-hash buckets (contiguous key-group ranges) a maxParallelism is cut into.

    ``MAX_BUCKETS``, or as many as keep ``state_bytes`` within ``BUCKET_BYTES`` a bucket; never more than
    there are key groups.
    """
    wanted = max(MAX_BUCKETS, -(-state_bytes // BUCKET_BYTES))
    return min(new_max_parallelism, wanted)


def spill_keys(new_max_parallelism: int, new_parallelism: int, buckets: int) -> int:
    """Return how many (new subtask, bucket) pairs hold some key group: the spill files a reader may open."""
    groups = np.arange(new_max_parallelism, dtype=np.int32)
    return int(np.unique(_pairs(groups, new_max_parallelism, new_parallelism, buckets)).size)


def _pairs(
    groups: npt.NDArray[np.int32], new_max_parallelism: int, new_parallelism: int, buckets: int
) -> npt.NDArray[np.int64]:
    """Return ``new subtask * buckets + bucket`` of every key group: a bucket can straddle two subtasks."""
    subtasks = operator_indexes_for_key_groups(groups, new_max_parallelism, new_parallelism)
    return np.add(subtasks.astype(np.int64) * buckets, bucket_of(groups, new_max_parallelism, buckets))


def bucket_of(
    key_groups: npt.NDArray[np.int32] | int, new_max_parallelism: int, buckets: int
) -> npt.NDArray[np.int64]:
    """Return the bucket of every key group (``kg * buckets // maxP'``: contiguous, ascending)."""
    kg = np.asarray(key_groups, dtype=np.int64)
    return kg * buckets // new_max_parallelism


def buckets_for(key_groups: KeyGroupRange, new_max_parallelism: int, buckets: int) -> range:
    """Return the buckets that hold some key group of ``key_groups``, ascending."""
    first = int(bucket_of(key_groups.start, new_max_parallelism, buckets))
    last = int(bucket_of(key_groups.end, new_max_parallelism, buckets))
    return range(first, last + 1)


def split_by_bucket(table: pa.Table, buckets: npt.NDArray[np.int64]) -> Iterator[tuple[int, pa.Table]]:
    """Yield ``(bucket, rows)`` for every bucket present, ascending, keeping row order within each."""
    if table.num_rows == 0:
        return
    order = np.argsort(buckets, kind="stable")
    ordered = table.take(pa.array(order))
    sorted_buckets = buckets[order]
    present = np.unique(sorted_buckets)
    bounds = np.searchsorted(sorted_buckets, np.append(present, present[-1] + 1), side="left")
    for i, bucket in enumerate(present.tolist()):
        yield int(bucket), ordered.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))


def sort_bucket(table: pa.Table, key_groups: KeyGroupRange) -> pa.Table:
    """Return the rows of one bucket that fall in ``key_groups``, stably sorted by key group."""
    kg = np.asarray(table.column("key_group").to_numpy(), dtype=np.int32)
    keep = np.flatnonzero((kg >= key_groups.start) & (kg <= key_groups.end))
    order = keep[np.argsort(kg[keep], kind="stable")]
    return table.take(pa.array(order))


# -- Task bodies (every engine runs these) ------------------------------------------------------------------


def rekeyed(table: pa.Table, codes: npt.NDArray[np.int32], new_max_parallelism: int) -> pa.Table:
    """Return ``table`` (``key_group`` first) with the key groups of hash ``codes`` under a new maxP."""
    groups = key_groups_for_hashes(codes, new_max_parallelism)
    return table.set_column(0, table.schema.field(0), pa.array(groups, type=pa.int32()))


def route(job: KeyedJob[Any], task: ReadTask, batch_rows: int) -> Iterator[tuple[int, int, pa.Table]]:
    """Yield ``(new subtask, bucket, rows)`` for the rows of ``task``, batch by batch, buckets ascending.

    Within one yield rows keep their input order.
    """
    count = job.buckets
    for rows in task.read(job, batch_rows):
        table = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
        groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int32)
        # One block per (new subtask, bucket).
        composite = _pairs(groups, job.new_max_parallelism, job.new_parallelism, count)
        for key, part in split_by_bucket(table, composite):
            new_subtask, bucket = divmod(key, count)
            yield new_subtask, bucket, part


def route_parts(
    job: KeyedJob[Any], task: ReadTask, batch_rows: int
) -> Iterator[tuple[int, int, bytes | memoryview, int]]:
    """Yield ``(new subtask, bucket, part, entries)`` for a read task of a ``parts`` job (the byte route)."""
    assert job.parts, "only jobs of the byte route pack parts"
    return cast(PartReadTask, task).parts(job, batch_rows)


def write_parts(job: KeyedJob[W], new_subtask: int, buckets: Iterable[bytes | memoryview]) -> W:
    """Write new subtask ``new_subtask``'s file from its buckets' parts (ascending; each in input order)."""
    return job.writes[new_subtask].write(cast(Iterable[Rows], buckets))


def write(job: KeyedJob[W], new_subtask: int, buckets: Iterable[pa.Table]) -> W:
    """Write new subtask ``new_subtask``'s file from its buckets (ascending; rows in input order in each)."""
    task = job.writes[new_subtask]
    return task.write(sort_bucket(b, task.key_groups) for b in buckets)


def stream(
    job: KeyedJob[W],
    new_subtask: int,
    batch_rows: int,
    on_read: Callable[[ReadTask], None] | None = None,
) -> tuple[W, int]:
    """Write new subtask ``new_subtask`` of a narrow job straight from its read tasks; return it and the rows.

    ``on_read`` is called after each read task is consumed.
    """
    assert job.feeds is not None, "only narrow jobs feed write tasks directly"
    feeds = job.feeds[new_subtask]
    received = 0

    def rows() -> Iterator[Rows]:
        nonlocal received
        for index in feeds:
            task = job.reads[index]
            for part in task.read(job, batch_rows):
                received += part.num_rows
                yield part
            if on_read is not None:
                on_read(task)

    written = job.writes[new_subtask].write(rows())
    return written, received


def checked_written(job: KeyedJob[W], rows_read: int, written: Iterable[W]) -> list[W]:
    """Return the written files in subtask order after checking that every row read was written once.

    Raises:
        ExecutionError: A write task is missing or rows were lost or duplicated on the way.
    """
    files = sorted(written, key=lambda f: f.subtask)
    if [f.subtask for f in files] != list(range(job.new_parallelism)):
        raise ExecutionError(
            f"operator {job.label!r}: write tasks returned subtasks {[f.subtask for f in files]}",
            code="OUTPUT_VERIFICATION_FAILED",
        )
    rows_written = sum(f.rows for f in files)
    if rows_written != rows_read:
        raise ExecutionError(
            f"operator {job.label!r}: {rows_read} keyed entries read, {rows_written} written",
            code="OUTPUT_VERIFICATION_FAILED",
        )
    return files


# -- Progress -----------------------------------------------------------------------------------------------


class Progress:
    """Report jobs' progress: one stage per distinct ``stage``, the jobs of a stage adding up."""

    def __init__(self, jobs: Sequence[KeyedJob[Any] | CopyJob], report: OnProgress | None) -> None:
        self.report = report
        self.totals: Counter[str] = Counter()
        for job in jobs:
            if job.stage is not None:
                self.totals[job.stage] += job.weight
        self.done: Counter[str] = Counter()
        self._started: set[str] = set()

    def begin(self, stage: str | None) -> None:
        """Report ``stage`` at 0 the first time one of its jobs starts."""
        if stage is not None and stage not in self._started:
            self._started.add(stage)
            if self.report is not None:
                self.report(stage, 0, self.totals[stage])

    def advance(self, stage: str | None, weight: int) -> None:
        """Count ``weight`` more done in ``stage`` and report it."""
        if stage is None:
            return
        self.done[stage] += weight
        if self.report is not None:
            self.report(stage, self.done[stage], self.totals[stage])


__all__ = [
    "BUCKET_BYTES",
    "MAX_BUCKETS",
    "CopyJob",
    "Job",
    "KeyedJob",
    "PartReadTask",
    "Progress",
    "ReadTask",
    "Rows",
    "WriteTask",
    "Written",
    "bucket_count",
    "bucket_of",
    "buckets_for",
    "checked_written",
    "rekeyed",
    "route",
    "route_parts",
    "sort_bucket",
    "spill_keys",
    "split_by_bucket",
    "stream",
    "write",
    "write_parts",
]
