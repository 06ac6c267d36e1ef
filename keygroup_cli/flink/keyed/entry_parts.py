"""Entry parts: the byte-level re-key of a maxParallelism change, with no Arrow row on the way.

Under a new maxParallelism an entry's bytes after its key-group prefix do not change (``keyed_entries``).
So a read task walks and proves each block as ``keyed_decode`` does (``PartCutter``: ``keyed_entries.Rekey``'s
hashes, checks and errors), and instead of entry batches it packs each batch of entries into *parts*:
counting-sorted by new key group (stable), one part per (new subtask, bucket), each entry's bytes copied
once. A part is plain bytes (little-endian)::

    u32 count, u32 data bytes, i32 key_length[count], i32 entry_length[count],
    u16 key_group[count], u16 state[count], the entries' bytes, zero padding to a multiple of 4

(``state``: the position in the operator's state names). Engines append parts to a spill file per
(new subtask, bucket), or send them through Spark's shuffle, in input order; a write task reads one
bucket's parts (``frame_bucket``), orders the entries as the row encoder does (per key group each state's
entries in one run, runs in order of first appearance, entries in input order) and frames them into blocks
with the new prefix, copying each entry's bytes once more, into its place. The bytes are those of the
decode and re-encode route (``tests/execution/jobs/test_byte_rekey.py``).

The per-entry loops are the sort of a batch's entries into parts with their heads and columns
(``sort_parts_reference``), the copy of each entry's bytes into its part (``copy_ranges``, block by block
in source order) and the framing of each entry into its block (``frame_entries_reference``): the numba
kernels of ``native_kernels`` when ``KG_NATIVE`` allows, else numpy (the reference, the same bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.keygroups import operator_indexes_for_key_groups
from keygroup_cli.flink.kernels.native import DEFER, Kernels, kernels, state_mask
from keygroup_cli.flink.keyed.decode import _Structure, check_block
from keygroup_cli.flink.keyed.encode import _Block
from keygroup_cli.flink.keyed.entries import Rekey, walk_window
from keygroup_cli.flink.keyed.layout import END_OF_KEY_GROUP_MARK, FIRST_BIT_IN_BYTE_MASK, KeyedLayout

_HEAD = struct.Struct("<II")
#: Bytes of a part's columns per entry (two int32, two uint16).
_COLUMNS = 12


@dataclass(frozen=True, slots=True)
class Cut:
    """Re-keyed entries of proven blocks: where their bytes lie, and their columns.

    The blocks' bytes are ``raws``, seen back to back: ``starts`` and ``ends`` are positions in that
    sequence, ``raws[k]`` beginning at ``offsets[k]`` (no block is copied to join them).
    """

    raws: tuple[np.ndarray, ...]
    offsets: tuple[int, ...]
    starts: np.ndarray
    ends: np.ndarray
    groups: np.ndarray
    states: np.ndarray
    key_length: np.ndarray

    @property
    def num_rows(self) -> int:
        """Return the number of entries."""
        return len(self.starts)

    def slice(self, start: int, stop: int | None = None) -> Cut:
        """Return entries ``[start, stop)`` (the same bytes)."""
        s = slice(start, stop)
        return Cut(
            self.raws,
            self.offsets,
            self.starts[s],
            self.ends[s],
            self.groups[s],
            self.states[s],
            self.key_length[s],
        )

    @staticmethod
    def join(cuts: Sequence[Cut]) -> Cut:
        """Return the entries of ``cuts`` in order (their buffers kept as they are, not copied)."""
        if len(cuts) == 1:
            return cuts[0]
        raws: list[np.ndarray] = []
        offsets: list[int] = []
        shifts: list[int] = []
        total = 0
        for c in cuts:
            # Each cut's positions move by where its own buffers now begin.
            shifts.append(total - c.offsets[0])
            for raw, offset in zip(c.raws, c.offsets, strict=True):
                raws.append(raw)
                offsets.append(total + offset - c.offsets[0])
            total += c.offsets[-1] - c.offsets[0] + len(c.raws[-1])
        return Cut(
            tuple(raws),
            tuple(offsets),
            np.concatenate([c.starts + s for c, s in zip(cuts, shifts, strict=True)]),
            np.concatenate([c.ends + s for c, s in zip(cuts, shifts, strict=True)]),
            np.concatenate([c.groups for c in cuts]),
            np.concatenate([c.states for c in cuts]),
            np.concatenate([c.key_length for c in cuts]),
        )

    def copy_in_order(self, lengths: np.ndarray, dst: np.ndarray, placed: np.ndarray) -> None:
        """Copy entry ``i``'s bytes (``lengths[i]``, its ``ends - starts``) to ``dst[placed[i]:]``, by block.

        The entries lie in their blocks' order (``starts`` ascending), so each block's entries are one
        stretch of the cut: each block is read in order, every entry written to its place.
        """
        firsts = np.searchsorted(self.starts, np.asarray(self.offsets[1:]), side="left").tolist()
        for raw, offset, lo, hi in zip(
            self.raws, self.offsets, [0, *firsts], [*firsts, self.num_rows], strict=True
        ):
            if hi > lo:
                copy_ranges(raw, self.starts[lo:hi] - offset, lengths[lo:hi], dst, placed[lo:hi])


@dataclass(frozen=True, slots=True)
class PartCutter(Rekey):
    """``keyed_entries.Rekey`` whose proven blocks become ``Cut``s (bytes and columns, no Arrow)."""

    def cut(
        self, block: bytes | bytearray, found: _Structure, key_group: int, layout: KeyedLayout
    ) -> Cut | None:
        """Return ``found``'s entries re-keyed; None where a key cannot be read from its bytes.

        Raises:
            InvalidInputError: As ``Rekey.cut`` (``KEY_GROUP_MISMATCH``).
        """
        columns = self.rekeyed(block, found, key_group, layout)
        if columns is None:
            return None
        new, states = columns
        after_prefix = found.key_starts + layout.prefix_bytes
        return Cut(
            (np.frombuffer(block, dtype=np.uint8),),
            (0,),
            after_prefix,
            found.value_ends,
            new.astype(np.int64, copy=False),
            states,
            (found.key_ends - after_prefix).astype(np.int32),
        )

    def walk(
        self, buf: bytes, current: int | None, key_group: int, layout: KeyedLayout
    ) -> tuple[Cut, int, int | None, bool] | None:
        """Walk, prove and cut the whole entries at the start of ``buf`` in one kernel call; None: defer.

        ``buf`` is a window of key group ``key_group``'s block (or the whole block), ``current`` the state
        id of the run it starts inside (None: it starts at a state id). Returns the entries' ``Cut`` (over
        ``buf`` itself, no copy), the bytes consumed, the state id of the run open there and whether the
        END mark was read: what ``keyed_decode._scan_window``, ``_structure``, ``_prefixes_match`` and
        ``cut`` give for the same bytes. None where ``keyed_entries.walk_window`` defers: the reference
        path then walks the same bytes and decides, with its errors.
        """
        walked = walk_window(
            buf, current, key_group, layout, self.old_max_parallelism, self.new_max_parallelism, self.remap
        )
        if walked is None:
            return None
        raw, starts, ends, groups, states, key_length, consumed, after, ended = walked
        return Cut((raw,), (0,), starts, ends, groups, states, key_length), consumed, after, ended


# -- Read side: entries into parts --------------------------------------------------------------------------


def parts(
    cut: Cut, new_max_parallelism: int, new_parallelism: int, buckets: int
) -> Iterator[tuple[int, int, memoryview, int]]:
    """Yield ``(new subtask, bucket, part, entries)`` for ``cut``'s entries, buckets ascending.

    Entries are sorted by new key group, stably (so within a part they keep their order per key group);
    ``buckets`` contiguous key-group ranges cut maxParallelism (``pipeline.bucket_of``). The parts are
    laid out back to back in one buffer: each entry's bytes are copied once, straight to their place in
    it, and each part is a view of its stretch (valid while the caller keeps it; no other copy).
    """
    if cut.num_rows == 0:
        return
    native = kernels()
    layout = sort_parts_reference if native is None else native.sort_parts
    lengths = cut.ends - cut.starts
    out, placed, part_at, part_stop, keys, counts = layout(
        cut.groups,
        cut.key_length,
        lengths,
        cut.states,
        new_max_parallelism,
        new_parallelism,
        buckets,
    )
    cut.copy_in_order(lengths, out, placed)
    view = memoryview(out)  # type: ignore[arg-type]
    # Plain ints for the loop: a numpy scalar per part costs more than the part's slice.
    heads = zip(part_at.tolist(), part_stop.tolist(), keys.tolist(), counts.tolist(), strict=True)
    for at, stop, key, entries in heads:
        subtask, bucket = divmod(key, buckets)
        yield subtask, bucket, view[at:stop], entries


def sort_parts_reference(
    groups: np.ndarray,
    key_length: np.ndarray,
    lengths: np.ndarray,
    states: np.ndarray,
    new_max_parallelism: int,
    new_parallelism: int,
    buckets: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Lay out the parts of entries with these columns: their buffer without the entries' bytes yet.

    Entries are sorted by new key group, stably; a part holds the entries of one (new subtask, bucket).
    Returns the buffer (heads, columns and padding written), where entry ``i``'s bytes go in it, and per
    part its start, its end, its ``subtask * buckets + bucket`` and its entry count. The numba kernel
    ``sort_parts`` returns the same.
    """
    count = len(groups)
    order = np.argsort(groups.astype(np.int16), kind="stable")
    groups = groups[order]
    subtasks = operator_indexes_for_key_groups(groups, new_max_parallelism, new_parallelism)
    composite = subtasks.astype(np.int64) * buckets + groups * buckets // new_max_parallelism
    lows = np.flatnonzero(np.diff(composite)) + 1
    part_lo = np.concatenate([[0], lows]).astype(np.int64)
    part_hi = np.concatenate([lows, [count]]).astype(np.int64)
    lengths = lengths[order]
    ends = np.cumsum(lengths)
    data_bytes = np.add.reduceat(lengths, part_lo)
    data_start = ends[part_hi - 1] - data_bytes
    counts = part_hi - part_lo
    size = 8 + _COLUMNS * counts + data_bytes
    padded = size + (-size % 4)
    base = np.cumsum(padded) - padded
    out = np.empty(int(base[-1] + padded[-1]), dtype=np.uint8)
    # Entry i of part p goes after p's head and columns, where its bytes lie among p's entries.
    part_of = np.repeat(np.arange(len(part_lo)), counts)
    first_data = base + 8 + _COLUMNS * counts - data_start
    placed = np.empty(count, dtype=np.int64)
    placed[order] = ends - lengths + first_data[part_of]
    columns = (key_length[order].astype(np.int64), lengths, groups, states[order].astype(np.int64))
    pack_parts_reference(out, base, part_lo, part_hi, data_bytes, *columns)
    return out, placed, base, base + padded, composite[part_lo], counts


