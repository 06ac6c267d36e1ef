"""Byte codecs for the Flink serializers kg understands, and the composite-key layout of keyed state.

Keys are decoded for Flink's ``StringSerializer``, ``LongSerializer``, ``IntSerializer`` and
``BooleanSerializer`` (so that kg can recompute their key groups); every other key serializer is carried as
opaque ``binary`` bytes. Namespaces, map keys and values are never decoded: only their *length* matters,
to find where one part of a composite key ends and the next begins.

Mirrors:
- ``StringValue.readString`` / ``writeString`` (``StringSerializer``): length+1 as a base-128 varint
  (low group first, ``0`` = null), then each UTF-16 code unit as a base-128 varint.
- ``LongSerializer`` / ``IntSerializer`` / ``BooleanSerializer``: big-endian 8 / 4 bytes, 1 byte.
- ``SerializedCompositeKeyBuilder`` / ``CompositeKeySerializationUtils``: key-group prefix, key, key length
  (only if key *and* namespace serializers are variable-length), namespace, namespace length (same rule),
  then the map user key.
- ``TimerSerializer``: ``timestamp ^ Long.MIN_VALUE`` (``MathUtils.flipSignBit``), key, namespace, no lengths.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError

_BASE = "org.apache.flink.api.common.typeutils.base."
STRING_SERIALIZER_SNAPSHOT = f"{_BASE}StringSerializer$StringSerializerSnapshot"
LONG_SERIALIZER_SNAPSHOT = f"{_BASE}LongSerializer$LongSerializerSnapshot"
INT_SERIALIZER_SNAPSHOT = f"{_BASE}IntSerializer$IntSerializerSnapshot"
BOOLEAN_SERIALIZER_SNAPSHOT = f"{_BASE}BooleanSerializer$BooleanSerializerSnapshot"
VOID_NAMESPACE_SERIALIZER_SNAPSHOT = (
    "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot"
)
TIME_WINDOW_SERIALIZER_SNAPSHOT = (
    "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot"
)
GLOBAL_WINDOW_SERIALIZER_SNAPSHOT = (
    "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot"
)

#: The Table runtime's ``RowDataSerializer`` (SQL jobs' key rows): ``row`` keys, bytes to this module (self-
#: delimiting: an int length, big-endian, then the row's bytes) that ``javahash`` hashes as Flink does.
ROW_DATA_SERIALIZER_SNAPSHOT = (
    "org.apache.flink.table.runtime.typeutils.RowDataSerializer$RowDataSerializerSnapshot"
)

#: kg key type per key-serializer snapshot class; any other class is carried as ``binary``.
KEY_TYPE_BY_SERIALIZER_SNAPSHOT = {
    STRING_SERIALIZER_SNAPSHOT: "string",
    LONG_SERIALIZER_SNAPSHOT: "long",
    INT_SERIALIZER_SNAPSHOT: "int",
    BOOLEAN_SERIALIZER_SNAPSHOT: "boolean",
}

#: Bytes written per value, by serializer snapshot class, for serializers of fixed size.
#: VoidNamespace and GlobalWindow report ``getLength() == 0`` (fixed) yet write one byte.
FIXED_SIZES = {
    LONG_SERIALIZER_SNAPSHOT: 8,
    INT_SERIALIZER_SNAPSHOT: 4,
    BOOLEAN_SERIALIZER_SNAPSHOT: 1,
    f"{_BASE}ShortSerializer$ShortSerializerSnapshot": 2,
    f"{_BASE}ByteSerializer$ByteSerializerSnapshot": 1,
    f"{_BASE}CharSerializer$CharSerializerSnapshot": 2,
    f"{_BASE}DoubleSerializer$DoubleSerializerSnapshot": 8,
    f"{_BASE}FloatSerializer$FloatSerializerSnapshot": 4,
    VOID_NAMESPACE_SERIALIZER_SNAPSHOT: 1,
    GLOBAL_WINDOW_SERIALIZER_SNAPSHOT: 1,
    TIME_WINDOW_SERIALIZER_SNAPSHOT: 16,
}

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_FLIP = 1 << 63


def _corrupt(source: str, what: str) -> InvalidInputError:
    return InvalidInputError(f"{source}: {what}", code="FLINK_STATE_CORRUPT")


# -- StringValue --------------------------------------------------------------------------------------------


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Read StringValue's varint (7-bit groups, low group first, high bit = more); raise IndexError at end."""
    value = data[pos]
    pos += 1
    if value < 0x80:
        return value, pos
    shift, value = 7, value & 0x7F
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def read_string(data: bytes, pos: int, source: str = "<bytes>") -> tuple[str | None, int]:
    """Decode a ``StringValue.writeString`` string at ``pos``; return it (None for null) and the end position.

    Raises:
        InvalidInputError: The bytes end inside the string.
    """
    try:
        length, pos = _read_varint(data, pos)
        if length == 0:
            return None, pos
        n = length - 1
        chunk = data[pos : pos + n]
        if len(chunk) == n and chunk.isascii():
            # Fast path: every UTF-16 unit below 0x80 is one byte.
            return chunk.decode("ascii"), pos + n
        units = []
        for _ in range(n):
            c, pos = _read_varint(data, pos)
            units.append(c & 0xFFFF)
    except IndexError:
        raise _corrupt(source, f"string runs past the end of its bytes (at {pos})") from None
    raw = struct.pack(f"<{len(units)}H", *units)
    return raw.decode("utf-16-le", "surrogatepass"), pos


