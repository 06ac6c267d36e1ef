"""Typed values of keyed state, decoded with the serializers named in a state file's header.

``type_codec(snapshot)`` builds a decoder from one ``TypeSerializerSnapshot`` (``keyed_header``);
``StateCodecs.of(info, key_snapshot)`` builds one state's decoders: key, namespace, value (value, reducing
and aggregating states), list element, map user key and user value, and a timer's key and namespace.
Each decoder reads the exact bytes Flink's serializer writes (``TypeSerializer.serialize``):

- primitives (``LongSerializer`` … ``CharSerializer``): big-endian, ``writeChar`` for chars;
- ``StringSerializer``: ``StringValue.writeString``; ``BytePrimitiveArraySerializer`` and the other primitive
  arrays: int length, then the elements;
- ``EnumSerializer``: int index into the constants listed in its snapshot (``EnumSerializerSnapshot``);
- ``ListSerializer``: int size, elements; ``MapSerializer``: int size, then key, boolean isNull, value;
- ``TtlStateFactory$TtlSerializer`` (a ``CompositeSerializer``): long last-access timestamp, user value;
- ``TupleSerializer``: each field, no nulls; ``RowSerializer``: a bit mask (MSB first, ``MaskUtils``) of
  two row-kind bits (unless the snapshot's outer boolean says no row kind) and one null bit per field,
  then the non-null fields;
- ``PojoSerializer``: a flags byte (``IS_NULL`` 1, ``NO_SUBCLASS`` 2, subclasses 4/8), then per field a
  boolean isNull and the field; field names, order and serializers come from ``PojoSerializerSnapshot``
  (``PojoSerializerSnapshotData``: class name, then ``LinkedOptionalMapSerializer`` maps of framed
  entries);
- ``AvroSerializer`` (flink-avro): Avro values read with the writer schema of ``AvroSerializerSnapshot``
  (``avro``);
- namespaces: ``VoidNamespace`` (one byte) is None, ``TimeWindow`` is ``{"start", "end"}``.

In canonical key groups (and kg's rows) a list state's value is its elements joined by one ``,`` byte
(``ListDelimitedSerializer``), and a map state has one entry per user key with the value after its null
flag already split off (``keyed_decode``).

Anything else, Kryo (generic types) included, is *opaque*: its bytes are kept and the decoder says
why (``Opaque.reason``); kg never guesses a layout.

Every codec encodes too, as the same serializer's ``serialize`` writes: ``Codec.write(value)`` takes a value
as ``decode`` returns it, ``Codec.from_arrow`` turns a value of ``arrow_type`` (as ``to_arrow`` returns it,
or as ``pyarrow`` gives it back: ``arrow_rows``) into that form, and ``encode_arrow`` does both. Nulls are
written where and as Flink writes them (a null ``String`` as ``StringValue``'s 0 byte, a POJO's flags and
per-field null flags, a Row's null mask, a map value's null flag); ``NaN`` as Java's ``doubleToLongBits``
writes it (one canonical NaN). A type kg cannot encode (an opaque one, or a composite with such a part)
raises ``NotEncodable`` before anything is written (``Codec.write_reason`` says so up front); a value that
does not fit its type raises ``ValueNotEncodable``. Nothing is ever written approximately.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import numbers
import operator
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.binary import decode_modified_utf8
from keygroup_cli.flink.types.avro import (
    AvroEncodeError,
    AvroSchemaError,
    Node,
    avro_reader,
    read_value,
    write_value,
)
from keygroup_cli.flink.types.binary_row import (
    ROW_KINDS,
    RowDecodeError,
    RowFields,
    SqlTimestamp,
    arrow_unit,
    decode_row,
    encode_row,
)
from keygroup_cli.flink.types.serializer_snapshots import (
    AVRO_SERIALIZER_SNAPSHOT,
    OPTIONAL_MAP_HEADER,
    SerializerSnapshot,
    StateMetaInfo,
    parse_serializer_snapshot,
)
from keygroup_cli.flink.types.serializers import ROW_DATA_SERIALIZER_SNAPSHOT, read_string, write_string

_BASE = "org.apache.flink.api.common.typeutils.base."
_ARRAY = f"{_BASE}array."
_RUNTIME = "org.apache.flink.api.java.typeutils.runtime."

#: Fixed-size primitives: snapshot class -> (kg type name, struct format).
_PRIMITIVES = {
    f"{_BASE}LongSerializer$LongSerializerSnapshot": ("Long", ">q"),
    f"{_BASE}IntSerializer$IntSerializerSnapshot": ("Integer", ">i"),
    f"{_BASE}ShortSerializer$ShortSerializerSnapshot": ("Short", ">h"),
    f"{_BASE}ByteSerializer$ByteSerializerSnapshot": ("Byte", ">b"),
    f"{_BASE}DoubleSerializer$DoubleSerializerSnapshot": ("Double", ">d"),
    f"{_BASE}FloatSerializer$FloatSerializerSnapshot": ("Float", ">f"),
    f"{_BASE}BooleanSerializer$BooleanSerializerSnapshot": ("Boolean", ">?"),
    f"{_BASE}CharSerializer$CharSerializerSnapshot": ("Character", ">H"),
}
#: Primitive arrays (int length, then elements): snapshot class -> (kg type name, element format).
_ARRAYS = {
    f"{_ARRAY}LongPrimitiveArraySerializer$LongPrimitiveArraySerializerSnapshot": ("long[]", "q"),
    f"{_ARRAY}IntPrimitiveArraySerializer$IntPrimitiveArraySerializerSnapshot": ("int[]", "i"),
    f"{_ARRAY}ShortPrimitiveArraySerializer$ShortPrimitiveArraySerializerSnapshot": ("short[]", "h"),
    f"{_ARRAY}DoublePrimitiveArraySerializer$DoublePrimitiveArraySerializerSnapshot": ("double[]", "d"),
    f"{_ARRAY}FloatPrimitiveArraySerializer$FloatPrimitiveArraySerializerSnapshot": ("float[]", "f"),
    f"{_ARRAY}BooleanPrimitiveArraySerializer$BooleanPrimitiveArraySerializerSnapshot": ("boolean[]", "?"),
    f"{_ARRAY}CharPrimitiveArraySerializer$CharPrimitiveArraySerializerSnapshot": ("char[]", "H"),
}
STRING = f"{_BASE}StringSerializer$StringSerializerSnapshot"
#: The Table runtime's ``ExternalSerializer``: converts to the internal type, then writes its one nested
#: (internal) serializer's bytes.
EXTERNAL = "org.apache.flink.table.runtime.typeutils.ExternalSerializer$ExternalSerializerSnapshot"
#: The Table runtime's ``StringDataSerializer`` (SQL strings outside rows): int length, then UTF-8 bytes.
STRING_DATA = "org.apache.flink.table.runtime.typeutils.StringDataSerializer$StringDataSerializerSnapshot"
BYTES = f"{_ARRAY}BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot"
STRING_ARRAY = f"{_ARRAY}StringArraySerializer$StringArraySerializerSnapshot"
ENUM = f"{_BASE}EnumSerializer$EnumSerializerSnapshot"
LIST = f"{_BASE}ListSerializerSnapshot"
MAP = f"{_BASE}MapSerializerSnapshot"
TTL = "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
TUPLE = f"{_RUNTIME}TupleSerializerSnapshot"
ROW = f"{_RUNTIME}RowSerializer$RowSerializerSnapshot"
POJO = f"{_RUNTIME}PojoSerializerSnapshot"
VOID_NAMESPACE = "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot"
TIME_WINDOW = (
    "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot"
)
GLOBAL_WINDOW = (
    "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot"
)
TIMER = "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot"

#: ``LinkedOptionalMapSerializer.HEADER``.

#: ``PojoSerializer`` flags.
_POJO_IS_NULL, _POJO_NO_SUBCLASS = 1, 2
#: ``RowKind`` short strings by byte value.
_ROW_KINDS = ("+I", "-U", "+U", "-D")
#: ``ListDelimitedSerializer``'s separator between list elements.
LIST_DELIMITER = 0x2C

#: Arrow types of the fixed-size primitives, and the primitive arrays' element type names by format.
_ARROW_FIXED = {
    "Long": pa.int64(),
    "Integer": pa.int32(),
    "Short": pa.int16(),
    "Byte": pa.int8(),
    "Double": pa.float64(),
    "Float": pa.float32(),
    "Boolean": pa.bool_(),
    "Character": pa.string(),
}
_ARRAY_ELEMENTS = {
    "q": "Long",
    "i": "Integer",
    "h": "Short",
    "d": "Double",
    "f": "Float",
    "?": "Boolean",
    "H": "Character",
}

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_USHORT = struct.Struct(">H")


class NotDecodable(Exception):
    """A value kg cannot decode (an opaque serializer, or bytes that do not fit the serializer)."""


class NotEncodable(UnsupportedFormatError):
    """A type kg cannot encode (an opaque serializer, Kryo, or a composite with such a part): exit 4.

    Attributes:
        type_name: The type (``Kryo``, ``Pojo a.B``, ``RowData<INTEGER, RAW(...)>``).
        reason: Why, in one line.
    """

    default_code = "TYPE_NOT_ENCODABLE"

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason
        super().__init__(f"{type_name}: kg cannot encode it ({reason})")


class ValueNotEncodable(InvalidArgumentError):
    """A value that does not fit its type (out of range, null where Flink writes no null, a wrong shape).

    Attributes:
        type_name: The outermost type being written.
        path: Where inside it (``.field``, ``[3]``, ``.value``), empty at the top.
        problem: What is wrong with the value.
    """

    default_code = "VALUE_DOES_NOT_FIT"

    def __init__(self, type_name: str, problem: str, path: str = "") -> None:
        self.type_name = type_name
        self.problem = problem
        self.path = path
        super().__init__(f"{type_name}{path}: {problem}")

    def inside(self, type_name: str, step: str) -> ValueNotEncodable:
        """Return the same problem seen from the enclosing type, ``step`` down into it."""
        return ValueNotEncodable(type_name, self.problem, step + self.path)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unfit(type_name: str, value: Any, what: str | None = None) -> ValueNotEncodable:
    return ValueNotEncodable(type_name, f"{_shown(value)} is not {what or 'a ' + type_name}")


def _int_value(type_name: str, value: Any, bits: int) -> int:
    """Return ``value`` as an int of ``bits`` bits (signed), refusing booleans, floats and overflow."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise _unfit(type_name, value, f"an integer ({type_name})") from None
    if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
        raise ValueNotEncodable(type_name, f"{number} is out of the range of {type_name} ({bits} bits)")
    return int(number)