def pack_parts_reference(
    out: np.ndarray,
    base: np.ndarray,
    part_lo: np.ndarray,
    part_hi: np.ndarray,
    data_bytes: np.ndarray,
    key_length: np.ndarray,
    lengths: np.ndarray,
    groups: np.ndarray,
    states: np.ndarray,
) -> None:
    """Write each part's head (count, data bytes), its columns and its zero padding into ``out``.

    Part ``p`` starts at ``base[p]`` and holds entries ``[part_lo[p], part_hi[p])``; its entries' bytes
    (``data_bytes[p]`` of them, after the columns) are the caller's to copy.
    """
    widths = (("<i4", key_length), ("<i4", lengths), ("<u2", groups), ("<u2", states))
    for p, (lo, hi) in enumerate(zip(part_lo.tolist(), part_hi.tolist(), strict=True)):
        at = int(base[p])
        out[at : at + 8] = np.frombuffer(_HEAD.pack(hi - lo, int(data_bytes[p])), dtype=np.uint8)
        at += 8
        for dtype, column in widths:
            piece = column[lo:hi].astype(dtype).view(np.uint8)
            out[at : at + len(piece)] = piece
            at += len(piece)
        end = at + int(data_bytes[p])
        pad = -(end - int(base[p])) % 4
        out[end : end + pad] = 0


