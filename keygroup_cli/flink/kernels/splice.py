"""Numba kernels of an edit done on a key-group block's bytes (``flink.write.edit_copy``).

Imported by ``native`` only, with ``compiled``, when ``KG_NATIVE`` allows. Each kernel gives exactly what
``edit_copy``'s numpy code gives (that code stays the reference, ``KG_NATIVE=0``), without a whole-block
numpy pass per step:

- ``splice_match``: which entries of one state have a key among the data's (``_Splice.block``'s key-length
  check and ``_Splice._matched``'s comparison of keys as numbers);
- ``splice_block``: the block with some entries dropped and new ones added after the state's run, framed
  anew (``_rebuilt`` of the kept entries and the inserted ones), its bytes copied in runs as long as the
  kept entries follow each other, instead of one copy per entry;
- ``ttl_expired``: which TTL values have expired (``_filtered``'s test of each value's last access).

Kept in their own module so that changing them leaves the compile cache of ``compiled``'s kernels valid.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from keygroup_cli.flink.kernels.compiled import _memcpy

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)
_END_OF_KEY_GROUP_MARK = 0xFFFF
_FIRST_BIT_IN_BYTE_MASK = 0x80
_LONG_MAX = 0x7FFFFFFFFFFFFFFF


@_jit
def _slot(value: np.uint64, shift: int) -> int:
    """``edit_copy._slot``: Fibonacci hashing of a value's 64 bits into ``64 - shift`` bits."""
    return int((value * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shift))


@_jit
def splice_match(
    raw: npt.NDArray[np.uint8],
    ids: npt.NDArray[np.int64],
    key_starts: npt.NDArray[np.int64],
    key_ends: npt.NDArray[np.int64],
    sid: int,
    key_length: int,
    offset: int,
    width: int,
    wanted: npt.NDArray[np.uint64],
) -> tuple[int, int, npt.NDArray[np.int64]]:
    """Return ``(ok, mine, hits)`` for the entries of state ``sid`` of a proven block.

    ``ok`` 0: an entry of the state has a key of another length than ``key_length`` (the reference's None).
    ``mine``: the state's entries. ``hits``: ascending, the entries of the state whose key's ``width``
    bytes at ``offset`` after its start, read big-endian unsigned, are among ``wanted`` (sorted, unique,
    the data's keys read the same way).
    """
    n = len(ids)
    hits = np.empty(0, dtype=np.int64)
    mine = 0
    for i in range(n):
        if ids[i] == sid:
            mine += 1
            if key_ends[i] - key_starts[i] != key_length:
                return 0, mine, hits
    count = len(wanted)
    if count == 0 or mine == 0:
        return 1, mine, hits
    # A bitmap of the wanted values' slots first: only the keys it lets through are searched.
    bits = 10
    while (1 << bits) < count * 64 and bits < 24:
        bits += 1
    shift = 64 - bits
    table = np.zeros(1 << bits, dtype=np.bool_)
    for j in range(count):
        table[_slot(wanted[j], shift)] = True
    found = np.empty(min(mine, 1024), dtype=np.int64)
    used = 0
    for i in range(n):
        if ids[i] != sid:
            continue
        at = key_starts[i] + offset
        value = np.uint64(0)
        for k in range(width):
            value = (value << np.uint64(8)) | np.uint64(raw[at + k])
        if not table[_slot(value, shift)]:
            continue
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) >> 1
            if wanted[mid] < value:
                lo = mid + 1
            else:
                hi = mid
        if lo < count and wanted[lo] == value:
            if used == len(found):
                grown = np.empty(2 * used, dtype=np.int64)
                grown[:used] = found
                found = grown
            found[used] = i
            used += 1
    return 1, mine, found[:used].copy()


