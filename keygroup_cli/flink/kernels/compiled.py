"""The numba kernels of ``native_kernels`` (imported by it only, and only when ``KG_NATIVE`` allows).

Each mirrors a Python function of ``keyed_decode`` / ``keyed_entries`` step for step; ``native_kernels``
says which, and the tests hold them byte for byte to it. Compiled on first use, cached (``cache=True``) in
``NUMBA_CACHE_DIR``, which ``native_kernels`` points at kg's cache directory before this module is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: A kernel's answer for bytes it does not decide (``native_kernels.DEFER``).
DEFER = 2
_END_OF_KEY_GROUP_MARK = 0xFFFF

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)
#: Helpers inlined into the kernels (numba's IR): LLVM does not inline calls between jitted functions, and a
#: call per field of each entry cost a bucket's framing a third of its time.
_inline = numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")


@_inline
def _int_at(raw: npt.NDArray[np.uint8], pos: int) -> int:
    """Return the big-endian Java int at ``pos`` (inlined: ``check_block`` reads two per entry)."""
    value: int = (np.int64(raw[pos]) << 24) | (np.int64(raw[pos + 1]) << 16)
    value |= (np.int64(raw[pos + 2]) << 8) | np.int64(raw[pos + 3])
    return value - (1 << 32) if value >= (1 << 31) else value


@_jit
def _grow(array: npt.NDArray[np.int64], count: int) -> npt.NDArray[np.int64]:
    """Return ``array``, or a larger copy of its first ``count`` items when it is full."""
    if count < len(array):
        return array
    bigger = np.empty(2 * len(array) + 16, dtype=np.int64)
    bigger[:count] = array[:count]
    return bigger


@_jit
def scan(
    raw: npt.NDArray[np.uint8], states: npt.NDArray[np.bool_], current: int
) -> tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64], int, int]:
    """``keyed_decode._scan_window``, step for step (struct's bounds: a negative offset counts from the end).

    ``current`` -1 is None. Returns a status (-1: refused, 0: no END mark read, 1: END read), each entry's
    end, the entries opening a run, the bytes consumed and the state id of the run open there (-1: none).
    """
    n = len(raw)
    ends = np.empty(n // 64 + 16, dtype=np.int64)
    count = 0
    runs = np.empty(16, dtype=np.int64)
    nruns = 0
    pos = 0
    ended = False
    while True:
        if current < 0:
            if pos + 2 > n:
                break
            state_id = (np.int64(raw[pos]) << 8) | np.int64(raw[pos + 1])
            if state_id == _END_OF_KEY_GROUP_MARK:
                ended = True
                break
            if not states[state_id]:
                return -1, ends[:0], runs[:0], 0, -1
            pos += 2
            current = state_id
            runs = _grow(runs, nruns)
            runs[nruns] = count
            nruns += 1
        stop = False
        while True:
            begin = pos + 4
            if pos + 4 > n:
                stop = True
                break
            key_end = begin + _int_at(raw, pos)
            at = key_end + n if key_end < 0 else key_end
            if at < 0 or at + 4 > n:
                stop = True
                break
            following = key_end + 4 + _int_at(raw, at)
            if following <= begin:
                return -1, ends[:0], runs[:0], 0, -1
            if following > n:
                stop = True
                break
            ends = _grow(ends, count)
            ends[count] = following
            count += 1
            pos = following
            if raw[begin] > 0x7F:
                current = -1
                break
        if stop:
            break
    if nruns and runs[nruns - 1] == count:
        nruns -= 1
        current = -1
    if ended:
        consumed = pos + 2
    else:
        consumed = ends[count - 1] if count else 0
    return np.int64(ended), ends[:count].copy(), runs[:nruns].copy(), consumed, current


@_jit
def structure(
    raw: npt.NDArray[np.uint8],
    states: npt.NDArray[np.bool_],
    all_ve: npt.NDArray[np.int64],
    run_end: npt.NDArray[np.bool_],
    end: int,
    lo: int,
    hi: int,
    opened: int,
) -> tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """``keyed_decode._structure``'s checks after its preliminaries, entry by entry.

    ``opened`` is where the state id of the run holding entry ``lo`` lies. Returns a status (1: the claim
    holds, 0: it does not, DEFER: a read would leave ``[0, end)``, where numpy's indexes would wrap: the
    reference decides), each entry's key start and key end, and its state id.
    """
    size = hi - lo
    ks = np.empty(size, dtype=np.int64)
    ke = np.empty(size, dtype=np.int64)
    ids = np.empty(size, dtype=np.int32)
    if opened < 0 or opened + 2 > end:
        return DEFER, ks, ke, ids
    current = (np.int64(raw[opened]) << 8) | np.int64(raw[opened + 1])
    if not states[current]:
        return 0, ks, ke, ids
    count = len(all_ve)
    for j in range(size):
        i = lo + j
        if i == 0:
            start = 6
        else:
            start = all_ve[i - 1] + 4 + (2 if run_end[i - 1] else 0)
        ve = all_ve[i]
        if start + 4 > ve:
            return 0, ks, ke, ids
        if start - 4 < 0 or start + 4 > end:
            return DEFER, ks, ke, ids
        key_end = start + _int_at(raw, start - 4)
        if key_end < start + 1 or key_end + 4 > ve:
            return 0, ks, ke, ids
        if key_end + 4 + _int_at(raw, key_end) != ve:
            return 0, ks, ke, ids
        if (raw[start] > 0x7F) != run_end[i]:
            return 0, ks, ke, ids
        ks[j] = start
        ke[j] = key_end
        ids[j] = current
        if run_end[i]:
            if ve + 2 > end:
                return DEFER, ks, ke, ids
            following = (np.int64(raw[ve]) << 8) | np.int64(raw[ve + 1])
            if i == count - 1:
                if following != _END_OF_KEY_GROUP_MARK:
                    return 0, ks, ke, ids
            elif not states[following]:
                return 0, ks, ke, ids
            current = following
    return 1, ks, ke, ids


@_jit
def _murmur(code: int) -> int:
    """``core.keygroups.murmur_hash_array`` of one Java int (``MathUtils.murmurHash``): never negative."""
    k = np.uint32(np.int64(code) & 0xFFFFFFFF)
    k = np.uint32(k * np.uint32(0xCC9E2D51))
    k = np.uint32((k << np.uint32(15)) | (k >> np.uint32(17)))
    k = np.uint32(k * np.uint32(0x1B873593))
    h = np.uint32((k << np.uint32(13)) | (k >> np.uint32(19)))
    h = np.uint32(h * np.uint32(5) + np.uint32(0xE6546B64))
    h = np.uint32(h ^ np.uint32(4))
    h = np.uint32(h ^ (h >> np.uint32(16)))
    h = np.uint32(h * np.uint32(0x85EBCA6B))
    h = np.uint32(h ^ (h >> np.uint32(13)))
    h = np.uint32(h * np.uint32(0xC2B2AE35))
    h = np.uint32(h ^ (h >> np.uint32(16)))
    signed: int = np.int64(h)
    if signed >= (1 << 31):
        signed -= 1 << 32
    if signed == -(1 << 31):
        return 0
    return -signed if signed < 0 else signed


@_jit
def _modulo(value: int, modulus: int) -> int:
    """Return ``value % modulus`` for a non-negative ``value``: a mask where ``modulus`` is a power of two.

    maxParallelism is one almost always (Flink's default is), and a division costs several times a mask.
    """
    if modulus & (modulus - 1) == 0:
        return value & (modulus - 1)
    return value % modulus


@_jit
def _key_hash(raw: npt.NDArray[np.uint8], at: int, limit: int, kind: int) -> tuple[int, int]:
    """Return a key's Java ``hashCode`` read at ``at`` and where the key ends; end -1: not one the walk takes.

    ``kind``: 0 a short ASCII ``StringValue`` (``keyed_entries._short_string_hash_codes``), 1 Long, 2 Int,
    3 Boolean (big-endian, ``core.javahash.hash_codes``). The key must end by ``limit``.
    """
    if kind == 0:
        if at + 1 > limit:
            return 0, -1
        head = np.int64(raw[at])
        if head < 1 or head >= 0x80 or at + head > limit:
            return 0, -1
        h = np.uint32(0)
        seen = np.uint8(0)  # every char byte OR-ed: ASCII if its top bit stays clear (no branch per byte)
        for p in range(at + 1, at + head):
            b = raw[p]
            seen |= b
            h = np.uint32(h * np.uint32(31) + np.uint32(b))
        if seen >= 0x80:
            return 0, -1
        return np.int64(np.int32(h)), at + head
    size = 8 if kind == 1 else (4 if kind == 2 else 1)
    if at + size > limit:
        return 0, -1
    if kind == 3:
        return (1231 if raw[at] != 0 else 1237), at + 1
    high = _int_at(raw, at)
    if kind == 2:
        return high, at + 4
    low = _int_at(raw, at + 4)
    return np.int64(np.int32(np.int64(high ^ low) & 0xFFFFFFFF)), at + 8


@_jit
def _wider(table: npt.NDArray[np.int64], count: int) -> npt.NDArray[np.int64]:
    """Return ``rekey_window``'s full table (a row per column) copied into twice the room."""
    wider = np.empty((table.shape[0], 2 * count + 16), dtype=np.int64)
    wider[:, :count] = table[:, :count]
    return wider


@_jit
def rekey_window(
    raw: npt.NDArray[np.uint8],
    states: npt.NDArray[np.bool_],
    current: int,
    key_group: int,
    nprefix: int,
    kind: int,
    timer: npt.NDArray[np.bool_],
    namespace: npt.NDArray[np.int64],
    remap: npt.NDArray[np.int32],
    old_max: int,
    new_max: int,
) -> tuple[int, npt.NDArray[np.int64], int, int]:
    """The read side of the byte re-key in one walk: ``scan``, ``structure``, the prefix check and the cut.

    Walks the whole entries at the start of ``raw`` as ``scan`` does (``current``: the state id of the run
    ``raw`` starts inside, -1 none), reading each entry as Flink's restore does, so the walk is its own
    proof; checks every key's prefix (``keyed_decode._prefixes_match``), reads and hashes every key
    (``keyed_entries._hashed``), checks it is stored in ``key_group`` under ``old_max`` and computes its key
    group under ``new_max`` (``Rekey.rekeyed``). ``timer``, ``namespace`` and ``remap`` are per state id:
    whether it holds timers, its fixed namespace size (0 if none or variable), its position in the
    operator's state names.

    Returns a status (1: the END mark read, 0: not, DEFER: an entry the walk does not take: a state id
    outside ``states``, a length or prefix out of place, a key not short ASCII or not whole, a key stored in
    another key group. The reference path then decides and names what is wrong); a table with a row per
    column and a column per entry: where its bytes begin after the prefix, where they end, its new key
    group, its state position, its key's length after the prefix; then the bytes consumed and the state id
    of the run open there (as ``scan``). One exit and one table keep numba's compile short.
    """
    n = len(raw)
    table = np.empty((5, n // 32 + 16), dtype=np.int64)
    count = 0
    pos = 0
    ended = False
    deferred = False
    fresh = False  # a state id read, none of its run's entries yet
    while True:
        if current < 0:
            if pos + 2 > n:
                break
            state_id = (np.int64(raw[pos]) << 8) | np.int64(raw[pos + 1])
            if state_id == _END_OF_KEY_GROUP_MARK:
                ended = True
                break
            if not states[state_id]:
                deferred = True
                break
            pos += 2
            current = state_id
            fresh = True
        stop = False
        while True:
            begin = pos + 4
            if begin > n:
                stop = True
                break
            key_length = _int_at(raw, pos)
            key_end = begin + key_length
            if key_length < max(nprefix, 1):
                deferred = True
                break
            if key_end + 4 > n:
                stop = True
                break
            value_length = _int_at(raw, key_end)
            following = key_end + 4 + value_length
            if value_length < 0:
                deferred = True
                break
            if following > n:
                stop = True
                break
            # The key-group prefix without the run-end flag, read as two bytes and shifted to its width (no
            # branch on it in the loop: the second byte lies inside the entry, before its value's length).
            prefix = (((np.int64(raw[begin]) & 0x7F) << 8) | np.int64(raw[begin + 1])) >> (16 - 8 * nprefix)
            key_at = begin + nprefix + (8 if timer[current] else 0)
            code, key_stop = _key_hash(raw, key_at, key_end, kind)
            mixed = _murmur(code)
            if prefix != key_group or key_stop < 0 or key_stop + namespace[current] > key_end:
                deferred = True
                break
            if _modulo(mixed, old_max) != key_group:
                deferred = True
                break
            if count == table.shape[1]:
                table = _wider(table, count)
            table[0, count] = begin + nprefix
            table[1, count] = following
            table[2, count] = _modulo(mixed, new_max)
            table[3, count] = remap[current]
            table[4, count] = key_length - nprefix
            count += 1
            fresh = False
            pos = following
            if raw[begin] > 0x7F:  # the run's last entry
                current = -1
                break
        if stop or deferred:
            break
    if deferred:
        return DEFER, table[:, :0], 0, -1
    if fresh:
        # A state id read, but none of its run's entries fits: the next window starts at that id.
        current = -1
    if ended:
        consumed = pos + 2
    else:
        consumed = table[1, count - 1] if count else 0
    return np.int64(ended), table[:, :count], consumed, current


@_jit
def string_hashes(
    raw: npt.NDArray[np.uint8], key_at: npt.NDArray[np.int64], key_ends: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``keyed_entries._short_string_hash_codes``: the String.hashCode of each short ASCII key.

    A short ASCII ``StringValue`` is chars + 1 as one varint byte, then one byte per char. Returns each
    key's code (0 where it is not one), where it ends, and whether it is one.
    """
    count = len(key_at)
    codes = np.zeros(count, dtype=np.int32)
    ends = np.empty(count, dtype=np.int64)
    simple = np.zeros(count, dtype=np.bool_)
    for i in range(count):
        at = key_at[i]
        ends[i] = at + np.int64(raw[at])
        code, stop = _key_hash(raw, at, key_ends[i], 0)  # the fused walk's String hash
        if stop >= 0:
            simple[i] = True
            codes[i] = np.int32(code)
    return codes, ends, simple


def _memcpy_typed(
    typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, count: Any
) -> tuple[Any, Callable[..., None]]:
    """Copy ``count`` bytes from ``src[src_at:]`` to ``dst[dst_at:]`` (LLVM's memcpy; they never overlap)."""
    signature = types.void(dst, types.int64, src, types.int64, types.int64)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> None:
        d, d_at, s, s_at, n = args
        target = context.make_array(sig.args[0])(context, builder, d)
        origin = context.make_array(sig.args[2])(context, builder, s)
        memcpy: Any = cgutils.raw_memcpy
        memcpy(builder, builder.gep(target.data, [d_at]), builder.gep(origin.data, [s_at]), n, 1)

    return signature, codegen


#: ``_memcpy(dst, dst_at, src, src_at, count)`` inside a kernel.
_memcpy: Any = intrinsic(_memcpy_typed)


@_jit
def copy_ranges(
    src: npt.NDArray[np.uint8],
    src_at: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    dst: npt.NDArray[np.uint8],
    dst_at: npt.NDArray[np.int64],
) -> None:
    """``entry_parts.copy_ranges_reference``: each range of ``src`` copied to its place in ``dst``."""
    for i in range(len(lengths)):
        _memcpy(dst, dst_at[i], src, src_at[i], lengths[i])


@_inline
def _put(out: npt.NDArray[np.uint8], at: int, value: int, width: int) -> None:
    """Write ``value`` big-endian in ``width`` bytes at ``at``."""
    for b in range(width):
        out[at + b] = (value >> (8 * (width - 1 - b))) & 0xFF


@_jit
def frame_entries(
    groups: npt.NDArray[np.int64],
    states: npt.NDArray[np.int64],
    key_length: npt.NDArray[np.int64],
    src: npt.NDArray[np.uint8],
    src_at: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    nprefix: int,
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``entry_parts.frame_entries_reference``, one entry at a time."""
    count = len(groups)
    run_end = np.empty(count, dtype=np.bool_)
    size = 0
    for i in range(count):
        opens = i == 0 or groups[i] != groups[i - 1]
        closes_group = i == count - 1 or groups[i + 1] != groups[i]
        run_end[i] = closes_group or states[i + 1] != states[i]
        size += 4 + nprefix + lengths[i] + (2 if opens else 0) + (2 if run_end[i] else 0)
    out = np.empty(size, dtype=np.uint8)
    value_ends = np.empty(count, dtype=np.int64)
    p = 0
    for i in range(count):
        if i == 0 or groups[i] != groups[i - 1]:
            _put(out, p, states[i], 2)
            p += 2
        _put(out, p, nprefix + key_length[i], 4)
        p += 4
        prefix = groups[i]
        if run_end[i]:
            prefix |= 0x80 << (8 * (nprefix - 1))
        _put(out, p, prefix, nprefix)
        p += nprefix
        _memcpy(out, p, src, src_at[i], lengths[i])
        p += lengths[i]
        value_ends[i] = p
        if run_end[i]:
            closes_group = i == count - 1 or groups[i + 1] != groups[i]
            _put(out, p, _END_OF_KEY_GROUP_MARK if closes_group else states[i + 1], 2)
            p += 2
    return out, value_ends, run_end


@_jit
def _put_le(out: npt.NDArray[np.uint8], at: int, value: int, width: int) -> None:
    """Write ``value`` little-endian in ``width`` bytes at ``at``."""
    for b in range(width):
        out[at + b] = (value >> (8 * b)) & 0xFF


@_jit
def sort_parts(
    groups: npt.NDArray[Any],
    key_length: npt.NDArray[Any],
    lengths: npt.NDArray[np.int64],
    states: npt.NDArray[Any],
    new_max: int,
    new_parallelism: int,
    buckets: int,
) -> tuple[
    npt.NDArray[np.uint8],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
]:
    """``entry_parts.parts``' layout in one kernel: the counting sort, the parts' heads, columns and padding.

    Returns the parts' buffer (entries' bytes not yet copied), where each entry's bytes go in it (by input
    position), and per part its start, its end, its ``subtask * buckets + bucket`` and its entry count.
    """
    n = len(groups)
    # Per key group: its entries and their bytes (a counting sort needs no more: parts are runs of key
    # groups, and each key group's entries keep their input order).
    in_group = np.zeros(new_max, dtype=np.int64)
    bytes_in = np.zeros(new_max, dtype=np.int64)
    for i in range(n):
        g = np.int64(groups[i])
        in_group[g] += 1
        bytes_in[g] += lengths[i]
    # Parts: the runs of non-empty key groups (ascending) that share a (subtask, bucket), whose key grows
    # with the key group.
    part_of = np.empty(new_max, dtype=np.int64)
    keys = np.empty(new_max, dtype=np.int64)  # each part's key, the first nparts of them
    nparts = 0
    for g in range(new_max):
        if in_group[g]:
            key = (g * new_parallelism // new_max) * buckets + g * buckets // new_max
            if nparts == 0 or key != keys[nparts - 1]:
                keys[nparts] = key
                nparts += 1
            part_of[g] = nparts - 1
    part_key = keys[:nparts].copy()
    counts = np.zeros(nparts, dtype=np.int64)
    data_bytes = np.zeros(nparts, dtype=np.int64)
    for g in range(new_max):
        if in_group[g]:
            counts[part_of[g]] += in_group[g]
            data_bytes[part_of[g]] += bytes_in[g]
    part_at = np.empty(nparts, dtype=np.int64)
    part_stop = np.empty(nparts, dtype=np.int64)
    at = 0
    for q in range(nparts):
        size = 8 + 12 * counts[q] + data_bytes[q]
        part_at[q] = at
        at += size + (-size % 4)
        part_stop[q] = at
    out = np.empty(at, dtype=np.uint8)
    # Each key group's next entry: its index in its part and where its bytes go.
    next_index = np.empty(new_max, dtype=np.int64)
    next_data = np.empty(new_max, dtype=np.int64)
    q = -1
    index = data = 0
    for g in range(new_max):
        if in_group[g]:
            if part_of[g] != q:
                q = part_of[g]
                index = 0
                data = part_at[q] + 8 + 12 * counts[q]
            next_index[g] = index
            next_data[g] = data
            index += in_group[g]
            data += bytes_in[g]
    for q in range(nparts):
        _put_le(out, part_at[q], counts[q], 4)
        _put_le(out, part_at[q] + 4, data_bytes[q], 4)
        end = part_at[q] + 8 + 12 * counts[q] + data_bytes[q]
        for k in range(end, part_stop[q]):
            out[k] = 0
    # One pass in input order: each entry's columns straight to its place in its part (stable per key group).
    placed = np.empty(n, dtype=np.int64)
    for i in range(n):
        g = np.int64(groups[i])
        q = part_of[g]
        k = next_index[g]
        next_index[g] = k + 1
        c = part_at[q] + 8
        count = counts[q]
        _put_le(out, c + 4 * k, np.int64(key_length[i]), 4)
        _put_le(out, c + 4 * count + 4 * k, lengths[i], 4)
        _put_le(out, c + 8 * count + 2 * k, g, 2)
        _put_le(out, c + 10 * count + 2 * k, np.int64(states[i]), 2)
        placed[i] = next_data[g]
        next_data[g] += lengths[i]
    return out, placed, part_at, part_stop, part_key, counts


# -- The write side of the byte-level re-key: a bucket's parts framed into blocks, each block checked ------


@_inline
def _le(buf: npt.NDArray[np.uint8], at: int, width: int) -> int:
    """Return the unsigned little-endian ``width``-byte integer at ``at``."""
    value: int = np.int64(0)
    for b in range(width):
        value |= np.int64(buf[at + b]) << (8 * b)
    return value


@_jit
def _segments(
    buf: npt.NDArray[np.uint8], state_ids: npt.NDArray[np.int64]
) -> tuple[
    int,
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    int,
    int,
]:
    """``entry_parts._unpack`` and ``frame_bucket``'s state check, by segments, not entries.

    A segment is a stretch of one part's entries of one key group and one state: its entries' bytes lie
    back to back, and the ordering never splits it (so it orders segments, a few per part, not entries).
    Returns a status (1: read; DEFER: a part the reference refuses, a state the map lacks, an entry length
    below 0 or a key group above 32767, which no maxParallelism has: the reference decides those, its
    sort reading key groups as int16), then per segment where its key lengths and its
    lengths begin (the parts' columns), where its bytes begin, its entry count, key group and state
    position; and the entry count and their bytes in all.
    """
    size = len(buf)
    nstates = len(state_ids)
    empty = np.empty(0, dtype=np.int64)
    # One row per segment: key lengths' position, lengths' position, bytes' position, count, group, state.
    rows = np.empty((16, 6), dtype=np.int64)
    nseg = 0
    entries = 0
    data_bytes = 0
    pos = 0
    while pos < size:
        if pos + 8 > size:
            return DEFER, empty, empty, empty, empty, empty, empty, 0, 0
        n = _le(buf, pos, 4)
        data = _le(buf, pos + 4, 4)
        head = pos + 8
        end = head + 12 * n + data
        if end > size:
            return DEFER, empty, empty, empty, empty, empty, empty, 0, 0
        at = head + 12 * n
        group = state = -1
        first = 0
        for k in range(n):
            length = _le(buf, head + 4 * n + 4 * k, 4)
            g = _le(buf, head + 8 * n + 2 * k, 2)
            s = _le(buf, head + 10 * n + 2 * k, 2)
            if length >= 1 << 31 or s >= nstates or state_ids[s] < 0 or g >= 1 << 15:
                return DEFER, empty, empty, empty, empty, empty, empty, 0, 0
            if g != group or s != state:
                if k:
                    rows[nseg - 1, 3] = k - first
                if nseg == len(rows):
                    bigger = np.empty((2 * nseg, 6), dtype=np.int64)
                    bigger[:nseg] = rows
                    rows = bigger
                rows[nseg, 0] = head + 4 * k
                rows[nseg, 1] = head + 4 * n + 4 * k
                rows[nseg, 2] = at
                rows[nseg, 4] = g
                rows[nseg, 5] = s
                nseg += 1
                group, state, first = g, s, k
            at += length
        if n:
            rows[nseg - 1, 3] = n - first
        if at - (head + 12 * n) != data:
            return DEFER, empty, empty, empty, empty, empty, empty, 0, 0
        entries += n
        data_bytes += data
        pos = end + (-end % 4)
    key_at = rows[:nseg, 0].copy()
    length_at = rows[:nseg, 1].copy()
    src_at = rows[:nseg, 2].copy()
    counts = rows[:nseg, 3].copy()
    groups = rows[:nseg, 4].copy()
    states = rows[:nseg, 5].copy()
    return 1, key_at, length_at, src_at, counts, groups, states, entries, data_bytes


@_jit
def _bucket_order(
    groups: npt.NDArray[np.int64], states: npt.NDArray[np.int64], nstates: int
) -> npt.NDArray[np.int64]:
    """``entry_parts._entry_order``: key groups ascending, then runs in order of first appearance.

    Of entries or of ``_segments`` (stretches of entries the order keeps together). A counting sort by key
    group (stable), then within each key group one by run: a bucket's key groups are few and contiguous, a
    key group's states fewer (each ``state`` below ``nstates``).
    """
    n = len(groups)
    low = groups.min()
    starts = np.zeros(groups.max() - low + 2, dtype=np.int64)
    for i in range(n):
        starts[groups[i] - low + 1] += 1
    for g in range(len(starts) - 1):
        starts[g + 1] += starts[g]
    by_group = np.empty(n, dtype=np.int64)
    for i in range(n):
        g = groups[i] - low
        by_group[starts[g]] = i
        starts[g] += 1
    order = np.empty(n, dtype=np.int64)
    seen = np.full(nstates, -1, dtype=np.int64)  # the key group (its first entry) where a state last ran
    rank = np.empty(nstates, dtype=np.int64)
    place = np.empty(nstates, dtype=np.int64)
    lo = 0
    while lo < n:
        group = groups[by_group[lo]]
        hi = lo
        runs = 0
        while hi < n and groups[by_group[hi]] == group:
            s = states[by_group[hi]]
            if seen[s] != lo:
                seen[s] = lo
                rank[s] = runs
                place[runs] = 0
                runs += 1
            place[rank[s]] += 1
            hi += 1
        at = lo
        for r in range(runs):
            size = place[r]
            place[r] = at
            at += size
        for j in range(lo, hi):
            e = by_group[j]
            r = rank[states[e]]
            order[place[r]] = e
            place[r] += 1
        lo = hi
    return order


@_jit
def _frame_segments(
    buf: npt.NDArray[np.uint8],
    order: npt.NDArray[np.int64],
    key_at: npt.NDArray[np.int64],
    length_at: npt.NDArray[np.int64],
    src_at: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
    groups: npt.NDArray[np.int64],
    ids: npt.NDArray[np.int64],
    entries: int,
    data_bytes: int,
    nprefix: int,
    check: npt.NDArray[np.bool_],
) -> tuple[
    npt.NDArray[np.uint8],
    npt.NDArray[np.int64],
    npt.NDArray[np.bool_],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
]:
    """``frame_entries`` of ``_segments``' entries, segments in ``order`` (``ids``: the header's state ids).

    Entries of one segment share key group and state, so only a segment's last entry may close a run.
    Each entry's value end is counted from the start of its key group's block. Returns the bytes, the
    value ends, which entries close a run, and per block its key group, its first entry, its start (one
    more of each: -1, the entry count and the end of the bytes) and ``check_block``'s verdict on it with
    the state ids ``check`` allows, taken as soon as it is framed, while its bytes are in cache (-1: none
    taken, ``check`` being empty).
    """
    nseg = len(order)
    closes = np.empty(nseg, dtype=np.bool_)
    nblocks = 0
    nruns = 0
    for q in range(nseg):
        s = order[q]
        if q == 0 or groups[s] != groups[order[q - 1]]:
            nblocks += 1
        closes_group = q == nseg - 1 or groups[order[q + 1]] != groups[s]
        closes[q] = closes_group or ids[order[q + 1]] != ids[s]
        if closes[q]:
            nruns += 1
    out = np.empty(entries * (4 + nprefix) + data_bytes + 2 * nblocks + 2 * nruns, dtype=np.uint8)
    value_ends = np.empty(entries, dtype=np.int64)
    run_end = np.zeros(entries, dtype=np.bool_)
    block_group = np.empty(nblocks + 1, dtype=np.int64)
    block_lo = np.empty(nblocks + 1, dtype=np.int64)
    block_at = np.empty(nblocks + 1, dtype=np.int64)
    proven = np.full(nblocks + 1, -1, dtype=np.int64)
    flag = 0x80 << (8 * (nprefix - 1))
    p = 0
    j = 0
    b = -1
    for q in range(nseg):
        s = order[q]
        group = groups[s]
        if q == 0 or group != groups[order[q - 1]]:
            b += 1
            block_group[b] = group
            block_lo[b] = j
            block_at[b] = p
            _put(out, p, ids[s], 2)
            p += 2
        base = block_at[b]
        src = src_at[s]
        last = counts[s] - 1
        for k in range(counts[s]):
            length = _le(buf, length_at[s] + 4 * k, 4)
            _put(out, p, nprefix + _le(buf, key_at[s] + 4 * k, 4), 4)
            p += 4
            _put(out, p, group | flag if k == last and closes[q] else group, nprefix)
            p += nprefix
            _memcpy(out, p, buf, src, length)
            p += length
            src += length
            value_ends[j] = p - base
            j += 1
        if closes[q]:
            run_end[j - 1] = True
            closes_group = q == nseg - 1 or groups[order[q + 1]] != group
            _put(out, p, _END_OF_KEY_GROUP_MARK if closes_group else ids[order[q + 1]], 2)
            p += 2
            if closes_group and len(check):
                lo = block_lo[b]
                proven[b] = check_block(
                    out[block_at[b] : p], check, value_ends[lo:j], run_end[lo:j], group, nprefix
                )
    block_group[nblocks] = -1
    block_lo[nblocks] = entries
    block_at[nblocks] = p
    return out, value_ends, run_end, block_group, block_lo, block_at, proven


@_jit
def frame_bucket(
    buf: npt.NDArray[np.uint8], state_ids: npt.NDArray[np.int64], nprefix: int, check: npt.NDArray[np.bool_]
) -> tuple[
    int,
    npt.NDArray[np.uint8],
    npt.NDArray[np.int64],
    npt.NDArray[np.bool_],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
]:
    """``entry_parts.frame_bucket``, one kernel: the parts read, the entries ordered, framed, cut in blocks.

    ``check`` (state ids allowed; empty: none) also checks each block as ``check_block`` does. Returns a
    status (1: framed; DEFER: parts or states the reference refuses, which it decides and words), then
    ``_frame_segments``' bytes, value ends (per block), run ends, blocks and verdicts.
    """
    status, key_at, length_at, src_at, counts, groups, states, entries, data_bytes = _segments(buf, state_ids)
    no_entries = np.empty(0, dtype=np.int64)
    no_bytes = np.empty(0, dtype=np.uint8)
    no_flags = np.empty(0, dtype=np.bool_)
    if status != 1:
        return DEFER, no_bytes, no_entries, no_flags, no_entries, no_entries, no_entries, no_entries
    if entries == 0:
        return 1, no_bytes, no_entries, no_flags, no_entries, no_entries, no_entries, no_entries
    order = _bucket_order(groups, states, len(state_ids))
    ids = state_ids[states]
    out, value_ends, run_end, block_group, block_lo, block_at, proven = _frame_segments(
        buf, order, key_at, length_at, src_at, counts, groups, ids, entries, data_bytes, nprefix, check
    )
    return 1, out, value_ends, run_end, block_group, block_lo, block_at, proven


@_jit
def check_block(
    raw: npt.NDArray[np.uint8],
    states: npt.NDArray[np.bool_],
    value_ends: npt.NDArray[np.int64],
    run_end: npt.NDArray[np.bool_],
    key_group: int,
    nprefix: int,
) -> int:
    """``keyed_decode.check_block``, one kernel: ``_structure``'s checks and ``_prefixes_match``'s.

    ``_structure``'s preliminaries, then ``structure``'s checks over the whole block with each key's prefix.
    Returns 1 (the bytes prove the claim), 0 (they do not) or DEFER (where the reference takes numpy's
    path: a first entry end below 0, or a read that would leave the block; the reference decides).
    """
    count = len(value_ends)
    end = len(raw)
    if count == 0 or len(run_end) != count or end < 8 or not run_end[count - 1]:
        return 0
    if value_ends[count - 1] + 2 != end:
        return 0
    for i in range(1, count):
        if value_ends[i] <= value_ends[i - 1]:
            return 0
    if value_ends[0] < 0:
        return DEFER
    # ``structure``'s loop over the whole block (``opened`` 0), with each key's prefix checked on the way
    # (a mismatch is remembered, not returned: as in the reference, the structure's verdict comes first).
    current = (np.int64(raw[0]) << 8) | np.int64(raw[1])
    if not states[current]:
        return 0
    matches = True
    start = 6
    for i in range(count):
        ve = value_ends[i]
        if start + 4 > ve:
            return 0
        if start - 4 < 0 or start + 4 > end:
            return DEFER
        key_end = start + _int_at(raw, start - 4)
        if key_end < start + 1 or key_end + 4 > ve:
            return 0
        if key_end + 4 + _int_at(raw, key_end) != ve:
            return 0
        if (raw[start] > 0x7F) != run_end[i]:
            return 0
        if key_end - start < nprefix:
            matches = False
        else:
            prefix = np.int64(raw[start] & 0x7F)
            if nprefix == 2:
                prefix = (prefix << 8) | np.int64(raw[start + 1])
            matches = matches and prefix == key_group
        if run_end[i]:
            if ve + 2 > end:
                return DEFER
            following = (np.int64(raw[ve]) << 8) | np.int64(raw[ve + 1])
            if i == count - 1:
                if following != _END_OF_KEY_GROUP_MARK:
                    return 0
            elif not states[following]:
                return 0
            current = following
            start = ve + 6
        else:
            start = ve + 4
    return 1 if matches else 0


__all__ = [
    "check_block",
    "copy_ranges",
    "frame_bucket",
    "frame_entries",
    "rekey_window",
    "scan",
    "sort_parts",
    "string_hashes",
    "structure",
]