def part_entries(part: bytes | memoryview) -> int:
    """Return how many entries a part holds."""
    count: int = _HEAD.unpack_from(part, 0)[0]
    return count


# -- Write side: parts into blocks --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Unpacked:
    """A bucket's entries in input order: the bucket's bytes, the entries' columns, where each starts."""

    data: np.ndarray
    key_length: np.ndarray
    lengths: np.ndarray
    groups: np.ndarray
    states: np.ndarray
    at: np.ndarray


def _unpack(buf: bytes | bytearray | memoryview) -> _Unpacked:
    """Read every part of ``buf`` (parts back to back, as a spill file holds them).

    The entries' bytes stay where they are in ``buf`` (``at``: each one's position there).

    Raises:
        InvalidInputError: A part that does not fit the buffer (``FLINK_STATE_CORRUPT``).
    """
    columns: list[list[np.ndarray]] = [[], [], [], []]
    data_at: list[int] = []  # where each part's entries' bytes begin in buf
    data_sizes: list[int] = []
    pos, size = 0, len(buf)
    while pos < size:
        if pos + 8 > size:
            raise InvalidInputError("a spilled entry part is truncated", code="FLINK_STATE_CORRUPT")
        n, data = _HEAD.unpack_from(buf, pos)
        head = pos + 8
        end = head + _COLUMNS * n + data
        if end > size:
            raise InvalidInputError("a spilled entry part is truncated", code="FLINK_STATE_CORRUPT")
        lengths = np.frombuffer(buf, dtype="<i4", count=n, offset=head + 4 * n)
        columns[0].append(np.frombuffer(buf, dtype="<i4", count=n, offset=head))
        columns[1].append(lengths)
        columns[2].append(np.frombuffer(buf, dtype="<u2", count=n, offset=head + 8 * n))
        columns[3].append(np.frombuffer(buf, dtype="<u2", count=n, offset=head + 10 * n))
        data_at.append(head + _COLUMNS * n)
        data_sizes.append(data)
        if int(lengths.sum(dtype=np.int64)) != data or bool((lengths < 0).any()):
            # A negative length could add up with the others and would have the framing copy before its
            # entry: corrupt either way.
            raise InvalidInputError("a spilled entry part is corrupt", code="FLINK_STATE_CORRUPT")
        pos = end + (-end % 4)
    lengths = np.concatenate(columns[1]).astype(np.int64) if columns[1] else np.zeros(0, dtype=np.int64)
    if len(lengths) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return _Unpacked(np.zeros(0, dtype=np.uint8), empty, empty, empty, empty, empty)
    counts = np.fromiter((len(c) for c in columns[1]), dtype=np.int64, count=len(columns[1]))
    # Entries' bytes back to back would start at ``starts``; each part's lie at its own place in buf.
    starts = np.cumsum(lengths) - lengths
    sizes = np.asarray(data_sizes, dtype=np.int64)
    shift = np.repeat(np.asarray(data_at, dtype=np.int64) - (np.cumsum(sizes) - sizes), counts)
    return _Unpacked(
        np.frombuffer(buf, dtype=np.uint8),
        np.concatenate(columns[0]).astype(np.int64),
        lengths,
        np.concatenate(columns[2]).astype(np.int64),
        np.concatenate(columns[3]).astype(np.int64),
        starts + shift,
    )


