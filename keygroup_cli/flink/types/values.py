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
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.binary import decode_modified_utf8
from keygroup_cli.flink.types.avro import AvroSchemaError, Node, avro_reader, read_value
from keygroup_cli.flink.types.binary_row import RowDecodeError, RowFields, arrow_unit, decode_row
from keygroup_cli.flink.types.serializer_snapshots import (
    AVRO_SERIALIZER_SNAPSHOT,
    OPTIONAL_MAP_HEADER,
    SerializerSnapshot,
    StateMetaInfo,
    parse_serializer_snapshot,
)
from keygroup_cli.flink.types.serializers import ROW_DATA_SERIALIZER_SNAPSHOT, read_string

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


class _String(Codec):
    type_name = "String"

    def arrow_type(self) -> pa.DataType:
        return pa.string()

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return read_string(data, pos)


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


class _Bytes(Codec):
    type_name = "byte[]"

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _INT.unpack_from(data, pos)[0]
        end = pos + 4 + n
        if n < 0 or end > len(data):
            raise NotDecodable("byte[]: length runs past the value")
        return bytes(data[pos + 4 : end]), end


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


class _TimeWindow(Codec):
    type_name = "TimeWindow"

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        start, end = struct.unpack_from(">qq", data, pos)
        return {"start": start, "end": end}, pos + 16

    def arrow_type(self) -> pa.DataType:
        return pa.struct([("start", pa.int64()), ("end", pa.int64())])


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
    # RowSerializerSnapshot: versions < 3 carry no row kind; 3 always does; later ones write a boolean.
    if snapshot.version < 3:
        return "row-legacy"
    if snapshot.version == 3:
        return "row"
    raw, pos = _body(snapshot)
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


__all__ = [
    "LIST_DELIMITER",
    "Codec",
    "NotDecodable",
    "Opaque",
    "StateCodecs",
    "TtlValue",
    "fixed_width",
    "key_type_codec",
    "prefixed_kind",
    "to_plain",
    "type_codec",
]
