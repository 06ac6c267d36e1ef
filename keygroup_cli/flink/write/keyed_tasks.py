"""Read and write tasks over canonical keyed state files: the savepoint's format adapter for the rescale.

A **read task** is a key-group range of one old subtask's keyed file. It yields that range's rows as Arrow
record batches in the kg keyed schema (``core.schema.keyed_schema``), with the ``state`` column over the
operator's state names, after checking that every key hashes to the key group it is stored under.

A **write task** is one new subtask's keyed file: a header (``KeyedBackendSerializationProxy``) and the
subtask's key-group range. It encodes rows sorted by key group into blocks (``keyed_encode``) and returns
the file's ``KeyGroupsSavepointStateHandle`` (offsets, size) and its row count.

Tasks name their files by a root (a local directory, or an object-store URI) and a relative path, and hold
nothing else that is tied to a process, so an engine runs them wherever it runs code: in this process, or
as Spark tasks on executors that reach the same storage.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import pyarrow as pa

from keygroup_cli.core.errors import ExecutionError, InvalidInputError
from keygroup_cli.core.javahash import HASHABLE_KEY_TYPES, hash_codes
from keygroup_cli.core.keygroups import KeyGroupRange, even_runs, key_groups_for_hashes
from keygroup_cli.core.schema import STATE_TYPE
from keygroup_cli.flink.io.snappy import encode_frames
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, RelativeFileHandle, key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.kernels.native import expect
from keygroup_cli.flink.keyed.decode import BYTE_WINDOW_BYTES, decode_keyed_file
from keygroup_cli.flink.keyed.encode import BlockSource, write_keyed_file
from keygroup_cli.flink.keyed.entries import Rekey, all_states
from keygroup_cli.flink.keyed.entry_parts import Cut, PartCutter, frame_checked_bucket, parts
from keygroup_cli.flink.keyed.header import KeyedStateHeader, read_keyed_header
from keygroup_cli.flink.keyed.layout import DEFAULT_BATCH_ROWS, KeyedLayout
from keygroup_cli.storage.locations import Location, is_remote, location
from keygroup_cli.storage.staging import flush_soon


@dataclass(frozen=True, slots=True)
class KeyedReadTask:
    """Read the key groups ``key_groups`` of one keyed file of a savepoint rooted at ``root``."""

    #: The savepoint directory (local path or object-store URI); relative handles resolve against it.
    root: str
    handle: KeyGroupsHandle
    #: The maxParallelism the file was written for (its key-group prefix width, the keys' check).
    max_parallelism: int
    key_groups: KeyGroupRange
    #: Position in input order (old subtask, then range): rows of a new key group keep this order.
    order: int
    #: Bytes of the blocks in range (for progress and balancing).
    bytes: int
    #: The file's header as the savepoint was opened with it (``Savepoint.keyed_streams``): the task
    #: parses it instead of reading the file's first bytes again. None: read it from the file.
    header: builtins.bytes | None = None


@dataclass(frozen=True, slots=True)
class KeyedWriteTask:
    """Write new subtask ``subtask``'s keyed file ``root/name``."""

    root: str
    name: str
    subtask: int
    #: The header to write (its state order defines the state ids of the blocks).
    header: bytes
    max_parallelism: int
    key_groups: KeyGroupRange
    compressed: bool


@dataclass(frozen=True, slots=True)
class WrittenKeyedFile:
    """What a write task wrote: the handle for ``_metadata``, its size and rows."""

    subtask: int
    handle: KeyGroupsHandle
    size: int
    rows: int
    key_groups_with_data: int


def directory_of(root: str) -> Path | Location:
    """Return the savepoint directory ``root`` names, as the readers take it."""
    return location(root) if is_remote(root) else Path(root)


def keyed_header(src: StreamSource, handle: KeyGroupsHandle) -> tuple[bytes, KeyedStateHeader]:
    """Return the raw and parsed header of a keyed file: everything before its first key-group block."""
    first = min([o for o in handle.offsets if o] or [src.size])
    raw = src.read(0, first)
    return raw, read_keyed_header(raw, src.source, first)