def frame_bucket(
    buf: bytes | bytearray | memoryview, layout: KeyedLayout, state_ids: np.ndarray
) -> list[_Block]:
    """Return the blocks of a bucket's parts (``buf``), key groups ascending, framed as the row encoder does.

    ``state_ids`` maps the parts' state positions to the header's state ids (-1: a state it lacks). Each
    block carries its entry ends and run ends, for ``keyed_decode.check_block``. The numba kernel
    ``frame_bucket`` when ``KG_NATIVE`` allows (the same blocks); parts or states it does not take are
    left to ``frame_bucket_reference``, which words the error.

    Raises:
        InvalidInputError: A part that does not fit the buffer (``FLINK_STATE_CORRUPT``), a state the
            header does not hold (``FLINK_STATE_UNKNOWN``).
    """
    native = kernels()
    framed = None if native is None else _kernel_framed(native, buf, layout, state_ids, _NO_CHECK)
    return frame_bucket_reference(buf, layout, state_ids) if framed is None else framed[0]


#: ``frame_bucket``'s kernel told to check no block.
_NO_CHECK = np.zeros(0, dtype=np.bool_)


def frame_checked_bucket(
    buf: bytes | bytearray | memoryview, layout: KeyedLayout, state_ids: np.ndarray, states: frozenset[int]
) -> list[tuple[_Block, int | None]]:
    """Return ``frame_bucket``'s blocks, each with ``keyed_decode.check_block``'s verdict on it.

    ``states``: the state ids the check allows. With the kernels, one call frames the bucket and checks
    each block as soon as it is framed, while its bytes are still in cache (checked after the whole
    bucket, a block is read back from memory); a verdict it defers is the reference's, and a bucket it
    defers is framed by ``frame_bucket_reference``.

    Raises:
        InvalidInputError: As ``frame_bucket``.
    """
    native = kernels()
    check = state_mask(states) if states else _NO_CHECK
    framed = None if native is None else _kernel_framed(native, buf, layout, state_ids, check)
    if framed is None:
        return [(b, _checked(b, layout, states)) for b in frame_bucket_reference(buf, layout, state_ids)]
    blocks, verdicts = framed
    return [
        (b, b.rows if v == 1 else None if v == 0 else _checked(b, layout, states))
        for b, v in zip(blocks, verdicts, strict=True)
    ]


