"""Decode and encode operator (non-keyed) state files: list elements and broadcast maps at their offsets.

Mirrors ``DefaultOperatorStateBackendSnapshotStrategy`` (Flink 2.3): an ``OperatorBackendSerializationProxy``
header, then each list state's elements back to back (``PartitionableListState.write``: one offset per
element) and each broadcast state as ``int size, size × (key, value)`` at one offset
(``HeapBroadcastState.write``), both in the header's state order. With compression
(``CompressibleFSDataOutputStream``) one snappy framed stream starts right after the header and is flushed
before every recorded offset, so each element starts on a chunk boundary and is decoded on its own.

Rows are in the kg operator schema: ``state``, ``position`` (element index), ``entry_key`` (broadcast map key)
and ``value`` (the serialized element or map value). A broadcast state whose key or value serializer kg
cannot delimit is kept as one row with a null ``entry_key`` holding the whole ``size, entries`` blob.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.schema import OPERATOR_SCHEMA
from keygroup_cli.flink.io.snappy import STREAM_IDENTIFIER, decode_frames, encode_frames
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.metadata.handles import OperatorStateEntry, OperatorStateHandle
from keygroup_cli.flink.operator.header import OperatorStateHeader, mode_ordinal, require_states_declared
from keygroup_cli.flink.types.serializer_snapshots import MODE_OPTION, StateMetaInfo
from keygroup_cli.flink.types.serializers import value_end

_INT = struct.Struct(">i")
#: ``BytePrimitiveArraySerializer``'s snapshot: an int length, then the bytes (source readers' split state).
BYTE_ARRAY_SERIALIZER_SNAPSHOT = (
    "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer"
    "$BytePrimitiveArraySerializerSnapshot"
)
#: ``OperatorStateHandle.Mode`` ordinals.
MODE_ORDINALS = {"SPLIT_DISTRIBUTE": 0, "UNION": 1, "BROADCAST": 2}
KIND_BY_MODE = {0: "operator-split", 1: "operator-union", 2: "operator-broadcast"}


def _serializer_class(info: StateMetaInfo, key: str) -> str | None:
    snapshot = info.serializer(key)
    return snapshot.class_name if snapshot is not None else None


def decode_operator_file(
    source: StreamSource, handle: OperatorStateHandle, header: OperatorStateHeader
) -> pa.Table:
    """Return every element of one operator-state stream as a table in the kg operator schema.

    Raises:
        InvalidInputError: Offsets outside the stream, a broadcast blob that does not parse, or states
            other than the header's (``require_states_declared``).
    """
    require_states_declared(handle, header, source.source)
    broadcast_infos = {i.name: i for i in header.broadcast_states or ()}
    element_classes = {i.name: _serializer_class(i, "VALUE_SERIALIZER") for i in header.states or ()}
    ends = _element_ends(handle, source.size)
    rows = _OperatorRows()
    for n, entry in enumerate(handle.states):
        where = f"{source.source} state {entry.name!r}"
        for j, off in enumerate(entry.offsets):
            end = ends[(n, j)]
            if not 0 < off <= end <= source.size:
                raise InvalidInputError(
                    f"{source.source}: state {entry.name!r} element {j} has offset {off} outside the stream",
                    code="FLINK_STATE_CORRUPT",
                )
            raw = source.read(off, end)
            data = decode_frames(raw, where) if header.compressed else raw
            if entry.mode_name != "BROADCAST":
                _require_one_value(data, element_classes.get(entry.name), where, j)
                rows.add(entry.name, j, None, data)
                continue
            info = broadcast_infos.get(entry.name)
            pairs = _split_broadcast(data, info, where) if info else None
            if pairs is None:
                rows.add(entry.name, 0, None, data)
                continue
            for i, (pair_key, pair_value) in enumerate(pairs):
                rows.add(entry.name, i, pair_key, pair_value)
    return rows.table()


def _element_ends(handle: OperatorStateHandle, size: int) -> dict[tuple[int, int], int]:
    """Return where each element ends: where the next one (in file order) begins, or at the stream's end."""
    starts = sorted((off, n, j) for n, e in enumerate(handle.states) for j, off in enumerate(e.offsets))
    ends: dict[tuple[int, int], int] = {}
    for k, (_off, n, j) in enumerate(starts):
        ends[(n, j)] = starts[k + 1][0] if k + 1 < len(starts) else size
    return ends