def read_tasks(
    root: str,
    handle: KeyGroupsHandle,
    max_parallelism: int,
    order: int,
    pieces: int,
    header: bytes | None = None,
    min_bytes: int = 0,
) -> list[KeyedReadTask]:
    """Cut one keyed file into at most ``pieces`` read tasks of contiguous key groups and similar bytes.

    Block sizes come from the handle's offsets alone (the last block's end is the delegate's size), so
    no byte of the file is read here. ``order`` numbers the tasks ``order * pieces + i``. ``header`` is
    the file's header bytes, read once when the savepoint was opened; every task carries it. With
    ``min_bytes``, a file is cut into no more tasks than it has ``min_bytes`` of blocks: a task costs its
    engine a fixed start (about 0.1 s for a Spark task), worth paying only for enough bytes.
    """
    extents = sorted(key_group_extents(handle, handle.size))
    sizes = [end - start for _, start, end in extents]
    whole = KeyGroupRange(handle.key_group_start, handle.key_group_end)
    runs = even_runs(sizes, pieces, min_bytes)
    if len(runs) <= 1:
        return [
            KeyedReadTask(root, handle, max_parallelism, whole, order * max(pieces, 1), sum(sizes), header)
        ]
    out: list[KeyedReadTask] = []
    start = whole.start
    for n, run in enumerate(runs):
        stop = whole.end if n == len(runs) - 1 else extents[run[-1]][0]
        weight = sum(sizes[i] for i in run)
        out.append(
            KeyedReadTask(
                root,
                handle,
                max_parallelism,
                KeyGroupRange(start, stop),
                order * pieces + len(out),
                weight,
                header,
            )
        )
        start = stop + 1
    return out


def intersecting_tasks(
    root: str,
    handle: KeyGroupsHandle,
    max_parallelism: int,
    ranges: list[KeyGroupRange],
    order: int,
    header: bytes | None = None,
) -> list[tuple[int, KeyedReadTask]]:
    """Cut one keyed file at the new subtasks' key-group ranges (same maxParallelism): one task per overlap.

    Returns ``(new subtask, task)`` for every range of ``ranges`` (indexed by new subtask) the file
    overlaps, ascending; each task reads the key groups of the overlap, as Flink's restore intersects
    ``KeyGroupsStateHandle``s with a subtask's range. Block sizes come from the handle's offsets alone.
    Tasks are numbered ``order``, ``order + 1``, ...
    """
    extents = key_group_extents(handle, handle.size)
    out: list[tuple[int, KeyedReadTask]] = []
    for subtask, wanted in enumerate(ranges):
        start, end = max(wanted.start, handle.key_group_start), min(wanted.end, handle.key_group_end)
        if start > end:
            continue
        size = sum(e - b for group, b, e in extents if start <= group <= end)
        task = KeyedReadTask(
            root, handle, max_parallelism, KeyGroupRange(start, end), order + len(out), size, header
        )
        out.append((subtask, task))
    return out