def _kernel_framed(
    native: Kernels,
    buf: bytes | bytearray | memoryview,
    layout: KeyedLayout,
    state_ids: np.ndarray,
    check: np.ndarray,
) -> tuple[list[_Block], list[int]] | None:
    """Frame a bucket by the kernel ``frame_bucket``: its blocks and a verdict on each; None: it deferred.

    ``check`` (a ``state_mask``; empty: none) has each block checked as ``check_block`` checks it: 1 it
    holds, 0 it does not, else not checked (the caller asks the reference).
    """
    framed = native.frame_bucket(
        np.frombuffer(buf, dtype=np.uint8),
        np.ascontiguousarray(state_ids, dtype=np.int64),
        layout.prefix_bytes,
        check,
    )
    if framed[0] == DEFER:
        return None
    blocks = _blocks(*framed[1:7])
    return blocks, framed[7][: len(blocks)].tolist()  # one verdict per block (the kernel adds a sentinel)


def _checked(block: _Block, layout: KeyedLayout, states: frozenset[int]) -> int | None:
    """Return ``keyed_decode.check_block``'s verdict on a framed block."""
    assert block.value_ends is not None and block.run_end is not None
    return check_block(block.block, block.key_group, layout, block.value_ends, block.run_end, states)


def _blocks(
    out: np.ndarray,
    value_ends: np.ndarray,
    run_end: np.ndarray,
    groups: np.ndarray,
    lows: np.ndarray,
    starts: np.ndarray,
) -> list[_Block]:
    """Return the ``_Block``s the kernel ``frame_bucket`` framed: views of its bytes and its columns.

    Block ``b`` is key group ``groups[b]``, bytes ``[starts[b], starts[b + 1])`` and entries
    ``[lows[b], lows[b + 1])``, whose value ends count from the block's start already.
    """
    view: memoryview = out.data
    blocks = []
    ats, firsts = starts.tolist(), lows.tolist()
    for b, group in enumerate(groups[:-1].tolist()):
        lo, hi = firsts[b], firsts[b + 1]
        blocks.append(_Block(group, view[ats[b] : ats[b + 1]], hi - lo, value_ends[lo:hi], run_end[lo:hi]))
    return blocks


