"""Keyed entries as bytes: the byte-level re-key route of a maxParallelism change, savepoint to savepoint.

Under a new maxParallelism every key moves to another key group, but an entry's bytes after its key-group
prefix (``key``, ``namespace``, ``user key``, ``int valueLen``, ``value``; a timer's flipped timestamp,
key and namespace) do not change. So kg does not decode entries into rows and encode them again: it walks
each block as ``keyed_decode`` does (the same scan, the same proofs, the same strictness and errors),
computes each key's Java ``hashCode`` from its serialized bytes (``String``: ``StringValue`` bytes, whose
ASCII characters are their UTF-16 units; ``Long``, ``Integer``, ``Boolean``: big-endian), checks the stored
key group with Flink's murmur hash, and cuts each entry's bytes out once, with its new key group.

An *entry batch* (``ENTRY_SCHEMA``) is ``key_group`` (the new one), ``state`` (over the operator's state
names, as rows), ``key_length`` (bytes of the key after the prefix) and ``entry`` (the bytes after the
prefix, to the value's end). Engines route and shuffle entry batches as they do rows: only ``key_group``
matters to them. ``Entries`` builds the new blocks from them, with the new prefix and the run structure
the row encoder gives (per key group, each state's entries in one run, runs in order of first appearance,
entries in input order), so the bytes are exactly those of the decode and re-encode route.

Entry batches are the byte route of ``--format native``; a canonical output's re-key packs the entries of
the same cut (``Rekey.rekeyed``) into plain-byte parts instead (``entry_parts``), no Arrow on the way.
Only primitive keys take the byte route. SQL jobs' ``row`` keys are re-keyed by the row route (decoded,
re-hashed with ``core.javahash.row_hash_codes``, encoded); opaque ``binary`` keys have no re-key route.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.errors import ExecutionError, InvalidInputError
from keygroup_cli.core.javahash import PRIMITIVE_KEY_TYPES, hash_codes, string_hash_code, unit_run_hash_codes
from keygroup_cli.core.keygroups import key_groups_for_hashes, key_groups_for_murmurs, murmur_hash_array
from keygroup_cli.core.schema import STATE_TYPE
from keygroup_cli.flink.kernels.native import DEFER, kernels, state_mask
from keygroup_cli.flink.keyed.decode import (
    ROWS,
    _fixed_width,
    _prefixes_match,
    _run_ends,
    _scan_block,
    _slices,
    _Structure,
    _structure,
    _walk_windows,
    check_block,
)
from keygroup_cli.flink.keyed.encode import (
    _EMPTY,
    _ENCODE_CHUNK_ROWS,
    _big_endian,
    _Block,
    _cut_blocks,
    _fixed_cells,
    _prefix_cells,
    header_state_ids,
)
from keygroup_cli.flink.keyed.layout import (
    _INT,
    _USHORT,
    END_OF_KEY_GROUP_MARK,
    FIRST_BIT_IN_BYTE_MASK,
    KeyedLayout,
)

#: The batches of the byte route: an entry's bytes after its key-group prefix, with its new key group.
ENTRY_SCHEMA = pa.schema(
    [
        pa.field("key_group", pa.int32(), nullable=False),
        pa.field("state", STATE_TYPE, nullable=False),
        pa.field("key_length", pa.int32(), nullable=False),
        pa.field("entry", pa.binary(), nullable=False),
    ]
)


def all_states(layout: KeyedLayout) -> frozenset[int]:
    """Return the state ids the byte route takes for ``layout``: all of them, for primitive keys."""
    if layout.codec.key_type not in PRIMITIVE_KEY_TYPES or layout.prefix_bytes not in (1, 2):
        return frozenset()
    return frozenset(range(len(layout.states)))


@dataclass(frozen=True, slots=True)
class Rekey:
    """A ``keyed_decode.BlockCutter`` that cuts proven blocks into entry batches under a new maxParallelism.

    ``remap`` maps the file's state ids to positions in ``state_names`` (the operator's states, the
    ``state`` dictionary of every batch); ``where`` names the input in ``KEY_GROUP_MISMATCH`` errors.
    """

    old_max_parallelism: int
    new_max_parallelism: int
    state_names: tuple[str, ...]
    remap: tuple[int, ...]
    where: str

    def states(self, layout: KeyedLayout) -> frozenset[int]:
        """Return every state id of ``layout`` (no entry needs its namespace split)."""
        return all_states(layout)

    def cut(
        self, block: bytes | bytearray, found: _Structure, key_group: int, layout: KeyedLayout
    ) -> pa.RecordBatch | None:
        """Return ``found``'s entries re-keyed; None where a key cannot be read from its bytes.

        Raises:
            InvalidInputError: A key stored in a key group Flink would not assign it to
                (``KEY_GROUP_MISMATCH``).
        """
        columns = self.rekeyed(block, found, key_group, layout)
        if columns is None:
            return None
        new, states = columns
        after_prefix = found.key_starts + layout.prefix_bytes
        return pa.RecordBatch.from_arrays(
            [
                pa.array(new, type=pa.int32()),
                pa.DictionaryArray.from_arrays(pa.array(states, type=pa.int32()), _names(self.state_names)),
                pa.array((found.key_ends - after_prefix).astype(np.int32)),
                _slices(pa.py_buffer(block), after_prefix, found.value_ends),
            ],
            schema=ENTRY_SCHEMA,
        )

    def rekeyed(
        self, block: bytes | bytearray, found: _Structure, key_group: int, layout: KeyedLayout
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Return ``found``'s new key groups and state positions (in ``state_names``); None as ``cut``.

        Raises:
            InvalidInputError: As ``cut``.
        """
        hashed = _hashed(block, found, layout)
        if hashed is None:
            return None
        codes, key_at = hashed
        # Both key groups from one murmur hash of each code.
        mixed = murmur_hash_array(codes)
        stored = key_groups_for_murmurs(mixed, self.old_max_parallelism)
        wrong = np.flatnonzero(stored != key_group)
        if wrong.size:
            i = int(wrong[0])
            key, _end = layout.codec.read(
                bytes(block[int(key_at[i]) : int(found.key_ends[i])]), 0, self.where
            )
            raise InvalidInputError(
                f"{self.where}: key {key!r} is stored in key group {key_group} but Flink assigns it to "
                f"{int(stored[i])} (wrong key serializer or maxParallelism?)",
                code="KEY_GROUP_MISMATCH",
            )
        new = key_groups_for_murmurs(mixed, self.new_max_parallelism)
        states = np.asarray(self.remap, dtype=np.int32)[found.state_ids]
        return new, states

    def per_entry(
        self, block: bytes, key_group: int, layout: KeyedLayout, source: str, *, whole: bool
    ) -> pa.RecordBatch:
        """Re-key a block the proofs did not take: read as the reference decoder reads it, then cut.

        Raises:
            InvalidInputError: What ``keyed_decode.decode_block`` raises for the block.
        """
        # The reference decoder names what is wrong with the block, exactly as the row route would.
        ROWS.per_entry(block, key_group, layout, source, whole=whole)
        found = _walk(block)
        batch = self.cut(block, found, key_group, layout)
        if batch is None:
            raise InvalidInputError(
                f"{source}: key group {key_group}: a key cannot be read from its bytes",
                code="FLINK_STATE_CORRUPT",
            )
        return batch


