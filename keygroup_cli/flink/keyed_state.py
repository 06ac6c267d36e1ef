"""Decode and encode canonical keyed state: the key-group blocks of a ``KeyGroupsSavepointStateHandle`` file.

Mirrors ``FullSnapshotAsyncWriter.writeKVStateData`` (writing) and ``FullSnapshotRestoreOperation`` /
``readKvStatesFromKeyGroup`` (reading), Flink 2.3. A keyed file is the ``KeyedBackendSerializationProxy``
header followed by one block per non-empty key group, each at its recorded offset and, when the header's
compression flag is set, inside its own snappy framed stream. A block is: short ``kvStateId``, entries
``int keyLen, key, int valueLen, value``; bit ``0x80`` of ``key[0]`` marks the last entry of a state and is
followed by the next state id or ``END_OF_KEY_GROUP_MARK`` (``0xFFFF``).

Rows come out in the kg keyed schema (``snapshot.parquet.keyed_schema``): key decoded by key type,
namespace and map user key as raw bytes, values raw (a map value without its null flag; a null map value as
SQL null), timers with their timestamp decoded and no value. Rows keep the file's order, so encoding the
decoded rows with the same header reproduces the file byte for byte (uncompressed; pyarrow's snappy may
pick different matches than the snappy-java build Flink ships, which changes compressed bytes, not content).
"""

from __future__ import annotations

import mmap
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.errors import InvalidSnapshotError, UnsupportedFormatError
from keygroup_cli.flink import local_path
from keygroup_cli.flink.handles import (
    ByteStreamHandle,
    KeyGroupsHandle,
    SegmentFileHandle,
    StreamHandle,
    key_group_extents,
)
from keygroup_cli.flink.keyed_header import KeyedStateHeader, StateMetaInfo
from keygroup_cli.flink.serializers import (
    KeyCodec,
    flip_sign_bit,
    key_codec,
    namespace_size,
    variable_int_bytes,
)
from keygroup_cli.flink.snappy import decode_frames, encode_frames
from keygroup_cli.keygroups import KeyGroupRange, key_group_prefix_bytes
from keygroup_cli.snapshot.parquet import STATE_TYPE, keyed_schema
from keygroup_cli.storage.locations import Location

#: ``FullSnapshotUtil.END_OF_KEY_GROUP_MARK``.
END_OF_KEY_GROUP_MARK = 0xFFFF
#: ``FullSnapshotUtil.FIRST_BIT_IN_BYTE_MASK``: set in ``key[0]`` on the last entry of a state.
FIRST_BIT_IN_BYTE_MASK = 0x80
#: Rows per emitted record batch (batches end at key-group boundaries, so one group may exceed it).
DEFAULT_BATCH_ROWS = 1 << 16

_INT = struct.Struct(">i")
_USHORT = struct.Struct(">H")
_LONG = struct.Struct(">q")


# -- where the bytes are ------------------------------------------------------------------------------------


class StreamSource:
    """Random access to the bytes of one state handle: inline, a local file (memory-mapped) or a segment.

    Use as a context manager; ``read(start, end)`` returns ``bytes``.
    """

    def __init__(
        self, handle: StreamHandle | None, directory: Path | Location, source: str | None = None
    ) -> None:
        self._mmap: mmap.mmap | None = None
        self._file: BinaryIO | None = None
        self._base = 0
        if handle is None:
            self._data: bytes | mmap.mmap = b""
            self.source = source or "<empty>"
        elif isinstance(handle, ByteStreamHandle):
            self._data = handle.data
            self.source = source or f"inline state {handle.handle_name}"
        else:
            path = local_path(handle, directory)
            if path is None:
                raise UnsupportedFormatError(
                    f"cannot read state handle {handle!r}", code="FLINK_HANDLE_UNSUPPORTED"
                )
            self.source = source or str(path)
            if isinstance(path, Location):
                if path.local_path is None:
                    # Decoding streams whole files: kg downloads a remote input first (storage.remote).
                    raise UnsupportedFormatError(
                        f"{path}: decoding state straight from an object store is not supported; "
                        "kg rescale downloads it first",
                        code="REMOTE_STATE_FILE",
                    )
                path = path.local_path
            try:
                self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
            except FileNotFoundError:
                raise InvalidSnapshotError(
                    f"{path}: state file is missing", code="STATE_FILE_MISSING"
                ) from None
            except OSError as exc:
                raise InvalidSnapshotError(
                    f"{path}: cannot read state file: {exc.strerror}", code="STATE_FILE_UNREADABLE"
                ) from None
            size = path.stat().st_size
            self._data = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
            if isinstance(self._data, mmap.mmap):
                self._mmap = self._data
            if isinstance(handle, SegmentFileHandle):
                self._base = handle.start_pos
                self.size = handle.size
                return
        self.size = len(self._data)

    def read(self, start: int, end: int) -> bytes:
        """Return the bytes ``[start, end)`` of the stream (clipped to its end)."""
        end = min(end, self.size)
        return bytes(self._data[self._base + start : self._base + end])

    def close(self) -> None:
        """Release the mapping and the file."""
        if self._mmap is not None:
            self._mmap.close()
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> StreamSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


# -- layout -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateLayout:
    """How one state's entries are laid out: kg kind and the namespace serializer's byte size."""

    name: str
    kind: str
    namespace_class: str | None

    @property
    def namespace_size(self) -> int | None:
        """Return the fixed namespace size, None for variable / unknown namespace serializers."""
        return namespace_size(self.namespace_class)


