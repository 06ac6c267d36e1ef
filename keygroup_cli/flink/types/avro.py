"""Avro values in keyed state: Flink's ``AvroSerializer`` (flink-avro), read with the writer schema.

``AvroSerializerSnapshot`` (the serializer snapshot in a state file's header) holds the writer schema: its
body is the runtime class name and the schema's JSON (``schema.toString(false)``): version 1 the schema
(or, in some 1.7-era code, both), version 2 both as ``writeUTF`` strings, version 3 both as
``StringValue.writeString`` strings (``avro_serializer_snapshot``).

``AvroSerializer.serialize`` is Avro's ``GenericDatumWriter`` (or its specific / reflect variants, which
write the same bytes for a schema) over Flink's own ``DataOutputEncoder``, with no framing of its own. That
encoder is *not* Avro's binary encoding: numbers are fixed width and big-endian like ``DataOutput``:

- boolean: one byte; int, enum index and union branch index: 4-byte int; long: 8 bytes; float, double:
  IEEE 754 big-endian;
- bytes and string: a 4-byte length, then the bytes (UTF-8 for strings); fixed: its ``size`` bytes;
- array and map: blocks, each an unsigned base-128 varint item count (7 bits per byte, least significant
  first, high bit = more) then the items (a map item: string key, value); a count of 0 ends it. Flink
  writes one block and never a negative count;
- record: its fields in schema order; null: nothing.

Logical types kg types: ``decimal`` (on bytes or fixed: two's-complement big-endian unscaled value) as a
``Decimal``, ``date`` as a ``datetime.date``, ``timestamp-millis`` / ``timestamp-micros`` as an
``AvroInstant`` (shown as Java's ``Instant.toString``), ``uuid`` as its string. Dates and instants outside
years 1-9999 (which Python's ``datetime`` cannot hold) stay their count of days or units. Any other logical
type is read as its underlying type, as the Avro specification says readers do.

Arrow types: record -> struct, array -> list, map -> map<string, T>, enum -> string, fixed -> fixed-size
binary, bytes -> binary, decimal -> decimal128 (decimal256 above 38 digits), date -> date32, timestamps ->
timestamp[ms/us, UTC]. A union of null and one type is that type, nullable; any other union is a struct
with one field per non-null branch, named by the branch's (full) name, exactly one of them set (JSON:
``{"branch": value}``, Avro's own JSON form). A schema kg cannot type (a recursive record) raises
``AvroSchemaError``; the caller keeps such values as bytes with a note.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import numbers
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.io.binary import decode_modified_utf8
from keygroup_cli.flink.types.serializer_snapshots import AVRO_SERIALIZER_SNAPSHOT
from keygroup_cli.flink.types.serializers import read_string

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_FLOAT = struct.Struct(">f")
_DOUBLE = struct.Struct(">d")
_USHORT = struct.Struct(">H")
_EPOCH = dt.date(1970, 1, 1)
_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


class AvroSchemaError(ValueError):
    """A writer schema kg cannot read or type (invalid JSON, an unknown name, a recursive record)."""


class AvroDecodeError(ValueError):
    """Bytes that do not hold a value of the writer schema."""


class AvroEncodeError(ValueError):
    """A value that does not fit the writer schema (the message says where and why)."""


def _unfit(what: str, value: Any) -> AvroEncodeError:
    return AvroEncodeError(f"{_shown(value)} is not {what}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int_of(value: Any, bits: int, what: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise _unfit(what, value) from None
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise AvroEncodeError(f"{value} is out of the range of {what}")
    return int(value)


def _float_of(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _unfit(what, value)
    return float(value)


def _bytes_of(value: Any, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise _unfit(what, value)


def _var_count(out: bytearray, count: int) -> None:
    """Write ``DataOutputEncoder.writeVarLongCount``: unsigned base-128, least significant group first."""
    while count & ~0x7F:
        out.append((count & 0x7F) | 0x80)
        count >>= 7
    out.append(count)


#: ``DataOutput.writeFloat`` / ``writeDouble`` write ``floatToIntBits`` / ``doubleToLongBits``: one NaN.
_NAN = {"float": b"\x7f\xc0\x00\x00", "double": b"\x7f\xf8\x00\x00\x00\x00\x00\x00"}


def avro_serializer_snapshot(raw: bytes, version: int) -> tuple[str | None, str]:
    """Return (runtime class, schema JSON) of an ``AvroSerializerSnapshot``'s raw bytes (name, version, body).

    Raises:
        AvroSchemaError: A version kg does not know, or a body that is not that version's.
    """
    try:
        pos = 2 + _USHORT.unpack_from(raw, 0)[0] + 4
        if version == 1:
            # Written as the schema alone, and (by some 1.7-era code) as runtime class, then schema.
            schema, pos = _utf(raw, pos)
            runtime = None
            if pos < len(raw):
                runtime, (schema, pos) = schema, _utf(raw, pos)
        elif version == 2:
            runtime, pos = _utf(raw, pos)
            schema, pos = _utf(raw, pos)
        elif version == 3:
            runtime, pos = read_string(raw, pos)
            text, pos = read_string(raw, pos)
            if text is None:
                raise AvroSchemaError("AvroSerializerSnapshot: no schema")
            schema = text
        else:
            raise AvroSchemaError(f"AvroSerializerSnapshot version {version} is not one kg knows (1-3)")
    except AvroSchemaError:
        raise
    except (struct.error, IndexError, ValueError, InvalidInputError) as exc:
        raise AvroSchemaError(f"AvroSerializerSnapshot: the body does not read ({exc})") from None
    if pos != len(raw):
        raise AvroSchemaError(f"AvroSerializerSnapshot: {len(raw) - pos} byte(s) after the schema")
    return runtime, schema


def _utf(raw: bytes, pos: int) -> tuple[str, int]:
    n = _USHORT.unpack_from(raw, pos)[0]
    if pos + 2 + n > len(raw):
        raise AvroSchemaError("AvroSerializerSnapshot: a string runs past the body")
    return decode_modified_utf8(raw[pos + 2 : pos + 2 + n]), pos + 2 + n


@dataclass(frozen=True, slots=True)
class AvroInstant:
    """An Avro ``timestamp-millis`` / ``timestamp-micros`` value: ``unit``s since the epoch (UTC)."""

    value: int
    unit: str  # "ms" or "us"

    def iso(self) -> str | None:
        """Return the instant as Java's ``Instant.toString`` shows it (``2024-01-31T12:00:00.250Z``).

        None outside years 1-9999 (which ``datetime`` cannot hold).
        """
        per_second = 1000 if self.unit == "ms" else 1_000_000
        seconds, fraction = divmod(self.value, per_second)
        nanos = fraction * (1_000_000_000 // per_second)
        try:
            m = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
        except OverflowError:
            return None
        text = f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}"
        if nanos % 1_000_000 == 0 and nanos:
            text += f".{nanos // 1_000_000:03d}"
        elif nanos % 1000 == 0 and nanos:
            text += f".{nanos // 1000:06d}"
        elif nanos:
            text += f".{nanos:09d}"
        return text + "Z"

    def __str__(self) -> str:
        """Return ``iso()``, or the count where there is none."""
        return self.iso() or str(self.value)


class Node:
    """One schema node: how its values read, their Arrow type and their Arrow (Python) form."""

    name = "?"
    arrow: pa.DataType = pa.null()
    #: The fewest bytes a value takes.
    min_size = 0

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        """Read one value at ``pos``; return it and where it ends (raises ``AvroDecodeError``)."""
        raise NotImplementedError

    def to_arrow(self, value: Any) -> Any:
        """Return a read value as the Python value of ``arrow`` (``pa.array`` takes it)."""
        return value

    def write(self, out: bytearray, value: Any) -> None:
        """Append ``value`` (as ``read`` returns it) as Flink's ``AvroSerializer`` writes it.

        Raises:
            AvroEncodeError: The value does not fit the schema.
        """
        raise NotImplementedError

    def from_arrow(self, value: Any) -> Any:
        """Return an Arrow (Python) value of ``arrow`` as ``read`` returns it: the inverse of ``to_arrow``."""
        return value


class _Null(Node):
    name = "null"
    arrow = pa.null()

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return None, pos

    def write(self, out: bytearray, value: Any) -> None:
        if value is not None:
            raise _unfit("null", value)


class _Boolean(Node):
    name = "boolean"
    arrow = pa.bool_()
    min_size = 1

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        if pos >= len(data):
            raise AvroDecodeError("a boolean runs past the value")
        return data[pos] != 0, pos + 1  # DataInput.readBoolean: any non-zero byte is true

    def write(self, out: bytearray, value: Any) -> None:
        if not isinstance(value, bool):
            raise _unfit("a boolean", value)
        out.append(1 if value else 0)


class _Number(Node):
    def __init__(self, name: str, fmt: struct.Struct, arrow: pa.DataType) -> None:
        self.name = name
        self._fmt = fmt
        self.arrow = arrow
        self.min_size = fmt.size

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        return self._fmt.unpack_from(data, pos)[0], pos + self._fmt.size

    def write(self, out: bytearray, value: Any) -> None:
        if self.name in _NAN:
            number = _float_of(value, f"a {self.name}")
            if math.isnan(number):
                out += _NAN[self.name]
                return
            try:
                out += self._fmt.pack(number)
            except (OverflowError, struct.error):
                raise AvroEncodeError(f"{value} is out of the range of a {self.name}") from None
            return
        out += self._fmt.pack(_int_of(value, 8 * self._fmt.size, f"an Avro {self.name}"))


def _length(data: bytes, pos: int, what: str) -> int:
    n: int = _INT.unpack_from(data, pos)[0]
    if n < 0 or pos + 4 + n > len(data):
        raise AvroDecodeError(f"{what} length {n} runs past the value")
    return n


class _Bytes(Node):
    name = "bytes"
    arrow = pa.binary()
    min_size = 4

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _length(data, pos, "bytes")
        return bytes(data[pos + 4 : pos + 4 + n]), pos + 4 + n

    def write(self, out: bytearray, value: Any) -> None:
        raw = _bytes_of(value, "Avro bytes")
        out += _INT.pack(len(raw)) + raw


class _String(Node):
    name = "string"
    arrow = pa.string()
    min_size = 4

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        n = _length(data, pos, "string")
        return bytes(data[pos + 4 : pos + 4 + n]).decode("utf-8"), pos + 4 + n

    def write(self, out: bytearray, value: Any) -> None:
        if not isinstance(value, str):
            raise _unfit("an Avro string", value)
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError:
            raise AvroEncodeError(f"{_shown(value)} holds a lone surrogate (not UTF-8)") from None
        out += _INT.pack(len(raw)) + raw


class _Fixed(Node):
    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.arrow = pa.binary(size)
        self.min_size = size

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        if pos + self.size > len(data):
            raise AvroDecodeError(f"fixed {self.name} runs past the value")
        return bytes(data[pos : pos + self.size]), pos + self.size

    def write(self, out: bytearray, value: Any) -> None:
        raw = _bytes_of(value, f"fixed {self.name}")
        if len(raw) != self.size:
            raise AvroEncodeError(f"fixed {self.name} holds {self.size} bytes, got {len(raw)}")
        out += raw


class _Enum(Node):
    arrow = pa.string()
    min_size = 4

    def __init__(self, name: str, symbols: list[str]) -> None:
        self.name = name
        self.symbols = tuple(symbols)

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        index = _INT.unpack_from(data, pos)[0]
        if not 0 <= index < len(self.symbols):
            raise AvroDecodeError(f"enum {self.name}: symbol index {index} out of range")
        return self.symbols[index], pos + 4

    def write(self, out: bytearray, value: Any) -> None:
        try:
            index = self.symbols.index(value)
        except ValueError:
            raise AvroEncodeError(f"{_shown(value)} is not a symbol of enum {self.name}") from None
        out += _INT.pack(index)


def _count(data: bytes, pos: int) -> tuple[int, int]:
    """Read ``DataInputDecoder.readVarLongCount``: an unsigned base-128 varint, least significant first."""
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise AvroDecodeError("a block count runs past the value")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise AvroDecodeError("a block count longer than a long")


#: Most zero-width items (nulls, empty records) one block may hold: more is damage, not data.
_MAX_EMPTY_ITEMS = 1 << 20


def _require_count_fits(count: int, items: Node | None, left: int) -> None:
    """Refuse a block count its bytes cannot hold (each map entry and non-empty item takes a byte or more)."""
    width = 4 if items is None else items.min_size
    if (width and count * width > left) or count > max(left, _MAX_EMPTY_ITEMS):
        raise AvroDecodeError(f"a block of {count} items runs past the value ({left} bytes left)")


class _Array(Node):
    def __init__(self, items: Node) -> None:
        self.items = items
        self.name = "array"
        self.arrow = pa.list_(items.arrow)
        self.min_size = 1

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        out = []
        count, pos = _count(data, pos)
        while count:
            _require_count_fits(count, self.items, len(data) - pos)
            for _ in range(count):
                item, pos = self.items.read(data, pos)
                out.append(item)
            count, pos = _count(data, pos)
        return out, pos

    def to_arrow(self, value: Any) -> Any:
        return [self.items.to_arrow(v) for v in value]

    def write(self, out: bytearray, value: Any) -> None:
        # GenericDatumWriter.writeArray over DataOutputEncoder: one block (no count when empty), then 0.
        if not isinstance(value, (list, tuple)):
            raise _unfit("an Avro array", value)
        if value:
            _var_count(out, len(value))
        for i, item in enumerate(value):
            try:
                self.items.write(out, item)
            except AvroEncodeError as exc:
                raise AvroEncodeError(f"[{i}]: {exc}") from None
        out.append(0)

    def from_arrow(self, value: Any) -> Any:
        return None if value is None else [self.items.from_arrow(v) for v in value]


class _Map(Node):
    def __init__(self, values: Node) -> None:
        self.values = values
        self.name = "map"
        self.arrow = pa.map_(pa.string(), values.arrow)
        self.min_size = 1
        self._key = _String()

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        out: dict[str, Any] = {}
        count, pos = _count(data, pos)
        while count:
            _require_count_fits(count, None, len(data) - pos)
            for _ in range(count):
                key, pos = self._key.read(data, pos)
                out[key], pos = self.values.read(data, pos)
            count, pos = _count(data, pos)
        return out, pos

    def to_arrow(self, value: Any) -> Any:
        return [(k, self.values.to_arrow(v)) for k, v in value.items()]

    def write(self, out: bytearray, value: Any) -> None:
        if not isinstance(value, dict):
            raise _unfit("an Avro map", value)
        if value:
            _var_count(out, len(value))
        for key, item in value.items():
            try:
                self._key.write(out, key)
                self.values.write(out, item)
            except AvroEncodeError as exc:
                raise AvroEncodeError(f"[{key!r}]: {exc}") from None
        out.append(0)

    def from_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        pairs = value.items() if isinstance(value, dict) else value
        return {k: self.values.from_arrow(v) for k, v in pairs}


class _Record(Node):
    def __init__(self, name: str) -> None:
        self.name = name
        self.fields: tuple[tuple[str, Node], ...] = ()
        self.building = True

    def finish(self, fields: list[tuple[str, Node]]) -> None:
        self.fields = tuple(fields)
        self.arrow = pa.struct([(n, node.arrow) for n, node in fields])
        self.min_size = sum(node.min_size for _, node in fields)
        self.building = False

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        out = {}
        for name, node in self.fields:
            out[name], pos = node.read(data, pos)
        return out, pos

    def to_arrow(self, value: Any) -> Any:
        return {n: node.to_arrow(value[n]) for n, node in self.fields}

    def write(self, out: bytearray, value: Any) -> None:
        if not isinstance(value, dict):
            raise _unfit(f"a record {self.name}", value)
        extra = set(value) - {n for n, _ in self.fields}
        if extra:
            raise AvroEncodeError(f"record {self.name} has no field {sorted(extra)[0]!r}")
        for name, node in self.fields:
            if name not in value:
                raise AvroEncodeError(f"record {self.name}: field {name!r} is missing")
            try:
                node.write(out, value[name])
            except AvroEncodeError as exc:
                raise AvroEncodeError(f".{name}: {exc}") from None

    def from_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        return {n: node.from_arrow(value.get(n)) for n, node in self.fields}


class _Union(Node):
    """A union: nullable T for ``[null, T]``, else a struct of the non-null branches (one set)."""

    def __init__(self, branches: list[Node]) -> None:
        self.branches = tuple(branches)
        non_null = [b for b in branches if not isinstance(b, _Null)]
        self.nullable = len(branches) == 2 and len(non_null) == 1
        self.name = "union"
        self.min_size = 4
        if self.nullable:
            self.arrow = non_null[0].arrow
        elif non_null:
            self.arrow = pa.struct([(b.name, b.arrow) for b in non_null])
        else:
            self.arrow = pa.null()

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        index = _INT.unpack_from(data, pos)[0]
        if not 0 <= index < len(self.branches):
            raise AvroDecodeError(f"union branch index {index} out of range ({len(self.branches)} branches)")
        branch = self.branches[index]
        value, pos = branch.read(data, pos + 4)
        if self.nullable or isinstance(branch, _Null):
            return value, pos
        return {branch.name: value}, pos

    def to_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if self.nullable:
            branch = next(b for b in self.branches if not isinstance(b, _Null))
            return branch.to_arrow(value)
        ((name, inner),) = value.items()
        out: dict[str, Any] = {b.name: None for b in self.branches if not isinstance(b, _Null)}
        branch = next(b for b in self.branches if b.name == name)
        out[name] = branch.to_arrow(inner)
        return out

    def write(self, out: bytearray, value: Any) -> None:
        # DataOutputEncoder.writeIndex: the branch as an int, then the value.
        if value is None:
            index = next((i for i, b in enumerate(self.branches) if isinstance(b, _Null)), None)
            if index is None:
                raise AvroEncodeError("None, but the union has no null branch")
            out += _INT.pack(index)
            return
        if self.nullable:
            index = next(i for i, b in enumerate(self.branches) if not isinstance(b, _Null))
            out += _INT.pack(index)
            self.branches[index].write(out, value)
            return
        if not isinstance(value, dict) or len(value) != 1:
            raise AvroEncodeError(f"{_shown(value)} is not one union branch ({{name: value}})")
        ((name, inner),) = value.items()
        index = next(
            (i for i, b in enumerate(self.branches) if b.name == name and not isinstance(b, _Null)), None
        )
        if index is None:
            raise AvroEncodeError(f"the union has no branch {name!r}")
        out += _INT.pack(index)
        self.branches[index].write(out, inner)

    def from_arrow(self, value: Any) -> Any:
        if value is None:
            return None
        if self.nullable:
            branch = next(b for b in self.branches if not isinstance(b, _Null))
            return branch.from_arrow(value)
        chosen = [(k, v) for k, v in value.items() if v is not None]
        if len(chosen) != 1:
            raise AvroEncodeError(f"{_shown(value)}: exactly one union branch must be set")
        name, inner = chosen[0]
        branch = next(b for b in self.branches if b.name == name and not isinstance(b, _Null))
        return {name: branch.from_arrow(inner)}


class _Logical(Node):
    """A logical type over its underlying node: ``convert`` turns the underlying value into kg's value."""

    def __init__(
        self,
        base: Node,
        arrow: pa.DataType,
        convert: Callable[[Any], Any],
        to_arrow: Callable[[Any], Any] = lambda v: v,
        unconvert: Callable[[Any], Any] = lambda v: v,
        from_arrow: Callable[[Any], Any] = lambda v: v,
    ) -> None:
        self.base = base
        self.name = base.name
        self.min_size = base.min_size
        self.arrow = arrow
        self._convert = convert
        self._to_arrow = to_arrow
        self._unconvert = unconvert
        self._from_arrow = from_arrow

    def read(self, data: bytes, pos: int) -> tuple[Any, int]:
        value, pos = self.base.read(data, pos)
        return self._convert(value), pos

    def to_arrow(self, value: Any) -> Any:
        return self._to_arrow(value)

    def write(self, out: bytearray, value: Any) -> None:
        self.base.write(out, self._unconvert(value))

    def from_arrow(self, value: Any) -> Any:
        return None if value is None else self._from_arrow(value)


