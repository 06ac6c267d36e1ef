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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

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

    def __init__(self, handle: StreamHandle | None, directory: Path, source: str | None = None) -> None:
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
    key group plus one batch.
    """
    columns = _Columns()
    for group, start, end in sorted(key_group_extents(handle, source.size)):
        raw = source.read(start, end)
        block = decode_frames(raw, f"{source.source} key group {group}") if compressed else raw
        decode_block(block, group, layout, columns, source.source)
        if len(columns) >= batch_rows:
            yield columns.batch(layout)
            columns = _Columns()
    if len(columns):
        yield columns.batch(layout)


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
    encode_key = layout.codec.encoder()
    rows_total = 0
    last_group = -1

    def flush(rows: dict[str, list[Any]], lo: int, hi: int, group: int) -> None:
        nonlocal pos
        entries = _entries_of_group(rows, lo, hi, layout, state_ids, encode_key)
        block = encode_block(group, entries, layout.prefix_bytes)
        data = encode_frames(block) if compressed else block
        offsets[group - key_groups.start] = pos
        out.write(data)
        pos += len(data)

    carry: dict[str, list[Any]] | None = None
    for part in batches:
        if part.num_rows == 0:
            continue
        rows = part.to_pydict()
        groups = np.asarray(rows["key_group"], dtype=np.int64)
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
                rows = {k: carry[k] + rows[k] for k in rows}
                groups = np.asarray(rows["key_group"], dtype=np.int64)
            else:
                flush(carry, 0, len(carry["key_group"]), last_group)
            carry = None
        bounds = np.flatnonzero(np.diff(groups)) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(groups)]
        for lo, hi in zip(starts[:-1], ends[:-1], strict=True):
            flush(rows, lo, hi, int(groups[lo]))
        lo = starts[-1]
        carry = {k: v[lo:] for k, v in rows.items()}
        last_group = int(groups[-1])
    if carry is not None:
        flush(carry, 0, len(carry["key_group"]), last_group)
    return EncodedKeyedFile(key_groups.start, tuple(offsets), pos, rows_total)


__all__ = [
    "DEFAULT_BATCH_ROWS",
    "END_OF_KEY_GROUP_MARK",
    "EncodedKeyedFile",
    "KeyedLayout",
    "StateLayout",
    "StreamSource",
    "decode_block",
    "decode_keyed_file",
    "encode_block",
    "key_group_extents",
    "kg_kind",
    "write_keyed_file",
]