def read_keyed_task(
    task: KeyedReadTask,
    state_names: tuple[str, ...],
    batch_rows: int = DEFAULT_BATCH_ROWS,
    *,
    check: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``task`` (key groups ascending, file order within each).

    The ``state`` column is a dictionary over ``state_names`` (every state of the operator), so batches
    of files whose headers order states differently concatenate and serialize as one schema.

    With ``check=False`` the keys are not checked against their stored key group (a caller that hashes
    every key anyway checks them itself).

    Raises:
        InvalidInputError: A missing or corrupt file, or a key stored in a key group Flink would not
            assign it to (``KEY_GROUP_MISMATCH``).
    """
    with StreamSource(task.handle.delegate, directory_of(task.root)) as src:
        if task.header is not None:
            header = read_keyed_header(task.header, src.source, len(task.header))
        else:
            _raw, header = keyed_header(src, task.handle)
        layout = KeyedLayout.from_header(header, task.max_parallelism, src.source)
        key_type = layout.codec.key_type
        lookup = {name: i for i, name in enumerate(state_names)}
        remap = np.asarray([lookup.get(s.name, -1) for s in layout.states], dtype=np.int32)
        if bool((remap < 0).any()):
            raise InvalidInputError(
                f"{src.source}: its header declares states the operator's chosen header lacks",
                code="FLINK_STATE_INCONSISTENT",
            )
        batches = decode_keyed_file(
            src,
            task.handle,
            layout,
            compressed=header.compressed,
            batch_rows=batch_rows,
            key_groups=task.key_groups,
            # Every block as kg verify checks it (snappy CRCs, nothing after the END mark): the CLI does
            # not decode a savepoint's blocks before a rescale, its read tasks do (integrity.require_intact).
            strict=True,
        )
        for batch in batches:
            if check:
                require_keys_in_groups(batch, key_type, task.max_parallelism, src.source)
            yield _with_states(batch, state_names)


def read_parts_task(
    task: KeyedReadTask,
    state_names: tuple[str, ...],
    target: tuple[int, int, int],
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[tuple[int, int, bytes | memoryview, int]]:
    """Yield ``(new subtask, bucket, part, entries)``: the entries of ``task`` re-keyed as bytes, packed.

    ``target`` is the new maxParallelism, parallelism and bucket count. Every block is read, proven and
    checked as ``read_entries_task`` does (the same cutter checks, the same errors); each batch of entries
    becomes parts (``entry_parts.parts``): no Arrow array is made.

    Raises:
        InvalidInputError: As ``read_keyed_task``.
    """
    new_max, new_parallelism, buckets = target
    expect(task.bytes)
    with StreamSource(task.handle.delegate, directory_of(task.root)) as src:
        layout, compressed, remap = _entry_layout(task, src, state_names)
        cutter = PartCutter(task.max_parallelism, new_max, state_names, remap, task.root)
        cuts = decode_keyed_file(
            src,
            task.handle,
            layout,
            compressed=compressed,
            batch_rows=batch_rows,
            key_groups=task.key_groups,
            strict=True,
            cutter=cutter,
            window_bytes=BYTE_WINDOW_BYTES,
        )
        for cut in cuts:
            yield from parts(cast(Cut, cut), new_max, new_parallelism, buckets)


def _entry_layout(
    task: KeyedReadTask, src: StreamSource, state_names: tuple[str, ...]
) -> tuple[KeyedLayout, bool, tuple[int, ...]]:
    """Return a read task's layout, whether its blocks are compressed, and its state ids' positions.

    Raises:
        InvalidInputError: The file declares a state the operator's chosen header lacks.
    """
    if task.header is not None:
        header = read_keyed_header(task.header, src.source, len(task.header))
    else:
        _raw, header = keyed_header(src, task.handle)
    layout = KeyedLayout.from_header(header, task.max_parallelism, src.source)
    lookup = {name: i for i, name in enumerate(state_names)}
    remap = tuple(lookup.get(s.name, -1) for s in layout.states)
    if min(remap, default=0) < 0:
        raise InvalidInputError(
            f"{src.source}: its header declares states the operator's chosen header lacks",
            code="FLINK_STATE_INCONSISTENT",
        )
    return layout, header.compressed, remap


def write_parts_task(
    task: KeyedWriteTask, state_names: tuple[str, ...], buckets: Iterable[bytes | memoryview]
) -> WrittenKeyedFile:
    """Write ``root/name`` from its buckets' parts (ascending; each bucket's parts in input order).

    Each bucket's entries are framed into blocks and every block is proven against the entry ends the
    framing claims (``keyed_decode.check_block``) before it is written: ``entry_parts.frame_checked_bucket``,
    one kernel call per bucket with the native kernels.

    Raises:
        InvalidInputError: Entries outside the range, out of bucket order, or of a state the header lacks.
        ExecutionError: ``OUTPUT_VERIFICATION_FAILED``: a block does not read back as its entries.
    """
    where = f"{task.root}/{task.name}"
    header = read_keyed_header(task.header, where, len(task.header))
    layout = KeyedLayout.from_header(header, task.max_parallelism, where)
    ids = layout.state_ids()
    state_map = np.asarray([ids.get(name, -1) for name in state_names], dtype=np.int64)
    states = all_states(layout)
    span = task.key_groups
    offsets = [0] * span.size
    rows, last = 0, -1
    with _output(task.root, task.name) as out:
        head = bytearray(task.header)
        head[4] = 1 if task.compressed else 0
        out.write(head)
        pos = len(head)
        for buf in buckets:
            framed = frame_checked_bucket(buf, layout, state_map, states)
            del buf  # the blocks hold every byte now: a bucket's parts need not wait for their writes
            for encoded, proven in framed:
                group = encoded.key_group
                if group not in span:
                    raise InvalidInputError(
                        f"a row's key group is outside the file's range [{span.start}, {span.end}]",
                        code="KEY_GROUP_OUT_OF_RANGE",
                    )
                if group <= last:
                    raise InvalidInputError("keyed rows are not sorted by key_group", code="ROWS_NOT_SORTED")
                if proven != encoded.rows:
                    raise ExecutionError(
                        f"output verification failed: key group {group}'s block does not read back as its "
                        f"{encoded.rows} entries",
                        code="OUTPUT_VERIFICATION_FAILED",
                    )
                data = encode_frames(bytes(encoded.block)) if task.compressed else encoded.block
                offsets[group - span.start] = pos
                out.write(data)
                pos += len(data)
                rows += encoded.rows
                last = group
    handle = KeyGroupsHandle(7, span.start, tuple(offsets), RelativeFileHandle(task.name, pos))
    with_data = sum(1 for o in offsets if o)
    return WrittenKeyedFile(task.subtask, handle, pos, rows, with_data)


def read_entries_task(
    task: KeyedReadTask,
    state_names: tuple[str, ...],
    new_max_parallelism: int,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Yield the entries of ``task`` as bytes with their key group under ``new_max_parallelism``.

    The byte-level re-key route (``keyed_entries``): every block is read and proven as ``read_keyed_task``
    reads it (strictly), every key is hashed from its bytes and checked against the key group it is
    stored under, and each entry's bytes after the prefix are cut out once (``keyed_entries.ENTRY_SCHEMA``,
    ``state`` over ``state_names``). Entries keep the order rows would have.

    Raises:
        InvalidInputError: As ``read_keyed_task``.
    """
    with StreamSource(task.handle.delegate, directory_of(task.root)) as src:
        layout, compressed, remap = _entry_layout(task, src, state_names)
        rekey = Rekey(task.max_parallelism, new_max_parallelism, state_names, remap, task.root)
        yield from decode_keyed_file(
            src,
            task.handle,
            layout,
            compressed=compressed,
            batch_rows=batch_rows,
            key_groups=task.key_groups,
            strict=True,
            cutter=rekey,
        )