def kg_kind(info: StateMetaInfo) -> str:
    """Return kg's keyed kind for a state: value/list/map/timer (reducing and aggregating are values)."""
    kind = info.kind
    if kind in ("reducing", "aggregating"):
        return "value"
    if kind not in ("value", "list", "map", "timer"):
        raise UnsupportedFormatError(
            f"keyed state {info.name!r} has unsupported type {kind!r}", code="FLINK_STATE_TYPE_UNSUPPORTED"
        )
    return kind


def _namespace_class(info: StateMetaInfo) -> str | None:
    if info.backend_type_name == "PRIORITY_QUEUE":
        # TimerSerializer's nested snapshots are (key, namespace).
        timer = info.serializer("VALUE_SERIALIZER")
        if timer is not None and len(timer.nested) == 2:
            return timer.nested[1].class_name
        return None
    snapshot = info.serializer("NAMESPACE_SERIALIZER")
    return snapshot.class_name if snapshot is not None else None


@dataclass(frozen=True, slots=True)
class KeyedLayout:
    """Everything needed to split and build composite keys of one keyed file (state id = tuple index)."""

    codec: KeyCodec
    prefix_bytes: int
    states: tuple[StateLayout, ...]

    @classmethod
    def from_header(cls, header: KeyedStateHeader, max_parallelism: int, source: str) -> KeyedLayout:
        """Build the layout from a parsed header and the operator's maxParallelism.

        Raises:
            UnsupportedFormatError: The header could not be fully parsed (an unknown serializer snapshot).
        """
        if header.states is None or header.key_serializer is None:
            raise UnsupportedFormatError(
                f"{source}: the keyed-state header holds a serializer snapshot kg cannot delimit",
                code="FLINK_STATE_HEADER_UNKNOWN",
            )
        states = tuple(StateLayout(i.name, kg_kind(i), _namespace_class(i)) for i in header.states)
        return cls(
            key_codec(header.key_serializer.class_name), key_group_prefix_bytes(max_parallelism), states
        )

    def state_ids(self) -> dict[str, int]:
        """Return state name → state id (its index in the header)."""
        return {s.name: i for i, s in enumerate(self.states)}


# -- decoding -----------------------------------------------------------------------------------------------


class _Columns:
    """Column buffers for rows of one record batch."""

    __slots__ = ("key_group", "state", "key", "namespace", "user_key", "value", "timestamp")

    def __init__(self) -> None:
        self.key_group: list[int] = []
        self.state: list[int] = []
        self.key: list[object] = []
        self.namespace: list[bytes] = []
        self.user_key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.timestamp: list[int | None] = []

    def __len__(self) -> int:
        return len(self.key_group)

    def batch(self, layout: KeyedLayout) -> pa.RecordBatch:
        schema = keyed_schema(layout.codec.key_type)
        names = pa.array([s.name for s in layout.states], type=pa.string())
        state = pa.DictionaryArray.from_arrays(pa.array(self.state, type=pa.int32()), names)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.key_group, type=pa.int32()),
                state.cast(STATE_TYPE),
                pa.array(self.key, type=schema.field("key").type),
                pa.array(self.namespace, type=pa.binary()),
                pa.array(self.user_key, type=pa.binary()),
                pa.array(self.value, type=pa.binary()),
                pa.array(self.timestamp, type=pa.int64()),
            ],
            schema=schema,
        )


def _unsplittable(source: str, state: StateLayout, codec: KeyCodec, why: str) -> UnsupportedFormatError:
    return UnsupportedFormatError(
        f"{source}: state {state.name!r}: cannot split the composite key ({why}; key serializer "
        f"{codec.serializer_class.rsplit('.', 1)[-1]}, namespace serializer "
        f"{(state.namespace_class or '?').rsplit('.', 1)[-1]})",
        code="FLINK_KEY_UNSPLITTABLE",
    )


def _split_key(
    key: bytes, start: int, state: StateLayout, codec: KeyCodec, source: str
) -> tuple[object, bytes, bytes | None]:
    """Split ``key[start:]`` (after the key-group prefix) into (key value, namespace, user key or None)."""
    ns_size = state.namespace_size
    is_map = state.kind == "map"
    if codec.self_delimiting:
        value, pos = codec.read(key, start, source)
        if codec.variable and ns_size is None:
            # Both variable: the key's length follows the key (writeVariableIntBytes).
            pos += len(variable_int_bytes(pos - start))
    elif ns_size is not None and not is_map:
        # Opaque key, fixed namespace: the key is everything up to the namespace.
        end = len(key) - ns_size
        if end < start:
            raise InvalidSnapshotError(f"{source}: composite key too short", code="FLINK_STATE_CORRUPT")
        return codec.decode(key[start:end]), key[end:], None
    else:
        raise _unsplittable(source, state, codec, "the key serializer is not self-delimiting")
    if ns_size is not None:
        ns_end = pos + ns_size
        if ns_end > len(key):
            raise InvalidSnapshotError(f"{source}: composite key too short", code="FLINK_STATE_CORRUPT")
        return value, key[pos:ns_end], (key[ns_end:] if is_map else None)
    if is_map:
        raise _unsplittable(source, state, codec, "map state with a variable-length namespace")
    rest = key[pos:]
    if codec.variable:
        # The namespace's own length follows it; find the split whose suffix encodes the prefix length.
        for n in range(len(rest), -1, -1):
            if rest[n:] == variable_int_bytes(n):
                return value, rest[:n], None
        raise InvalidSnapshotError(
            f"{source}: bad namespace length in composite key", code="FLINK_STATE_CORRUPT"
        )
    return value, rest, None


