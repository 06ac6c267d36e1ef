"""The savepoint route compiled into the task model of ``execution.jobs.model``: Flink read and write tasks.

``plan_keyed_jobs`` builds, from ``_metadata`` and the keyed files' headers alone, one ``KeyedJob`` per
keyed operator of a canonical savepoint: its read tasks (key-group ranges of the old files,
``flink.write.keyed_tasks``), its write tasks (one per new subtask: range, file name under the output root,
header, compression) and what routes rows between them (key type, new maxParallelism and parallelism).

- ``FlinkKeyedRead`` (a ``flink.write.keyed_tasks.KeyedReadTask``) decodes a key-group range of an old keyed
  file into Arrow (as strictly as ``kg verify``) and checks every key against the key group it is stored
  under; under a new maxParallelism it re-keys the rows, hashing each key once for both.
- ``FlinkKeyedWrite`` (a ``KeyedWriteTask``) encodes one new subtask's keyed file (header, then its key
  groups' blocks) and returns its ``WrittenKeyedFile`` (the handle for ``_metadata``, size, rows).
- Under a new maxParallelism, where the keys can be hashed (``byte_route_applies``), ``FlinkPartRead`` and
  ``FlinkPartWrite`` take their place (a ``parts`` job): entries are re-keyed as bytes and packed into parts
  (``flink.keyed.entry_parts``), never decoded into rows nor put in Arrow arrays, and the files are byte for
  byte those the row tasks would write. (``FlinkEntryRead`` and ``FlinkEntryWrite``, entry batches in
  Arrow, are the byte route of ``--format native``.)
- ``--format native``: ``FlinkNativeWrite`` builds the new subtask's RocksDB database in the same task
  (``flink.write.native.write_native_task``), so each database is built by one task wherever the engine
  runs it. An operator that keeps its maxParallelism is then a *narrow* job: each new subtask's read tasks
  are the overlaps of the old files with its key-group range (``intersecting_tasks``) and stream straight
  into its write task, with no shuffle (entries as bytes where keys can be hashed).

No kg snapshot is written in between.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.javahash import PRIMITIVE_KEY_TYPES, hash_codes
from keygroup_cli.core.keygroups import (
    KeyGroupRange,
    key_group_range_for_operator_index,
    key_groups_for_hashes,
)
from keygroup_cli.execution.jobs.model import KeyedJob, Rows, rekeyed
from keygroup_cli.flink import (
    Entries,
    FlinkCheckpoint,
    KeyedLayout,
    KeyedReadTask,
    KeyedStateHeader,
    KeyedStream,
    KeyedWriteTask,
    OperatorState,
    Savepoint,
    WrittenDatabase,
    WrittenKeyedFile,
    intersecting_tasks,
    read_entries_task,
    read_keyed_task,
    read_parts_task,
    read_tasks,
    require_stored_key_groups,
    write_keyed_task,
    write_native_task,
    write_parts_task,
)

#: The progress stage of a savepoint's keyed jobs (all operators add up, in bytes read).
STAGE = "re-hash keyed state (bytes)"
#: The stage of ``--format native`` jobs: each new subtask's database is built by its write task.
NATIVE_STAGE = "build NATIVE databases (bytes)"

_Header = tuple[bytes, KeyedStateHeader, KeyedLayout]


@dataclass(frozen=True, slots=True)
class FlinkKeyedRead(KeyedReadTask):
    """A key-group range of one keyed file of a savepoint, as the pipeline reads it."""

    @classmethod
    def of(cls, task: KeyedReadTask) -> FlinkKeyedRead:
        """Return ``task`` as a pipeline read task."""
        return cls(**{f.name: getattr(task, f.name) for f in fields(task)})

    @property
    def weight(self) -> int:
        """Return the bytes of the blocks in range."""
        return self.bytes

    def read(self, job: KeyedJob[Any], batch_rows: int) -> Iterator[Rows]:
        """Yield the range's rows with their new key group (see ``pipeline.ReadTask``).

        Raises:
            InvalidInputError: A missing or corrupt file, or a key stored in a key group Flink would
                not assign it to.
        """
        rehash = job.rehash
        # Under a new maxParallelism every key is hashed anyway: the stored key group is checked here,
        # from the same hash codes, rather than by the reader.
        for batch in read_keyed_task(self, job.state_names, batch_rows, check=not rehash):
            table = pa.Table.from_batches([batch])
            if rehash:
                codes = hash_codes(table.column("key"), job.key_type)
                stored = key_groups_for_hashes(codes, job.old_max_parallelism)
                require_stored_key_groups(table, stored, self.root)
                table = rekeyed(table, codes, job.new_max_parallelism)
            yield table


@dataclass(frozen=True, slots=True)
class FlinkEntryRead(FlinkKeyedRead):
    """A key-group range of one keyed file, re-keyed as bytes (``keyed_entries``): no rows are decoded."""

    @classmethod
    def of(cls, task: KeyedReadTask) -> FlinkEntryRead:
        """Return ``task`` as a read task of the byte route."""
        return cls(**{f.name: getattr(task, f.name) for f in fields(task)})

    def read(self, job: KeyedJob[Any], batch_rows: int) -> Iterator[Rows]:
        """Yield the range's entries as bytes with their new key group (``keyed_entries.ENTRY_SCHEMA``).

        Raises:
            InvalidInputError: As ``FlinkKeyedRead.read``.
        """
        yield from read_entries_task(self, job.state_names, job.new_max_parallelism, batch_rows)


@dataclass(frozen=True, slots=True)
class FlinkPartRead(FlinkKeyedRead):
    """A key-group range of one keyed file, re-keyed as bytes and packed into parts (``entry_parts``)."""

    @classmethod
    def of(cls, task: KeyedReadTask) -> FlinkPartRead:
        """Return ``task`` as a read task of the byte route."""
        return cls(**{f.name: getattr(task, f.name) for f in fields(task)})

    def parts(
        self, job: KeyedJob[Any], batch_rows: int
    ) -> Iterator[tuple[int, int, bytes | memoryview, int]]:
        """Yield ``(new subtask, bucket, part, entries)`` (see ``pipeline.PartReadTask``).

        Raises:
            InvalidInputError: As ``FlinkKeyedRead.read``.
        """
        target = (job.new_max_parallelism, job.new_parallelism, job.buckets)
        yield from read_parts_task(self, job.state_names, target, batch_rows)


@dataclass(frozen=True, slots=True)
class FlinkPartWrite(KeyedWriteTask):
    """One new subtask's keyed file, framed from its buckets' parts (the byte route)."""

    #: The operator's states, as the parts number them.
    state_names: tuple[str, ...] = ()

    def write(self, rows: Iterable[Any]) -> WrittenKeyedFile:
        """Frame ``rows`` (each a bucket's parts, back to back) into ``root/name``; return its handle.

        Raises:
            InvalidInputError: Entries outside the range, out of order, or of a state the header lacks.
        """
        return write_parts_task(self, self.state_names, rows)


@dataclass(frozen=True, slots=True)
class FlinkKeyedWrite(KeyedWriteTask):
    """One new subtask's keyed file of a savepoint, as the pipeline writes it."""

    def write(self, rows: Iterable[Rows]) -> WrittenKeyedFile:
        """Encode ``rows`` into ``root/name``; return its handle, size and rows.

        Raises:
            InvalidInputError: Rows outside the range, unsorted, or of a state the header lacks.
        """
        return write_keyed_task(self, rows)


@dataclass(frozen=True, slots=True)
class FlinkEntryWrite(KeyedWriteTask):
    """One new subtask's keyed file, built from entry batches (the byte route)."""

    def write(self, rows: Iterable[Rows]) -> WrittenKeyedFile:
        """Frame ``rows`` (entry batches) into ``root/name``'s blocks; return its handle, size and entries.

        Raises:
            InvalidInputError: Entries outside the range, unsorted, or of a state the header lacks.
        """
        return write_keyed_task(self, rows, Entries)


@dataclass(frozen=True, slots=True)
class FlinkNativeWrite(KeyedWriteTask):
    """One new subtask's RocksDB database of a NATIVE savepoint (``--format native``), built by this task."""

    #: The savepoint's checkpoint id, recorded in the handle.
    checkpoint_id: int = 0
    #: The rows are entry batches (the byte route), not decoded rows.
    entries: bool = False

    def write(self, rows: Iterable[Rows]) -> WrittenDatabase:
        """Encode ``rows`` into ``root/name``, build the database from it, remove it; return the handle.

        Raises:
            InvalidInputError: Rows outside the range, unsorted, or of a state the header lacks.
            MissingDependencyError: ``rocksdict`` is not installed where the task runs.
            UnsupportedFormatError: The binding cannot build the database.
        """
        return write_native_task(self, rows, self.checkpoint_id, Entries if self.entries else None)


def byte_route_applies(streams: list[KeyedStream], layout: KeyedLayout) -> bool:
    """Return whether an operator's keys can be re-keyed as bytes (``keyed_entries``).

    Its keys must be primitives (``row`` keys take the row route, ``binary`` ones none) and every old file
    must lay out each state as the header the new files carry does (entries keep their bytes), which real
    savepoints always do.
    """
    if layout.codec.key_type not in PRIMITIVE_KEY_TYPES or layout.prefix_bytes not in (1, 2):
        return False
    chosen = {s.name: s for s in layout.states}
    return all(
        s.layout.codec == layout.codec and all(chosen.get(state.name) == state for state in s.layout.states)
        for s in streams
    )


def plan_keyed_jobs(
    savepoint: FlinkCheckpoint,
    targets: Mapping[str, tuple[int, int]],
    output_root: str,
    *,
    compression: bool | None = None,
    pieces: int = 1,
    source_root: str | None = None,
    native_checkpoint: int | None = None,
    min_piece_bytes: int = 0,
) -> list[KeyedJob[Any]]:
    """Plan the rescale of every keyed operator of ``savepoint`` (reads only ``_metadata`` and headers).

    Args:
        savepoint: The input savepoint (canonical keyed files).
        targets: The new parallelism and maxParallelism of every keyed operator, by operator id (the
            plan's: an operator left out of the rescale keeps both).
        output_root: Where write tasks create their files (a local directory or an object-store URI).
        compression: Snappy for the new files; None keeps what the old files used.
        pieces: Cut each old file into up to this many read tasks (more tasks than cores on a cluster).
        min_piece_bytes: ... and each of them no smaller than this (``MIN_READ_TASK_BYTES`` for a run: a
            small file stays one task), unless the file is; 0 cuts into ``pieces`` whatever the sizes.
        source_root: The savepoint directory as executors should open it (default: where it was read).
        native_checkpoint: ``--format native``: write tasks build RocksDB databases whose handles record
            this checkpoint id (``FlinkNativeWrite``), and operators that keep their maxParallelism are
            narrow jobs; None: canonical keyed files.

    Raises:
        InvalidInputError: Subtasks disagree on the key serializer, or no header declares every state.
    """
    root = source_root or str(savepoint.directory)
    opened = Savepoint.of(savepoint)
    jobs: list[KeyedJob[Any]] = []
    for op in savepoint.metadata.operators:
        streams = sorted(opened.keyed_streams.get(op.operator_id, ()), key=lambda s: s.handle.key_group_start)
        if not streams:
            continue
        header = _operator_header(f"{savepoint.metadata_path}: operator {op.label!r}", streams)
        target = targets.get(op.operator_id, (op.parallelism, op.max_parallelism))
        cut = {"pieces": pieces, "min_piece_bytes": min_piece_bytes}
        if native_checkpoint is not None:
            jobs.append(_native_job(op, streams, header, root, output_root, target, native_checkpoint, **cut))
        else:
            jobs.append(_operator_job(op, streams, header, root, output_root, target, compression, **cut))
    return jobs


def _operator_header(where: str, streams: list[KeyedStream]) -> _Header:
    """Return the header the new files carry: the first (key-group order) that declares every state.

    Raises:
        InvalidInputError: Subtasks disagree on the key serializer, or no header declares every state.
    """
    if len({s.layout.codec.key_type for s in streams}) != 1:
        raise InvalidInputError(
            f"{where}: subtasks disagree on the key serializer", code="FLINK_STATE_INCONSISTENT"
        )
    needed = {state.name for s in streams for state in s.layout.states}
    for s in streams:
        if needed <= {state.name for state in s.layout.states}:
            return s.raw_header, s.header, s.layout
    raise InvalidInputError(
        f"{where}: no keyed-state header declares all of {sorted(needed)}", code="FLINK_STATE_UNKNOWN"
    )


def _operator_job(
    op: OperatorState,
    streams: list[KeyedStream],
    header: _Header,
    root: str,
    output_root: str,
    target: tuple[int, int],
    compression: bool | None,
    *,
    pieces: int,
    min_piece_bytes: int,
) -> KeyedJob[WrittenKeyedFile]:
    """Return the job that rewrites ``op``'s keyed files as ``new_p`` files for maxParallelism ``new_max``.

    ``pieces`` and ``min_piece_bytes`` cut each old file into read tasks (see ``plan_keyed_jobs``).
    """
    new_p, new_max = target
    raw, parsed, layout = header
    compressed = parsed.compressed if compression is None else compression
    as_bytes = new_max != op.max_parallelism and byte_route_applies(streams, layout)
    read_class = FlinkPartRead if as_bytes else FlinkKeyedRead
    reads = _piece_reads(read_class, op, streams, root, pieces, min_piece_bytes)
    names = tuple(s.name for s in layout.states)
    writes: list[FlinkPartWrite | FlinkKeyedWrite] = []
    for j in range(new_p):
        span = key_group_range_for_operator_index(new_max, new_p, j)
        name = str(uuid.uuid4())
        if as_bytes:
            writes.append(FlinkPartWrite(output_root, name, j, raw, new_max, span, compressed, names))
        else:
            writes.append(FlinkKeyedWrite(output_root, name, j, raw, new_max, span, compressed))
    return KeyedJob(
        op.operator_id,
        op.label,
        layout.codec.key_type,
        tuple(s.name for s in layout.states),
        op.max_parallelism,
        new_max,
        new_p,
        tuple(reads),
        tuple(writes),
        STAGE,
        parts=as_bytes,
    )


def _native_job(
    op: OperatorState,
    streams: list[KeyedStream],
    header: _Header,
    root: str,
    output_root: str,
    target: tuple[int, int],
    checkpoint_id: int,
    *,
    pieces: int,
    min_piece_bytes: int,
) -> KeyedJob[WrittenDatabase]:
    """Return the job that writes ``op``'s keyed state as one RocksDB database per new subtask.

    The canonical blocks a write task encodes (and builds its database from) are uncompressed: the
    database files are RocksDB's, and its metadata stream says so.
    """
    new_p, new_max = target
    raw, _parsed, layout = header
    same_max = new_max == op.max_parallelism
    as_bytes = byte_route_applies(streams, layout)
    ranges = [key_group_range_for_operator_index(new_max, new_p, j) for j in range(new_p)]
    read_class = FlinkEntryRead if as_bytes else FlinkKeyedRead
    feeds: tuple[tuple[int, ...], ...] | None = None
    if same_max:
        reads, feeds = _intersecting_reads(read_class, op, streams, root, ranges)
    else:
        reads = _piece_reads(read_class, op, streams, root, pieces, min_piece_bytes)
    writes = [
        FlinkNativeWrite(
            output_root, str(uuid.uuid4()), j, raw, new_max, ranges[j], False, checkpoint_id, as_bytes
        )
        for j in range(new_p)
    ]
    return KeyedJob(
        op.operator_id,
        op.label,
        layout.codec.key_type,
        tuple(s.name for s in layout.states),
        op.max_parallelism,
        new_max,
        new_p,
        tuple(reads),
        tuple(writes),
        NATIVE_STAGE,
        feeds,
    )


def _piece_reads(
    read_class: type[FlinkKeyedRead],
    op: OperatorState,
    streams: list[KeyedStream],
    root: str,
    pieces: int,
    min_piece_bytes: int,
) -> list[FlinkKeyedRead]:
    """Return the read tasks of ``op``'s old files, each file cut into pieces (see ``plan_keyed_jobs``)."""
    return [
        read_class.of(task)
        for index, stream in enumerate(streams)
        for task in read_tasks(
            root, stream.handle, op.max_parallelism, index, pieces, stream.raw_header, min_piece_bytes
        )
    ]


def _intersecting_reads(
    read_class: type[FlinkKeyedRead],
    op: OperatorState,
    streams: list[KeyedStream],
    root: str,
    ranges: list[KeyGroupRange],
) -> tuple[list[FlinkKeyedRead], tuple[tuple[int, ...], ...]]:
    """Return the read tasks of a job that keeps maxParallelism, and which of them feed each new subtask.

    Key groups keep their numbers: each new subtask reads the overlaps of the old files with its range, in
    key-group order (the old ranges are disjoint), and writes as it reads.
    """
    fed: list[list[int]] = [[] for _ in ranges]
    reads: list[FlinkKeyedRead] = []
    for stream in streams:
        cut = intersecting_tasks(
            root, stream.handle, op.max_parallelism, ranges, len(reads), stream.raw_header
        )
        for subtask, task in cut:
            fed[subtask].append(len(reads))
            reads.append(read_class.of(task))
    return reads, tuple(tuple(f) for f in fed)


__all__ = [
    "NATIVE_STAGE",
    "STAGE",
    "FlinkEntryRead",
    "FlinkEntryWrite",
    "FlinkKeyedRead",
    "FlinkKeyedWrite",
    "FlinkNativeWrite",
    "FlinkPartRead",
    "FlinkPartWrite",
    "byte_route_applies",
    "plan_keyed_jobs",
]