def frame_bucket_reference(
    buf: bytes | bytearray | memoryview, layout: KeyedLayout, state_ids: np.ndarray
) -> list[_Block]:
    """``frame_bucket`` with whole-array steps: the parts read in Python, the entries ordered by numpy.

    The framing itself is ``frame_entries_reference`` (or its kernel, when ``KG_NATIVE`` allows).

    Raises:
        InvalidInputError: As ``frame_bucket``.
    """
    got = _unpack(buf)
    count = len(got.groups)
    if count == 0:
        return []
    if int(got.states.max()) >= len(state_ids) or bool((state_ids[got.states] < 0).any()):
        raise InvalidInputError(
            "an entry's state is not in the savepoint's keyed-state header", code="FLINK_STATE_UNKNOWN"
        )
    order = _entry_order(got.groups, got.states, max(len(state_ids), 1))
    groups = got.groups[order]
    native = kernels()
    framing = frame_entries_reference if native is None else native.frame_entries
    out, value_ends, run_end = framing(
        groups,
        state_ids[got.states[order]].astype(np.int64),
        got.key_length[order],
        got.data,
        got.at[order],
        got.lengths[order],
        layout.prefix_bytes,
    )
    group_start = np.ones(count, dtype=bool)
    group_start[1:] = groups[1:] != groups[:-1]
    at = np.concatenate([[0], value_ends[:-1] + 2 * run_end[:-1]])
    ends = value_ends + 2 * run_end
    lows = np.flatnonzero(group_start)
    highs = [*lows[1:].tolist(), count]
    view: memoryview = np.asarray(out, dtype=np.uint8).data
    blocks = []
    for lo, hi in zip(lows.tolist(), highs, strict=True):
        base = int(at[lo])
        blocks.append(
            _Block(
                int(groups[lo]),
                view[base : int(ends[hi - 1])],
                hi - lo,
                value_ends[lo:hi] - base,
                run_end[lo:hi],
            )
        )
    return blocks


def _entry_order(groups: np.ndarray, states: np.ndarray, nstates: int) -> np.ndarray:
    """Return the order the row encoder gives: key groups ascending, then runs in order of first appearance.

    Entries keep their input order within a run.
    """
    order = np.argsort(groups.astype(np.int16), kind="stable")
    run_key = groups[order] * nstates + states[order]
    heads = np.flatnonzero(np.concatenate([[True], run_key[1:] != run_key[:-1]]))
    if len(np.unique(run_key[heads])) == len(heads):
        return order  # every run is in one piece already
    _, first, inverse = np.unique(run_key, return_index=True, return_inverse=True)
    # Sorted by key group, a run's first appearance orders key groups too.
    return order[np.argsort(first[inverse], kind="stable")]