def _split_timer(
    key: bytes, start: int, state: StateLayout, codec: KeyCodec, source: str
) -> tuple[object, bytes, int]:
    """Split a timer element (``TimerSerializer``: flipped timestamp, key, namespace) after the prefix."""
    if start + 8 > len(key):
        raise InvalidSnapshotError(f"{source}: timer element too short", code="FLINK_STATE_CORRUPT")
    timestamp = flip_sign_bit(_LONG.unpack_from(key, start)[0])
    pos = start + 8
    if codec.self_delimiting:
        value, end = codec.read(key, pos, source)
        return value, key[end:], timestamp
    ns_size = state.namespace_size
    if ns_size is None:
        raise _unsplittable(source, state, codec, "timer with an opaque key and a variable-length namespace")
    end = len(key) - ns_size
    return codec.decode(key[pos:end]), key[end:], timestamp


def decode_block(block: bytes, key_group: int, layout: KeyedLayout, columns: _Columns, source: str) -> None:
    """Decode one key group's (uncompressed) block into ``columns``.

    Raises:
        InvalidSnapshotError: Truncated entries, an unknown state id, or a key whose prefix names another
            key group.
    """
    states = layout.states
    codec = layout.codec
    nprefix = layout.prefix_bytes
    expected_prefix = key_group.to_bytes(nprefix, "big")
    n = len(block)
    try:
        state_id = _USHORT.unpack_from(block, 0)[0]
        pos = 2
        while True:
            if state_id >= len(states):
                raise InvalidSnapshotError(
                    f"{source}: key group {key_group}: unknown state id {state_id}",
                    code="FLINK_STATE_CORRUPT",
                )
            state = states[state_id]
            kind = state.kind
            while True:
                klen = _INT.unpack_from(block, pos)[0]
                pos += 4
                key = block[pos : pos + klen]
                pos += klen
                vlen = _INT.unpack_from(block, pos)[0]
                pos += 4
                value = block[pos : pos + vlen]
                pos += vlen
                if pos > n or klen < nprefix or vlen < 0:
                    raise InvalidSnapshotError(
                        f"{source}: key group {key_group}: truncated entry", code="FLINK_STATE_CORRUPT"
                    )
                last = key[0] & FIRST_BIT_IN_BYTE_MASK
                if (bytes((key[0] & 0x7F,)) + key[1:nprefix]) != expected_prefix:
                    raise InvalidSnapshotError(
                        f"{source}: an entry in key group {key_group}'s block has another key group's prefix",
                        code="FLINK_STATE_CORRUPT",
                    )
                columns.key_group.append(key_group)
                columns.state.append(state_id)
                if kind == "timer":
                    k, ns, ts = _split_timer(key, nprefix, state, codec, source)
                    columns.key.append(k)
                    columns.namespace.append(ns)
                    columns.user_key.append(None)
                    columns.value.append(None)
                    columns.timestamp.append(ts)
                else:
                    k, ns, uk = _split_key(key, nprefix, state, codec, source)
                    columns.key.append(k)
                    columns.namespace.append(ns)
                    columns.user_key.append(uk)
                    if kind == "map":
                        # MapSerializer entry value: boolean isNull, then the value when present.
                        columns.value.append(None if value[:1] != b"\x00" else value[1:])
                    else:
                        columns.value.append(value)
                    columns.timestamp.append(None)
                if last:
                    break
            state_id = _USHORT.unpack_from(block, pos)[0]
            pos += 2
            if state_id == END_OF_KEY_GROUP_MARK:
                return
    except struct.error:
        raise InvalidSnapshotError(
            f"{source}: key group {key_group}: block ends before its END_OF_KEY_GROUP mark",
            code="FLINK_STATE_CORRUPT",
        ) from None


