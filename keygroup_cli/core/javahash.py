"""Java ``hashCode()`` per key type, so that key-group math stays type-agnostic.

Scalar functions mirror ``String.hashCode``, ``Long.hashCode``, ``Integer.hashCode`` and
``Boolean.hashCode`` with Java's 32-bit wrapping arithmetic; ``hash_codes`` does the same over a whole
Arrow or numpy array at once. ``row`` keys, the ``BinaryRowData`` keys of SQL jobs, are Arrow binary holding
what ``RowDataSerializer`` wrote (a big-endian int length, then the row's bytes); their hash code is
``BinaryRowData.hashCode()``: ``MurmurHashUtils.hashBytesByWords`` over the row's bytes (murmur3's 32-bit
body over little-endian 4-byte words, seed 42, finalised with the byte length). Binary (opaque) keys have
no Java hash code that kg could reproduce.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.keygroups import to_int32

#: Key types given as text (``kg key --key-type``) and generated (``kg generate``).
PRIMITIVE_KEY_TYPES = ("string", "long", "int", "boolean")
#: Key types kg can re-hash: the primitives and SQL jobs' rows. ``binary`` keys can be moved between
#: subtasks but never re-hashed.
HASHABLE_KEY_TYPES = (*PRIMITIVE_KEY_TYPES, "row")
KEY_TYPES = (*HASHABLE_KEY_TYPES, "binary")
#: ``MurmurHashUtils.DEFAULT_SEED``, the seed of ``BinaryRowData.hashCode()``.
ROW_HASH_SEED = 42

_MASK32 = 0xFFFFFFFF


def string_hash_code(value: str) -> int:
    """Return Java's ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units."""
    h = 0
    for unit in _utf16_units(value):
        h = (31 * h + unit) & _MASK32
    return to_int32(h)


def _utf16_units(value: str) -> Iterable[int]:
    for ch in value:
        cp = ord(ch)
        if cp >= 0x10000:
            # A supplementary character is two surrogate code units in a Java String.
            cp -= 0x10000
            yield 0xD800 | (cp >> 10)
            yield 0xDC00 | (cp & 0x3FF)
        else:
            yield cp


def long_hash_code(value: int) -> int:
    """Return Java's ``Long.hashCode()``: ``(int)(v ^ (v >>> 32))``."""
    if not -(2**63) <= value < 2**63:
        raise InvalidArgumentError(f"Not a Java long: {value}", code="KEY_OUT_OF_RANGE")
    unsigned = value & 0xFFFFFFFFFFFFFFFF
    return to_int32(unsigned ^ (unsigned >> 32))


def int_hash_code(value: int) -> int:
    """Return Java's ``Integer.hashCode()``: the value itself."""
    if not -(2**31) <= value < 2**31:
        raise InvalidArgumentError(f"Not a Java int: {value}", code="KEY_OUT_OF_RANGE")
    return value


def boolean_hash_code(value: bool) -> int:
    """Return Java's ``Boolean.hashCode()``: 1231 for true, 1237 for false."""
    return 1231 if value else 1237


def hash_code(value: Any, key_type: str) -> int:
    """Return the Java ``hashCode()`` of one key of the given kg key type."""
    if key_type == "string":
        return string_hash_code(value)
    if key_type == "long":
        return long_hash_code(value)
    if key_type == "int":
        return int_hash_code(value)
    if key_type == "boolean":
        return boolean_hash_code(value)
    if key_type == "row":
        return int(row_hash_codes(pa.array([value], type=pa.binary()))[0])
    raise _not_hashable(key_type)


def parse_key(text: str, key_type: str) -> Any:
    """Parse one key given on the command line or in a keys file into its Python value."""
    if key_type == "string":
        return text
    if key_type in ("long", "int"):
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidArgumentError(f"Not a {key_type} key: {text!r}", code="KEY_PARSE_ERROR") from None
        hash_code(value, key_type)  # range check with the type's own message
        return value
    if key_type == "boolean":
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise InvalidArgumentError(f"Not a boolean key (true/false): {text!r}", code="KEY_PARSE_ERROR")
        return lowered == "true"
    raise _not_hashable(key_type)


