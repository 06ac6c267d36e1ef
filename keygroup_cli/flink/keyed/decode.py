"""Decode canonical keyed state: the key-group blocks of a ``KeyGroupsSavepointStateHandle`` file into rows.

Mirrors ``FullSnapshotRestoreOperation`` / ``readKvStatesFromKeyGroup`` (Flink 2.3); the block layout is
described in ``keyed_layout``. Rows come out in the kg keyed schema (``core.schema.keyed_schema``): key
decoded by key type, namespace and map user key as raw bytes, values raw (a map value without its null
flag; a null map value as SQL null), timers with their timestamp decoded and no value. Rows keep the file's
order, so ``keyed_encode`` reproduces the file byte for byte from them.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.core.schema import STATE_TYPE, keyed_schema
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.kernels.native import DEFER, kernels, scan_window, state_mask
from keygroup_cli.flink.keyed.layout import (
    _INT,
    _LONG,
    _MAX_SHORT_STRING,
    _USHORT,
    DEFAULT_BATCH_ROWS,
    END_OF_KEY_GROUP_MARK,
    FIRST_BIT_IN_BYTE_MASK,
    KeyedLayout,
    StateLayout,
    _vector_states,
)
from keygroup_cli.flink.types.serializers import (
    KeyCodec,
    flip_sign_bit,
    variable_int_bytes,
)

#: Uncompressed key-group blocks larger than this are read and decoded window by window.
WINDOW_BYTES = 8 << 20
#: The windows of the byte-level routes (the re-key as bytes, the checked copy): they make no rows, so a
#: small window costs little, and a read task's or worker thread's memory is the same for any key group.
BYTE_WINDOW_BYTES = 1 << 20


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
            raise InvalidInputError(f"{source}: composite key too short", code="FLINK_STATE_CORRUPT")
        return codec.decode(key[start:end]), key[end:], None
    else:
        raise _unsplittable(source, state, codec, "the key serializer is not self-delimiting")
    if ns_size is not None:
        ns_end = pos + ns_size
        if ns_end > len(key):
            raise InvalidInputError(f"{source}: composite key too short", code="FLINK_STATE_CORRUPT")
        return value, key[pos:ns_end], (key[ns_end:] if is_map else None)
    if is_map:
        raise _unsplittable(source, state, codec, "map state with a variable-length namespace")
    rest = key[pos:]
    if codec.variable:
        # The namespace's own length follows it; find the split whose suffix encodes the prefix length.
        for n in range(len(rest), -1, -1):
            if rest[n:] == variable_int_bytes(n):
                return value, rest[:n], None
        raise InvalidInputError(
            f"{source}: bad namespace length in composite key", code="FLINK_STATE_CORRUPT"
        )
    return value, rest, None


def _split_timer(
    key: bytes, start: int, state: StateLayout, codec: KeyCodec, source: str
) -> tuple[object, bytes, int]:
    """Split a timer element (``TimerSerializer``: flipped timestamp, key, namespace) after the prefix."""
    if start + 8 > len(key):
        raise InvalidInputError(f"{source}: timer element too short", code="FLINK_STATE_CORRUPT")
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


def decode_block(block: bytes, key_group: int, layout: KeyedLayout, columns: _Columns, source: str) -> int:
    """Decode one key group's (uncompressed) block into ``columns``; return where its END mark ends.

    Raises:
        InvalidInputError: Truncated entries, an unknown state id, or a key whose prefix names another
            key group.
    """
    states = layout.states
    nprefix = layout.prefix_bytes
    expected_prefix = key_group.to_bytes(nprefix, "big")
    try:
        state_id = _USHORT.unpack_from(block, 0)[0]
        pos = 2
        while True:
            if state_id >= len(states):
                raise InvalidInputError(
                    f"{source}: key group {key_group}: unknown state id {state_id}",
                    code="FLINK_STATE_CORRUPT",
                )
            pos = _decode_run(block, pos, key_group, state_id, layout, expected_prefix, columns, source)
            state_id = _USHORT.unpack_from(block, pos)[0]
            pos += 2
            if state_id == END_OF_KEY_GROUP_MARK:
                return int(pos)
    except struct.error:
        raise InvalidInputError(
            f"{source}: key group {key_group}: block ends before its END_OF_KEY_GROUP mark",
            code="FLINK_STATE_CORRUPT",
        ) from None


def _decode_run(
    block: bytes,
    pos: int,
    key_group: int,
    state_id: int,
    layout: KeyedLayout,
    expected_prefix: bytes,
    columns: _Columns,
    source: str,
) -> int:
    """Decode state ``state_id``'s run from ``pos`` (one call per run, struct.error left); return its end."""
    state = layout.states[state_id]
    kind = state.kind
    codec = layout.codec
    nprefix = layout.prefix_bytes
    n = len(block)
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
            raise InvalidInputError(
                f"{source}: key group {key_group}: truncated entry", code="FLINK_STATE_CORRUPT"
            )
        last = key[0] & FIRST_BIT_IN_BYTE_MASK
        if (bytes((key[0] & 0x7F,)) + key[1:nprefix]) != expected_prefix:
            raise InvalidInputError(
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
            return pos


def decode_keyed_file(
    source: StreamSource,
    handle: KeyGroupsHandle,
    layout: KeyedLayout,
    *,
    compressed: bool,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    key_groups: KeyGroupRange | None = None,
    strict: bool = False,
    window_bytes: int = WINDOW_BYTES,
    cutter: BlockCutter | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of one canonical keyed file as record batches, key group by key group (ascending).

    With ``strict`` a block is also refused where ``kg verify`` refuses it and Flink would not notice: a
    snappy frame whose CRC32C does not hold, or bytes between the END mark and the next block. A reader
    that decodes every block of its input this way needs no deep verification of it first.

    Each block is read (and, if compressed, decompressed) on its own and decoded column-wise at most
    ``batch_rows`` entries at a time (``decode_block_batches``). An uncompressed block larger than
    ``window_bytes`` is read and decoded window by window (``_windowed_block``), so memory is bounded by
    a window (or the largest compressed key group) plus one batch, not by the largest key group. With
    ``key_groups`` only the blocks of those key groups are read.

    ``cutter`` says what a proven block becomes (default: rows of the kg keyed schema, ``ROWS``); the
    byte-level re-key route (``keyed_entries``) cuts each entry's bytes instead, with the same walk, the
    same proofs and the same errors.
    """
    cut = ROWS if cutter is None else cutter
    pending: list[pa.RecordBatch] = []
    rows = 0
    for group, start, end in sorted(key_group_extents(handle, source.size)):
        if key_groups is not None and group not in key_groups:
            continue
        batches: Iterator[pa.RecordBatch]
        if not compressed and end - start > window_bytes:
            batches = _windowed_block(
                source, group, start, end, layout, batch_rows, strict, window_bytes, cut
            )
        else:
            raw = source.read(start, end)
            where = f"{source.source} key group {group}"
            block = decode_frames(raw, where, verify=strict) if compressed else raw
            del raw
            batches = decode_block_batches(
                block, group, layout, source.source, batch_rows, whole=strict, cutter=cut
            )
        for batch in batches:
            pending.append(batch)
            rows += batch.num_rows
            if rows >= batch_rows:
                yield _concat(pending)
                pending, rows = [], 0
    if rows:
        yield _concat(pending)


def _windowed_block(
    source: StreamSource,
    group: int,
    start: int,
    end: int,
    layout: KeyedLayout,
    batch_rows: int,
    strict: bool,
    window_bytes: int,
    cutter: BlockCutter | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decode the uncompressed block ``[start, end)`` window by window: memory follows the window.

    A window holds the whole entries that fit in ``window_bytes`` (more when one entry is larger). It is
    decoded as a block of its own by the column-wise path, which proves every entry against the bytes:
    the state id of the run it starts inside is put in front, an END mark after it, and its last entry is
    flagged as closing its run when the real one does not (``_window_block``). The windows follow each
    other exactly, so their rows are the block's, in order. Whatever a window's column-wise path does not
    take (an unusual key, damaged bytes, no END mark where the block ends, with ``strict`` bytes after
    it) sends the block to the whole-block path, which skips the rows already given and raises what a
    whole-block read raises.
    """
    cutter = ROWS if cutter is None else cutter
    states = cutter.states(layout)
    given = 0
    if states and batch_rows > 0:
        walked = yield from _walk_windows(
            source, group, start, end, layout, batch_rows, strict, window_bytes, cutter, states
        )
        if walked is None:
            return
        given = walked
    whole = source.read(start, end)
    for batch in decode_block_batches(
        whole, group, layout, source.source, batch_rows, whole=strict, cutter=cutter
    ):
        if given >= batch.num_rows:
            given -= batch.num_rows
            continue
        yield batch.slice(given) if given else batch
        given = 0


def _walk_windows(
    source: StreamSource,
    group: int,
    start: int,
    end: int,
    layout: KeyedLayout,
    batch_rows: int,
    strict: bool,
    window_bytes: int,
    cutter: BlockCutter,
    states: frozenset[int],
) -> Generator[pa.RecordBatch, None, int | None]:
    """Yield the rows of ``_windowed_block``'s windows, in order; return None once the block is done.

    Else return the rows already given: what no window took goes to the whole-block path.
    """
    given = 0
    pos = start
    current: int | None = None  # the state id of the run open at ``pos``; None: a state id is next
    size = window_bytes
    walk = getattr(cutter, "walk", None)
    while pos < end:
        buf = source.read(pos, min(pos + size, end))
        fused = None if walk is None else walk(buf, current, group, layout)
        if fused is not None:
            # The cutter walked, proved and cut the window in one step (the same result as below).
            cut, consumed, after, ended = fused
            entries = cut.num_rows
            yield from _in_batches(cut, batch_rows)
            given += entries
            del cut
        else:
            scanned = _scan_window(buf, states, current)
            if scanned is None:
                break
            value_ends, run_starts, consumed, after, ended = scanned
            entries = len(value_ends)
            if entries:
                block, window = _window_block(
                    buf, states, value_ends, run_starts, consumed, current, after, ended
                )
                taken = True
                for _lo, batch in _proven_batches(block, window, group, layout, batch_rows, cutter):
                    if batch is None:
                        taken = False
                        break
                    given += batch.num_rows
                    yield batch
                del block, window, batch  # before the next window is read
                if not taken:
                    break
        if not entries and not ended:
            if pos + size >= end:
                break  # the block ends inside an entry
            size *= 2  # an entry larger than the window
            continue
        del buf
        pos, current, size = pos + consumed, after, window_bytes
        if ended:
            if strict and pos != end:
                break  # bytes after the END mark: the whole-block path refuses them
            return None
    return given


def _in_batches(cut: pa.RecordBatch, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Yield a cutter's walked entries at most ``batch_rows`` at a time (whole when they fit)."""
    if cut.num_rows <= batch_rows:
        if cut.num_rows:
            yield cut
        return
    for lo in range(0, cut.num_rows, batch_rows):
        yield cut.slice(lo, lo + batch_rows)


def _scan_window(
    buf: bytes, states: frozenset[int], current: int | None
) -> tuple[np.ndarray, list[int], int, int | None, bool] | None:
    """Walk the whole entries at the start of ``buf``: one ``array`` append per entry, no slicing.

    ``current`` is the state id of the run ``buf`` starts inside, None if it starts at a state id. Returns
    each entry's end, the entries that open a run (after a state id in ``buf``), the bytes consumed (to
    the last whole entry, or the END mark), the state id of the run open there (None if a state id is
    next) and whether the END mark was read; None for a state outside ``states`` or negative lengths.
    With the native kernels (``native_kernels``), their scan: the same result.
    """
    native = kernels(len(buf))
    if native is not None:
        return scan_window(native, buf, states, current)
    unpack = _INT.unpack_from
    value_ends = array("q")
    add = value_ends.append
    run_starts: list[int] = []
    n = len(buf)
    pos = 0
    ended = False
    try:
        while True:
            if current is None:
                state_id = _USHORT.unpack_from(buf, pos)[0]
                if state_id == END_OF_KEY_GROUP_MARK:
                    ended = True
                    break
                if state_id not in states:
                    return None
                pos += 2
                current = state_id
                run_starts.append(len(value_ends))
            while True:
                begin = pos + 4
                key_end = begin + unpack(buf, pos)[0]
                following = key_end + 4 + unpack(buf, key_end)[0]
                if following <= begin:
                    # Negative lengths: refuse before the walk can loop.
                    return None
                if following > n:
                    raise IndexError  # the entry goes on past this window
                add(following)
                pos = following
                if buf[begin] > 0x7F:  # FIRST_BIT_IN_BYTE_MASK: the run's last entry
                    current = None
                    break
    except (struct.error, IndexError):
        pass
    if run_starts and run_starts[-1] == len(value_ends):
        # A state id read, but none of its run's entries fits: the next window starts at that id.
        run_starts.pop()
        current = None
    consumed = pos + 2 if ended else (value_ends[-1] if value_ends else 0)
    return np.frombuffer(value_ends, dtype=np.int64), run_starts, consumed, current, ended


def _window_block(
    buf: bytes,
    states: frozenset[int],
    value_ends: np.ndarray,
    run_starts: list[int],
    consumed: int,
    opened: int | None,
    after: int | None,
    ended: bool,
) -> tuple[bytearray, _Scanned]:
    """Return a window's entries as a block of their own, with its scan (see ``_windowed_block``).

    ``opened`` is the state id of the run the window starts inside (None: it starts at a state id),
    ``after`` the one still open after its last entry (None: that entry closes its run).
    """
    prefix = b"" if opened is None else _USHORT.pack(opened)
    shift = len(prefix)
    tail = b"" if ended else _USHORT.pack(END_OF_KEY_GROUP_MARK)
    block = bytearray(prefix)  # one copy of the window's bytes
    block += memoryview(buf)[:consumed]
    block += tail
    if after is not None:
        # The real last entry does not close its run (the next window goes on with it): flag it here.
        last = len(value_ends) - 1
        begin = (int(value_ends[last - 1]) if last else 0) + (2 if last in run_starts else 0)
        block[shift + begin + 4] |= FIRST_BIT_IN_BYTE_MASK
    starts = ([0] if opened is not None else []) + run_starts
    window = _Scanned(states, value_ends + shift, _run_ends(len(value_ends), starts), len(block))
    return block, window


def _proven_batches(
    block: bytes | bytearray,
    scanned: _Scanned,
    key_group: int,
    layout: KeyedLayout,
    batch_rows: int,
    cutter: BlockCutter,
) -> Iterator[tuple[int, pa.RecordBatch | None]]:
    """Yield ``(lo, rows of entries [lo, lo + batch_rows))``, each window proven and cut column-wise.

    Yields ``(lo, None)`` and stops at the first window the column-wise path does not take (it then needs
    ``decode_block``). Memory follows the window, not the block.
    """
    closed = np.flatnonzero(scanned.run_end)
    raw = np.frombuffer(block, dtype=np.uint8)
    for lo in range(0, len(scanned.value_ends), batch_rows):
        found = _structure(
            block,
            scanned.states,
            scanned.value_ends,
            scanned.run_end,
            scanned.end,
            lo,
            lo + batch_rows,
            closed,
        )
        batch = None
        if found is not None and _prefixes_match(raw, found, key_group, layout):
            batch = cutter.cut(block, found, key_group, layout)
        yield lo, batch
        if batch is None:
            return


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    if not isinstance(batches[0], pa.RecordBatch):
        # A cutter's own batches (``entry_parts.Cut``) join themselves.
        joined: pa.RecordBatch = type(batches[0]).join(batches)
        return joined
    return pa.concat_batches(batches)


# -- column-wise decoding -----------------------------------------------------------------------------------
#
# The per-entry decoder above is the reference; the column-wise one below walks a block once in Python for
# the entry boundaries only (each entry's position depends on the previous lengths) and cuts every column
# out of the block with numpy / Arrow. It covers value, list and map states with fixed-size namespaces, and
# timers, with String (ASCII, shorter than 127 chars), Long, Int or Boolean keys: the common layouts. Any
# other block (opaque keys, non-ASCII keys, corrupt bytes) is decoded by ``decode_block``, which also
# produces every error message.


def _scan_block(block: bytes, states: frozenset[int]) -> tuple[np.ndarray, list[int], int] | None:
    """Walk a block's entries; return each entry's value end, each run's first entry, and the END's end.

    Only positions are collected (the hot loop of the column-wise decoder, ``_scan_window``'s, run over
    the whole block); ``_structure`` derives and checks everything else from them. Returns None (so the
    caller falls back to ``decode_block``) for a state outside ``states`` or bytes that end too early.
    """
    scanned = _scan_window(block, states, None)
    if scanned is None or not scanned[4]:
        return None
    value_ends, run_starts, end, _open, _ended = scanned
    return value_ends, run_starts, end


@dataclass(frozen=True, slots=True)
class _Structure:
    """Entry positions of one block, proven to be where Flink's sequential read finds them."""

    key_starts: np.ndarray  # after the int key length
    key_ends: np.ndarray
    value_ends: np.ndarray
    state_ids: np.ndarray  # per entry (int32)

    @property
    def count(self) -> int:
        return len(self.value_ends)


def _ints_at(raw: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Return the big-endian int32 at each of ``positions`` (each with 4 bytes inside ``raw``), as int64."""
    return raw[positions[:, None] + np.arange(4, dtype=np.int64)].view(">i4").ravel().astype(np.int64)


def _structure(
    block: bytes | bytearray | memoryview,
    states: frozenset[int],
    value_ends: np.ndarray,
    run_end: np.ndarray,
    end: int,
    lo: int = 0,
    hi: int | None = None,
    run_ends: np.ndarray | None = None,
) -> _Structure | None:
    """Check claimed entry boundaries against the bytes, all entries at once; None where they differ.

    ``value_ends`` (each entry's end) and ``run_end`` (whether it closes its state's run) are a claim, from
    ``_scan_block`` or from the encoder that wrote the block. They are accepted only if reading the block
    as ``readKvStatesFromKeyGroup`` does (state id, then ``int keyLen, key, int valueLen, value`` until a
    key whose first byte has bit 0x80, then the next state id or ``END_OF_KEY_GROUP_MARK`` ending at
    ``end``) gives them exactly: entry ``i`` starts where entry ``i - 1`` ends (after the state id that
    follows a run's last entry), its lengths read from the bytes lead to the claimed end, its flag bit is
    the claimed run end, every state id is one of ``states``. By induction over the entries, that is the
    sequential read's own result, without a Python step per entry.

    Only entries ``[lo, hi)`` are checked and returned (windows that together cover the block check all
    of it, each in memory proportional to the window); the last window checks the END mark. ``run_ends``
    (``np.flatnonzero(run_end)``, once per block) finds where the run holding entry ``lo`` opened.
    """
    count = len(value_ends)
    n = len(block)
    hi = count if hi is None else min(hi, count)
    if count == 0 or len(run_end) != count or not 8 <= end <= n or not bool(run_end[-1]) or not 0 <= lo < hi:
        return None
    all_ve = np.asarray(value_ends, dtype=np.int64)
    if int(all_ve[-1]) + 2 != end or bool((np.diff(all_ve[max(lo - 1, 0) : hi]) <= 0).any()):
        return None
    raw = np.frombuffer(block, dtype=np.uint8, count=end)
    native = kernels()
    if native is not None and int(all_ve[max(lo - 1, 0)]) >= 0:
        # The same checks, entry by entry, by the native kernel (it defers where a read would wrap).
        mask = state_mask(states)
        status, ks, ke, ids = native.structure(
            raw,
            mask,
            all_ve,
            np.asarray(run_end, dtype=np.bool_),
            end,
            lo,
            hi,
            _opened(all_ve, run_end, lo, run_ends),
        )
        if status != DEFER:
            return _Structure(ks, ke, all_ve[lo:hi], ids) if status else None
    ve = all_ve[lo:hi]
    ends = np.asarray(run_end[lo:hi], dtype=bool)
    ks = np.empty(hi - lo, dtype=np.int64)
    if lo == 0:
        ks[0] = 2 + 4
        ks[1:] = ve[:-1] + 4 + 2 * ends[:-1]
    else:
        ks[:] = all_ve[lo - 1 : hi - 1] + 4 + 2 * np.asarray(run_end[lo - 1 : hi - 1], dtype=bool)
    # A key's int length lies after the previous entry; its first byte, the value's int length and the
    # value inside this entry: every read below stays inside [0, end).
    if bool((ks + 4 > ve).any()):
        return None
    ke = ks + _ints_at(raw, ks - 4)
    if bool((ke < ks + 1).any()) or bool((ke + 4 > ve).any()):
        return None
    if bool((ke + 4 + _ints_at(raw, ke) != ve).any()):
        return None
    if bool((((raw[ks] & FIRST_BIT_IN_BYTE_MASK) != 0) != ends).any()):
        return None
    state_ids = _state_ids(raw, states, all_ve, run_end, ve, ends, lo, hi, run_ends)
    if state_ids is None:
        return None
    return _Structure(ks, ke, ve, state_ids)


def _state_ids(
    raw: np.ndarray,
    states: frozenset[int],
    all_ve: np.ndarray,
    run_end: np.ndarray,
    ve: np.ndarray,
    ends: np.ndarray,
    lo: int,
    hi: int,
    run_ends: np.ndarray | None,
) -> np.ndarray | None:
    """Check the state ids around entries ``[lo, hi)`` (see ``_structure``); return each entry's, or None."""
    # State ids: one at 0 and one after each run's last entry (END_OF_KEY_GROUP_MARK after the last).
    opened = _opened(all_ve, run_end, lo, run_ends)
    first_id = (int(raw[opened]) << 8) | int(raw[opened + 1])
    closing = ve[ends]
    ids = (raw[closing].astype(np.int64) << 8) | raw[closing + 1]
    following = ids
    if hi == len(all_ve):
        if int(ids[-1]) != END_OF_KEY_GROUP_MARK:
            return None
        following = ids[:-1]
    if first_id not in states or not all(int(i) in states for i in np.unique(following)):
        return None
    bounds = np.flatnonzero(ends) + 1
    if not bool(ends[-1]):
        bounds = np.concatenate([bounds, [hi - lo]])
    run_lengths = np.diff(np.concatenate([[0], bounds]))
    run_ids = np.concatenate([[first_id], following])[: len(run_lengths)]
    return np.repeat(run_ids.astype(np.int32), run_lengths)


def _opened(all_ve: np.ndarray, run_end: np.ndarray, lo: int, run_ends: np.ndarray | None) -> int:
    """Return where the state id of the run holding entry ``lo`` lies: after the last run end before it."""
    if lo == 0:
        return 0
    if bool(run_end[lo - 1]):
        return int(all_ve[lo - 1])
    closed = np.flatnonzero(run_end) if run_ends is None else run_ends
    k = int(np.searchsorted(closed, lo)) - 1
    return int(all_ve[closed[k]]) if k >= 0 else 0


@dataclass(frozen=True, slots=True)
class _Scanned:
    """A block's scan (``_scan_block``): each entry's end, which entries close a run, where END ends."""

    states: frozenset[int]
    value_ends: np.ndarray
    run_end: np.ndarray
    end: int


def _scan(
    block: bytes, layout: KeyedLayout, *, whole: bool, states: frozenset[int] | None = None
) -> _Scanned | None:
    """Scan a block for the column-wise path; None where it cannot take it.

    With ``whole``, also None where bytes follow the END mark. ``states``: the state ids the path takes
    (default: ``_vector_states``).
    """
    states = _vector_states(layout) if states is None else states
    scanned = _scan_block(block, states) if states and len(block) < 2**31 else None
    if scanned is None or (whole and scanned[2] != len(block)):
        return None
    value_ends, run_starts, end = scanned
    return _Scanned(states, value_ends, _run_ends(len(value_ends), run_starts), end)


def _run_ends(count: int, run_starts: list[int]) -> np.ndarray:
    """Return, per entry, whether it closes its run (the entry before each run start, and the last)."""
    run_end = np.zeros(count, dtype=bool)
    run_end[np.asarray(run_starts[1:], dtype=np.int64) - 1] = True
    run_end[-1:] = True
    return run_end


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


def decode_block_batch(
    block: bytes, key_group: int, layout: KeyedLayout, source: str, *, whole: bool = False
) -> pa.RecordBatch:
    """Decode one key group's (uncompressed) block into a record batch of the kg keyed schema.

    Column-wise where the layout allows it (see above), else through ``decode_block``; both give the same
    rows in the same order.

    Raises:
        InvalidInputError: As ``decode_block``; with ``whole``, bytes after the END mark
            (``FLINK_KEY_GROUP_OFFSETS``).
    """
    batch = decode_block_columns(block, key_group, layout, whole=whole)
    return batch if batch is not None else _per_entry(block, key_group, layout, source, whole=whole)


def check_block(
    block: bytes | memoryview,
    key_group: int,
    layout: KeyedLayout,
    value_ends: np.ndarray,
    run_end: np.ndarray,
    states: frozenset[int] | None = None,
) -> int | None:
    """Return the entry count of a block as its encoder claims it, if the bytes prove the claim; else None.

    ``value_ends`` and ``run_end`` are the encoder's entry ends and run ends (see ``_structure``); the block
    must read as exactly those entries, up to an ``END_OF_KEY_GROUP_MARK`` that is its last byte, and every
    key must carry ``key_group``'s prefix. No Python step per entry: the check of a block a write task has
    just encoded, before it is written. ``states``: the state ids allowed (default: ``_vector_states``).
    """
    states = _vector_states(layout) if states is None else states
    native = kernels()
    if native is not None and states:
        # The same checks, and the prefixes', in one pass by the native kernel (it defers where
        # ``_structure`` takes its numpy path).
        status = native.check_block(
            np.frombuffer(block, dtype=np.uint8),
            state_mask(states),
            np.asarray(value_ends, dtype=np.int64),
            np.asarray(run_end, dtype=np.bool_),
            key_group,
            layout.prefix_bytes,
        )
        if status != DEFER:
            return len(value_ends) if status else None
    found = _structure(block, states, value_ends, run_end, len(block)) if states else None
    if found is None or not _prefixes_match(np.frombuffer(block, dtype=np.uint8), found, key_group, layout):
        return None
    return found.count


def _prefixes_match(raw: np.ndarray, found: _Structure, key_group: int, layout: KeyedLayout) -> bool:
    """Return whether every key starts with ``key_group``'s prefix (without the last-entry flag)."""
    nprefix = layout.prefix_bytes
    if bool((found.key_ends - found.key_starts < nprefix).any()):
        return False
    prefix = (raw[found.key_starts] & 0x7F).astype(np.int64)
    if nprefix == 2:
        prefix = (prefix << 8) | raw[found.key_starts + 1]
    return bool((prefix == key_group).all())


def decode_block_columns(
    block: bytes, key_group: int, layout: KeyedLayout, *, whole: bool = False
) -> pa.RecordBatch | None:
    """Decode a block column-wise; None when any entry needs the per-entry decoder.

    With ``whole``, also None when bytes follow the END mark.
    """
    found = _proven(block, key_group, layout, whole=whole)
    return None if found is None else _columns(block, found, key_group, layout)


def decode_block_batches(
    block: bytes,
    key_group: int,
    layout: KeyedLayout,
    source: str,
    batch_rows: int,
    *,
    whole: bool = False,
    cutter: BlockCutter | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield a block's rows (as ``decode_block_batch``) at most ``batch_rows`` at a time.

    The block's structure is proven once; the columns are cut window by window, so a key group of
    millions of entries never becomes one batch. Should a window need the per-entry decoder (a non-ASCII
    key, say), the rest of the block comes from it. With ``whole`` bytes after the END mark are refused.

    Raises:
        InvalidInputError: As ``decode_block``; with ``whole``, bytes after the END mark
            (``FLINK_KEY_GROUP_OFFSETS``).
    """
    cut = ROWS if cutter is None else cutter
    walk = getattr(cut, "walk", None)
    fused = None if walk is None or batch_rows <= 0 else walk(block, None, key_group, layout)
    if fused is not None and fused[3] and fused[0].num_rows and (fused[1] == len(block) or not whole):
        # The cutter walked, proved and cut the whole block in one step, up to its END mark.
        yield from _in_batches(fused[0], batch_rows)
        return
    scanned = _scan(block, layout, whole=whole, states=cut.states(layout)) if batch_rows > 0 else None
    if scanned is None:
        yield cut.per_entry(block, key_group, layout, source, whole=whole)
        return
    for lo, batch in _proven_batches(block, scanned, key_group, layout, batch_rows, cut):
        if batch is None:
            yield cut.per_entry(block, key_group, layout, source, whole=whole).slice(lo)
            return
        yield batch


def _per_entry(
    block: bytes, key_group: int, layout: KeyedLayout, source: str, *, whole: bool
) -> pa.RecordBatch:
    """Decode a block with the per-entry decoder; with ``whole`` refuse bytes after its END mark."""
    columns = _Columns()
    end = decode_block(block, key_group, layout, columns, source)
    if whole and end != len(block):
        raise InvalidInputError(
            f"{source}: key group {key_group}: {len(block) - end} byte(s) after the END_OF_KEY_GROUP mark, "
            "before the next block",
            code="FLINK_KEY_GROUP_OFFSETS",
        )
    try:
        return columns.batch(layout)
    except UnicodeEncodeError:
        # Java strings may hold a lone UTF-16 surrogate; kg's String keys are UTF-8 text (Arrow strings).
        raise UnsupportedFormatError(
            f"{source}: key group {key_group}: a String key holds an unpaired UTF-16 surrogate, which kg "
            "cannot keep as text",
            code="FLINK_KEY_NOT_UNICODE",
        ) from None


def _proven(block: bytes, key_group: int, layout: KeyedLayout, *, whole: bool = False) -> _Structure | None:
    """Return a block's proven structure if the column-wise path takes it (keys carrying its prefix)."""
    scanned = _scan(block, layout, whole=whole)
    if scanned is None:
        return None
    found = _structure(block, scanned.states, scanned.value_ends, scanned.run_end, scanned.end)
    if found is None or not _prefixes_match(np.frombuffer(block, dtype=np.uint8), found, key_group, layout):
        return None
    return found


def _columns(
    block: bytes | bytearray, found: _Structure, key_group: int, layout: KeyedLayout
) -> pa.RecordBatch | None:
    """Cut the rows of ``found``'s entries out of ``block``; None where an entry needs the per-entry path."""
    raw = np.frombuffer(block, dtype=np.uint8)
    nprefix = layout.prefix_bytes
    count = found.count
    ks, ke, ve = found.key_starts, found.key_ends, found.value_ends
    vs = ke + 4
    state_ids = found.state_ids
    codec = layout.codec
    data = pa.py_buffer(block)
    kinds = [s.kind for s in layout.states]
    is_timer = np.asarray([k == "timer" for k in kinds], dtype=bool)[state_ids]
    any_timer = bool(is_timer.any())
    # A timer (TimerSerializer) is: timestamp with its sign bit flipped (8 bytes), key, namespace.
    pos = ks + nprefix + 8 * is_timer
    if any_timer and not bool((pos <= ke).all()):
        return None
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
    # A timer's namespace is the rest of its element (_split_timer).
    ns_end = np.where(is_timer, ke, ns_start + ns_sizes) if any_timer else ns_start + ns_sizes
    # Checked before any cut: every range must lie inside its own entry's key.
    if not bool(((ns_start <= ns_end) & (ns_end <= ke)).all()):
        return None
    key: pa.Array | None
    if codec.key_type == "string":
        key = _string_keys(data, pos, ns_start, lengths)
        if key is None:
            return None
    else:
        key = _fixed_keys(raw, pos, codec)
    namespace = _slices(data, ns_start, ns_end)
    is_map = np.asarray([k == "map" for k in kinds], dtype=bool)[state_ids]
    user_key = _with_validity(_slices(data, np.where(is_map, ns_end, ke), ke), is_map)
    # MapSerializer entry value: boolean isNull, then the value when present. A timer has none.
    flag = np.where(vs < ve, raw[np.minimum(vs, len(raw) - 1)], 1)
    present = ~is_timer & (~is_map | (flag == 0))
    value = _with_validity(_slices(data, np.where(is_map, np.minimum(vs + 1, ve), vs), ve), present)
    timestamp = _timestamps(raw, ks, nprefix, is_timer, any_timer, count)
    return _row_batch(layout, key_group, count, state_ids, [key, namespace, user_key, value, timestamp])


def _string_keys(
    data: pa.Buffer, pos: np.ndarray, ns_start: np.ndarray, lengths: np.ndarray
) -> pa.Array | None:
    """Cut short ASCII String keys (one length byte at ``pos``); None where one is not."""
    if not bool(((lengths >= 1) & (lengths <= _MAX_SHORT_STRING + 1)).all()):
        return None
    key = _slices(data, pos + 1, ns_start)
    if not _is_ascii(key):
        return None
    return key.view(pa.string())


def _fixed_keys(raw: np.ndarray, pos: np.ndarray, codec: KeyCodec) -> pa.Array:
    """Cut fixed-size keys (Long, Int or Boolean) at ``pos``."""
    cut = _fixed_width(raw, pos, codec.fixed_size or 0)
    if codec.key_type == "long":
        return pa.array(cut.view(">i8").ravel().astype(np.int64))
    if codec.key_type == "int":
        return pa.array(cut.view(">i4").ravel().astype(np.int32))
    return pa.array(cut.ravel() != 0)


def _timestamps(
    raw: np.ndarray, ks: np.ndarray, nprefix: int, is_timer: np.ndarray, any_timer: bool, count: int
) -> pa.Array:
    """Return the timestamp column: each timer's flipped timestamp after its prefix, null elsewhere."""
    if any_timer:
        stamp = _fixed_width(raw, np.where(is_timer, ks + nprefix, 0), 8).view(">u8").ravel()
        flipped = (stamp ^ np.uint64(1 << 63)).astype(np.uint64).view(np.int64)
        return _with_validity(pa.array(np.where(is_timer, flipped, 0)), is_timer)
    return pa.nulls(count, pa.int64())


def _row_batch(
    layout: KeyedLayout, key_group: int, count: int, state_ids: np.ndarray, columns: list[pa.Array]
) -> pa.RecordBatch:
    """Return the kg keyed schema batch of ``columns`` (key to timestamp) with key group and state."""
    names = pa.array([s.name for s in layout.states], type=pa.string())
    state = pa.DictionaryArray.from_arrays(pa.array(state_ids, type=pa.int32()), names)
    return pa.RecordBatch.from_arrays(
        [pa.array(np.full(count, key_group, dtype=np.int32)), state.cast(STATE_TYPE), *columns],
        schema=keyed_schema(layout.codec.key_type),
    )


class BlockCutter(Protocol):
    """What a proven block becomes: the record batches ``decode_keyed_file`` yields.

    A cutter may also have ``walk(buf, current, key_group, layout)``: the walk, proof and cut of a window (or
    a whole block) in one step, returning ``(batch, consumed, open state id, END read)`` or None to leave the
    bytes to the steps below (``entry_parts.PartCutter.walk``).
    """

    def states(self, layout: KeyedLayout) -> frozenset[int]:
        """Return the state ids whose entries ``cut`` takes (others go to ``per_entry``)."""
        ...

    def cut(
        self, block: bytes | bytearray, found: _Structure, key_group: int, layout: KeyedLayout
    ) -> pa.RecordBatch | None:
        """Return the batch of ``found``'s entries (proven against ``block``); None: ``per_entry`` must."""
        ...

    def per_entry(
        self, block: bytes, key_group: int, layout: KeyedLayout, source: str, *, whole: bool
    ) -> pa.RecordBatch:
        """Return the batch of a whole block the reference way, raising what ``decode_block`` raises."""
        ...


class _RowCutter:
    """Rows of the kg keyed schema: ``_columns``, with ``decode_block`` as the reference."""

    def states(self, layout: KeyedLayout) -> frozenset[int]:
        return _vector_states(layout)

    def cut(
        self, block: bytes | bytearray, found: _Structure, key_group: int, layout: KeyedLayout
    ) -> pa.RecordBatch | None:
        return _columns(block, found, key_group, layout)

    def per_entry(
        self, block: bytes, key_group: int, layout: KeyedLayout, source: str, *, whole: bool
    ) -> pa.RecordBatch:
        return _per_entry(block, key_group, layout, source, whole=whole)


#: The default cutter: decoded rows.
ROWS: BlockCutter = _RowCutter()


__all__ = [
    "BYTE_WINDOW_BYTES",
    "ROWS",
    "BlockCutter",
    "check_block",
    "decode_block",
    "decode_block_batch",
    "decode_block_batches",
    "decode_block_columns",
    "decode_keyed_file",
]