def walk_window(
    buf: bytes | bytearray,
    current: int | None,
    key_group: int,
    layout: KeyedLayout,
    old_max_parallelism: int,
    new_max_parallelism: int,
    remap: tuple[int, ...],
) -> (
    tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int | None, bool]
    | None
):
    """Walk, prove, check and re-key the whole entries at the start of ``buf``: one kernel call.

    The fused kernel (``numba_kernels.rekey_window``) gives for ``buf`` what the reference's five steps give
    (``keyed_decode._scan_window``, the window's copy, ``_structure``, ``_prefixes_match`` and
    ``Rekey.rekeyed``): ``buf`` as bytes, per entry where its bytes begin after the prefix and where they
    end, its key group under ``new_max_parallelism`` and its state's position by ``remap``, its key's length
    after the prefix; then the bytes consumed, the state id of the run open there (None: a state id is
    next) and whether the END mark was read. None without the kernels, for a layout the kernel does not
    take, or where it meets anything unusual (a state id out of place, a length or prefix that does not
    hold, a key that is not a short ASCII String or not whole, a key stored in another key group): the
    caller's reference path then reads the same bytes and decides, with its errors.
    """
    # Not counted as walked (``native_kernels.kernels``): the reference path counts the bytes it walks when
    # this defers, and ``expect`` has counted a large task's already.
    native = kernels()
    columns = _walk_columns(layout, remap)
    if native is None or columns is None or len(buf) >= 2**31:
        return None
    mask, kind, timer, namespace, positions = columns
    raw = np.frombuffer(buf, dtype=np.uint8)
    status, table, consumed, after = native.rekey_window(
        raw,
        mask,
        -1 if current is None else current,
        key_group,
        layout.prefix_bytes,
        kind,
        timer,
        namespace,
        positions,
        old_max_parallelism,
        new_max_parallelism,
    )
    if status == DEFER:
        return None
    opened = None if after < 0 else int(after)
    # Each row of the table is one column, contiguous; the small ones as the reference types them.
    starts, ends, groups = table[0], table[1], table[2]
    states, key_length = table[3].astype(np.int32), table[4].astype(np.int32)
    return raw, starts, ends, groups, states, key_length, int(consumed), opened, bool(status)