def _not_hashable(key_type: str) -> UnsupportedFormatError:
    if key_type == "binary":
        return UnsupportedFormatError(
            "binary keys are opaque: kg cannot compute their Java hashCode()", code="KEY_TYPE_NOT_HASHABLE"
        )
    return UnsupportedFormatError(
        f"Unknown key type {key_type!r}; expected one of {', '.join(KEY_TYPES)}", code="UNKNOWN_KEY_TYPE"
    )


# -- Vectorised --------------------------------------------------------------------------------------------


def hash_codes(keys: pa.Array | pa.ChunkedArray | npt.ArrayLike, key_type: str) -> npt.NDArray[np.int32]:
    """Return the Java ``hashCode()`` of every key, as an int32 array in input order.

    Args:
        keys: An Arrow array (any chunking) or anything numpy accepts; strings should be Arrow strings.
        key_type: One of ``string``, ``long``, ``int``, ``boolean``.
    """
    if key_type == "string":
        return string_hash_codes(keys)
    if key_type == "row":
        return row_hash_codes(keys)
    if key_type not in HASHABLE_KEY_TYPES:
        raise _not_hashable(key_type)
    values = _to_numpy(keys)
    if key_type == "long":
        u = values.astype(np.int64, copy=False).view(np.uint64)
        return np.asarray((u ^ (u >> np.uint64(32))).astype(np.uint32).view(np.int32), dtype=np.int32)
    if key_type == "int":
        return np.asarray(values, dtype=np.int32)
    return np.asarray(np.where(np.asarray(values, dtype=bool), 1231, 1237), dtype=np.int32)


def _to_numpy(keys: pa.Array | pa.ChunkedArray | npt.ArrayLike) -> npt.NDArray[Any]:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(keys, pa.Array):
        if keys.null_count:
            raise InvalidArgumentError("Null keys are not allowed (Flink rejects them)", code="NULL_KEY")
        return np.asarray(keys.to_numpy(zero_copy_only=False))
    return np.asarray(keys)


# 31**k mod 2**32 for k = 0, 1, ...; grown on demand and shared across calls.
_POWERS_31 = np.ones(1, dtype=np.uint32)


def _powers_of_31(n: int) -> npt.NDArray[np.uint32]:
    global _POWERS_31
    if len(_POWERS_31) < n:
        size = max(n, 2 * len(_POWERS_31))
        powers = np.empty(size, dtype=np.uint32)
        powers[0] = 1
        # Doubling: powers[k:2k] = powers[0:k] * 31**k, all mod 2**32.
        filled = 1
        with np.errstate(over="ignore"):
            while filled < size:
                step = min(filled, size - filled)
                factor = np.uint32(pow(31, filled, 1 << 32))
                powers[filled : filled + step] = powers[:step] * factor
                filled += step
        _POWERS_31 = powers
    return _POWERS_31[:n]


def string_hash_codes(keys: pa.Array | pa.ChunkedArray | npt.ArrayLike) -> npt.NDArray[np.int32]:
    """Return ``String.hashCode()`` of every string without a per-key Python loop.

    The UTF-8 bytes of the Arrow array are decoded to UTF-16 code units in numpy (ASCII is used as is).
    Strings of up to ``_HORNER_LIMIT`` units are hashed by Horner's rule one position at a time over all
    strings still that long, which needs only key-sized temporaries; longer strings are hashed as
    ``sum(unit * 31**units_after_it)`` over their own units. Both are exact mod 2**32.
    """
    arr = _as_large_string_array(keys)
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    if arr.null_count:
        raise InvalidArgumentError("Null keys are not allowed (Flink rejects them)", code="NULL_KEY")
    offsets_buf, data_buf = arr.buffers()[1], arr.buffers()[2]
    offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=n + 1, offset=arr.offset * 8)
    start, stop = int(offsets[0]), int(offsets[-1])
    if data_buf is None or stop == start:
        return np.zeros(n, dtype=np.int32)
    data = np.frombuffer(data_buf, dtype=np.uint8, count=stop - start, offset=start)
    offsets = offsets - start
    units: npt.NDArray[np.uint8] | npt.NDArray[np.uint32]
    if int(data.max()) < 0x80:
        units, unit_offsets = data, offsets
    else:
        units, unit_offsets = _utf8_to_utf16_units(data, offsets)
    lengths = np.diff(unit_offsets)
    result = np.zeros(n, dtype=np.uint32)
    long_ones = np.flatnonzero(lengths > _HORNER_LIMIT)
    if len(long_ones):
        result[long_ones] = _weighted_sums(units, unit_offsets, long_ones)
    short_ones = np.flatnonzero((lengths > 0) & (lengths <= _HORNER_LIMIT))
    if len(short_ones):
        result[short_ones] = _horner(units, unit_offsets[short_ones], lengths[short_ones])
    return result.view(np.int32)