class _OperatorRows:
    """Columns of the kg operator schema, filled element by element."""

    def __init__(self) -> None:
        self.state: list[str] = []
        self.position: list[int] = []
        self.entry_key: list[bytes | None] = []
        self.value: list[bytes] = []

    def add(self, state: str, position: int, entry_key: bytes | None, value: bytes) -> None:
        self.state.append(state)
        self.position.append(position)
        self.entry_key.append(entry_key)
        self.value.append(value)

    def table(self) -> pa.Table:
        return pa.Table.from_arrays(
            [
                pa.array(self.state, type=pa.string()),
                pa.array(self.position, type=pa.int32()),
                pa.array(self.entry_key, type=pa.binary()),
                pa.array(self.value, type=pa.binary()),
            ],
            schema=OPERATOR_SCHEMA,
        )


def _require_one_value(data: bytes, serializer_class: str | None, source: str, index: int) -> None:
    """Refuse a list element whose bytes are not exactly one value of its serializer (where kg knows it).

    ``PartitionableListState.write`` records one offset per element and serializes it there, so the next
    offset (or the end of the stream) is where the value ends. A shifted or swapped offset in
    ``_metadata`` cuts values apart: for serializers whose length kg can read (fixed-size ones, ``String``,
    ``byte[]``), that is found here, as ``kg verify`` finds it. Others are kept as opaque bytes.

    Raises:
        InvalidInputError: ``FLINK_STATE_CORRUPT``.
    """
    if serializer_class == BYTE_ARRAY_SERIALIZER_SNAPSHOT:
        if len(data) < 4:
            raise InvalidInputError(
                f"{source}: element {index} has {len(data)} bytes, no byte[] length",
                code="FLINK_STATE_CORRUPT",
            )
        length = _INT.unpack_from(data, 0)[0]
        end: int | None = 4 + length if length >= 0 else -1
    else:
        end = value_end(serializer_class, data, 0, source) if data else -1
    if end is not None and end != len(data):
        raise InvalidInputError(
            f"{source}: element {index} has {len(data)} bytes, its value serializer's value "
            f"{'has a negative length' if end < 0 else f'ends at byte {end}'}",
            code="FLINK_STATE_CORRUPT",
        )


def _split_broadcast(data: bytes, info: StateMetaInfo, source: str) -> list[tuple[bytes, bytes]] | None:
    """Split a broadcast blob into (key, value) pairs, or None when a serializer is opaque to kg."""
    key_class = _serializer_class(info, "KEY_SERIALIZER")
    value_class = _serializer_class(info, "VALUE_SERIALIZER")
    if len(data) < 4:
        raise InvalidInputError(f"{source}: broadcast state truncated", code="FLINK_STATE_CORRUPT")
    size = _INT.unpack_from(data, 0)[0]
    pos = 4
    pairs = []
    for _ in range(size):
        k_end = value_end(key_class, data, pos, source)
        if k_end is None:
            return None
        v_end = value_end(value_class, data, k_end, source)
        if v_end is None:
            return None
        pairs.append((data[pos:k_end], data[k_end:v_end]))
        pos = v_end
    if pos != len(data):
        raise InvalidInputError(
            f"{source}: trailing bytes after broadcast entries", code="FLINK_STATE_CORRUPT"
        )
    return pairs


@dataclass(frozen=True, slots=True)
class EncodedOperatorFile:
    """What ``write_operator_file`` wrote: the handle entries (name, mode, offsets) and the size."""

    states: tuple[OperatorStateEntry, ...]
    size: int