#: ``rekey_window``'s key kinds, by kg key type.
_KEY_KINDS = {"string": 0, "long": 1, "int": 2, "boolean": 3}
#: The key sizes ``rekey_window`` reads, by key kind (a String's is its own).
_FIXED_SIZES = (None, 8, 4, 1)


@functools.lru_cache(maxsize=64)
def _walk_columns(
    layout: KeyedLayout, remap: tuple[int, ...]
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray] | None:
    """Return ``rekey_window``'s view of a layout: state mask, key kind, per state timer, namespace, position.

    None where the kernel does not take the layout (a key type it cannot hash, another key size). Kept per
    layout and remap, not built again for each window: the arrays are shared, and no kernel writes to them.
    """
    codec = layout.codec
    kind = _KEY_KINDS.get(codec.key_type)
    states = all_states(layout)
    if kind is None or codec.fixed_size != _FIXED_SIZES[kind] or not states or len(remap) != len(states):
        return None
    timer, namespace = _key_room(layout)
    return state_mask(states), kind, timer, namespace, np.asarray(remap, dtype=np.int32)


def _key_room(layout: KeyedLayout) -> tuple[np.ndarray, np.ndarray]:
    """Return per state id whether it holds timers and the fixed namespace its keys leave room for.

    A timer's element is its flipped timestamp, its key and its namespace (the rest of the element: 0 here);
    a state's key is followed by its namespace (0 where none or of variable size).
    """
    timer = np.asarray([s.kind == "timer" for s in layout.states], dtype=np.bool_)
    sizes = [0 if s.kind == "timer" else s.namespace_size or 0 for s in layout.states]
    return timer, np.asarray(sizes, dtype=np.int64)


def _hashed(
    block: bytes | bytearray | memoryview, found: _Structure, layout: KeyedLayout
) -> tuple[np.ndarray, np.ndarray] | None:
    """Return every proven entry's key hash code and where its key starts; None where a key is not whole.

    A key must lie inside its entry's key bytes and leave room for a fixed-size namespace after it, as the
    row route's split requires (a timer's namespace is the rest of its element).
    """
    raw = np.frombuffer(block, dtype=np.uint8)
    timer, namespace = _key_room(layout)
    # A timer's element is the flipped timestamp (8 bytes), then the key, then the namespace.
    key_at = found.key_starts + layout.prefix_bytes + 8 * timer[found.state_ids]
    hashed = _key_hash_codes(block, raw, found, key_at, layout)
    if hashed is None:
        return None
    codes, key_end = hashed
    if bool((key_end + namespace[found.state_ids] > found.key_ends).any()):
        return None
    return codes, key_at