#: Strings longer than this many UTF-16 units are hashed by weighted sums instead of Horner steps.
_HORNER_LIMIT = 256


def unit_run_hash_codes(
    units: npt.NDArray[np.uint8] | npt.NDArray[np.uint32],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
) -> npt.NDArray[np.int32]:
    """Return ``String.hashCode()`` of the strings whose UTF-16 units are ``units[start:start + length]``.

    The hash of serialized keys where they lie (``StringValue`` bytes of ASCII strings are their units), with
    no string made: the byte-level re-key route hashes keys inside key-group blocks this way.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    result = np.zeros(len(starts), dtype=np.uint32)
    if not len(starts):
        return result.view(np.int32)
    offsets = np.empty(2 * len(starts), dtype=np.int64)
    offsets[0::2] = starts
    offsets[1::2] = starts + lengths
    long_ones = np.flatnonzero(lengths > _HORNER_LIMIT)
    if len(long_ones):
        # _weighted_sums reads string i as units[offsets[i]:offsets[i + 1]]: pairs (start, end) do that.
        result[long_ones] = _weighted_sums(units, offsets, 2 * long_ones)
    short_ones = np.flatnonzero((lengths > 0) & (lengths <= _HORNER_LIMIT))
    if len(short_ones):
        result[short_ones] = _horner(units, starts[short_ones], lengths[short_ones])
    return result.view(np.int32)


def _horner(
    units: npt.NDArray[np.uint8] | npt.NDArray[np.uint32],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
) -> npt.NDArray[np.uint32]:
    # Longest first, so the strings still active at position j are always a prefix.
    order = np.argsort(-lengths, kind="stable")
    sorted_starts = starts[order]
    descending = lengths[order]
    active = np.searchsorted(-descending, -np.arange(int(descending[0])), side="left")
    h = np.zeros(len(order), dtype=np.uint32)
    thirty_one = np.uint32(31)
    with np.errstate(over="ignore"):
        for j, count in enumerate(active.tolist()):
            head = h[:count]
            head *= thirty_one
            head += units[sorted_starts[:count] + j]
    out = np.empty_like(h)
    out[order] = h
    return out


def _weighted_sums(
    units: npt.NDArray[np.uint8] | npt.NDArray[np.uint32],
    unit_offsets: npt.NDArray[np.int64],
    which: npt.NDArray[np.int64],
) -> npt.NDArray[np.uint32]:
    sums = np.empty(len(which), dtype=np.uint32)
    max_len = int((unit_offsets[which + 1] - unit_offsets[which]).max())
    powers = _powers_of_31(max_len)
    with np.errstate(over="ignore"):
        for i, string in enumerate(which.tolist()):
            chunk = units[unit_offsets[string] : unit_offsets[string + 1]].astype(np.uint32)
            sums[i] = np.sum(chunk * powers[: len(chunk)][::-1], dtype=np.uint32)
    return sums


def _as_large_string_array(keys: pa.Array | pa.ChunkedArray | npt.ArrayLike) -> pa.LargeStringArray:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if not isinstance(keys, pa.Array):
        keys = pa.array(keys, type=pa.large_string())
    if pa.types.is_dictionary(keys.type):
        keys = keys.dictionary_decode()
    if not pa.types.is_large_string(keys.type):
        keys = keys.cast(pa.large_string())
    return keys


def _utf8_to_utf16_units(
    data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
    """Decode valid UTF-8 bytes to UTF-16 code units; return the units and per-string unit offsets."""
    b = data.astype(np.uint32)
    padded = np.concatenate([b, np.zeros(3, dtype=np.uint32)])
    lead_idx = np.flatnonzero((data & 0xC0) != 0x80)
    lead = b[lead_idx]
    b1 = padded[lead_idx + 1] & 0x3F
    b2 = padded[lead_idx + 2] & 0x3F
    b3 = padded[lead_idx + 3] & 0x3F
    cp = np.where(
        lead < 0x80,
        lead,
        np.where(
            lead < 0xE0,
            ((lead & 0x1F) << 6) | b1,
            np.where(
                lead < 0xF0,
                ((lead & 0x0F) << 12) | (b1 << 6) | b2,
                ((lead & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3,
            ),
        ),
    )
    supplementary = cp >= 0x10000
    units_per_cp = 1 + supplementary.astype(np.int64)
    # Code points per string, from how many lead bytes fall before each string's byte offset.
    cp_offsets = np.searchsorted(lead_idx, offsets, side="left")
    unit_end = np.cumsum(units_per_cp)
    unit_offsets = np.concatenate([[0], unit_end])[cp_offsets]
    units = np.empty(int(unit_end[-1]) if len(unit_end) else 0, dtype=np.uint32)
    first_unit = unit_end - units_per_cp
    shifted = cp - 0x10000
    units[first_unit] = np.where(supplementary, 0xD800 | (shifted >> 10), cp)
    low_at = first_unit[supplementary] + 1
    units[low_at] = 0xDC00 | (shifted[supplementary] & 0x3FF)
    return units, unit_offsets.astype(np.int64)


# -- BinaryRowData (SQL jobs' keys) -------------------------------------------------------------------------


def row_hash_codes(keys: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int32]:
    """Return ``BinaryRowData.hashCode()`` of every ``row`` key (``RowDataSerializer`` bytes), in input order.

    Keys are grouped by length, so each group's murmur3 runs column-wise over its 4-byte words.

    Raises:
        InvalidInputError: A key that is not an int length followed by that many bytes of whole words.
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        keys = pa.array(keys, type=pa.binary())
    if pa.types.is_large_binary(keys.type):
        keys = keys.cast(pa.binary())
    n = len(keys)
    codes = np.zeros(n, dtype=np.int32)
    if n == 0:
        return codes
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * keys.offset).astype(
        np.int64
    )
    data = keys.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    lengths = np.diff(offsets)
    for size in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == size)
        if size < 4 or (size - 4) % 4:
            raise _not_a_row(size)
        cells = raw[offsets[rows][:, None] + np.arange(size, dtype=np.int64)]
        declared = cells[:, :4].copy().view(">i4").ravel()
        if bool((declared != size - 4).any()):
            raise _not_a_row(size)
        words = np.ascontiguousarray(cells[:, 4:]).view("<u4")
        codes[rows] = _murmur_words(words, size - 4)
    return codes


def _murmur_words(words: npt.NDArray[np.uint32], byte_length: int) -> npt.NDArray[np.int32]:
    """Return ``MurmurHashUtils.hashBytesByWords`` of each row of ``words`` (uint32 arithmetic wraps)."""
    h = np.full(words.shape[0], ROW_HASH_SEED, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for column in range(words.shape[1]):
            k = words[:, column] * np.uint32(0xCC9E2D51)
            k = (k << np.uint32(15)) | (k >> np.uint32(17))
            k = k * np.uint32(0x1B873593)
            h ^= k
            h = (h << np.uint32(13)) | (h >> np.uint32(19))
            h = h * np.uint32(5) + np.uint32(0xE6546B64)
        h ^= np.uint32(byte_length & _MASK32)
        h ^= h >> np.uint32(16)
        h = h * np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h = h * np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return np.asarray(h.view(np.int32), dtype=np.int32)


def _not_a_row(size: int) -> InvalidInputError:
    return InvalidInputError(
        f"a {size}-byte key is not a serialized BinaryRowData (an int length, then whole 4-byte words)",
        code="FLINK_STATE_CORRUPT",
    )