def _decimal(base: Node, precision: int, scale: int) -> Node:
    def convert(raw: bytes) -> Decimal:
        unscaled = int.from_bytes(raw, "big", signed=True)
        value = Decimal(unscaled).scaleb(-scale)
        if len(str(abs(unscaled))) > precision:
            raise AvroDecodeError(f"decimal({precision}, {scale}): {value} has more digits than allowed")
        return value

    def unconvert(value: Any) -> bytes:
        # Avro's DecimalConversion: toBytes writes BigInteger.toByteArray() (minimal two's complement);
        # toFixed sign-extends it to the fixed size.
        if isinstance(value, bool) or not isinstance(value, (Decimal, int)):
            raise _unfit(f"a decimal({precision}, {scale})", value)
        exact = Decimal(value)
        if not exact.is_finite():
            raise _unfit(f"a decimal({precision}, {scale})", value)
        unscaled_dec = exact.scaleb(scale)
        if unscaled_dec != unscaled_dec.to_integral_value():
            raise AvroEncodeError(
                f"{value} has more than {scale} decimal places (decimal({precision}, {scale}))"
            )
        unscaled = int(unscaled_dec)
        if len(str(abs(unscaled))) > precision:
            raise AvroEncodeError(f"{value} has more digits than decimal({precision}, {scale}) holds")
        size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
        if isinstance(base, _Fixed):
            if size > base.size:
                raise AvroEncodeError(f"{value} does not fit fixed {base.name} ({base.size} bytes)")
            size = base.size
        return unscaled.to_bytes(size, "big", signed=True)

    arrow = pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    return _Logical(base, arrow, convert, unconvert=unconvert)