def check_entries(
    block: bytes | memoryview, key_group: int, layout: KeyedLayout, max_parallelism: int
) -> int | None:
    """Return the entry count of a whole uncompressed block if everything ``kg verify`` checks holds.

    The block's structure must be proven (lengths, flags, state ids, prefixes, the END mark as its last
    bytes) and every key must hash to ``key_group`` under ``max_parallelism``, without a row being made:
    the check of a block copied as bytes, in the pass that copies it. None if anything does not hold, or
    if the proof does not take the block (the caller then asks ``flink.check.verify``'s reference check why).
    """
    states = all_states(layout)
    if not states or len(block) >= 2**31:
        return None
    whole = bytes(block) if isinstance(block, memoryview) else block
    walked = _KeyGroupCheck(max_parallelism).walk(whole, None, key_group, layout)
    if walked is not None and walked[3] and walked[1] == len(block) and walked[0].num_rows:
        return walked[0].num_rows  # the fused kernel walked, proved and checked it all
    scanned = _scan_block(whole, states)
    if scanned is None or scanned[2] != len(block):
        return None
    value_ends, run_starts, end = scanned
    found = _structure(block, states, value_ends, _run_ends(len(value_ends), run_starts), end)
    if found is None or not _prefixes_match(np.frombuffer(block, dtype=np.uint8), found, key_group, layout):
        return None
    return found.count if _keys_in_group(block, found, key_group, layout, max_parallelism) else None


def proven_entries(
    block: bytes | memoryview, key_group: int, layout: KeyedLayout, max_parallelism: int
) -> Any:
    """Return the entry positions of a whole uncompressed block, checked as ``check_entries`` checks.

    The structure proven (lengths, flags, state ids, prefixes, the END mark as the last bytes) and every
    key hashed against ``key_group``, no row made: what a block copied or filtered as bytes needs. The
    result has ``key_starts``, ``key_ends``, ``value_ends`` and ``state_ids`` (one per entry). None where
    the proof does not take the block (the caller decodes it instead).
    """
    states = all_states(layout)
    if not states or len(block) >= 2**31:
        return None
    whole = bytes(block) if isinstance(block, memoryview) else block
    ids = tuple(range(len(layout.states)))
    walked = walk_window(whole, None, key_group, layout, max_parallelism, max_parallelism, ids)
    if walked is not None and walked[8] and walked[6] == len(whole) and len(walked[1]):
        # The fused kernel walked, proved and checked it all (as ``check_entries`` takes it).
        _raw, starts, ends, _groups, state_ids, key_length = walked[:6]
        starts = np.asarray(starts, dtype=np.int64)
        return _Structure(starts - layout.prefix_bytes, starts + key_length, np.asarray(ends), state_ids)
    scanned = _scan_block(whole, states)
    if scanned is None or scanned[2] != len(whole):
        return None
    value_ends, run_starts, end = scanned
    found = _structure(whole, states, value_ends, _run_ends(len(value_ends), run_starts), end)
    if found is None or not _prefixes_match(np.frombuffer(whole, dtype=np.uint8), found, key_group, layout):
        return None
    if not _keys_in_group(whole, found, key_group, layout, max_parallelism):
        return None
    return found


def walked_entries(block: bytes) -> Any:
    """Return the entry positions of a block another check proved, read one entry at a time."""
    return _walk(block)


def _keys_in_group(
    block: bytes | bytearray | memoryview,
    found: _Structure,
    key_group: int,
    layout: KeyedLayout,
    max_parallelism: int,
) -> bool:
    """Return whether every proven entry's key is whole and hashes to ``key_group`` (False: ask why)."""
    hashed = _hashed(block, found, layout)
    return hashed is not None and not bool(
        (key_groups_for_hashes(hashed[0], max_parallelism) != key_group).any()
    )