def _float_value(type_name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _unfit(type_name, value, f"a number ({type_name})")
    return float(value)


#: Java's ``floatToIntBits`` / ``doubleToLongBits`` NaN: ``DataOutput.writeFloat``/``writeDouble`` write it.
_NAN_BITS = {4: b"\x7f\xc0\x00\x00", 8: b"\x7f\xf8\x00\x00\x00\x00\x00\x00"}


def _pack_float(type_name: str, fmt: str, value: Any) -> bytes:
    number = _float_value(type_name, value)
    size = struct.calcsize(fmt)
    if math.isnan(number):
        return _NAN_BITS[size]
    try:
        return struct.pack(fmt, number)
    except (OverflowError, struct.error):
        raise ValueNotEncodable(type_name, f"{value} is out of the range of {type_name}") from None


def _char_unit(type_name: str, value: Any) -> int:
    if not isinstance(value, str) or len(value) != 1 or ord(value) > 0xFFFF:
        raise _unfit(type_name, value, "one UTF-16 code unit (a str of length 1 below U+10000)")
    return ord(value)


def _bytes_value(type_name: str, value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise _unfit(type_name, value, "bytes")


def _sequence(type_name: str, value: Any) -> Sequence[Any]:
    if isinstance(value, (list, tuple)):
        return value
    raise _unfit(type_name, value, "a list")


def _not_null(type_name: str, value: Any) -> None:
    if value is None:
        raise ValueNotEncodable(type_name, f"None: Flink's serializer of {type_name} writes no null")


def _short(class_name: str) -> str:
    return class_name.rsplit(".", 1)[-1].split("$", 1)[0]


class Codec:
    """Decode one serializer's bytes; ``type_name`` names the type (``Long``, ``Pojo a.B``)."""

    type_name = "?"
    #: Why the bytes cannot be decoded (None: they can).
    reason: str | None = None

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        """Decode the value at ``pos``; return it and where it ends.

        Raises:
            NotDecodable: An opaque type, or bytes that end inside the value.
        """
        raise NotImplementedError

    def arrow_type(self) -> pa.DataType:
        """Return the Arrow type of the decoded values (``binary`` for opaque ones: their bytes)."""
        return pa.binary()

    def to_arrow(self, value: Any) -> Any:
        """Return a decoded value as the Python value of ``arrow_type`` (``pa.array`` takes it)."""
        return value

    def decode(self, data: bytes) -> Any:
        """Decode a whole serialized value (every byte must belong to it)."""
        try:
            value, end = self.read(data, 0)
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, InvalidInputError) as exc:
            raise NotDecodable(f"{self.type_name}: the bytes do not decode ({exc})") from None
        if end != len(data):
            raise NotDecodable(f"{self.type_name}: {len(data) - end} byte(s) left after the value")
        return value

    #: Whether values are ``TtlValue`` (the state TTL wrapper).
    ttl = False

    @property
    def write_reason(self) -> str | None:
        """Return why kg cannot encode this type (None: it can); known before any value is written.

        The decoder's ``reason`` (an opaque type, or a composite with an opaque part), without its note
        that values stay bytes.
        """
        if self.reason is None:
            return None
        return self.reason.replace("; kept as bytes", "").replace(": kept as bytes", "")

    @property
    def encodable(self) -> bool:
        """Return whether kg encodes this type (``write_reason`` is None)."""
        return self.write_reason is None

    def write(self, value: Any) -> bytes:
        """Return ``value`` (as ``decode`` returns it) as the serializer writes it.

        Raises:
            NotEncodable: A type kg cannot encode (``write_reason``), before anything is written.
            ValueNotEncodable: A value that does not fit the type.
        """
        reason = self.write_reason
        if reason is not None:
            raise NotEncodable(self.type_name, reason)
        out = bytearray()
        self.write_into(out, value)
        return bytes(out)

    def write_into(self, out: bytearray, value: Any) -> None:
        """Append ``value`` as the serializer writes it (``write``; composites call their parts' here)."""
        raise NotEncodable(self.type_name, self.write_reason or "no encoder for this serializer")

    def from_arrow(self, value: Any) -> Any:
        """Return a value of ``arrow_type`` as ``decode`` returns it: the inverse of ``to_arrow``.

        Takes what ``to_arrow`` returns and what ``arrow_rows`` reads back from Arrow.
        """
        return value

    def encode_arrow(self, value: Any) -> bytes:
        """Return the serializer's bytes of a value of ``arrow_type`` (``write(from_arrow(value))``)."""
        reason = self.write_reason
        if reason is not None:
            raise NotEncodable(self.type_name, reason)
        return self.write(self.from_arrow(value))


class Opaque(Codec):
    """A serializer kg does not decode: values stay bytes."""

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        """Refuse: an opaque value has no decoder."""
        raise NotDecodable(self.reason or self.type_name)


class _Fixed(Codec):
    def __init__(self, type_name: str, fmt: str) -> None:
        self.type_name = type_name
        self._struct = struct.Struct(fmt)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        value = self._struct.unpack_from(data, pos)[0]
        if self.type_name == "Character":
            value = chr(value)
        return value, pos + self._struct.size

    def arrow_type(self) -> pa.DataType:
        return _ARROW_FIXED[self.type_name]

    def write_into(self, out: bytearray, value: Any) -> None:
        if type(value) is int and self._struct.format[-1] in "qihb":
            try:
                out += self._struct.pack(value)
                return
            except struct.error:
                pass  # out of range: refused below, with the type named
        _not_null(self.type_name, value)
        out += _pack_fixed(self.type_name, self._struct.format, value)


def _pack_fixed(type_name: str, fmt: str, value: Any) -> bytes:
    """Pack one primitive as ``DataOutput`` writes it (``fmt``: a big-endian struct format)."""
    code = fmt[-1]
    if code in "df":
        return _pack_float(type_name, fmt, value)
    if code == "?":
        if not isinstance(value, bool):
            raise _unfit(type_name, value, "a bool")
        return b"\x01" if value else b"\x00"
    if code == "H":
        return struct.pack(fmt, _char_unit(type_name, value))
    return struct.pack(fmt, _int_value(type_name, value, 8 * struct.calcsize(fmt)))


class _String(Codec):
    type_name = "String"

    def arrow_type(self) -> pa.DataType:
        return pa.string()

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return read_string(data, pos)

    def write_into(self, out: bytearray, value: Any) -> None:
        # StringValue.writeString: a null String is the single byte 0.
        if value is not None and not isinstance(value, str):
            raise _unfit(self.type_name, value)
        out += write_string(value)


class _StringData(Codec):
    type_name = "StringData"

    def arrow_type(self) -> pa.DataType:
        return pa.string()

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _INT.unpack_from(data, pos)[0]
        end = pos + 4 + n
        if n < 0 or end > len(data):
            raise NotDecodable("StringData: length runs past the value")
        return bytes(data[pos + 4 : end]).decode("utf-8"), end

    def write_into(self, out: bytearray, value: Any) -> None:
        _not_null(self.type_name, value)
        raw = _utf8(self.type_name, value)
        out += _INT.pack(len(raw)) + raw


def _utf8(type_name: str, value: Any) -> bytes:
    if not isinstance(value, str):
        raise _unfit(type_name, value, "a str")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueNotEncodable(type_name, f"{_shown(value)} holds a lone surrogate (not UTF-8)") from None


class _Bytes(Codec):
    type_name = "byte[]"

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _INT.unpack_from(data, pos)[0]
        end = pos + 4 + n
        if n < 0 or end > len(data):
            raise NotDecodable("byte[]: length runs past the value")
        return bytes(data[pos + 4 : end]), end

    def write_into(self, out: bytearray, value: Any) -> None:
        _not_null(self.type_name, value)
        raw = _bytes_value(self.type_name, value)
        out += _INT.pack(len(raw)) + raw


class _PrimitiveArray(Codec):
    def __init__(self, type_name: str, fmt: str) -> None:
        self.type_name = type_name
        self._fmt = fmt

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _INT.unpack_from(data, pos)[0]
        if n < 0:
            raise NotDecodable(f"{self.type_name}: negative length")
        unpacked = struct.unpack_from(f">{n}{self._fmt}", data, pos + 4)
        end = pos + 4 + struct.calcsize(f">{n}{self._fmt}")
        values = [chr(c) for c in unpacked] if self._fmt == "H" else list(unpacked)
        return values, end

    def arrow_type(self) -> pa.DataType:
        return pa.list_(_ARROW_FIXED[_ARRAY_ELEMENTS[self._fmt]])

    def write_into(self, out: bytearray, value: Any) -> None:
        _not_null(self.type_name, value)
        items = _sequence(self.type_name, value)
        out += _INT.pack(len(items))
        element = _ARRAY_ELEMENTS[self._fmt]
        for i, item in enumerate(items):
            try:
                _not_null(element, item)
                out += _pack_fixed(element, ">" + self._fmt, item)
            except ValueNotEncodable as exc:
                raise exc.inside(self.type_name, f"[{i}]") from None


class _StringArray(Codec):
    type_name = "String[]"

    def arrow_type(self) -> pa.DataType:
        return pa.list_(pa.string())

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _INT.unpack_from(data, pos)[0]
        pos += 4
        out = []
        for _ in range(n):
            value, pos = read_string(data, pos)
            out.append(value)
        return out, pos

    def write_into(self, out: bytearray, value: Any) -> None:
        # StringArraySerializer: int length, then each element by StringValue.writeString (nulls too).
        _not_null(self.type_name, value)
        items = _sequence(self.type_name, value)
        out += _INT.pack(len(items))
        for i, item in enumerate(items):
            if item is not None and not isinstance(item, str):
                raise _unfit("String", item).inside(self.type_name, f"[{i}]")
            out += write_string(item)


class _Enum(Codec):
    def __init__(self, class_name: str, constants: Sequence[str]) -> None:
        self.type_name = f"Enum {class_name}"
        self.constants = tuple(constants)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        index = _INT.unpack_from(data, pos)[0]
        if not 0 <= index < len(self.constants):
            raise NotDecodable(f"{self.type_name}: constant index {index} out of range")
        return self.constants[index], pos + 4

    def arrow_type(self) -> pa.DataType:
        return pa.string()

    def write_into(self, out: bytearray, value: Any) -> None:
        # EnumSerializer: the constant's index in the serializer's (snapshot's) constants.
        _not_null(self.type_name, value)
        try:
            index = self.constants.index(value)
        except ValueError:
            raise ValueNotEncodable(
                self.type_name, f"{_shown(value)} is not one of its constants ({', '.join(self.constants)})"
            ) from None
        out += _INT.pack(index)


class _List(Codec):
    def __init__(self, element: Codec) -> None:
        self.element = element
        self.type_name = f"List<{element.type_name}>"
        self.reason = element.reason

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _INT.unpack_from(data, pos)[0]
        pos += 4
        out = []
        for _ in range(n):
            value, pos = self.element.read(data, pos)
            out.append(value)
        return out, pos

    def arrow_type(self) -> pa.DataType:
        return pa.list_(self.element.arrow_type())

    def to_arrow(self, value: Any) -> Any:
        return None if value is None else [self.element.to_arrow(v) for v in value]

    def write_into(self, out: bytearray, value: Any) -> None:
        # ListSerializer: int size, then each element.
        _not_null(self.type_name, value)
        items = _sequence(self.type_name, value)
        out += _INT.pack(len(items))
        for i, item in enumerate(items):
            try:
                self.element.write_into(out, item)
            except ValueNotEncodable as exc:
                raise exc.inside(self.type_name, f"[{i}]") from None

    def from_arrow(self, value: Any) -> Any:
        return None if value is None else [self.element.from_arrow(v) for v in value]


class _Map(Codec):
    def __init__(self, key: Codec, value: Codec) -> None:
        self.key = key
        self.value = value
        self.type_name = f"Map<{key.type_name}, {value.type_name}>"
        self.reason = key.reason or value.reason

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _INT.unpack_from(data, pos)[0]
        pos += 4
        out = []
        for _ in range(n):
            key, pos = self.key.read(data, pos)
            null = data[pos] != 0
            pos += 1
            value = None
            if not null:
                value, pos = self.value.read(data, pos)
            out.append((key, value))
        return out, pos

    def arrow_type(self) -> pa.DataType:
        return pa.map_(self.key.arrow_type(), self.value.arrow_type())

    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        return [(self.key.to_arrow(k), None if v is None else self.value.to_arrow(v)) for k, v in value]

    def write_into(self, out: bytearray, value: Any) -> None:
        # MapSerializer: int size, then per entry the key, boolean isNull, the value when present.
        _not_null(self.type_name, value)
        pairs = _pairs(self.type_name, value)
        out += _INT.pack(len(pairs))
        for key, item in pairs:
            try:
                self.key.write_into(out, key)
            except ValueNotEncodable as exc:
                raise exc.inside(self.type_name, f" key {_shown(key)}") from None
            if item is None:
                out.append(1)
                continue
            out.append(0)
            try:
                self.value.write_into(out, item)
            except ValueNotEncodable as exc:
                raise exc.inside(self.type_name, f"[{_shown(key)}]") from None

    def from_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        return [
            (self.key.from_arrow(k), None if v is None else self.value.from_arrow(v))
            for k, v in _pairs(self.type_name, value)
        ]


def _pairs(type_name: str, value: Any) -> list[tuple[Any, Any]]:
    """Return a map's entries: from a list of (key, value) pairs (as ``decode`` gives) or a dict."""
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return [(k, v) for k, v in value]
    raise _unfit(type_name, value, "a map (a list of (key, value) pairs, or a dict)")


@dataclass(frozen=True, slots=True)
class TtlValue:
    """A value under state TTL: the user value and its last-access timestamp (ms since the epoch)."""

    value: Any
    last_access: int


class _Ttl(Codec):
    def __init__(self, value: Codec) -> None:
        self.value = value
        self.type_name = f"Ttl<{value.type_name}>"
        self.reason = value.reason

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        stamp = _LONG.unpack_from(data, pos)[0]
        value, pos = self.value.read(data, pos + 8)
        return TtlValue(value, stamp), pos

    def arrow_type(self) -> pa.DataType:
        return pa.struct([("value", self.value.arrow_type()), ("ttl_last_access", pa.int64())])

    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        inner = None if value.value is None else self.value.to_arrow(value.value)
        return {"value": inner, "ttl_last_access": value.last_access}

    ttl = True

    def write_into(self, out: bytearray, value: Any) -> None:
        # TtlSerializer (a CompositeSerializer): long last-access timestamp, then the user value.
        if not isinstance(value, TtlValue):
            raise _unfit(self.type_name, value, "a TtlValue(value, last_access)")
        try:
            stamp = _int_value("Long", value.last_access, 64)
        except ValueNotEncodable as exc:
            raise exc.inside(self.type_name, ".last_access") from None
        out += _LONG.pack(stamp)
        try:
            self.value.write_into(out, value.value)
        except ValueNotEncodable as exc:
            raise exc.inside(self.type_name, ".value") from None

    def from_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, TtlValue):
            return value
        if not isinstance(value, Mapping) or set(value) != {"value", "ttl_last_access"}:
            raise _unfit(self.type_name, value, '{"value": ..., "ttl_last_access": ms}')
        inner = value["value"]
        return TtlValue(None if inner is None else self.value.from_arrow(inner), value["ttl_last_access"])