def frame_entries_reference(
    groups: np.ndarray,
    states: np.ndarray,
    key_length: np.ndarray,
    src: np.ndarray,
    src_at: np.ndarray,
    lengths: np.ndarray,
    nprefix: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frame entries (sorted: key groups ascending, each state's run in one piece) as the row encoder does.

    Entry ``i``'s bytes are ``src[src_at[i]:][:lengths[i]]``, its key ``key_length[i]`` bytes of them;
    ``states`` are the header's ids. Per entry, big-endian: the run's state id before a key group's first
    entry, ``int keyLen`` (prefix included), the key-group prefix (``0x80`` on its first byte when the entry
    closes its run), the entry, and after a run's last entry the next one's id (``END_OF_KEY_GROUP_MARK``
    after a key group's last). Returns the bytes, each entry's end (before that id) and which close a run.
    """
    count = len(groups)
    group_start = np.ones(count, dtype=bool)
    group_start[1:] = groups[1:] != groups[:-1]
    group_end = np.ones(count, dtype=bool)
    group_end[:-1] = group_start[1:]
    run_end = group_end.copy()
    run_end[:-1] |= states[1:] != states[:-1]
    next_state = np.full(count, END_OF_KEY_GROUP_MARK, dtype=np.int64)
    next_state[:-1] = np.where(group_end[:-1], END_OF_KEY_GROUP_MARK, states[1:])
    head = 2 * group_start + 4 + nprefix
    # The fixed bytes before each entry (heads) and after it (tails), each set back to back.
    head_at = np.cumsum(head) - head
    heads = np.empty(int(head.sum()), dtype=np.uint8)
    _put(heads, head_at[group_start], states[group_start], 2)
    key_at = head_at + 2 * group_start
    _put(heads, key_at, nprefix + key_length, 4)
    prefix = groups | np.where(run_end, FIRST_BIT_IN_BYTE_MASK << (8 * (nprefix - 1)), 0)
    _put(heads, key_at + 4, prefix, nprefix)
    tail = 2 * run_end.astype(np.int64)
    tail_at = np.cumsum(tail) - tail
    tails = np.empty(int(tail.sum()), dtype=np.uint8)
    _put(tails, tail_at[run_end], next_state[run_end], 2)
    # One binary array over heads, tails and the entries; the framed bytes are one take of its items:
    # head i (item i), entry i (item 2 count + 1 + 2 rank: see _in_order), tail i (item count + i).
    base = len(heads) + len(tails)
    by_src = np.argsort(src_at, kind="stable")
    bounds = np.concatenate(
        [
            np.append(head_at, len(heads)),
            len(heads) + tail_at + tail,
            (base + np.stack([src_at[by_src], src_at[by_src] + lengths[by_src]], axis=1)).ravel(),
        ]
    ).astype(np.int64)
    items = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        len(bounds) - 1,
        [None, pa.py_buffer(bounds), pa.py_buffer(np.concatenate([heads, tails, src]))],
    )
    rank = np.empty(count, dtype=np.int64)
    rank[by_src] = np.arange(count)
    indices = np.stack([np.arange(count), 2 * count + 1 + 2 * rank, count + np.arange(count)], axis=1)
    out = _data(items.take(pa.array(indices.ravel()))).copy() if count else np.empty(0, dtype=np.uint8)
    value_ends = np.cumsum(head + lengths + tail) - tail
    return out, value_ends, run_end


def _put(out: np.ndarray, at: np.ndarray, values: np.ndarray, width: int) -> None:
    """Write each of ``values`` big-endian in ``width`` bytes at its position ``at``."""
    v = values.astype(np.int64)
    for i in range(width):
        out[at + i] = (v >> (8 * (width - 1 - i))) & 0xFF


# -- The per-entry copy -------------------------------------------------------------------------------------


def copy_ranges(
    src: np.ndarray, src_at: np.ndarray, lengths: np.ndarray, dst: np.ndarray, dst_at: np.ndarray
) -> None:
    """Copy ``src[src_at[i] : src_at[i] + lengths[i]]`` to ``dst[dst_at[i]:]`` for every ``i``.

    The numba kernel when ``KG_NATIVE`` allows; else ``copy_ranges_reference``, the same bytes.
    """
    native = kernels()
    if native is not None:
        native.copy_ranges(
            src,
            np.ascontiguousarray(src_at, dtype=np.int64),
            np.ascontiguousarray(lengths, dtype=np.int64),
            dst,
            np.ascontiguousarray(dst_at, dtype=np.int64),
        )
    else:
        copy_ranges_reference(src, src_at, lengths, dst, dst_at)


def copy_ranges_reference(
    src: np.ndarray, src_at: np.ndarray, lengths: np.ndarray, dst: np.ndarray, dst_at: np.ndarray
) -> None:
    """``copy_ranges`` with whole-array steps (the ranges of ``src`` and those of ``dst`` do not overlap).

    The ranges are put in ``dst``'s order by one Arrow ``take`` (``_in_order``), then into ``dst`` as one
    slice where they follow each other there, else by a byte mask.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    some = np.flatnonzero(lengths)
    if len(some) == 0:
        return
    lengths, src_at, dst_at = lengths[some], np.asarray(src_at)[some], np.asarray(dst_at)[some]
    by_dst = np.argsort(dst_at, kind="stable")
    data = _in_order(src, src_at, lengths, by_dst)
    starts, sizes = dst_at[by_dst], lengths[by_dst]
    if _back_to_back(starts, sizes):
        dst[int(starts[0]) : int(starts[0]) + len(data)] = data
    else:
        dst[_mask(len(dst), starts, sizes)] = data


def _in_order(src: np.ndarray, src_at: np.ndarray, lengths: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Return the (disjoint) ranges of ``src`` back to back, in ``order``: one Arrow ``take``.

    ``src`` is seen as a binary array whose items are the ranges (ascending) and the gaps between them; the
    ranges' items are taken in ``order`` (Arrow copies each item's bytes with one ``memcpy``).
    """
    count = len(lengths)
    by_src = np.argsort(src_at, kind="stable")
    bounds = np.empty(2 * count, dtype=np.int64)
    bounds[0::2] = src_at[by_src]
    bounds[1::2] = src_at[by_src] + lengths[by_src]
    items = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 2 * count - 1, [None, pa.py_buffer(bounds), pa.py_buffer(src)]
    )
    rank = np.empty(count, dtype=np.int64)
    rank[by_src] = np.arange(count)
    return _data(items.take(pa.array(2 * rank[order])))


def _data(array: pa.Array) -> np.ndarray:
    """Return the bytes of a (large) binary array's items, back to back."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)
    first, last = int(offsets[array.offset]), int(offsets[array.offset + len(array)])
    data: np.ndarray = np.frombuffer(array.buffers()[2], dtype=np.uint8)[first:last]
    return data


def _back_to_back(starts: np.ndarray, lengths: np.ndarray) -> bool:
    """Return whether each range (ascending) starts where the one before ends."""
    return bool((starts[1:] == starts[:-1] + lengths[:-1]).all())


def _mask(size: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Return which of ``size`` bytes lie in the non-empty, disjoint ranges ``[starts, starts + lengths)``."""
    ends = starts + lengths
    runs = np.empty(2 * len(starts) + 1, dtype=np.int64)
    runs[0:-1:2] = starts - np.concatenate([[0], ends[:-1]])
    runs[1:-1:2] = lengths
    runs[-1] = size - int(ends[-1])
    inside = np.zeros(len(runs), dtype=np.bool_)
    inside[1::2] = True
    mask: np.ndarray = np.repeat(inside, runs)
    return mask


__all__ = [
    "Cut",
    "PartCutter",
    "copy_ranges",
    "copy_ranges_reference",
    "frame_bucket",
    "frame_bucket_reference",
    "frame_checked_bucket",
    "frame_entries_reference",
    "pack_parts_reference",
    "part_entries",
    "parts",
    "sort_parts_reference",
]