class _Checked:
    """What ``_KeyGroupCheck`` cuts a proven window into: its entry count, nothing else."""

    __slots__ = ("num_rows",)

    def __init__(self, num_rows: int) -> None:
        self.num_rows = num_rows


@dataclass(frozen=True, slots=True)
class _KeyGroupCheck:
    """A ``keyed_decode.BlockCutter`` that checks every proven entry's key against its key group, no rows."""

    max_parallelism: int

    def states(self, layout: KeyedLayout) -> frozenset[int]:
        return all_states(layout)

    def cut(self, block: bytes | bytearray, found: _Structure, key_group: int, layout: KeyedLayout) -> Any:
        if not _keys_in_group(block, found, key_group, layout, self.max_parallelism):
            return None  # not taken: the caller asks the whole-block check why
        return _Checked(found.count)

    def walk(
        self, buf: bytes, current: int | None, key_group: int, layout: KeyedLayout
    ) -> tuple[_Checked, int, int | None, bool] | None:
        """Check a window in one kernel call (``walk_window``); None: the reference steps check it."""
        names = tuple(range(len(layout.states)))
        walked = walk_window(
            buf, current, key_group, layout, self.max_parallelism, self.max_parallelism, names
        )
        if walked is None:
            return None
        return _Checked(len(walked[1])), *walked[6:]

    def per_entry(
        self, block: bytes, key_group: int, layout: KeyedLayout, source: str, *, whole: bool
    ) -> Any:
        raise AssertionError("the window check never reads a block whole")  # pragma: no cover


def check_entries_in_windows(
    source: Any, key_group: int, start: int, end: int, layout: KeyedLayout, max_parallelism: int, window: int
) -> int | None:
    """``check_entries`` of the uncompressed block ``source[start:end]``, read window by window.

    ``source.read(a, b)`` gives bytes; each window is proven as ``keyed_decode._windowed_block`` proves it
    (lengths, flags, state ids, prefixes, and the END mark as the block's last bytes) and every key hashed
    against ``key_group``: memory follows the window, not the key group. Returns the entry count, or None
    where the windows do not take the block (anything wrong or unusual: the caller checks it whole).
    """
    checker = _KeyGroupCheck(max_parallelism)
    states = checker.states(layout)
    if not states:
        return None
    walk = _walk_windows(source, key_group, start, end, layout, 1 << 30, True, window, checker, states)
    entries = 0
    try:
        while True:
            entries += next(walk).num_rows
    except StopIteration as done:
        return entries if done.value is None else None
    except InvalidInputError:
        return None


def _names(state_names: tuple[str, ...]) -> pa.Array:
    return pa.array(state_names, type=pa.string())