def decode_keyed_file(
    source: StreamSource,
    handle: KeyGroupsHandle,
    layout: KeyedLayout,
    *,
    compressed: bool,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of one canonical keyed file as record batches, key group by key group (ascending).

    Each block is read (and, if compressed, decompressed) on its own, so memory is bounded by the largest
    key group plus one batch. Blocks are decoded column-wise (``decode_block_batch``).
    """
    pending: list[pa.RecordBatch] = []
    rows = 0
    for group, start, end in sorted(key_group_extents(handle, source.size)):
        raw = source.read(start, end)
        block = decode_frames(raw, f"{source.source} key group {group}") if compressed else raw
        batch = decode_block_batch(block, group, layout, source.source)
        pending.append(batch)
        rows += batch.num_rows
        if rows >= batch_rows:
            yield _concat(pending)
            pending, rows = [], 0
    if rows:
        yield _concat(pending)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


# -- column-wise decoding -----------------------------------------------------------------------------------
#
# The per-entry decoder above is the reference; the column-wise one below walks a block once in Python for
# the entry boundaries only (each entry's position depends on the previous lengths) and cuts every column
# out of the block with numpy / Arrow. It covers value, list and map states with fixed-size namespaces and
# String (ASCII, shorter than 127 chars), Long, Int or Boolean keys: the common layouts. Any other block
# (timers, opaque keys, non-ASCII keys, corrupt bytes) is decoded by ``decode_block``, which also produces
# every error message.

#: Key types whose serialized keys the column-wise paths can cut and build.
_VECTOR_KEY_TYPES = ("string", "long", "int", "boolean")
#: Longest ASCII String key whose StringValue length (chars + 1) fits one varint byte.
_MAX_SHORT_STRING = 126


@lru_cache(maxsize=64)
def _vector_states(layout: KeyedLayout) -> frozenset[int]:
    """Return the ids of the states whose entries the column-wise paths handle for ``layout``."""
    if layout.codec.key_type not in _VECTOR_KEY_TYPES or layout.prefix_bytes not in (1, 2):
        return frozenset()
    return frozenset(
        i
        for i, s in enumerate(layout.states)
        if s.kind in ("value", "list", "map") and s.namespace_size is not None
    )


def _scan_block(
    block: bytes, states: frozenset[int]
) -> tuple[list[int], list[int], array[int], array[int]] | None:
    """Walk a block's entries; return run state ids, run starts (entry index), key ends and value ends.

    Only positions are collected (the hot loop of the column-wise decoder; ``array`` appends, no slicing);
    the caller checks the lengths. Returns None (so the caller falls back to ``decode_block``) for a state
    outside ``states`` or bytes that end too early.
    """
    unpack = _INT.unpack_from
    run_ids: list[int] = []
    run_starts: list[int] = []
    key_ends = array("q")
    value_ends = array("q")
    add_key_end = key_ends.append
    add_value_end = value_ends.append
    try:
        state_id = _USHORT.unpack_from(block, 0)[0]
        pos = 2
        while True:
            if state_id not in states:
                return None
            run_ids.append(state_id)
            run_starts.append(len(key_ends))
            while True:
                start = pos + 4
                end = start + unpack(block, pos)[0]
                pos = end + 4 + unpack(block, end)[0]
                if pos <= start:
                    # Negative lengths: refuse before the walk can loop.
                    return None
                add_key_end(end)
                add_value_end(pos)
                if block[start] & FIRST_BIT_IN_BYTE_MASK:
                    break
            state_id = _USHORT.unpack_from(block, pos)[0]
            pos += 2
            if state_id == END_OF_KEY_GROUP_MARK:
                return run_ids, run_starts, key_ends, value_ends
    except (struct.error, IndexError):
        return None


def _slices(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Return the byte ranges ``[starts[i], ends[i])`` of ``data`` as a compact binary array.

    The ranges must be ordered and disjoint: they become every other element of a binary array laid over
    ``data`` (offsets 0, s0, e0, s1, e1, ...), and Arrow's ``take`` copies the odd elements out.
    """
    count = len(starts)
    bounds = np.empty(2 * count + 1, dtype=np.int32)
    bounds[0] = 0
    bounds[1::2] = starts
    bounds[2::2] = ends
    laid = pa.Array.from_buffers(pa.binary(), 2 * count, [None, pa.py_buffer(bounds), data])
    return laid.take(pa.array(np.arange(1, 2 * count, 2, dtype=np.int64)))


def _fixed_width(raw: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """Return the ``width`` bytes at each of ``starts`` as a (len(starts), width) uint8 array."""
    return raw[starts[:, None] + np.arange(width, dtype=np.int64)]


def _is_ascii(array: pa.Array) -> bool:
    """Return whether every byte of a binary array (offset 0) is below 0x80."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1)
    chars = array.buffers()[2]
    if chars is None or offsets[-1] == 0:
        return True
    return not bool((np.frombuffer(chars, dtype=np.uint8, count=int(offsets[-1])) >= 0x80).any())


def _with_validity(array: pa.Array, valid: np.ndarray) -> pa.Array:
    """Return ``array`` (offset 0, no nulls) with the rows where ``valid`` is False set to null."""
    if bool(valid.all()):
        return array
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = array.buffers()
    return pa.Array.from_buffers(array.type, len(array), [bitmap, *buffers[1:]])


def decode_block_batch(block: bytes, key_group: int, layout: KeyedLayout, source: str) -> pa.RecordBatch:
    """Decode one key group's (uncompressed) block into a record batch of the kg keyed schema.

    Column-wise where the layout allows it (see above), else through ``decode_block``; both give the same
    rows in the same order.

    Raises:
        InvalidSnapshotError: As ``decode_block``.
    """
    batch = _decode_block_columns(block, key_group, layout) if len(block) < 2**31 else None
    if batch is None:
        columns = _Columns()
        decode_block(block, key_group, layout, columns, source)
        batch = columns.batch(layout)
    return batch


def _decode_block_columns(block: bytes, key_group: int, layout: KeyedLayout) -> pa.RecordBatch | None:
    """Decode a block column-wise; None when any entry needs the per-entry decoder."""
    states = _vector_states(layout)
    nprefix = layout.prefix_bytes
    scanned = _scan_block(block, states) if states else None
    if scanned is None:
        return None
    run_ids, run_starts, key_ends, value_ends = scanned
    count = len(key_ends)
    raw = np.frombuffer(block, dtype=np.uint8)
    ke = np.frombuffer(key_ends, dtype=np.int64)
    ve = np.frombuffer(value_ends, dtype=np.int64)
    vs = ke + 4
    # A key starts after the previous value and its int length, plus the state id where a run begins.
    ks = np.empty(count, dtype=np.int64)
    ks[0] = 2 + 4
    ks[1:] = ve[:-1] + 4
    ks[np.asarray(run_starts[1:], dtype=np.int64)] += 2
    if not bool((ke - ks >= nprefix).all()) or not bool((ve >= vs).all()) or int(ve[-1]) > len(block):
        return None
    # Key-group prefix without the last-entry flag (FullSnapshotRestoreOperation checks none; kg does).
    prefix = (raw[ks] & 0x7F).astype(np.int64)
    if nprefix == 2:
        prefix = (prefix << 8) | raw[ks + 1]
    if not bool((prefix == key_group).all()):
        return None
    run_lengths = np.diff(np.asarray([*run_starts, count], dtype=np.int64)).astype(np.int64)
    state_ids = np.repeat(np.asarray(run_ids, dtype=np.int32), run_lengths)
    codec = layout.codec
    data = pa.py_buffer(block)
    pos = ks + nprefix
    # Fixed namespace size per state (VoidNamespace: 1 byte); a map's user key is the rest of the key.
    ns_sizes = np.asarray([s.namespace_size or 0 for s in layout.states], dtype=np.int64)[state_ids]
    if codec.key_type == "string":
        # StringValue: length + 1 as one varint byte (short strings), then one byte per ASCII char.
        lengths = raw[pos].astype(np.int64)
        ns_start = pos + lengths
    else:
        size = codec.fixed_size
        assert size is not None
        ns_start = pos + size
    ns_end = ns_start + ns_sizes
    # Checked before any cut: every range must lie inside its own entry's key.
    if not bool((ns_end <= ke).all()):
        return None
    key: pa.Array
    if codec.key_type == "string":
        if not bool(((lengths >= 1) & (lengths <= _MAX_SHORT_STRING + 1)).all()):
            return None
        key = _slices(data, pos + 1, ns_start)
        if not _is_ascii(key):
            return None
        key = key.view(pa.string())
    else:
        cut = _fixed_width(raw, pos, codec.fixed_size or 0)
        if codec.key_type == "long":
            key = pa.array(cut.view(">i8").ravel().astype(np.int64))
        elif codec.key_type == "int":
            key = pa.array(cut.view(">i4").ravel().astype(np.int32))
        else:
            key = pa.array(cut.ravel() != 0)
    namespace = _slices(data, ns_start, ns_end)
    is_map = np.asarray([s.kind == "map" for s in layout.states], dtype=bool)[state_ids]
    user_key = _with_validity(_slices(data, np.where(is_map, ns_end, ke), ke), is_map)
    # MapSerializer entry value: boolean isNull, then the value when present.
    flag = np.where(vs < ve, raw[np.minimum(vs, len(raw) - 1)], 1)
    present = ~is_map | (flag == 0)
    value = _with_validity(_slices(data, np.where(is_map, np.minimum(vs + 1, ve), vs), ve), present)
    names = pa.array([s.name for s in layout.states], type=pa.string())
    state = pa.DictionaryArray.from_arrays(pa.array(state_ids, type=pa.int32()), names)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(count, key_group, dtype=np.int32)),
            state.cast(STATE_TYPE),
            key,
            namespace,
            user_key,
            value,
            pa.nulls(count, pa.int64()),
        ],
        schema=keyed_schema(codec.key_type),
    )


# -- encoding -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncodedKeyedFile:
    """What ``write_keyed_file`` wrote: offsets per key group of the range (0 = empty) and the size."""

    key_group_start: int
    offsets: tuple[int, ...]
    size: int
    rows: int


def _entries_of_group(
    rows: dict[str, list[Any]],
    lo: int,
    hi: int,
    layout: KeyedLayout,
    state_ids: dict[str, int],
    encode_key: Callable[[Any], bytes],
) -> list[tuple[int, bytes, bytes]]:
    """Build ``(state id, composite key without prefix, value)`` for rows ``[lo, hi)``, grouped by state."""
    codec = layout.codec
    out: list[tuple[int, bytes, bytes]] = []
    for r in range(lo, hi):
        name: str = rows["state"][r]
        sid = state_ids.get(name)
        if sid is None:
            raise InvalidSnapshotError(
                f"state {name!r} is not in the savepoint's keyed-state header", code="FLINK_STATE_UNKNOWN"
            )
        state = layout.states[sid]
        key_bytes = encode_key(rows["key"][r])
        namespace: bytes = rows["namespace"][r]
        if state.kind == "timer":
            ts = rows["timestamp"][r]
            if ts is None:
                raise InvalidSnapshotError(f"timer row of {name!r} without timestamp", code="KG_ROW_INVALID")
            out.append((sid, _LONG.pack(flip_sign_bit(int(ts))) + key_bytes + namespace, b""))
            continue
        both_variable = codec.variable and state.namespace_size is None
        parts = [key_bytes]
        if both_variable:
            parts.append(variable_int_bytes(len(key_bytes)))
        parts.append(namespace)
        if both_variable:
            parts.append(variable_int_bytes(len(namespace)))
        value: bytes | None = rows["value"][r]
        if state.kind == "map":
            user_key: bytes | None = rows["user_key"][r]
            if user_key is None:
                raise InvalidSnapshotError(f"map row of {name!r} without user_key", code="KG_ROW_INVALID")
            parts.append(user_key)
            # MapSerializer entry value: boolean isNull, then the value when present.
            value = b"\x01" if value is None else b"\x00" + value
        elif value is None:
            raise InvalidSnapshotError(f"{state.kind} row of {name!r} without value", code="KG_ROW_INVALID")
        out.append((sid, b"".join(parts), value))
    # Each state's entries must form one run; runs keep their first-appearance order and rows their order
    # (heap backends do not write states in id order, so sorting by id would change Flink's bytes).
    first: dict[int, int] = {}
    for i, entry in enumerate(out):
        first.setdefault(entry[0], i)
    out.sort(key=lambda e: first[e[0]])
    return out


def encode_block(key_group: int, entries: list[tuple[int, bytes, bytes]], prefix_bytes: int) -> bytes:
    """Return one key group's block (uncompressed), as ``FullSnapshotAsyncWriter`` writes it."""
    prefix = key_group.to_bytes(prefix_bytes, "big")
    flagged = bytes((prefix[0] | FIRST_BIT_IN_BYTE_MASK,)) + prefix[1:]
    out = bytearray(_USHORT.pack(entries[0][0]))
    count = len(entries)
    for j, (sid, composite, value) in enumerate(entries):
        next_sid = entries[j + 1][0] if j + 1 < count else END_OF_KEY_GROUP_MARK
        last = next_sid != sid
        out += _INT.pack(prefix_bytes + len(composite))
        out += flagged if last else prefix
        out += composite
        out += _INT.pack(len(value))
        out += value
        if last:
            out += _USHORT.pack(next_sid)
    return bytes(out)


def write_keyed_file(
    out: BinaryIO,
    header: bytes,
    layout: KeyedLayout,
    batches: Iterable[pa.RecordBatch | pa.Table],
    key_groups: KeyGroupRange,
    *,
    compressed: bool,
) -> EncodedKeyedFile:
    """Write a canonical keyed file: ``header`` (compression flag patched), then one block per key group.

    Args:
        out: A binary file opened for writing at position 0.
        header: The ``KeyedBackendSerializationProxy`` bytes whose state order defines the state ids.
        layout: The layout for the *target* maxParallelism (key-group prefix width).
        batches: Rows in the kg keyed schema, ascending by ``key_group`` across batches.
        key_groups: The file's key-group range; rows outside it are an error.
        compressed: Write each block as its own snappy framed stream (and set the header flag).

    Raises:
        InvalidSnapshotError: A row outside the range, unsorted input, or a state missing from the header.
    """
    head = bytearray(header)
    head[4] = 1 if compressed else 0
    out.write(head)
    pos = len(head)
    offsets = [0] * key_groups.size
    state_ids = layout.state_ids()
    rows_total = 0
    last_group = -1

    def flush(rows: _Rows) -> None:
        nonlocal pos
        for group, block in _encode_rows(rows, layout):
            data = encode_frames(bytes(block)) if compressed else block
            offsets[group - key_groups.start] = pos
            out.write(data)
            pos += len(data)

    carry: _Rows | None = None
    for part in batches:
        for batch in part.to_batches() if isinstance(part, pa.Table) else (part,):
            if batch.num_rows == 0:
                continue
            rows = _Rows.of(batch, state_ids)
            groups = rows.groups
            if int(groups.min()) < key_groups.start or int(groups.max()) > key_groups.end:
                raise InvalidSnapshotError(
                    f"a row's key group is outside the file's range [{key_groups.start}, {key_groups.end}]",
                    code="KEY_GROUP_OUT_OF_RANGE",
                )
            if int(groups[0]) < last_group or bool(np.any(groups[1:] < groups[:-1])):
                raise InvalidSnapshotError("keyed rows are not sorted by key_group", code="ROWS_NOT_SORTED")
            rows_total += len(groups)
            if carry is not None:
                # The previous batch's last key group may continue here.
                if int(groups[0]) == last_group:
                    rows = _Rows.concat(carry, rows)
                    groups = rows.groups
                else:
                    flush(carry)
                carry = None
            last = int(np.searchsorted(groups, groups[-1], side="left"))
            if last:
                flush(rows.slice(0, last))
            carry = rows.slice(last, len(groups))
            last_group = int(groups[-1])
    if carry is not None:
        flush(carry)
    return EncodedKeyedFile(key_groups.start, tuple(offsets), pos, rows_total)


@dataclass(frozen=True, slots=True)
class _Rows:
    """Keyed rows on their way to blocks: key groups and state ids as numpy, the rest as Arrow arrays."""

    groups: np.ndarray
    states: np.ndarray
    names: tuple[str, ...]
    key: pa.Array
    namespace: pa.Array
    user_key: pa.Array
    value: pa.Array
    timestamp: pa.Array

    @classmethod
    def of(cls, batch: pa.RecordBatch, state_ids: dict[str, int]) -> _Rows:
        """Take a batch of the kg keyed schema apart; state names become the header's state ids.

        Raises:
            InvalidSnapshotError: A state the header does not hold (``FLINK_STATE_UNKNOWN``).
        """
        state = batch.column("state")
        if not pa.types.is_dictionary(state.type):
            state = pc.dictionary_encode(state)
        names = state.dictionary.to_pylist()
        lookup = np.asarray([state_ids.get(n, -1) for n in names], dtype=np.int32)
        indices = state.indices.to_numpy(zero_copy_only=False)
        states = lookup[indices] if len(names) else np.zeros(0, dtype=np.int32)
        if bool((states < 0).any()):
            name = names[int(indices[int(np.argmax(states < 0))])]
            raise InvalidSnapshotError(
                f"state {name!r} is not in the savepoint's keyed-state header", code="FLINK_STATE_UNKNOWN"
            )
        ordered = tuple(sorted(state_ids, key=state_ids.__getitem__))
        return cls(
            batch.column("key_group").to_numpy(zero_copy_only=False).astype(np.int64),
            states.astype(np.int32),
            ordered,
            batch.column("key"),
            batch.column("namespace"),
            batch.column("user_key"),
            batch.column("value"),
            batch.column("timestamp"),
        )

    @staticmethod
    def concat(a: _Rows, b: _Rows) -> _Rows:
        """Return the rows of ``a`` followed by those of ``b``."""
        return _Rows(
            np.concatenate([a.groups, b.groups]),
            np.concatenate([a.states, b.states]),
            a.names,
            pa.concat_arrays([a.key, b.key]),
            pa.concat_arrays([a.namespace, b.namespace]),
            pa.concat_arrays([a.user_key, b.user_key]),
            pa.concat_arrays([a.value, b.value]),
            pa.concat_arrays([a.timestamp, b.timestamp]),
        )

    def slice(self, start: int, stop: int) -> _Rows:
        """Return rows ``[start, stop)``."""
        n = stop - start
        return _Rows(
            self.groups[start:stop],
            self.states[start:stop],
            self.names,
            self.key.slice(start, n),
            self.namespace.slice(start, n),
            self.user_key.slice(start, n),
            self.value.slice(start, n),
            self.timestamp.slice(start, n),
        )

    def take(self, order: np.ndarray) -> _Rows:
        """Return the rows in ``order``."""
        indices = pa.array(order)
        return _Rows(
            self.groups[order],
            self.states[order],
            self.names,
            self.key.take(indices),
            self.namespace.take(indices),
            self.user_key.take(indices),
            self.value.take(indices),
            self.timestamp.take(indices),
        )

    def to_pydict(self) -> dict[str, list[Any]]:
        """Return the rows as ``_entries_of_group`` reads them (state names, Python values)."""
        return {
            "key_group": self.groups.tolist(),
            "state": [self.names[i] for i in self.states.tolist()],
            "key": self.key.to_pylist(),
            "namespace": self.namespace.to_pylist(),
            "user_key": self.user_key.to_pylist(),
            "value": self.value.to_pylist(),
            "timestamp": self.timestamp.to_pylist(),
        }


#: Rows encoded at once by the column-wise encoder (cut at key-group boundaries; bounds its memory).
_ENCODE_CHUNK_ROWS = 1 << 16


def _encode_rows(rows: _Rows, layout: KeyedLayout) -> Iterator[tuple[int, bytes | memoryview]]:
    """Yield ``(key group, block)`` for complete key groups of rows sorted by key group."""
    groups = rows.groups
    starts = [0, *(np.flatnonzero(np.diff(groups)) + 1).tolist()]
    cuts = [0]
    for start in starts[1:]:
        if start - cuts[-1] >= _ENCODE_CHUNK_ROWS:
            cuts.append(start)
    cuts.append(len(groups))
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        chunk = rows.slice(lo, hi) if (lo, hi) != (0, len(groups)) else rows
        encoded = _encode_columns(chunk, layout)
        if encoded is None:
            yield from _encode_per_entry(chunk, layout)
        else:
            yield from encoded


def _encode_per_entry(rows: _Rows, layout: KeyedLayout) -> Iterator[tuple[int, bytes]]:
    """Encode through ``_entries_of_group`` / ``encode_block``, the reference path (and its errors)."""
    data = rows.to_pydict()
    state_ids = layout.state_ids()
    encode_key = layout.codec.encoder()
    groups = rows.groups
    bounds = [0, *(np.flatnonzero(np.diff(groups)) + 1).tolist(), len(groups)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        entries = _entries_of_group(data, lo, hi, layout, state_ids, encode_key)
        yield int(groups[lo]), encode_block(int(groups[lo]), entries, layout.prefix_bytes)


def _fixed_cells(cells: np.ndarray, present: np.ndarray | None = None) -> pa.Array:
    """Return a binary array of the rows of ``cells`` ((n, w) uint8); b"" where ``present`` is False."""
    count, width = cells.shape
    if present is None:
        offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
        data = cells.tobytes()
    else:
        offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(present.astype(np.int32) * width, out=offsets[1:])
        data = cells[present].tobytes()
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _big_endian(values: np.ndarray, dtype: str) -> np.ndarray:
    """Return ``values`` as big-endian bytes, one row per value: an (n, itemsize) uint8 array."""
    be = np.ascontiguousarray(values.astype(dtype))
    cells: np.ndarray = be.view(np.uint8).reshape(len(values), be.dtype.itemsize)
    return cells


def _lengths(array: pa.Array) -> np.ndarray:
    """Return each binary / string value's byte length (0 for null) as int64."""
    lengths: np.ndarray = pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    return lengths.astype(np.int64)


def _encode_columns(rows: _Rows, layout: KeyedLayout) -> list[tuple[int, memoryview]] | None:
    """Encode rows column-wise into ``(key group, block)`` pairs; None when a row needs the reference path.

    The bytes are those of ``_entries_of_group`` + ``encode_block``: per key group, the states' runs in
    order of first appearance, and per entry ``int keyLen, prefix (+0x80 on a run's last entry), key,
    namespace, user key, int valueLen, value``, with the run's state id before its first entry and the next
    id (or ``END_OF_KEY_GROUP_MARK``) after its last. All rows are joined by one Arrow kernel.
    """
    count = len(rows.groups)
    vector = _vector_states(layout)
    used = np.unique(rows.states)
    if not vector or not all(int(i) in vector for i in used):
        return None
    codec = layout.codec
    if rows.key.null_count or rows.namespace.null_count:
        return None
    is_map = np.asarray([s.kind == "map" for s in layout.states], dtype=bool)[rows.states]
    value_null = rows.value.is_null().to_numpy(zero_copy_only=False)
    user_key_null = rows.user_key.is_null().to_numpy(zero_copy_only=False)
    if bool((value_null & ~is_map).any()) or bool((user_key_null & is_map).any()):
        return None

    # Runs: each state's rows of a key group together, in order of first appearance, rows in their order.
    nstates = max(len(layout.states), 1)
    run_key = rows.groups * nstates + rows.states
    _, first, inverse = np.unique(run_key, return_index=True, return_inverse=True)
    order = np.argsort(first[inverse], kind="stable")
    if bool((order != np.arange(count)).any()):
        rows = rows.take(order)
        is_map = is_map[order]
        value_null = value_null[order]
    groups, states = rows.groups, rows.states
    group_start = np.ones(count, dtype=bool)
    group_start[1:] = groups[1:] != groups[:-1]
    group_end = np.ones(count, dtype=bool)
    group_end[:-1] = groups[1:] != groups[:-1]
    run_end = group_end.copy()
    run_end[:-1] |= states[1:] != states[:-1]
    next_state = np.full(count, END_OF_KEY_GROUP_MARK, dtype=np.int64)
    next_state[:-1] = np.where(group_end[:-1], END_OF_KEY_GROUP_MARK, states[1:])

    key: pa.Array
    if codec.key_type == "string":
        key_len = _lengths(rows.key)
        ascii_only = pc.all(pc.string_is_ascii(rows.key)).as_py()
        if ascii_only is False or (count and int(key_len.max()) > _MAX_SHORT_STRING):
            return None
        # StringValue.writeString: chars + 1 as one varint byte, then the ASCII bytes.
        string_head = _fixed_cells((key_len + 1).astype(np.uint8).reshape(count, 1))
        key = pc.binary_join_element_wise(string_head, rows.key.cast(pa.binary()), _EMPTY)
        key_len = key_len + 1
    else:
        values = rows.key.to_numpy(zero_copy_only=False)
        if codec.key_type == "long":
            cells = _big_endian(values, ">i8")
        elif codec.key_type == "int":
            cells = _big_endian(values, ">i4")
        else:
            cells = values.astype(np.uint8).reshape(count, 1)
        key = _fixed_cells(cells)
        key_len = np.full(count, cells.shape[1], dtype=np.int64)
    namespace = rows.namespace
    user_key = pc.if_else(pa.array(is_map), rows.user_key.fill_null(b""), _EMPTY)
    value = rows.value.fill_null(b"")
    nprefix = layout.prefix_bytes
    key_bytes = nprefix + key_len + _lengths(namespace) + _lengths(user_key)
    value_bytes = _lengths(value) + is_map
    # Key-group prefix (1 or 2 bytes, big-endian), flagged on the last entry of each run.
    if nprefix == 2:
        prefix = _big_endian(groups, ">u2").copy()
    else:
        prefix = groups.astype(np.uint8).reshape(count, 1)
    prefix[:, 0] |= np.where(run_end, FIRST_BIT_IN_BYTE_MASK, 0).astype(np.uint8)
    # MapSerializer entry value: boolean isNull, then the value when present.
    null_flag = value_null.astype(np.uint8).reshape(count, 1)
    entries = pc.binary_join_element_wise(
        _fixed_cells(_big_endian(states, ">u2"), group_start),
        _fixed_cells(_big_endian(key_bytes, ">i4")),
        _fixed_cells(prefix),
        key,
        namespace,
        user_key,
        _fixed_cells(_big_endian(value_bytes, ">i4")),
        _fixed_cells(null_flag, is_map),
        value,
        _fixed_cells(_big_endian(next_state, ">u2"), run_end),
        _EMPTY,
    )
    bounds = np.frombuffer(entries.buffers()[1], dtype=np.int32, count=count + 1)[
        entries.offset : entries.offset + count + 1
    ]
    data = memoryview(entries.buffers()[2]) if entries.buffers()[2] is not None else memoryview(b"")
    starts = np.flatnonzero(group_start)
    ends = [*starts[1:].tolist(), count]
    return [
        (int(groups[lo]), data[int(bounds[lo]) : int(bounds[hi])])
        for lo, hi in zip(starts.tolist(), ends, strict=True)
    ]


_EMPTY = pa.scalar(b"", pa.binary())


__all__ = [
    "DEFAULT_BATCH_ROWS",
    "END_OF_KEY_GROUP_MARK",
    "EncodedKeyedFile",
    "KeyedLayout",
    "StateLayout",
    "StreamSource",
    "decode_block",
    "decode_block_batch",
    "decode_keyed_file",
    "encode_block",
    "key_group_extents",
    "kg_kind",
    "write_keyed_file",
]