def write_string(text: str | None) -> bytes:
    """Encode ``text`` as ``StringValue.writeString`` does (None → the single byte 0)."""
    if text is None:
        return b"\x00"
    if text.isascii():
        raw = text.encode("ascii")
        return _varint(len(raw) + 1) + raw
    raw = text.encode("utf-16-le", "surrogatepass")
    units = struct.unpack(f"<{len(raw) // 2}H", raw)
    out = bytearray(_varint(len(units) + 1))
    for c in units:
        out += _varint(c)
    return bytes(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# -- variable-length int bytes (CompositeKeySerializationUtils.writeVariableIntBytes) -------------------


def variable_int_bytes(value: int) -> bytes:
    """Encode a length as ``writeVariableIntBytes``: little-endian base-256, minimal, at least one byte."""
    out = bytearray()
    while True:
        out.append(value & 0xFF)
        value >>= 8
        if value == 0:
            return bytes(out)


# -- key codecs ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyCodec:
    """How to find the end of, decode and encode a serialized key.

    Attributes:
        key_type: kg key type (``string``, ``long``, ``int``, ``boolean``, ``row`` or ``binary``).
        fixed_size: Bytes per key for a fixed-size serializer, None for a variable-length one.
        serializer_class: The key serializer's snapshot class.
    """

    key_type: str
    fixed_size: int | None
    serializer_class: str

    @property
    def variable(self) -> bool:
        """Return whether the serializer is variable-length (``TypeSerializer.getLength() < 0``)."""
        return self.fixed_size is None

    @property
    def self_delimiting(self) -> bool:
        """Return whether a key's end can be found from its bytes alone."""
        return self.fixed_size is not None or self.key_type == "string" or self.length_prefixed

    @property
    def length_prefixed(self) -> bool:
        """Return whether each key starts with its byte length (``RowDataSerializer``'s int)."""
        return self.serializer_class == ROW_DATA_SERIALIZER_SNAPSHOT

    def read(self, data: bytes, pos: int, source: str = "<bytes>") -> tuple[object, int]:
        """Decode the key at ``pos``; return the value and the end position (self-delimiting codecs only)."""
        if self.key_type == "string":
            value, end = read_string(data, pos, source)
            if value is None:
                raise _corrupt(source, "null String key")
            return value, end
        if self.length_prefixed:
            # The key stays the bytes the serializer wrote (length and row), as opaque keys always are.
            if pos + 4 > len(data):
                raise _corrupt(source, f"key runs past the end of its bytes (at {pos})")
            end = pos + 4 + _INT.unpack_from(data, pos)[0]
            if end > len(data) or end < pos + 4:
                raise _corrupt(source, f"key runs past the end of its bytes (at {pos})")
            return bytes(data[pos:end]), end
        size = self.fixed_size
        if size is None:
            raise UnsupportedFormatError(
                f"{source}: cannot find the end of a key written by {self.serializer_class}",
                code="FLINK_KEY_UNSPLITTABLE",
            )
        end = pos + size
        if end > len(data):
            raise _corrupt(source, f"key runs past the end of its bytes (at {pos})")
        return self.decode(data[pos:end]), end

    def decode(self, raw: bytes) -> object:
        """Decode a whole serialized key."""
        if self.key_type == "long":
            return _LONG.unpack(raw)[0]
        if self.key_type == "int":
            return _INT.unpack(raw)[0]
        if self.key_type == "boolean":
            return raw != b"\x00"
        if self.key_type == "string":
            return read_string(raw, 0)[0]
        return raw

    def encoder(self) -> Callable[[object], bytes]:
        """Return a function that serializes one key value (the inverse of ``decode``)."""
        if self.key_type == "string":
            return write_string  # type: ignore[return-value]
        if self.key_type == "long":
            return _LONG.pack
        if self.key_type == "int":
            return _INT.pack
        if self.key_type == "boolean":
            return lambda v: b"\x01" if v else b"\x00"
        return bytes  # type: ignore[return-value]


def key_codec(serializer_class: str) -> KeyCodec:
    """Return the codec for a key serializer snapshot class (opaque ``binary`` for unknown classes)."""
    if serializer_class == STRING_SERIALIZER_SNAPSHOT:
        return KeyCodec("string", None, serializer_class)
    if serializer_class == ROW_DATA_SERIALIZER_SNAPSHOT:
        return KeyCodec("row", None, serializer_class)
    key_type = KEY_TYPE_BY_SERIALIZER_SNAPSHOT.get(serializer_class, "binary")
    return KeyCodec(key_type, FIXED_SIZES.get(serializer_class), serializer_class)


def namespace_size(serializer_class: str | None) -> int | None:
    """Return the bytes of one namespace for a fixed-size namespace serializer, None if unknown/variable."""
    if serializer_class is None:
        return None
    return FIXED_SIZES.get(serializer_class)


def namespace_is_variable(serializer_class: str | None) -> bool:
    """Return whether a namespace serializer is variable-length; unknown classes count as variable."""
    return namespace_size(serializer_class) is None


def value_end(serializer_class: str | None, data: bytes, pos: int, source: str = "<bytes>") -> int | None:
    """Return where one value written by ``serializer_class`` at ``pos`` ends, or None if kg cannot tell.

    Known for the fixed-size serializers and ``StringSerializer``; anything else is opaque to kg.
    """
    if serializer_class == STRING_SERIALIZER_SNAPSHOT:
        return read_string(data, pos, source)[1]
    size = FIXED_SIZES.get(serializer_class or "")
    if size is None:
        return None
    if pos + size > len(data):
        raise _corrupt(source, f"value runs past the end of its bytes (at {pos})")
    return pos + size


# -- timers -------------------------------------------------------------------------------------------------


def read_timer_timestamp(data: bytes, pos: int) -> int:
    """Decode ``TimerSerializer``'s leading long: the timestamp with its sign bit flipped."""
    value: int = _LONG.unpack_from(data, pos)[0]
    return flip_sign_bit(value)


def write_timer_timestamp(timestamp: int) -> bytes:
    """Encode a timer timestamp as ``TimerSerializer`` does (``MathUtils.flipSignBit``)."""
    return _LONG.pack(flip_sign_bit(timestamp))


def flip_sign_bit(value: int) -> int:
    """Return ``value ^ Long.MIN_VALUE`` as a signed 64-bit value (``MathUtils.flipSignBit``)."""
    # Flipping bit 63 of a two's-complement long shifts it by 2**63 towards the other half of the range.
    return value + _FLIP if value < 0 else value - _FLIP


__all__ = [
    "FIXED_SIZES",
    "KEY_TYPE_BY_SERIALIZER_SNAPSHOT",
    "KeyCodec",
    "flip_sign_bit",
    "key_codec",
    "namespace_is_variable",
    "namespace_size",
    "read_string",
    "read_timer_timestamp",
    "value_end",
    "variable_int_bytes",
    "write_string",
    "write_timer_timestamp",
]