def _key_hash_codes(
    block: bytes | bytearray | memoryview,
    raw: np.ndarray,
    found: _Structure,
    key_at: np.ndarray,
    layout: KeyedLayout,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Return the Java ``hashCode`` of every entry's key, read at ``key_at``, and where each key ends.

    None if a key does not lie inside its entry's key bytes.
    """
    codec = layout.codec
    key_ends = found.key_ends
    if codec.key_type != "string":
        size = codec.fixed_size or 0
        if size == 0 or bool((key_at + size > key_ends).any()):
            return None
        cells = _fixed_width(raw, key_at, size)
        if codec.key_type == "long":
            codes = hash_codes(cells.view(">i8").ravel().astype(np.int64), "long")
        elif codec.key_type == "int":
            codes = hash_codes(cells.view(">i4").ravel().astype(np.int32), "int")
        else:
            codes = hash_codes(cells.ravel() != 0, "boolean")
        return codes, key_at + size
    if bool((key_at + 1 > key_ends).any()):
        return None
    native = kernels()
    if native is not None:
        codes, ends, simple = native.string_hashes(raw, key_at, key_ends)
    else:
        codes, ends, simple = _short_string_hash_codes(raw, key_at, key_ends)
    for i in np.flatnonzero(~simple).tolist():
        # Longer or non-ASCII strings: decoded one by one (StringValue's varint chars).
        key = bytes(block[int(key_at[i]) : int(key_ends[i])])
        try:
            text, end = codec.read(key, 0)
        except InvalidInputError:
            return None
        if end > len(key):
            return None
        assert isinstance(text, str)
        codes[i] = string_hash_code(text)
        ends[i] = key_at[i] + end
    return codes, ends


def _short_string_hash_codes(
    raw: np.ndarray, key_at: np.ndarray, key_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the hash codes of the short ASCII String keys at ``key_at``, where each key ends, and which are.

    The others (longer, or not ASCII) have code 0: the caller decodes them one by one.
    """
    # StringValue: chars + 1 as a varint, then the chars; an ASCII char is one byte, its own UTF-16 unit.
    head = raw[key_at].astype(np.int64)
    simple = (head >= 1) & (head < 0x80) & (key_at + head <= key_ends)
    first, stop = key_at + 1, np.where(simple, key_at + head, key_at + 1)
    if len(first):
        # The largest byte of each string's chars (the bounds interleaved: every other range is a string's);
        # an empty string's range reads one byte, ignored. Every bound lies before its entry's value.
        bounds = np.empty(2 * len(first), dtype=np.int64)
        bounds[0::2], bounds[1::2] = first, stop
        largest = np.maximum.reduceat(raw, bounds)[0::2]
        simple &= (largest < 0x80) | (first == stop)
    codes = np.zeros(len(key_at), dtype=np.int32)
    ends = key_at + head
    easy = np.flatnonzero(simple)
    codes[easy] = unit_run_hash_codes(raw, first[easy], head[easy] - 1)
    return codes, ends, simple


def _walk(block: bytes) -> _Structure:
    """Return a block's entry positions read one entry at a time (a block the reference decoder read)."""
    key_starts, key_ends, value_ends, ids = [], [], [], []
    state_id = _USHORT.unpack_from(block, 0)[0]
    pos = 2
    while state_id != END_OF_KEY_GROUP_MARK:
        while True:
            start = pos + 4
            end = start + _INT.unpack_from(block, pos)[0]
            pos = end + 4 + _INT.unpack_from(block, end)[0]
            key_starts.append(start)
            key_ends.append(end)
            value_ends.append(pos)
            ids.append(state_id)
            if block[start] & FIRST_BIT_IN_BYTE_MASK:
                break
        state_id = _USHORT.unpack_from(block, pos)[0]
        pos += 2
    return _Structure(
        np.asarray(key_starts, dtype=np.int64),
        np.asarray(key_ends, dtype=np.int64),
        np.asarray(value_ends, dtype=np.int64),
        np.asarray(ids, dtype=np.int32),
    )


# -- Blocks from entries ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entries:
    """Entry batches on their way to blocks (a ``keyed_encode.BlockSource``): numpy columns and the bytes."""

    groups: np.ndarray
    states: np.ndarray
    key_length: np.ndarray
    entry: pa.Array

    @classmethod
    def of(cls, batch: pa.RecordBatch, state_ids: dict[str, int]) -> Entries:
        """Take an entry batch apart; state names become the header's state ids.

        Raises:
            InvalidInputError: A state the header does not hold (``FLINK_STATE_UNKNOWN``).
        """
        states = header_state_ids(batch.column("state"), state_ids)
        return cls(
            batch.column("key_group").to_numpy(zero_copy_only=False).astype(np.int64),
            states.astype(np.int32),
            batch.column("key_length").to_numpy(zero_copy_only=False).astype(np.int64),
            batch.column("entry"),
        )

    @staticmethod
    def concat(a: Entries, b: Entries) -> Entries:
        """Return the entries of ``a`` followed by those of ``b``."""
        return Entries(
            np.concatenate([a.groups, b.groups]),
            np.concatenate([a.states, b.states]),
            np.concatenate([a.key_length, b.key_length]),
            pa.concat_arrays([a.entry, b.entry]),
        )

    def slice(self, start: int, stop: int) -> Entries:
        """Return entries ``[start, stop)``."""
        return Entries(
            self.groups[start:stop],
            self.states[start:stop],
            self.key_length[start:stop],
            self.entry.slice(start, stop - start),
        )

    def take(self, order: np.ndarray) -> Entries:
        """Return the entries in ``order``."""
        return Entries(
            self.groups[order], self.states[order], self.key_length[order], self.entry.take(pa.array(order))
        )

    def blocks(self, layout: KeyedLayout) -> Iterator[_Block]:
        """Yield the blocks of the entries' key groups (sorted), each proven against its bytes.

        Raises:
            ExecutionError: ``OUTPUT_VERIFICATION_FAILED``: a block does not read back as its entries.
        """
        groups = self.groups
        starts = [0, *(np.flatnonzero(np.diff(groups)) + 1).tolist()]
        cuts = [0]
        for start in starts[1:]:
            if start - cuts[-1] >= _ENCODE_CHUNK_ROWS:
                cuts.append(start)
        cuts.append(len(groups))
        states = all_states(layout)
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            for encoded in _encode(self.slice(lo, hi), layout):
                assert encoded.value_ends is not None and encoded.run_end is not None
                found = check_block(
                    encoded.block, encoded.key_group, layout, encoded.value_ends, encoded.run_end, states
                )
                if found != encoded.rows:
                    raise ExecutionError(
                        f"output verification failed: key group {encoded.key_group}'s block does not read "
                        f"back as its {encoded.rows} entries",
                        code="OUTPUT_VERIFICATION_FAILED",
                    )
                yield encoded


def _encode(entries: Entries, layout: KeyedLayout) -> list[_Block]:
    """Return the blocks of complete key groups of sorted entries: ``keyed_encode._encode_columns``'s bytes.

    Per key group, each state's entries form one run, runs in order of first appearance, entries in their
    order; per entry ``int keyLen, prefix (+0x80 on a run's last entry), entry bytes``, the run's state id
    before the group's first entry and the next id (or ``END_OF_KEY_GROUP_MARK``) after a run's last.
    """
    count = len(entries.groups)
    nstates = max(len(layout.states), 1)
    run_key = entries.groups * nstates + entries.states
    _, first, inverse = np.unique(run_key, return_index=True, return_inverse=True)
    order = np.argsort(first[inverse], kind="stable")
    if bool((order != np.arange(count)).any()):
        entries = entries.take(order)
    groups, states = entries.groups, entries.states
    group_start = np.ones(count, dtype=bool)
    group_start[1:] = groups[1:] != groups[:-1]
    group_end = np.ones(count, dtype=bool)
    group_end[:-1] = groups[1:] != groups[:-1]
    run_end = group_end.copy()
    run_end[:-1] |= states[1:] != states[:-1]
    next_state = np.full(count, END_OF_KEY_GROUP_MARK, dtype=np.int64)
    next_state[:-1] = np.where(group_end[:-1], END_OF_KEY_GROUP_MARK, states[1:])
    joined = pc.binary_join_element_wise(
        _fixed_cells(_big_endian(states, ">u2"), group_start),
        _fixed_cells(_big_endian(layout.prefix_bytes + entries.key_length, ">i4")),
        _fixed_cells(_prefix_cells(groups, run_end, layout.prefix_bytes)),
        entries.entry,
        _fixed_cells(_big_endian(next_state, ">u2"), run_end),
        _EMPTY,
    )
    return _cut_blocks(joined, groups, group_start, run_end)


__all__ = [
    "ENTRY_SCHEMA",
    "Entries",
    "Rekey",
    "all_states",
    "check_entries",
    "check_entries_in_windows",
    "proven_entries",
    "walk_window",
    "walked_entries",
]