class _Fields(Codec):
    """Tuple (``f0`` …), POJO (named fields, each behind a null flag) and Row (null mask) values."""

    def __init__(self, type_name: str, names: Sequence[str], fields: Sequence[Codec], layout: str) -> None:
        self.type_name = type_name
        self.names = tuple(names)
        self.fields = tuple(fields)
        self.layout = layout  # "tuple", "pojo", "row" or "row-legacy"
        self.reason = next((f.reason for f in fields if f.reason), None)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        if self.layout == "tuple":
            out = {}
            for name, field in zip(self.names, self.fields, strict=True):
                out[name], pos = field.read(data, pos)
            return out, pos
        if self.layout == "pojo":
            return self._pojo(data, pos)
        return self._row(data, pos)

    def arrow_type(self) -> pa.DataType:
        fields = [(n, f.arrow_type()) for n, f in zip(self.names, self.fields, strict=True)]
        if self.layout.startswith("row"):
            fields.insert(0, ("kind", pa.string()))
        return pa.struct(fields)

    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if self.layout.startswith("row"):
            items = dict(zip(self.names, value["fields"], strict=True))
            out: dict[str, Any] = {"kind": value["kind"]}
        else:
            items, out = value, {}
        for name, field in zip(self.names, self.fields, strict=True):
            item = items[name]
            out[name] = None if item is None else field.to_arrow(item)
        return out

    def from_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise _unfit(self.type_name, value, "a struct (a dict of its fields)")
        row = self.layout.startswith("row")
        self._require_names(value, ("kind", *self.names) if row else self.names)
        items = [
            None if value[n] is None else f.from_arrow(value[n])
            for n, f in zip(self.names, self.fields, strict=True)
        ]
        if row:
            return {"kind": value["kind"], "fields": items}
        return dict(zip(self.names, items, strict=True))

    def _require_names(self, value: Mapping[str, Any], names: Sequence[str]) -> None:
        missing = [n for n in names if n not in value]
        extra = [n for n in value if n not in names]
        if missing or extra:
            problem = f"no field {missing[0]!r}" if missing else f"has no field {extra[0]!r}"
            raise ValueNotEncodable(
                self.type_name, f"{_shown(value)}: {problem} (fields: {', '.join(names)})"
            )

    def write_into(self, out: bytearray, value: Any) -> None:
        if self.layout == "pojo":
            self._write_pojo(out, value)
            return
        _not_null(self.type_name, value)
        if not isinstance(value, Mapping):
            raise _unfit(self.type_name, value, "a dict of its fields")
        if self.layout == "tuple":
            # TupleSerializer: every field, by its serializer (which refuses nulls it cannot write).
            self._require_names(value, self.names)
            for name, field in zip(self.names, self.fields, strict=True):
                self._field(out, name, field, value[name])
            return
        self._write_row(out, value)

    def _field(self, out: bytearray, name: str, field: Codec, item: Any) -> None:
        try:
            field.write_into(out, item)
        except ValueNotEncodable as exc:
            raise exc.inside(self.type_name, f".{name}") from None

    def _write_pojo(self, out: bytearray, value: Any) -> None:
        # PojoSerializer: flags (IS_NULL alone for null), then per field boolean isNull and the field.
        if value is None:
            out.append(_POJO_IS_NULL)
            return
        if not isinstance(value, Mapping):
            raise _unfit(self.type_name, value, "a dict of its fields (or None)")
        self._require_names(value, self.names)
        out.append(_POJO_NO_SUBCLASS)
        for name, field in zip(self.names, self.fields, strict=True):
            item = value[name]
            out.append(1 if item is None else 0)
            if item is not None:
                self._field(out, name, field, item)

    def _write_row(self, out: bytearray, value: Mapping[str, Any]) -> None:
        # RowSerializer (position based): MaskUtils.writeMask of [row kind bits,] null bits, MSB first;
        # then the non-null fields.
        if set(value) != {"kind", "fields"}:
            raise _unfit(self.type_name, value, '{"kind": "+I", "fields": [...]}')
        kind, items = value["kind"], value["fields"]
        items = _sequence(self.type_name, items)
        if len(items) != len(self.fields):
            raise ValueNotEncodable(self.type_name, f"{len(items)} field(s), the row has {len(self.fields)}")
        legacy = self.layout == "row-legacy"
        if kind not in ROW_KINDS or (legacy and kind != "+I"):
            allowed = "+I (this row serializer writes no row kind)" if legacy else ", ".join(ROW_KINDS)
            raise ValueNotEncodable(self.type_name, f"row kind {_shown(kind)} is not one of {allowed}")
        mask = [] if legacy else [bool(ROW_KINDS.index(kind) & 1), bool(ROW_KINDS.index(kind) & 2)]
        mask += [item is None for item in items]
        for start in range(0, len(mask), 8):
            bits = mask[start : start + 8]
            byte = 0
            for bit in bits:
                byte = (byte << 1) | int(bit)
            out.append(byte << (8 - len(bits)))
        for name, field, item in zip(self.names, self.fields, items, strict=True):
            if item is not None:
                self._field(out, name, field, item)

    def _pojo(self, data: bytes, pos: int) -> tuple[Any, int]:
        flags = data[pos]
        pos += 1
        if flags & _POJO_IS_NULL:
            return None, pos
        if not flags & _POJO_NO_SUBCLASS:
            raise NotDecodable(
                f"{self.type_name}: a subclass instance (written by the subclass's serializer)"
            )
        out: dict[str, Any] = {}
        for name, field in zip(self.names, self.fields, strict=True):
            null = data[pos] != 0
            pos += 1
            out[name] = None
            if not null:
                out[name], pos = field.read(data, pos)
        return out, pos

    def _row(self, data: bytes, pos: int) -> tuple[Any, int]:
        offset = 0 if self.layout == "row-legacy" else 2
        bits = offset + len(self.fields)
        nbytes = (bits + 7) // 8
        mask = [bool(data[pos + i // 8] & (0x80 >> (i % 8))) for i in range(bits)]
        if pos + nbytes > len(data):
            raise NotDecodable(f"{self.type_name}: null mask runs past the value")
        pos += nbytes
        kind = "+I" if not offset else _ROW_KINDS[int(mask[0]) | (int(mask[1]) << 1)]
        values: list[Any] = []
        for i, field in enumerate(self.fields):
            if mask[offset + i]:
                values.append(None)
            else:
                value, pos = field.read(data, pos)
                values.append(value)
        return {"kind": kind, "fields": values}, pos


#: Arrow types of ``BinaryRowData`` field kinds (``binary_row.FIELD_KINDS``).
_ROW_FIELD_ARROW = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "raw": pa.binary(),
}


class _RowData(Codec):
    """A SQL job's ``BinaryRowData`` (``RowDataSerializer``): int length, then the row (``binary_row``).

    As a key it decodes to the list of its fields (``[42, "abc"]``); as a value to ``{"kind", "fields"}``
    like a ``Row``.
    """

    def __init__(self, fields: RowFields, as_key: bool) -> None:
        self.fields = fields
        self.as_key = as_key
        self.type_name = fields.type_name
        if fields.undecodable:
            self.reason = (
                f"{fields.type_name}: a {fields.undecodable} field; kg does not decode it, kept as bytes"
            )

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        if self.reason:
            raise NotDecodable(self.reason)
        n = _INT.unpack_from(data, pos)[0]
        end = pos + 4 + n
        if n < 0 or end > len(data):
            raise NotDecodable(f"{self.type_name}: length runs past the value")
        try:
            kind, values = decode_row(self.fields, data[pos + 4 : end])
        except RowDecodeError as exc:
            raise NotDecodable(f"{self.type_name}: {exc}") from None
        return (values if self.as_key else {"kind": kind, "fields": values}), end

    def arrow_type(self) -> pa.DataType:
        if self.reason:
            return pa.binary()
        fields = _row_arrow_fields(self.fields)
        return pa.struct(fields if self.as_key else [("kind", pa.string()), *fields])

    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        out = _row_arrow_value(self.fields, value if self.as_key else value["fields"])
        return out if self.as_key else {"kind": value["kind"], **out}

    def write_into(self, out: bytearray, value: Any) -> None:
        # RowDataSerializer: int length, then the BinaryRowData's bytes (binary_row.encode_row).
        _not_null(self.type_name, value)
        if self.as_key:
            kind, items = "+I", value
        else:
            if not isinstance(value, Mapping) or set(value) != {"kind", "fields"}:
                raise _unfit(self.type_name, value, '{"kind": "+I", "fields": [...]}')
            kind, items = value["kind"], value["fields"]
        if kind not in ROW_KINDS:
            raise ValueNotEncodable(
                self.type_name, f"row kind {_shown(kind)} is not one of {', '.join(ROW_KINDS)}"
            )
        items = _sequence(self.type_name, items)
        _require_row_values(self.type_name, self.fields, items, "")
        # A key as the key selector's generated projection writes it; a value as RowDataSerializer writes
        # a GenericRowData (toBinaryRow: a null long DECIMAL or fine TIMESTAMP keeps no space).
        row = encode_row(self.fields, items, ROW_KINDS.index(kind), reserve_nulls=self.as_key)
        out += _INT.pack(len(row)) + row

    def from_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise _unfit(self.type_name, value, "a struct (a dict of f0, f1, ...)")
        names = [f"f{i}" for i in range(len(self.fields.kinds))]
        expected = names if self.as_key else ["kind", *names]
        if set(value) != set(expected):
            raise _unfit(self.type_name, value, f"a struct of {', '.join(expected)}")
        items = _row_from_arrow(self.type_name, self.fields, value)
        return items if self.as_key else {"kind": value["kind"], "fields": items}


#: Python types of ``BinaryRowData`` field kinds, and the int kinds' widths.
_ROW_INT_BITS = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}


def _require_row_values(type_name: str, fields: RowFields, items: Sequence[Any], path: str) -> None:
    """Refuse a row whose values do not fit its fields (``encode_row`` trusts them)."""
    if len(items) != len(fields.kinds):
        raise ValueNotEncodable(type_name, f"{len(items)} field(s), the row has {len(fields.kinds)}", path)
    for i, (kind, item) in enumerate(zip(fields.kinds, items, strict=True)):
        where = f"{path}.f{i}"
        try:
            _require_row_value(kind, fields.param(i), item, type_name, where)
        except ValueNotEncodable as exc:
            raise ValueNotEncodable(type_name, exc.problem, where) from None


def _require_row_value(kind: str, param: Any, item: Any, type_name: str, where: str) -> None:
    if item is None:
        return
    sql = kind.upper()
    if kind in _ROW_INT_BITS:
        _int_value(sql, item, _ROW_INT_BITS[kind])
    elif kind == "boolean":
        if not isinstance(item, bool):
            raise _unfit(sql, item, "a bool")
    elif kind in ("float", "double"):
        _pack_float(sql, "<f" if kind == "float" else "<d", item)
    elif kind == "string":
        _utf8(sql, item)
    elif kind in ("bytes", "raw"):
        _bytes_value(sql, item)
    elif kind == "decimal":
        precision, scale = param
        if isinstance(item, bool) or not isinstance(item, (Decimal, int)) or not Decimal(item).is_finite():
            raise _unfit(sql, item, f"a Decimal (DECIMAL({precision}, {scale}))")
        unscaled = Decimal(item).scaleb(scale)
        if unscaled != unscaled.to_integral_value():
            raise ValueNotEncodable(
                sql, f"{item} has more than {scale} decimal places (DECIMAL({precision}, {scale}))"
            )
        if len(str(abs(int(unscaled)))) > precision:
            raise ValueNotEncodable(sql, f"{item} has more digits than DECIMAL({precision}, {scale}) holds")
    elif kind == "timestamp":
        if not isinstance(item, SqlTimestamp):
            raise _unfit(sql, item, f"a SqlTimestamp (TIMESTAMP({param}))")
        _int_value(sql, item.millisecond, 64)
        if not 0 <= item.nano_of_millisecond < 1_000_000:
            raise ValueNotEncodable(
                sql, f"nano_of_millisecond {item.nano_of_millisecond} is not below 1000000"
            )
    elif kind == "row":
        _require_row_values(type_name, param, _sequence("ROW", item), where)
    else:
        raise ValueNotEncodable(sql, "a field kind kg does not encode")


def _row_from_arrow(type_name: str, fields: RowFields, value: Mapping[str, Any]) -> list[Any]:
    """Return a row's field list from its Arrow struct (``f0`` ...): the inverse of ``_row_arrow_value``."""
    out: list[Any] = []
    for i, kind in enumerate(fields.kinds):
        item = value[f"f{i}"]
        if item is not None and kind == "timestamp":
            item = _sql_timestamp(type_name, item, fields.param(i))
        elif item is not None and kind == "row":
            param = fields.param(i)
            if not isinstance(item, Mapping):
                raise _unfit(type_name, item, "a struct (a dict of f0, f1, ...)")
            item = _row_from_arrow(type_name, param, item)
        out.append(item)
    return out


_NAIVE_EPOCH = dt.datetime(1970, 1, 1)


def _sql_timestamp(type_name: str, value: Any, precision: int) -> SqlTimestamp:
    """Return a TIMESTAMP's Arrow value (an int in ``arrow_unit(precision)``, or a datetime) as kg's value."""
    if isinstance(value, SqlTimestamp):
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        delta = value - _NAIVE_EPOCH
        micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
        millisecond, rest = divmod(micros, 1000)
        return SqlTimestamp(millisecond, rest * 1000)
    number = _int_value(f"TIMESTAMP({precision})", value, 64)
    unit = arrow_unit(precision)
    if unit == "ms":
        return SqlTimestamp(number)
    per_ms = 1000 if unit == "us" else 1_000_000
    millisecond, rest = divmod(number, per_ms)
    return SqlTimestamp(millisecond, rest * (1_000_000 // per_ms))


def _row_arrow_fields(fields: RowFields) -> list[tuple[str, pa.DataType]]:
    """Return the struct fields of a row: ``f0``, ``f1``, … typed by kind (DECIMAL, TIMESTAMP, ROW too)."""
    out = []
    for i, kind in enumerate(fields.kinds):
        param = fields.param(i)
        if kind == "decimal":
            arrow: pa.DataType = pa.decimal128(*param)
        elif kind == "timestamp":
            arrow = pa.timestamp(arrow_unit(param))
        elif kind == "row":
            arrow = pa.struct(_row_arrow_fields(param))
        else:
            arrow = _ROW_FIELD_ARROW[kind]
        out.append((f"f{i}", arrow))
    return out


def _row_arrow_value(fields: RowFields, items: list[Any]) -> dict[str, Any]:
    out = {}
    for i, (kind, item) in enumerate(zip(fields.kinds, items, strict=True)):
        if item is not None and kind == "timestamp":
            item = item.arrow_value(fields.param(i))
        elif item is not None and kind == "row":
            item = _row_arrow_value(fields.param(i), item)
        out[f"f{i}"] = item
    return out


class _Avro(Codec):
    """An ``AvroSerializer``'s values, read with the writer schema (``avro``)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.type_name = f"Avro {node.name}"

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return read_value(self.node, data, pos)

    def arrow_type(self) -> pa.DataType:
        return self.node.arrow

    def to_arrow(self, value: Any) -> Any:
        return None if value is None else self.node.to_arrow(value)

    def write_into(self, out: bytearray, value: Any) -> None:
        # AvroSerializer: the datum writer over DataOutputEncoder, no framing of its own.
        try:
            out += write_value(self.node, value)
        except AvroEncodeError as exc:
            raise ValueNotEncodable(self.type_name, str(exc)) from None

    def from_arrow(self, value: Any) -> Any:
        try:
            return None if value is None else self.node.from_arrow(value)
        except AvroEncodeError as exc:
            raise ValueNotEncodable(self.type_name, str(exc)) from None


def _avro(snapshot: SerializerSnapshot) -> Codec:
    try:
        return _Avro(avro_reader(snapshot.raw, snapshot.version))
    except AvroSchemaError as exc:
        return Opaque("Avro", f"Avro: {exc}; kept as bytes")


class _VoidNamespace(Codec):
    type_name = "VoidNamespace"

    def arrow_type(self) -> pa.DataType:
        return pa.null()

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return None, pos + 1

    def write_into(self, out: bytearray, value: Any) -> None:
        # VoidNamespaceSerializer and GlobalWindow's serializer: one 0 byte.
        if value is not None:
            raise _unfit(self.type_name, value, "None (the one VoidNamespace)")
        out.append(0)


class _TimeWindow(Codec):
    type_name = "TimeWindow"

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        start, end = struct.unpack_from(">qq", data, pos)
        return {"start": start, "end": end}, pos + 16

    def arrow_type(self) -> pa.DataType:
        return pa.struct([("start", pa.int64()), ("end", pa.int64())])

    def write_into(self, out: bytearray, value: Any) -> None:
        # TimeWindow.Serializer: long start, long end.
        if not isinstance(value, Mapping) or set(value) != {"start", "end"}:
            raise _unfit(self.type_name, value, '{"start": ms, "end": ms}')
        start, end = (_int_value("Long", value[k], 64) for k in ("start", "end"))
        out += _LONG.pack(start) + _LONG.pack(end)


def fixed_width(codec: Codec) -> tuple[str, pa.DataType] | None:
    """Return (NumPy big-endian dtype, Arrow type) of a fixed-size primitive's values, else None.

    For the column-wise paths: such values are their bytes, nothing else (Character excluded: a UTF-16
    unit, not a number).
    """
    if isinstance(codec, _Fixed) and codec.type_name != "Character":
        fmt = codec._struct.format
        dtype = {">q": ">i8", ">i": ">i4", ">h": ">i2", ">b": "i1", ">d": ">f8", ">f": ">f4", ">?": "?"}[fmt]
        return dtype, codec.arrow_type()
    return None


def prefixed_kind(codec: Codec) -> str | None:
    """Return ``bytes`` (``byte[]``: int length, bytes) or ``string`` (``StringValue``), else None.

    For the column-wise paths, which cut such values where their length prefix allows it.
    """
    if isinstance(codec, _Bytes):
        return "bytes"
    if isinstance(codec, _String):
        return "string"
    return None


# -- building codecs from snapshots ---------------------------------------------------------------------


def _body(snapshot: SerializerSnapshot) -> tuple[bytes, int]:
    """Return the snapshot's raw bytes and where its body starts (after class name and version)."""
    raw = snapshot.raw
    n = _USHORT.unpack_from(raw, 0)[0]
    return raw, 2 + n + 4


def _utf(raw: bytes, pos: int) -> tuple[str, int]:
    n = _USHORT.unpack_from(raw, pos)[0]
    return decode_modified_utf8(raw[pos + 2 : pos + 2 + n]), pos + 2 + n


def _enum(snapshot: SerializerSnapshot) -> Codec:
    # EnumSerializerSnapshot.writeSnapshot: enum class name, int count, each constant's name.
    raw, pos = _body(snapshot)
    class_name, pos = _utf(raw, pos)
    count = _INT.unpack_from(raw, pos)[0]
    pos += 4
    constants = []
    for _ in range(count):
        name, pos = _utf(raw, pos)
        constants.append(name)
    if pos != len(raw):
        raise ValueError("enum snapshot has trailing bytes")
    return _Enum(class_name, constants)


def _optional_map(raw: bytes, pos: int) -> tuple[list[tuple[str, bytes | None, bytes | None]], int]:
    """Read a ``LinkedOptionalMapSerializer`` map: (name, framed key bytes, framed value bytes) entries."""
    if _LONG.unpack_from(raw, pos)[0] != OPTIONAL_MAP_HEADER:
        raise ValueError("not a LinkedOptionalMap")
    count = _INT.unpack_from(raw, pos + 8)[0]
    pos += 12
    entries = []
    for _ in range(count):
        name, pos = _utf(raw, pos)
        frames: list[bytes | None] = []
        for _part in range(2):
            present = raw[pos] != 0
            pos += 1
            if present:
                size = _INT.unpack_from(raw, pos)[0]
                frames.append(raw[pos + 4 : pos + 4 + size])
                pos += 4 + size
            else:
                frames.append(None)
        entries.append((name, frames[0], frames[1]))
    return entries, pos


def _pojo(snapshot: SerializerSnapshot) -> Codec:
    # PojoSerializerSnapshotData.writeSnapshotData: class name, fields (name -> field, versioned snapshot),
    # registered subclasses, non-registered subclasses.
    raw, pos = _body(snapshot)
    class_name, pos = _utf(raw, pos)
    fields, pos = _optional_map(raw, pos)
    names, codecs = [], []
    for name, _field, frame in fields:
        if frame is None:
            return Opaque(f"Pojo {class_name}", f"field {name!r} has no serializer snapshot")
        names.append(name)
        codecs.append(type_codec(parse_serializer_snapshot(frame, f"POJO field {name}")))
    return _Fields(f"Pojo {class_name}", names, codecs, "pojo")


def _outer_class_name(snapshot: SerializerSnapshot) -> str | None:
    """Return the UTF string right after a composite snapshot's magic and outer version, if one is there."""
    raw, pos = _body(snapshot)
    try:
        return _utf(raw, pos + 8)[0]
    except (struct.error, ValueError):
        return None


def _row_layout(snapshot: SerializerSnapshot) -> str:
    # RowSerializerSnapshot (a CompositeTypeSerializerSnapshot: magic, outer version): outer versions up to
    # 2 carry no row kind, 3 always does, later ones write the boolean supportsRowKind.
    if snapshot.version < 3:
        return "row-legacy"
    raw, pos = _body(snapshot)
    outer = _INT.unpack_from(raw, pos + 4)[0]
    if outer <= 2:
        return "row-legacy"
    if outer == 3:
        return "row"
    return "row" if raw[pos + 8] else "row-legacy"


def type_codec(snapshot: SerializerSnapshot) -> Codec:
    """Return the decoder for the serializer a snapshot describes (``Opaque`` where kg cannot decode it)."""
    name = snapshot.class_name
    nested = [type_codec(n) for n in snapshot.nested]
    try:
        if name in _PRIMITIVES:
            return _Fixed(*_PRIMITIVES[name])
        if name == STRING:
            return _String()
        if name == STRING_DATA:
            return _StringData()
        if name == EXTERNAL and len(nested) == 1:
            return nested[0]
        if name == BYTES:
            return _Bytes()
        if name in _ARRAYS:
            return _PrimitiveArray(*_ARRAYS[name])
        if name == STRING_ARRAY:
            return _StringArray()
        if name == ENUM:
            return _enum(snapshot)
        if name == POJO:
            return _pojo(snapshot)
        if name == LIST and len(nested) == 1:
            return _List(nested[0])
        if name == MAP and len(nested) == 2:
            return _Map(nested[0], nested[1])
        if name == TTL and len(nested) == 2:
            return _Ttl(nested[1])
        if name == TUPLE and snapshot.nested:
            tuple_class = _outer_class_name(snapshot) or "Tuple"
            names = [f"f{i}" for i in range(len(nested))]
            return _Fields(
                _short(tuple_class) + f"<{', '.join(c.type_name for c in nested)}>", names, nested, "tuple"
            )
        if name == ROW:
            names = [f"f{i}" for i in range(len(nested))]
            return _Fields(
                f"Row<{', '.join(c.type_name for c in nested)}>", names, nested, _row_layout(snapshot)
            )
        if name == ROW_DATA_SERIALIZER_SNAPSHOT:
            return _RowData(RowFields.of(snapshot), as_key=False)
        if name == VOID_NAMESPACE or name == GLOBAL_WINDOW:
            return _VoidNamespace()
        if name == TIME_WINDOW:
            return _TimeWindow()
        if name == AVRO_SERIALIZER_SNAPSHOT:
            return _avro(snapshot)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, InvalidInputError) as exc:
        return Opaque(_short(name), f"{_short(name)}: kg cannot read its serializer snapshot ({exc})")
    short = _short(name)
    if "kryo" in name.lower():
        return Opaque("Kryo", "Kryo-serialized (a generic type): kept as bytes; kg does not decode Kryo")
    if "avro" in name.lower():
        return Opaque(short, f"{short}: an Avro serializer kg does not know; kept as bytes")
    return Opaque(short, f"{short}: no decoder for this serializer; kept as bytes")


def key_type_codec(snapshot: SerializerSnapshot) -> Codec:
    """Return the decoder of keys a key serializer snapshot describes: a SQL key row as its field list."""
    if snapshot.class_name == ROW_DATA_SERIALIZER_SNAPSHOT:
        try:
            return _RowData(RowFields.of(snapshot), as_key=True)
        except (struct.error, ValueError) as exc:
            return Opaque("RowData", f"RowData: kg cannot read its serializer snapshot ({exc})")
    return type_codec(snapshot)


# -- per state -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateCodecs:
    """The decoders of one keyed state.

    Attributes:
        name: The state's name.
        kind: ``value``, ``list``, ``map`` or ``timer`` (reducing and aggregating states are values).
        key: The key's decoder.
        namespace: The namespace's decoder.
        value: A value state's value, a list state's element, a map state's user value (None for timers).
        user_key: A map state's user key (None otherwise).
    """

    name: str
    kind: str
    key: Codec
    namespace: Codec
    value: Codec | None
    user_key: Codec | None = None

    @classmethod
    def of(cls, info: StateMetaInfo, kind: str, key_snapshot: SerializerSnapshot) -> StateCodecs:
        """Build the decoders of state ``info`` of kg kind ``kind`` under the key serializer's snapshot."""
        key = key_type_codec(key_snapshot)
        value_snapshot = info.serializer("VALUE_SERIALIZER")
        namespace_snapshot = info.serializer("NAMESPACE_SERIALIZER")
        unknown = Opaque("?", f"state {info.name!r}: no serializer snapshot")
        if kind == "timer":
            # TimerSerializer's nested snapshots are (key, namespace); the timestamp is decoded already.
            nested = value_snapshot.nested if value_snapshot is not None else ()
            namespace = type_codec(nested[1]) if len(nested) == 2 else unknown
            return cls(info.name, kind, key, namespace, None)
        namespace = type_codec(namespace_snapshot) if namespace_snapshot is not None else unknown
        value = type_codec(value_snapshot) if value_snapshot is not None else unknown
        wrapper = _STATE_WRAPPERS.get(kind)
        if wrapper is not None and value_snapshot is not None and value_snapshot.class_name != wrapper[0]:
            # Flink's ListStateDescriptor / MapStateDescriptor always serialize with ListSerializer /
            # MapSerializer: another class here is one Flink cannot load either, and kg cannot know how
            # its bytes frame elements or user keys.
            raise UnsupportedFormatError(
                f"state {info.name!r}: a {kind} state whose value serializer is "
                f"{value_snapshot.class_name!r}, not Flink's {wrapper[1]}; kg cannot decode it",
                code="SERIALIZER_UNSUPPORTED",
            )
        if kind == "list":
            element = value.element if isinstance(value, _List) else _not_a(value, "ListSerializer")
            return cls(info.name, kind, key, namespace, element)
        if kind == "map":
            if isinstance(value, _Map):
                return cls(info.name, kind, key, namespace, value.value, value.key)
            opaque = _not_a(value, "MapSerializer")
            return cls(info.name, kind, key, namespace, opaque, opaque)
        return cls(info.name, kind, key, namespace, value)

    def write_reasons(self) -> dict[str, str]:
        """Return, per column kg cannot encode (``key``, ``namespace``, ``user_key``, ``value``), why.

        Empty when every part encodes; a caller refuses a column here, before writing anything.
        """
        return dict(self._write_reasons)

    @functools.cached_property
    def _write_reasons(self) -> dict[str, str]:
        parts = {"key": self.key, "namespace": self.namespace, "user_key": self.user_key, "value": self.value}
        out = {}
        for column, codec in parts.items():
            reason = codec.write_reason if codec is not None else None
            if codec is not None and reason is not None:
                out[column] = f"{codec.type_name}: {reason}"
        return out

    def list_bytes(self, elements: Sequence[Any]) -> bytes:
        """Return a list state's canonical value: the elements joined by ``,`` (``ListDelimitedSerializer``).

        The inverse of ``list_elements``; Flink writes no null element and an empty list as no bytes.

        Raises:
            NotEncodable: An element type kg cannot encode.
            ValueNotEncodable: An element that does not fit it, or a null one.
        """
        element = self.value
        if element is None:
            raise NotEncodable("?", f"state {self.name!r}: no element serializer")
        reason = element.write_reason
        if reason is not None:
            raise NotEncodable(element.type_name, reason)
        items = _sequence(f"List<{element.type_name}>", elements)
        out = bytearray()
        for i, item in enumerate(items):
            if i:
                out.append(LIST_DELIMITER)
            try:
                _not_null(element.type_name, item)
                element.write_into(out, item)
            except ValueNotEncodable as exc:
                raise exc.inside(f"state {self.name!r}", f"[{i}]") from None
        return bytes(out)

    @property
    def notes(self) -> tuple[str, ...]:
        """Return why parts of this state stay bytes (empty when everything decodes)."""
        parts = (self.key, self.namespace, self.value, self.user_key)
        return tuple(dict.fromkeys(c.reason for c in parts if c is not None and c.reason))

    def list_elements(self, raw: bytes) -> list[Any]:
        """Decode a list state's canonical value: elements joined by ``,`` (``ListDelimitedSerializer``).

        Raises:
            NotDecodable: An opaque element type, or bytes that do not split into elements.
        """
        element = self.value
        if element is None or element.reason:
            raise NotDecodable(element.reason if element else "no element serializer")
        out, pos = [], 0
        try:
            while pos < len(raw):
                value, pos = element.read(raw, pos)
                out.append(value)
                if pos < len(raw):
                    if raw[pos] != LIST_DELIMITER:
                        raise NotDecodable(f"{element.type_name}: no ',' between list elements at {pos}")
                    pos += 1
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, InvalidInputError) as exc:
            raise NotDecodable(f"{element.type_name}: the list does not decode ({exc})") from None
        return out


#: The serializer snapshot class Flink always writes for a list and a map state's value, and its name.
_STATE_WRAPPERS = {"list": (LIST, "ListSerializer"), "map": (MAP, "MapSerializer")}


def _not_a(codec: Codec, expected: str) -> Codec:
    if codec.reason:
        return codec
    return Opaque(codec.type_name, f"expected a {expected}, found {codec.type_name}; kept as bytes")


def to_plain(value: Any) -> Any:
    """Return a decoded value as plain JSON-able data (TTL values as ``{"value", "ttl_last_access"}``).

    Bytes stay bytes (renderers choose their text form); map values (lists of pairs) stay lists of pairs.
    """
    if isinstance(value, TtlValue):
        return {"value": to_plain(value.value), "ttl_last_access": value.last_access}
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    if isinstance(value, tuple):
        return [to_plain(v) for v in value]
    return value


def _cell_type(arrow: pa.DataType) -> pa.DataType:
    """Return ``arrow`` with every timestamp as int64 (its count of units, as ``to_arrow`` gives it)."""
    if pa.types.is_timestamp(arrow):
        return pa.int64()
    if pa.types.is_struct(arrow):
        return pa.struct([f.with_type(_cell_type(f.type)) for f in arrow])
    if pa.types.is_map(arrow):
        return pa.map_(
            arrow.key_field.with_type(_cell_type(arrow.key_type)),
            arrow.item_field.with_type(_cell_type(arrow.item_type)),
        )
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        item = arrow.value_field.with_type(_cell_type(arrow.value_type))
        return pa.list_(item) if pa.types.is_list(arrow) else pa.large_list(item)
    return arrow


def arrow_values(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """Return an Arrow column as Python values ``Codec.from_arrow`` takes (timestamps as ints).

    ``to_pylist`` cannot give nanosecond timestamps without pandas; as ints they are exact in every unit.
    """
    target = _cell_type(array.type)
    return (array.cast(target) if target != array.type else array).to_pylist()


def arrow_rows(batch: pa.RecordBatch | pa.Table) -> list[dict[str, Any]]:
    """Return the rows of a batch of the export schema as dicts of Python values ``from_arrow`` takes."""
    columns = {name: arrow_values(batch.column(name)) for name in batch.schema.names}
    return [{name: values[i] for name, values in columns.items()} for i in range(batch.num_rows)]


__all__ = [
    "LIST_DELIMITER",
    "Codec",
    "NotDecodable",
    "NotEncodable",
    "Opaque",
    "StateCodecs",
    "TtlValue",
    "ValueNotEncodable",
    "arrow_rows",
    "arrow_values",
    "fixed_width",
    "key_type_codec",
    "prefixed_kind",
    "to_plain",
    "type_codec",
]