def _with_states(batch: pa.RecordBatch, state_names: tuple[str, ...]) -> pa.RecordBatch:
    """Return ``batch`` with its ``state`` column re-encoded over ``state_names``."""
    state = batch.column("state")
    if not pa.types.is_dictionary(state.type):
        state = state.dictionary_encode()
    names = state.dictionary.to_pylist()
    lookup = {name: i for i, name in enumerate(state_names)}
    table = np.asarray([lookup[n] for n in names], dtype=np.int32)
    indices = np.asarray(state.indices.to_numpy(zero_copy_only=False), dtype=np.int32)
    recoded = pa.DictionaryArray.from_arrays(
        pa.array(table[indices] if len(names) else indices, type=pa.int32()),
        pa.array(state_names, type=pa.string()),
    )
    index = batch.schema.get_field_index("state")
    return batch.set_column(index, pa.field("state", STATE_TYPE, nullable=False), recoded)


def require_keys_in_groups(batch: pa.RecordBatch, key_type: str, max_parallelism: int, where: str) -> None:
    """Check that every decoded key hashes to the key group whose prefix it was stored under."""
    if key_type not in HASHABLE_KEY_TYPES or batch.num_rows == 0:
        return
    groups = key_groups_for_hashes(hash_codes(batch.column("key"), key_type), max_parallelism)
    require_stored_key_groups(batch, groups, where)


def require_stored_key_groups(batch: pa.RecordBatch | pa.Table, expected: np.ndarray, where: str) -> None:
    """Refuse rows whose stored ``key_group`` is not ``expected`` (the group Flink assigns their key).

    Raises:
        InvalidInputError: ``KEY_GROUP_MISMATCH``, naming the first such key.
    """
    stored = np.asarray(batch.column("key_group").to_numpy())
    bad = np.flatnonzero(expected != stored)
    if bad.size:
        i = int(bad[0])
        raise InvalidInputError(
            f"{where}: key {batch.column('key')[i].as_py()!r} is stored in key group {int(stored[i])} but "
            f"Flink assigns it to {int(expected[i])} (wrong key serializer or maxParallelism?)",
            code="KEY_GROUP_MISMATCH",
        )


def write_keyed_task(
    task: KeyedWriteTask,
    batches: Iterable[pa.RecordBatch | pa.Table],
    encoding: type[BlockSource[Any]] | None = None,
) -> WrittenKeyedFile:
    """Encode ``batches`` (ascending by ``key_group`` within ``task.key_groups``) into ``root/name``.

    ``encoding``: what the batches are (default rows; ``keyed_entries.Entries`` for entry batches).

    Raises:
        InvalidInputError: Rows outside the range, unsorted, or of a state the header lacks.
    """
    where = f"{task.root}/{task.name}"
    header = read_keyed_header(task.header, where, len(task.header))
    layout = KeyedLayout.from_header(header, task.max_parallelism, where)
    with _output(task.root, task.name) as out:
        written = write_keyed_file(
            out, task.header, layout, batches, task.key_groups, compressed=task.compressed, encoding=encoding
        )
    handle = KeyGroupsHandle(
        7, task.key_groups.start, written.offsets, RelativeFileHandle(task.name, written.size)
    )
    with_data = sum(1 for o in written.offsets if o)
    return WrittenKeyedFile(task.subtask, handle, written.size, written.rows, with_data)


@contextlib.contextmanager
def _output(root: str, name: str) -> Iterator[BinaryIO]:
    """Open ``root/name`` for writing: a buffered local file, or an object-store upload stream."""
    if is_remote(root):
        target = location(root) / name
        with target.fs.open_output_stream(target.path) as stream:
            yield stream
        return
    path = Path(root) / name
    with open(path, "wb", buffering=64 << 10) as fh:  # blocks larger than this go straight through
        yield fh
    flush_soon(path)  # the disk flushes this file while the next one is computed


__all__ = [
    "KeyedReadTask",
    "KeyedWriteTask",
    "WrittenKeyedFile",
    "require_keys_in_groups",
    "directory_of",
    "intersecting_tasks",
    "keyed_header",
    "read_entries_task",
    "read_parts_task",
    "read_keyed_task",
    "read_tasks",
    "require_stored_key_groups",
    "write_keyed_task",
    "write_parts_task",
]