@_jit
def splice_block(
    raw: npt.NDArray[np.uint8],
    ids: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    dropped: npt.NDArray[np.int64],
    sid: int,
    extra: npt.NDArray[np.uint8],
    extra_offsets: npt.NDArray[np.int64],
) -> tuple[int, npt.NDArray[np.uint8]]:
    """Return ``(1, edit_copy._rebuilt(...))`` of a block's entries less ``dropped``, with ``extra``'s added.

    The entries ``raw[starts[i]:ends[i]]`` (state ``ids[i]``) not in ``dropped`` (ascending indices) keep
    their order; the entries of ``extra`` (``extra_offsets``: where each begins, then the end; state
    ``sid``) follow the last kept entry of state ``sid``, or close the block when none is kept. The result
    is framed as ``_rebuilt`` frames it: the first entry's state id, each run's last entry flagged in its
    key's first byte and followed by the next run's id, the END mark last. Empty when no entry is left.

    ``raw`` must be framed as Flink frames a block (as ``_rebuilt`` frames it): then the kept entries
    between two dropped ones are copied as one range, their flags and run ids as they are, and only the
    entries at the ends of such ranges are framed anew. ``(0, empty)`` where ``raw``'s framing is not
    that (two runs of one state next to each other, a flag or a run id out of place): the caller frames
    every entry (``_rebuilt``).
    """
    n = len(ids)
    added = len(extra_offsets) - 1
    empty = np.empty(0, dtype=np.uint8)
    # The source's framing, as _rebuilt would frame its entries: a run ends exactly where the state
    # changes, its last entry flagged, followed by the next run's id (the END mark after the last).
    for i in range(n):
        last = i == n - 1 or ids[i + 1] != ids[i]
        if (raw[starts[i] + 4] >= _FIRST_BIT_IN_BYTE_MASK) != last:
            return 0, empty
        if last:
            following = _END_OF_KEY_GROUP_MARK if i == n - 1 else ids[i + 1]
            at = ends[i]
            if at + 2 > len(raw) or (np.int64(raw[at]) << 8 | np.int64(raw[at + 1])) != following:
                return 0, empty
            if i < n - 1 and starts[i + 1] != at + 2:
                return 0, empty
        elif starts[i + 1] != ends[i]:
            return 0, empty
    if n and (starts[0] != 2 or (np.int64(raw[0]) << 8 | np.int64(raw[1])) != ids[0]):
        return 0, empty
    count = len(dropped)
    if n - count + added <= 0:
        return 1, empty
    cut = n
    d = count - 1
    for i in range(n - 1, -1 if sid >= 0 else n - 1, -1):  # no state id is negative: no search
        while d >= 0 and dropped[d] > i:
            d -= 1
        if ids[i] == sid and not (d >= 0 and dropped[d] == i):
            cut = i + 1
            break
    # One pass over the result's pieces (ranges of kept entries that follow each other, then the added
    # entries): each piece's bytes copied, then, once the next piece's state is known, its last entry
    # framed (the end of a run where the next piece is another state's, or at the end).
    out = np.empty(len(raw) + len(extra) + 2, dtype=np.uint8)  # at most one run more (its id)
    at = 2
    last_id, flag = -1, -1
    d = 0
    for part in range(3):
        lo, hi = (0, cut) if part == 0 else (cut, n)
        a = lo if part != 1 else hi
        while a < hi or (part == 1 and added and a == hi):
            if part == 1:
                buf, start, end, first = extra, extra_offsets[0], extra_offsets[added], sid
                last_at, last = extra_offsets[added - 1], sid
                a = hi + 1
            else:
                while d < count and dropped[d] < a:
                    d += 1
                if d < count and dropped[d] == a:
                    a += 1
                    continue
                b = dropped[d] if d < count and dropped[d] < hi else hi
                buf, start, end, first = raw, starts[a], ends[b - 1], ids[a]
                last_at, last = starts[b - 1], ids[b - 1]
                a = b
            if flag < 0:
                out[0] = (first >> 8) & 0xFF
                out[1] = first & 0xFF
            elif first != last_id:
                out[flag] = out[flag] | _FIRST_BIT_IN_BYTE_MASK
                out[at] = (first >> 8) & 0xFF
                out[at + 1] = first & 0xFF
                at += 2
            else:
                out[flag] = out[flag] & (0xFF ^ _FIRST_BIT_IN_BYTE_MASK)
            _memcpy(out, at, buf, start, end - start)
            if part == 1:
                for j in range(added - 1):  # one run: no added entry but the last ends it
                    inner = at + extra_offsets[j] - start + 4
                    out[inner] = out[inner] & (0xFF ^ _FIRST_BIT_IN_BYTE_MASK)
            flag = at + last_at - start + 4
            last_id = last
            at += end - start
    out[flag] = out[flag] | _FIRST_BIT_IN_BYTE_MASK
    out[at] = (_END_OF_KEY_GROUP_MARK >> 8) & 0xFF
    out[at + 1] = _END_OF_KEY_GROUP_MARK & 0xFF
    return 1, out[: at + 2]


@_jit
def ttl_expired(
    raw: npt.NDArray[np.uint8],
    ids: npt.NDArray[np.int64],
    key_ends: npt.NDArray[np.int64],
    value_ends: npt.NDArray[np.int64],
    trimmed: npt.NDArray[np.bool_],
    ttl_ms: int,
    now_ms: int,
) -> tuple[int, npt.NDArray[np.int64]]:
    """Return ``(ok, expired)``: ascending, the entries of the ``trimmed`` states whose TTL value expired.

    A value's first 8 bytes are its last access (big-endian); it has expired when ``last + ttl_ms`` (at
    most ``Long.MAX_VALUE``: ``TtlUtils.expired`` saturates) is at most ``now_ms``; ``ttl_ms`` is not
    negative. ``ok`` 0: a value of a trimmed state is shorter than 8 bytes (the reference's None).
    """
    n = len(ids)
    found = np.empty(n, dtype=np.int64)
    used = 0
    long_max = _LONG_MAX
    for i in range(n):
        if not trimmed[ids[i]]:
            continue
        at = key_ends[i] + 4
        if value_ends[i] - at < 8:
            return 0, np.empty(0, dtype=np.int64)
        bits = np.uint64(0)
        for k in range(8):
            bits = (bits << np.uint64(8)) | np.uint64(raw[at + k])
        last = np.int64(bits)
        expires = long_max if last > long_max - ttl_ms else last + ttl_ms
        if expires <= now_ms:
            found[used] = i
            used += 1
    return 1, found[:used].copy()


__all__ = ["splice_block", "splice_match", "ttl_expired"]