def _date(days: int) -> dt.date | int:
    """Return the date ``days`` after the epoch; outside years 1-9999 (no ``datetime.date``) the count."""
    try:
        return _EPOCH + dt.timedelta(days=days)
    except OverflowError:
        return days


def _date_arrow(value: dt.date | int) -> int:
    return value if isinstance(value, int) else (value - _EPOCH).days


def _date_days(value: Any) -> int:
    if isinstance(value, dt.datetime) or not isinstance(value, (dt.date, int)) or isinstance(value, bool):
        raise _unfit("a date", value)
    return _date_arrow(value)


def _instant(unit: str) -> Callable[[Any], AvroInstant]:
    def from_arrow(value: Any) -> AvroInstant:
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=dt.timezone.utc)
            delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
            micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
            if unit == "ms":
                if micros % 1000:
                    raise AvroEncodeError(f"{value} has sub-millisecond digits (timestamp-millis)")
                return AvroInstant(micros // 1000, unit)
            return AvroInstant(micros, unit)
        if isinstance(value, AvroInstant):
            return value
        return AvroInstant(_int_of(value, 64, "a timestamp"), unit)

    return from_arrow


def _instant_value(unit: str) -> Callable[[Any], int]:
    def unconvert(value: Any) -> int:
        if isinstance(value, AvroInstant):
            if value.unit != unit:
                raise AvroEncodeError(f"{value} is in {value.unit}, the schema's timestamp in {unit}")
            return value.value
        return _int_of(value, 64, "a timestamp")

    return unconvert


def _logical(schema: dict[str, Any], base: Node) -> Node:
    """Wrap ``base`` in the logical type ``schema`` names, where kg types it (else ``base`` as is)."""
    logical = schema.get("logicalType")
    kind = schema.get("type")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if isinstance(precision, int) and isinstance(scale, int) and 0 <= scale <= precision <= 76:
            if precision > 0:
                return _decimal(base, precision, scale)
    elif logical == "date" and kind == "int":
        return _Logical(base, pa.date32(), _date, _date_arrow, _date_days, lambda v: _date(_date_days(v)))
    elif logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        unit = "ms" if logical == "timestamp-millis" else "us"
        return _Logical(
            base,
            pa.timestamp(unit, tz="UTC"),
            lambda v: AvroInstant(v, unit),
            lambda v: v.value,
            _instant_value(unit),
            _instant(unit),
        )
    return base


class _Builder:
    """Builds nodes from a parsed schema, resolving named types (with namespaces) as Avro's parser does."""

    def __init__(self) -> None:
        self.named: dict[str, Node] = {}

    def node(self, schema: Any, namespace: str) -> Node:
        if isinstance(schema, str):
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            return _Union([self.node(b, namespace) for b in schema])
        if not isinstance(schema, dict):
            raise AvroSchemaError(f"not a schema: {schema!r}")
        kind = schema.get("type")
        if isinstance(kind, (dict, list)):
            return self.node(kind, namespace)
        if kind in _PRIMITIVES:
            return _logical(schema, self._primitive(kind))
        if kind == "array":
            return _Array(self.node(schema.get("items"), namespace))
        if kind == "map":
            return _Map(self.node(schema.get("values"), namespace))
        if kind in ("record", "error", "enum", "fixed"):
            full, inner_ns = self._full_name(schema, namespace)
            if full in self.named:
                raise AvroSchemaError(f"the name {full} is defined twice")
            if kind == "enum":
                node: Node = _Enum(full, [str(s) for s in schema.get("symbols") or ()])
                self.named[full] = node
                return node
            if kind == "fixed":
                size = schema.get("size")
                if not isinstance(size, int) or size < 0:
                    raise AvroSchemaError(f"fixed {full} has no valid size")
                fixed = _Fixed(full, size)
                self.named[full] = fixed
                return _logical(schema, fixed)
            record = _Record(full)
            self.named[full] = record
            fields = []
            for field in schema.get("fields") or ():
                fields.append((str(field["name"]), self.node(field["type"], inner_ns)))
            record.finish(fields)
            return record
        if isinstance(kind, str):
            return self._reference(kind, namespace)
        raise AvroSchemaError(f"not a schema: {schema!r}")

    def _primitive(self, kind: str) -> Node:
        if kind == "null":
            return _Null()
        if kind == "boolean":
            return _Boolean()
        if kind == "int":
            return _Number("int", _INT, pa.int32())
        if kind == "long":
            return _Number("long", _LONG, pa.int64())
        if kind == "float":
            return _Number("float", _FLOAT, pa.float32())
        if kind == "double":
            return _Number("double", _DOUBLE, pa.float64())
        if kind == "bytes":
            return _Bytes()
        return _String()

    def _full_name(self, schema: dict[str, Any], namespace: str) -> tuple[str, str]:
        name = schema.get("name")
        if not isinstance(name, str) or not name:
            raise AvroSchemaError(f"a named type without a name: {schema!r}")
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        ns = schema.get("namespace", namespace) or ""
        return (f"{ns}.{name}" if ns else name), ns

    def _reference(self, name: str, namespace: str) -> Node:
        if name in _PRIMITIVES:
            return self._primitive(name)
        # A short name is looked up in the enclosing namespace first, then as a full name (Avro's Names).
        node = (
            self.named.get(f"{namespace}.{name}") if namespace and "." not in name else None
        ) or self.named.get(name)
        if node is None:
            raise AvroSchemaError(f"unknown type name {name!r}")
        if isinstance(node, _Record) and node.building:
            raise AvroSchemaError(f"record {node.name} is recursive; kg has no table type for it")
        return node


def parse_schema(text: str) -> Node:
    """Return the reading node of a writer schema's JSON.

    Raises:
        AvroSchemaError: Not a schema, or one kg cannot type (a recursive record).
    """
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise AvroSchemaError(f"the writer schema is not JSON ({exc})") from None
    try:
        return _Builder().node(schema, "")
    except (KeyError, TypeError) as exc:
        raise AvroSchemaError(f"the writer schema is not one kg reads ({exc!r})") from None


@functools.lru_cache(maxsize=64)
def avro_reader(raw: bytes, version: int) -> Node:
    """Return the reading node of an ``AvroSerializerSnapshot`` (its raw bytes and version), cached.

    Raises:
        AvroSchemaError: A snapshot or schema kg cannot read.
    """
    return parse_schema(avro_serializer_snapshot(raw, version)[1])


def write_value(node: Node, value: Any) -> bytes:
    """Return ``value`` (as ``read_value`` returns it) as Flink's ``AvroSerializer`` writes it.

    Raises:
        AvroEncodeError: The value does not fit the schema.
    """
    out = bytearray()
    node.write(out, value)
    return bytes(out)


def read_value(node: Node, data: bytes, pos: int) -> tuple[Any, int]:
    """Read one value of ``node`` at ``pos``; return it and where it ends.

    Raises:
        AvroDecodeError: The bytes do not hold such a value.
    """
    try:
        return node.read(data, pos)
    except struct.error as exc:
        raise AvroDecodeError(f"the value runs past its bytes ({exc})") from None
    except UnicodeDecodeError as exc:
        raise AvroDecodeError(f"a string is not UTF-8 ({exc.reason})") from None


__all__ = [
    "AVRO_SERIALIZER_SNAPSHOT",
    "AvroDecodeError",
    "AvroEncodeError",
    "AvroInstant",
    "AvroSchemaError",
    "Node",
    "avro_reader",
    "avro_serializer_snapshot",
    "parse_schema",
    "read_value",
    "write_value",
]
