"""Encode canonical keyed state: rows in the kg keyed schema into a ``KeyGroupsSavepointStateHandle`` file.

Mirrors ``FullSnapshotAsyncWriter.writeKVStateData`` (Flink 2.3); the block layout is described in
``keyed_layout``. Encoding rows decoded by ``keyed_decode`` with the same header reproduces the file byte for
byte (uncompressed; pyarrow's snappy may pick different matches than the snappy-java build Flink ships,
which changes compressed bytes, not content).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.errors import ExecutionError, InvalidInputError
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.flink.io.snappy import encode_frames
from keygroup_cli.flink.keyed.decode import check_block, decode_block_batch
from keygroup_cli.flink.keyed.layout import (
    _INT,
    _LONG,
    _MAX_SHORT_STRING,
    _USHORT,
    END_OF_KEY_GROUP_MARK,
    FIRST_BIT_IN_BYTE_MASK,
    KeyedLayout,
    _vector_states,
)
from keygroup_cli.flink.types.serializers import (
    flip_sign_bit,
    variable_int_bytes,
)


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
            raise InvalidInputError(
                f"state {name!r} is not in the savepoint's keyed-state header", code="FLINK_STATE_UNKNOWN"
            )
        state = layout.states[sid]
        key_bytes = encode_key(rows["key"][r])
        namespace: bytes = rows["namespace"][r]
        if state.kind == "timer":
            ts = rows["timestamp"][r]
            if ts is None:
                raise InvalidInputError(f"timer row of {name!r} without timestamp", code="KG_ROW_INVALID")
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
                raise InvalidInputError(f"map row of {name!r} without user_key", code="KG_ROW_INVALID")
            parts.append(user_key)
            # MapSerializer entry value: boolean isNull, then the value when present.
            value = b"\x01" if value is None else b"\x00" + value
        elif value is None:
            raise InvalidInputError(f"{state.kind} row of {name!r} without value", code="KG_ROW_INVALID")
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
    encoding: type[BlockSource[Any]] | None = None,
) -> EncodedKeyedFile:
    """Write a canonical keyed file: ``header`` (compression flag patched), then one block per key group.

    Args:
        out: A binary file opened for writing at position 0.
        header: The ``KeyedBackendSerializationProxy`` bytes whose state order defines the state ids.
        layout: The layout for the *target* maxParallelism (key-group prefix width).
        batches: Rows in the kg keyed schema, ascending by ``key_group`` across batches.
        key_groups: The file's key-group range; rows outside it are an error.
        compressed: Write each block as its own snappy framed stream (and set the header flag).
        encoding: What the batches hold and how they become blocks: rows of the kg keyed schema
            (default), or entries' bytes (``keyed_entries.Entries``, the byte-level re-key route).

    Raises:
        InvalidInputError: A row outside the range, unsorted input, or a state missing from the header.
    """
    head = bytearray(header)
    head[4] = 1 if compressed else 0
    out.write(head)
    pos = len(head)
    offsets = [0] * key_groups.size
    state_ids = layout.state_ids()
    rows_total = 0
    last_group = -1
    kind: type[BlockSource[Any]] = _Rows if encoding is None else encoding

    def flush(rows: BlockSource[Any]) -> None:
        nonlocal pos
        for encoded in rows.blocks(layout):
            group, block = encoded.key_group, encoded.block
            data = encode_frames(bytes(block)) if compressed else block
            offsets[group - key_groups.start] = pos
            out.write(data)
            pos += len(data)

    carry: BlockSource[Any] | None = None
    for batch in _nonempty_batches(batches):
        rows = kind.of(batch, state_ids)
        groups = rows.groups
        _require_groups_in_range(groups, key_groups, last_group)
        rows_total += len(groups)
        carry = _carry_over(kind, carry, rows, last_group, flush)
        last_group = int(groups[-1])
    if carry is not None:
        flush(carry)
    return EncodedKeyedFile(key_groups.start, tuple(offsets), pos, rows_total)


def _nonempty_batches(batches: Iterable[pa.RecordBatch | pa.Table]) -> Iterator[pa.RecordBatch]:
    """Yield the record batches of ``batches`` (tables split into theirs) that hold rows, in order."""
    for part in batches:
        for batch in part.to_batches() if isinstance(part, pa.Table) else (part,):
            if batch.num_rows == 0:
                continue
            yield batch


def _require_groups_in_range(groups: np.ndarray, key_groups: KeyGroupRange, last_group: int) -> None:
    """Refuse a batch whose key groups leave ``key_groups``, descend, or start below ``last_group``.

    Raises:
        InvalidInputError: ``KEY_GROUP_OUT_OF_RANGE`` or ``ROWS_NOT_SORTED``.
    """
    if int(groups.min()) < key_groups.start or int(groups.max()) > key_groups.end:
        raise InvalidInputError(
            f"a row's key group is outside the file's range [{key_groups.start}, {key_groups.end}]",
            code="KEY_GROUP_OUT_OF_RANGE",
        )
    if int(groups[0]) < last_group or bool(np.any(groups[1:] < groups[:-1])):
        raise InvalidInputError("keyed rows are not sorted by key_group", code="ROWS_NOT_SORTED")


def _carry_over(
    kind: type[BlockSource[Any]],
    carry: BlockSource[Any] | None,
    rows: BlockSource[Any],
    last_group: int,
    flush: Callable[[BlockSource[Any]], None],
) -> BlockSource[Any]:
    """Flush the complete key groups of ``carry`` then ``rows``; return the last key group's items, to carry.

    ``carry`` (the previous batch's last key group, ``last_group``) joins ``rows`` when they continue it.
    """
    groups = rows.groups
    if carry is not None:
        # The previous batch's last key group may continue here.
        if int(groups[0]) == last_group:
            rows = kind.concat(carry, rows)
            groups = rows.groups
        else:
            flush(carry)
    last = int(np.searchsorted(groups, groups[-1], side="left"))
    if last:
        flush(rows.slice(0, last))
    tail: BlockSource[Any] = rows.slice(last, len(groups))
    return tail


S = TypeVar("S", bound="BlockSource[Any]")


class BlockSource(Protocol[S]):
    """Batches on their way to blocks, sorted by key group: what ``write_keyed_file`` cuts and carries."""

    @property
    def groups(self) -> np.ndarray:
        """Return each item's key group (int64)."""
        ...

    @classmethod
    def of(cls, batch: pa.RecordBatch, state_ids: dict[str, int]) -> S:
        """Take a batch apart; state names become the header's state ids."""
        ...

    @staticmethod
    def concat(a: S, b: S) -> S:
        """Return ``a``'s items followed by ``b``'s."""
        ...

    def slice(self, start: int, stop: int) -> S:
        """Return items ``[start, stop)``."""
        ...

    def blocks(self, layout: KeyedLayout) -> Iterator[_Block]:
        """Yield the blocks of the complete key groups, each checked against its bytes first."""
        ...


def header_state_ids(state: pa.Array | pa.ChunkedArray, state_ids: dict[str, int]) -> np.ndarray:
    """Return each row's state id in the header (int32) for a column of state names.

    Raises:
        InvalidInputError: A state the header does not hold (``FLINK_STATE_UNKNOWN``).
    """
    if isinstance(state, pa.ChunkedArray):
        state = state.combine_chunks()
    if not pa.types.is_dictionary(state.type):
        state = pc.dictionary_encode(state)
    names = state.dictionary.to_pylist()
    lookup = np.asarray([state_ids.get(n, -1) for n in names], dtype=np.int32)
    indices = state.indices.to_numpy(zero_copy_only=False)
    states = lookup[indices] if len(names) else np.zeros(0, dtype=np.int32)
    if bool((states < 0).any()):
        name = names[int(indices[int(np.argmax(states < 0))])]
        raise InvalidInputError(
            f"state {name!r} is not in the savepoint's keyed-state header", code="FLINK_STATE_UNKNOWN"
        )
    return states


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
            InvalidInputError: A state the header does not hold (``FLINK_STATE_UNKNOWN``).
        """
        states = header_state_ids(batch.column("state"), state_ids)
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

    def blocks(self, layout: KeyedLayout) -> Iterator[_Block]:
        """Yield the blocks of the rows' key groups, each proven to read back as its rows."""
        for encoded in _encode_rows(self, layout):
            _require_reads_back(encoded, layout)
            yield encoded

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


@dataclass(frozen=True, slots=True)
class _Block:
    """One encoded key-group block (uncompressed) and its row count.

    From the column-wise encoder also where it put each entry's end and which entries close a state's run
    (the claim ``keyed_decode.check_block`` proves against the bytes).
    """

    key_group: int
    block: bytes | memoryview
    rows: int
    value_ends: np.ndarray | None = None
    run_end: np.ndarray | None = None


def _require_reads_back(encoded: _Block, layout: KeyedLayout) -> None:
    """Refuse a block that does not read back as the entries it was encoded from, before it is written.

    A column-wise block is checked against the encoder's own entry boundaries, all entries at once
    (``keyed_decode.check_block``: the lengths, flags, state ids and key-group prefixes in the bytes must
    give exactly those boundaries); a block of the reference encoder is decoded again. Either way the
    entries Flink's restore will read are the rows kg meant to write, so the commit need not decode the
    keyed files again.

    Raises:
        ExecutionError: ``OUTPUT_VERIFICATION_FAILED`` (a bug in kg's encoder: nothing is committed).
    """
    group = encoded.key_group
    if encoded.value_ends is not None and encoded.run_end is not None:
        found = check_block(encoded.block, group, layout, encoded.value_ends, encoded.run_end)
    else:
        try:
            found = decode_block_batch(bytes(encoded.block), group, layout, "encoded", whole=True).num_rows
        except InvalidInputError:
            found = None
    if found != encoded.rows:
        raise ExecutionError(
            f"output verification failed: key group {group}'s encoded block does not read back as its "
            f"{encoded.rows} entries ({'unreadable' if found is None else f'{found} entries'})",
            code="OUTPUT_VERIFICATION_FAILED",
        )


def _encode_rows(rows: _Rows, layout: KeyedLayout) -> Iterator[_Block]:
    """Yield the blocks of the complete key groups of rows sorted by key group."""
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


def _encode_per_entry(rows: _Rows, layout: KeyedLayout) -> Iterator[_Block]:
    """Encode through ``_entries_of_group`` / ``encode_block``, the reference path (and its errors)."""
    data = rows.to_pydict()
    state_ids = layout.state_ids()
    encode_key = layout.codec.encoder()
    groups = rows.groups
    bounds = [0, *(np.flatnonzero(np.diff(groups)) + 1).tolist(), len(groups)]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        entries = _entries_of_group(data, lo, hi, layout, state_ids, encode_key)
        group = int(groups[lo])
        yield _Block(group, encode_block(group, entries, layout.prefix_bytes), hi - lo)


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


def _vector_flags(rows: _Rows, layout: KeyedLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Return per row ``(is_map, is_timer, value_null)``; None when a row needs the reference path.

    The reference path takes states the column-wise encoder does not handle, null keys or namespaces, and
    rows missing the value, user key or timestamp their state's kind requires (its errors name them).
    """
    vector = _vector_states(layout)
    used = np.unique(rows.states)
    if not vector or not all(int(i) in vector for i in used):
        return None
    if rows.key.null_count or rows.namespace.null_count:
        return None
    kinds = [s.kind for s in layout.states]
    is_map = np.asarray([k == "map" for k in kinds], dtype=bool)[rows.states]
    is_timer = np.asarray([k == "timer" for k in kinds], dtype=bool)[rows.states]
    value_null = rows.value.is_null().to_numpy(zero_copy_only=False)
    user_key_null = rows.user_key.is_null().to_numpy(zero_copy_only=False)
    if bool((value_null & ~is_map & ~is_timer).any()) or bool((user_key_null & is_map).any()):
        return None
    timestamp_null = rows.timestamp.is_null().to_numpy(zero_copy_only=False)
    if bool((timestamp_null & is_timer).any()):
        return None
    return is_map, is_timer, value_null


def _run_order(rows: _Rows, layout: KeyedLayout) -> np.ndarray | None:
    """Return the row order that makes runs; None when the rows are in it already.

    Runs: each state's rows of a key group together, in order of first appearance, rows in their order.
    """
    count = len(rows.groups)
    nstates = max(len(layout.states), 1)
    run_key = rows.groups * nstates + rows.states
    _, first, inverse = np.unique(run_key, return_index=True, return_inverse=True)
    order = np.argsort(first[inverse], kind="stable")
    if bool((order != np.arange(count)).any()):
        return order
    return None


def _run_marks(groups: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return per entry of ordered rows ``(group_start, run_end, next_state)``.

    ``next_state`` is the id written after a run's last entry (``END_OF_KEY_GROUP_MARK`` at a group's end).
    """
    count = len(groups)
    group_start = np.ones(count, dtype=bool)
    group_start[1:] = groups[1:] != groups[:-1]
    group_end = np.ones(count, dtype=bool)
    group_end[:-1] = groups[1:] != groups[:-1]
    run_end = group_end.copy()
    run_end[:-1] |= states[1:] != states[:-1]
    next_state = np.full(count, END_OF_KEY_GROUP_MARK, dtype=np.int64)
    next_state[:-1] = np.where(group_end[:-1], END_OF_KEY_GROUP_MARK, states[1:])
    return group_start, run_end, next_state


def _key_cells(rows: _Rows, key_type: str) -> tuple[pa.Array, np.ndarray] | None:
    """Return the serialized keys and their byte lengths (int64); None when a key needs the reference path.

    The reference path takes string keys that are not ASCII or longer than ``_MAX_SHORT_STRING``.
    """
    count = len(rows.groups)
    key: pa.Array
    if key_type == "string":
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
        if key_type == "long":
            cells = _big_endian(values, ">i8")
        elif key_type == "int":
            cells = _big_endian(values, ">i4")
        else:
            cells = values.astype(np.uint8).reshape(count, 1)
        key = _fixed_cells(cells)
        key_len = np.full(count, cells.shape[1], dtype=np.int64)
    return key, key_len


def _timer_cells(rows: _Rows, is_timer: np.ndarray, value: pa.Array) -> tuple[pa.Array, tuple[pa.Array, ...]]:
    """Return ``value`` with timers' values emptied, and the timestamp column to join (none without timers).

    A timer (TimerSerializer) is: timestamp with its sign bit flipped (8 bytes), key, namespace; no value.
    """
    timestamp: tuple[pa.Array, ...] = ()
    if bool(is_timer.any()):
        value = pc.if_else(pa.array(is_timer), _EMPTY, value)
        stamps = rows.timestamp.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        flipped = stamps.view(np.uint64) ^ np.uint64(1 << 63)
        timestamp = (_fixed_cells(_big_endian(flipped, ">u8"), is_timer),)
    return value, timestamp


def _prefix_cells(groups: np.ndarray, run_end: np.ndarray, prefix_bytes: int) -> np.ndarray:
    """Return each entry's key-group prefix ((n, 1 or 2) uint8, big-endian), flagged on a run's last entry."""
    count = len(groups)
    prefix: np.ndarray
    if prefix_bytes == 2:
        prefix = _big_endian(groups, ">u2").copy()
    else:
        prefix = groups.astype(np.uint8).reshape(count, 1)
    prefix[:, 0] |= np.where(run_end, FIRST_BIT_IN_BYTE_MASK, 0).astype(np.uint8)
    return prefix


def _cut_blocks(
    entries: pa.Array, groups: np.ndarray, group_start: np.ndarray, run_end: np.ndarray
) -> list[_Block]:
    """Return the joined ``entries`` (one binary value per entry) cut into one ``_Block`` per key group."""
    count = len(groups)
    bounds = np.frombuffer(entries.buffers()[1], dtype=np.int32, count=count + 1)[
        entries.offset : entries.offset + count + 1
    ].astype(np.int64)
    data = memoryview(entries.buffers()[2]) if entries.buffers()[2] is not None else memoryview(b"")
    # Each entry's value ends before the next state id where it closes a run (see _structure).
    value_ends = bounds[1:] - 2 * run_end
    starts = np.flatnonzero(group_start)
    ends = [*starts[1:].tolist(), count]
    return [
        _Block(
            int(groups[lo]),
            data[int(bounds[lo]) : int(bounds[hi])],
            hi - lo,
            value_ends[lo:hi] - bounds[lo],
            run_end[lo:hi],
        )
        for lo, hi in zip(starts.tolist(), ends, strict=True)
    ]


def _encode_columns(rows: _Rows, layout: KeyedLayout) -> list[_Block] | None:
    """Encode rows column-wise into ``(key group, block)`` pairs; None when a row needs the reference path.

    The bytes are those of ``_entries_of_group`` + ``encode_block``: per key group, the states' runs in
    order of first appearance, and per entry ``int keyLen, prefix (+0x80 on a run's last entry), key,
    namespace, user key, int valueLen, value`` (a timer: ``int keyLen, prefix, flipped timestamp, key,
    namespace, int 0``), with the run's state id before its first entry and the next id (or
    ``END_OF_KEY_GROUP_MARK``) after its last. All rows are joined by one Arrow kernel.
    """
    count = len(rows.groups)
    flags = _vector_flags(rows, layout)
    if flags is None:
        return None
    is_map, is_timer, value_null = flags
    order = _run_order(rows, layout)
    if order is not None:
        rows = rows.take(order)
        is_map = is_map[order]
        is_timer = is_timer[order]
        value_null = value_null[order]
    groups, states = rows.groups, rows.states
    group_start, run_end, next_state = _run_marks(groups, states)
    keyed = _key_cells(rows, layout.codec.key_type)
    if keyed is None:
        return None
    key, key_len = keyed
    namespace = rows.namespace
    user_key = pc.if_else(pa.array(is_map), rows.user_key.fill_null(b""), _EMPTY)
    value, timestamp = _timer_cells(rows, is_timer, rows.value.fill_null(b""))
    key_bytes = layout.prefix_bytes + 8 * is_timer + key_len + _lengths(namespace) + _lengths(user_key)
    value_bytes = _lengths(value) + is_map
    prefix = _prefix_cells(groups, run_end, layout.prefix_bytes)
    # MapSerializer entry value: boolean isNull, then the value when present.
    null_flag = value_null.astype(np.uint8).reshape(count, 1)
    entries = pc.binary_join_element_wise(
        _fixed_cells(_big_endian(states, ">u2"), group_start),
        _fixed_cells(_big_endian(key_bytes, ">i4")),
        _fixed_cells(prefix),
        *timestamp,
        key,
        namespace,
        user_key,
        _fixed_cells(_big_endian(value_bytes, ">i4")),
        _fixed_cells(null_flag, is_map),
        value,
        _fixed_cells(_big_endian(next_state, ">u2"), run_end),
        _EMPTY,
    )
    return _cut_blocks(entries, groups, group_start, run_end)


_EMPTY = pa.scalar(b"", pa.binary())


__all__ = ["BlockSource", "EncodedKeyedFile", "encode_block", "write_keyed_file"]