def header_state_order(
    header: OperatorStateHeader, source: str = "operator-state header"
) -> list[tuple[str, int]]:
    """Return ``(name, mode ordinal)`` of every state in the header, lists first, as Flink writes data.

    Raises:
        InvalidInputError: A list state's mode is not ``SPLIT_DISTRIBUTE`` or ``UNION``
            (``FLINK_STATE_META_INFO_INVALID``; ``read_operator_header`` refuses such a header already).
    """
    out = []
    for info in header.states or ():
        mode = mode_ordinal(info.option(MODE_OPTION), source, info.name)
        if mode == MODE_ORDINALS["BROADCAST"]:
            raise InvalidInputError(
                f"{source}: list state {info.name!r} has distribution mode BROADCAST",
                code="FLINK_STATE_META_INFO_INVALID",
            )
        out.append((info.name, mode))
    out.extend((info.name, MODE_ORDINALS["BROADCAST"]) for info in header.broadcast_states or ())
    return out


def write_operator_file(
    out: BinaryIO,
    header_bytes: bytes,
    header: OperatorStateHeader,
    rows: pa.Table | Iterable[dict[str, object]],
    *,
    compressed: bool,
) -> EncodedOperatorFile:
    """Write an operator-state stream: ``header_bytes`` (compression flag patched), then the elements.

    Args:
        out: A binary file opened for writing at position 0.
        header_bytes: The ``OperatorBackendSerializationProxy`` bytes (version 6 has the compression flag).
        header: ``header_bytes`` parsed; its state order is the data order.
        rows: Rows in the kg operator schema (any order; sorted here by state order and position).
        compressed: Write the elements inside one snappy framed stream, one chunk run per element.

    Raises:
        InvalidInputError: A row names a state the header does not declare.
    """
    head = bytearray(header_bytes)
    version = _INT.unpack_from(head, 0)[0]
    if version >= 6:
        head[4] = 1 if compressed else 0
    elif compressed:
        raise InvalidInputError(
            "operator-state proxy version 5 has no compression flag", code="FLINK_COMPRESSION_UNSUPPORTED"
        )
    order = header_state_order(header)
    by_state = _elements_by_state(rows, [name for name, _ in order])
    out.write(head)
    pos = len(head)
    if compressed:
        out.write(STREAM_IDENTIFIER)
        pos += len(STREAM_IDENTIFIER)
    entries = []
    for name, mode in order:
        offsets = []
        for blob in _blobs(sorted(by_state[name], key=lambda e: e[0]), mode):
            offsets.append(pos)
            data = encode_frames(blob, identifier=False) if compressed else blob
            out.write(data)
            pos += len(data)
        entries.append(OperatorStateEntry(name, mode, tuple(offsets)))
    return EncodedOperatorFile(tuple(entries), pos)


def _elements_by_state(
    rows: pa.Table | Iterable[dict[str, object]], names: list[str]
) -> dict[str, list[tuple[int, bytes | None, bytes]]]:
    """Group rows in the kg operator schema by state: ``(position, entry key, value)`` each.

    Raises:
        InvalidInputError: A row names a state not in ``names`` (``FLINK_STATE_UNKNOWN``).
    """
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows), schema=OPERATOR_SCHEMA)
    by_state: dict[str, list[tuple[int, bytes | None, bytes]]] = {name: [] for name in names}
    for name, pos, key, val in zip(
        table.column("state").to_pylist(),
        table.column("position").to_pylist(),
        table.column("entry_key").to_pylist(),
        table.column("value").to_pylist(),
        strict=True,
    ):
        if name not in by_state:
            raise InvalidInputError(
                f"operator state {name!r} is not in the savepoint's operator-state header",
                code="FLINK_STATE_UNKNOWN",
            )
        by_state[name].append((pos, key, val))
    return by_state


def _blobs(elements: list[tuple[int, bytes | None, bytes]], mode: int) -> list[bytes]:
    """Return the blobs one state is written as: each list element, or a broadcast state's one map."""
    if mode != 2:
        return [val for _p, _k, val in elements]
    if len(elements) == 1 and elements[0][1] is None:
        return [elements[0][2]]
    packed = bytearray(_INT.pack(len(elements)))
    for _p, key, val in elements:
        packed += (key or b"") + val
    return [bytes(packed)]


__all__ = [
    "KIND_BY_MODE",
    "MODE_ORDINALS",
    "EncodedOperatorFile",
    "decode_operator_file",
    "header_state_order",
    "write_operator_file",
]
