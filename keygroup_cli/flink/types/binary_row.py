"""``BinaryRowData``, the rows of SQL jobs: decode, encode and hash them as Flink's Table runtime does.

A SQL job's keyed operators (``GROUP BY``, ``PARTITION BY``, joins, deduplication) are keyed by the row of
key fields, a ``BinaryRowData``, and their state values are rows too. Both are written by
``RowDataSerializer``: an int length (big-endian, ``DataOutputView.writeInt``), then the row's bytes, which
are Flink's in-memory layout in native byte order (little-endian on x86 and ARM; kg reads those):

- a header of ``((arity + 63 + 8) // 64) * 8`` bytes: byte 0 is the ``RowKind``, then one null bit per
  field from bit 8 on (``BinarySegmentUtils.bitGet``: byte ``index >> 3``, bit ``index & 7``);
- an 8-byte slot per field: booleans, bytes, shorts, ints, longs, floats and doubles in the slot's first
  bytes (the rest zero); a string or byte string of up to 7 bytes inline (its bytes first, then
  ``0x80 | length`` in the slot's last byte), a longer one as ``offset << 32 | length`` pointing into
  the variable part, where it starts at an 8-byte boundary padded with zeros (``AbstractBinaryWriter``);
  a null field's slot is zero;
- a DECIMAL of up to 18 digits (compact) is its unscaled long in the slot; a longer one reserves 16 bytes of
  the variable part (even when null) and holds its unscaled value's minimal big-endian two's complement
  bytes there (``offset << 32 | length``; null: length 0 and the null bit);
- a TIMESTAMP of precision up to 3 (compact) is its epoch millisecond in the slot; a finer one reserves 8
  bytes of the variable part for the millisecond (little-endian) and keeps ``offset << 32 | nanos of the
  millisecond`` in the slot (null: nanos 0, the 8 bytes zero, the null bit);
- a nested ROW is its own ``BinaryRowData`` in the variable part (``offset << 32 | length``, never inline).

``BinaryRowData.hashCode()`` (the hash ``KeyGroupRangeAssignment`` puts through ``MathUtils.murmurHash``)
is ``MurmurHashUtils.hashBytesByWords`` over the row's bytes: murmur3's 32-bit body over little-endian
4-byte words with seed 42, finalised with the byte length.

Field types come from the nested serializer snapshots of ``RowDataSerializerSnapshot`` (parsed by
``keyed_header``; a DECIMAL's precision and scale and a TIMESTAMP's precision from their bodies); the SQL
type names (``INTEGER``, ``VARCHAR``) from the ``LogicalTypeRoot`` each field's Java-serialized
``LogicalType`` names, for display only. Decoded, a DECIMAL is a ``decimal.Decimal`` of its scale, a
TIMESTAMP a ``SqlTimestamp`` (shown as Java's ``LocalDateTime.toString`` shows it), a ROW the list of its
fields.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.flink.types.serializer_snapshots import SerializerSnapshot
from keygroup_cli.flink.types.serializers import ROW_DATA_SERIALIZER_SNAPSHOT

if TYPE_CHECKING:
    from keygroup_cli.core.keys import KeyLocations

_BASE = "org.apache.flink.api.common.typeutils.base."
_TABLE = "org.apache.flink.table.runtime.typeutils."

#: Field kinds by nested serializer snapshot class: (kind, little-endian struct format or None).
FIELD_KINDS: dict[str, tuple[str, str | None]] = {
    f"{_BASE}BooleanSerializer$BooleanSerializerSnapshot": ("boolean", "<?"),
    f"{_BASE}ByteSerializer$ByteSerializerSnapshot": ("tinyint", "<b"),
    f"{_BASE}ShortSerializer$ShortSerializerSnapshot": ("smallint", "<h"),
    f"{_BASE}IntSerializer$IntSerializerSnapshot": ("int", "<i"),
    f"{_BASE}LongSerializer$LongSerializerSnapshot": ("bigint", "<q"),
    f"{_BASE}FloatSerializer$FloatSerializerSnapshot": ("float", "<f"),
    f"{_BASE}DoubleSerializer$DoubleSerializerSnapshot": ("double", "<d"),
    f"{_TABLE}StringDataSerializer$StringDataSerializerSnapshot": ("string", None),
    f"{_BASE}array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot": ("bytes", None),
    # RAW fields (an aggregate's data-view placeholders): the raw serializer's bytes, always in the
    # variable part (``writeRawValue``), so kg decodes them as bytes but never builds them into a key.
    f"{_TABLE}RawValueDataSerializer$RawValueDataSerializerSnapshot": ("raw", None),
    # Parameterised fields (``RowFields.params``): precision and scale; precision; the nested fields.
    f"{_TABLE}DecimalDataSerializer$DecimalSerializerSnapshot": ("decimal", None),
    f"{_TABLE}TimestampDataSerializer$TimestampDataSerializerSnapshot": ("timestamp", None),
    ROW_DATA_SERIALIZER_SNAPSHOT: ("row", None),
}
#: ``DecimalData.MAX_COMPACT_PRECISION`` and ``TimestampData``'s compact precision.
MAX_COMPACT_DECIMAL = 18
MAX_COMPACT_TIMESTAMP = 3
#: SQL type names a user may give for a key field (``kg key --sql-key``) -> field kind.
SQL_TYPE_KINDS = {
    "BOOLEAN": "boolean",
    "TINYINT": "tinyint",
    "SMALLINT": "smallint",
    "INT": "int",
    "INTEGER": "int",
    "BIGINT": "bigint",
    "FLOAT": "float",
    "DOUBLE": "double",
    "STRING": "string",
    "VARCHAR": "string",
    "BYTES": "bytes",
    "VARBINARY": "bytes",
    "DECIMAL": "decimal",
    "NUMERIC": "decimal",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP_LTZ": "timestamp",
    "ROW": "row",
}
#: ``RowKind`` short strings by byte value.
ROW_KINDS = ("+I", "-U", "+U", "-D")
#: ``MurmurHashUtils.DEFAULT_SEED`` (``core.javahash.ROW_HASH_SEED``).
SEED = 42

_MASK32 = 0xFFFFFFFF
_INLINE_MARK = 1 << 63
_BE_INT = struct.Struct(">i")
_JAVA_STREAM = b"\xac\xed\x00\x05"
#: A ``LogicalTypeRoot`` constant in a Java-serialized ``LogicalType``: TC_ENDBLOCKDATA, TC_NULL (the enum's
#: super class), TC_STRING with the constant's name.
_TYPE_ROOT = re.compile(rb"xpt\x00[\x01-\x40]([A-Z][A-Z_]*)")
_INT_RANGES = {
    "tinyint": (-(2**7), 2**7),
    "smallint": (-(2**15), 2**15),
    "int": (-(2**31), 2**31),
    "bigint": (-(2**63), 2**63),
}


class RowDecodeError(ValueError):
    """Bytes that are not a row of the expected fields."""


@dataclass(frozen=True, slots=True, order=True)
class SqlTimestamp:
    """A ``TimestampData``: epoch millisecond and nanos within it, shown as ``LocalDateTime.toString()``."""

    millisecond: int
    nano_of_millisecond: int = 0

    def __str__(self) -> str:
        seconds, millis = divmod(self.millisecond, 1000)
        when = _EPOCH + dt.timedelta(seconds=seconds)
        nanos = millis * 1_000_000 + self.nano_of_millisecond
        text = f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:{when.minute:02d}"
        if when.second or nanos:
            text += f":{when.second:02d}"
        if nanos % 1_000_000 == 0 and nanos:
            text += f".{nanos // 1_000_000:03d}"
        elif nanos % 1000 == 0 and nanos:
            text += f".{nanos // 1000:06d}"
        elif nanos:
            text += f".{nanos:09d}"
        return text

    @classmethod
    def parse(cls, text: str) -> SqlTimestamp:
        """Read ``2024-02-29T12:34:56.123456789`` (or with a space; seconds and fraction optional).

        Raises:
            ValueError: Not such a date and time.
        """
        m = _TIMESTAMP.fullmatch(text.strip())
        if m is None:
            raise ValueError(text)
        y, mo, d, h, mi, sec = (int(g or 0) for g in m.groups()[:6])
        whole = dt.datetime(y, mo, d, h, mi, sec) - _EPOCH
        nanos = int((m.group(7) or "").ljust(9, "0"))
        millis = (whole.days * 86400 + whole.seconds) * 1000 + nanos // 1_000_000
        return cls(millis, nanos % 1_000_000)

    def arrow_value(self, precision: int) -> int:
        """Return the timestamp in the unit of ``arrow_unit(precision)``."""
        if precision <= 3:
            return self.millisecond
        if precision <= 6:
            return self.millisecond * 1000 + self.nano_of_millisecond // 1000
        return self.millisecond * 1_000_000 + self.nano_of_millisecond


def arrow_unit(precision: int) -> str:
    """Return the Arrow timestamp unit that holds a TIMESTAMP(precision) exactly: ms, us or ns."""
    return "ms" if precision <= 3 else ("us" if precision <= 6 else "ns")


_EPOCH = dt.datetime(1970, 1, 1)
_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?(?:\.(\d{1,9}))?")


@dataclass(frozen=True, slots=True)
class RowFields:
    """The fields of the rows one ``RowDataSerializer`` writes.

    Attributes:
        kinds: Each field's kind (``int``, ``string``, …, or ``?<serializer>`` for one kg does not decode).
        sql_types: Each field's SQL type (``INTEGER``, ``VARCHAR``, ``DECIMAL(10, 2)``), or its kind where
            not found.
        params: Per field (empty: none has any): ``(precision, scale)`` of a DECIMAL, the precision of a
            TIMESTAMP, the nested ``RowFields`` of a ROW, else None.
    """

    kinds: tuple[str, ...]
    sql_types: tuple[str, ...]
    params: tuple[Any, ...] = ()

    def param(self, index: int) -> Any:
        """Return field ``index``'s parameters (see ``params``), None if it has none."""
        return self.params[index] if self.params else None

    @classmethod
    def of(cls, snapshot: SerializerSnapshot) -> RowFields:
        """Read the fields from a ``RowDataSerializerSnapshot`` (its nested snapshots, one per field)."""
        if snapshot.class_name != ROW_DATA_SERIALIZER_SNAPSHOT:
            raise ValueError(f"not a RowDataSerializer snapshot: {snapshot.class_name}")
        kinds = tuple(
            FIELD_KINDS.get(n.class_name, ("?" + n.serializer_name, None))[0] for n in snapshot.nested
        )
        params = tuple(_params(kind, n) for kind, n in zip(kinds, snapshot.nested, strict=True))
        # The fields' Java-serialized LogicalTypes come first (a nested row's own follow, inside it).
        roots = [
            m.group(1).decode()
            for m in (_TYPE_ROOT.search(c) for c in snapshot.raw.split(_JAVA_STREAM)[1 : 1 + len(kinds)])
            if m
        ]
        found = roots if len(roots) == len(kinds) else [k.upper() for k in kinds]
        sql = tuple(_sql_type(r, k, p) for r, k, p in zip(found, kinds, params, strict=True))
        return cls(kinds, sql, params if any(x is not None for x in params) else ())

    @property
    def undecodable(self) -> str | None:
        """Return the first field type kg does not decode (in a nested ROW's fields too), else None."""
        for i, kind in enumerate(self.kinds):
            if kind.startswith("?"):
                return kind[1:]
            if kind == "row" and self.param(i) is not None and self.param(i).undecodable:
                return str(self.param(i).undecodable)
        return None

    @property
    def unbuildable(self) -> str | None:
        """Return the first field type kg does not build keys of (undecodable ones and RAW), else None."""
        return self.undecodable or next(
            (s for k, s in zip(self.kinds, self.sql_types, strict=True) if k == "raw"), None
        )

    @property
    def type_name(self) -> str:
        """Return ``RowData<INTEGER, VARCHAR>``."""
        return f"RowData<{', '.join(self.sql_types)}>"

    @property
    def header_bytes(self) -> int:
        """Return the header's size: the row kind byte and the null bits, in whole 8-byte words."""
        return ((len(self.kinds) + 63 + 8) // 64) * 8


def _params(kind: str, nested: SerializerSnapshot) -> Any:
    """Return a field's parameters from its serializer snapshot's body (see ``RowFields.params``)."""
    if kind == "row":
        return RowFields.of(nested)
    if kind not in ("decimal", "timestamp"):
        return None
    body = 2 + struct.unpack_from(">H", nested.raw, 0)[0] + 4
    if kind == "decimal":
        return struct.unpack_from(">ii", nested.raw, body)
    return struct.unpack_from(">i", nested.raw, body)[0]


#: How type roots are shown: as SQL spells the types.
_SHOWN_ROOTS = {"TIMESTAMP_WITHOUT_TIME_ZONE": "TIMESTAMP", "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "TIMESTAMP_LTZ"}


def _sql_type(root: str, kind: str, param: Any) -> str:
    root = _SHOWN_ROOTS.get(root, root)
    if kind == "decimal":
        return f"{root}({param[0]}, {param[1]})"
    if kind == "timestamp":
        return f"{root}({param})"
    if kind == "row":
        return f"ROW<{', '.join(param.sql_types)}>"
    return root


def row_fields_from_sql(spec: str) -> RowFields:
    """Return the fields of key rows named by SQL types: ``INT,STRING`` (any case; ``VARCHAR(10)`` too).

    ``DECIMAL(p, s)`` (``DECIMAL`` is ``DECIMAL(10, 0)``), ``TIMESTAMP(p)`` (``TIMESTAMP`` is
    ``TIMESTAMP(6)``) and ``ROW<INT, STRING>`` (field names optional: ``ROW<a INT, b STRING>``) too.

    Raises:
        InvalidArgumentError: An empty list or a type kg does not build keys of (``UNKNOWN_KEY_TYPE``).
    """
    try:
        return _fields_of(_split_types(spec), spec)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"--sql-key {spec!r}: {str(exc) or 'no field'} is not a key field type kg builds "
            f"({', '.join(sorted(SQL_TYPE_KINDS))})",
            code="UNKNOWN_KEY_TYPE",
        ) from None


def _split_types(spec: str) -> list[str]:
    """Split a comma-separated type list at the commas outside parentheses and angle brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        depth += ch in "(<"
        depth -= ch in ")>"
        if ch == "," and depth == 0:
            parts.append(spec[start:i])
            start = i + 1
    parts.append(spec[start:])
    return [p.strip() for p in parts]


_SQL_TYPE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\s+)??([A-Za-z_]+)\s*(?:\((.*)\)|<(.*)>)?", re.S)


def _fields_of(parts: list[str], spec: str) -> RowFields:
    kinds, names, params = [], [], []
    for part in parts:
        m = _SQL_TYPE.fullmatch(part)
        name = m.group(1).upper() if m else part
        if m is None or name not in SQL_TYPE_KINDS:
            raise ValueError(part)
        kind, args, inner = SQL_TYPE_KINDS[name], m.group(2), m.group(3)
        param: Any = None
        if kind == "decimal":
            numbers = [int(x) for x in (args or "10, 0").split(",")]
            param = (numbers[0], numbers[1] if len(numbers) > 1 else 0)
            if not 1 <= param[0] <= 38 or not 0 <= param[1] <= param[0]:
                raise ValueError(part)
        elif kind == "timestamp":
            param = int(args or 6)
            if not 0 <= param <= 9:
                raise ValueError(part)
        elif kind == "row":
            param = _fields_of(_split_types(inner or ""), spec)
        params.append(param)
        kinds.append(kind)
        names.append(_sql_type(name, kind, param))
    has_params = any(p is not None for p in params)
    return RowFields(tuple(kinds), tuple(names), tuple(params) if has_params else ())


def locate_row_keys(
    texts: Sequence[str], fields: RowFields, max_parallelism: int, parallelism: int | None = None
) -> KeyLocations:
    """Return where SQL keys (``parse_row_key`` texts) land: ``BinaryRowData.hashCode()``, key group, subtask.

    The keys of the result are their JSON arrays as text (``[42, "abc"]``); its key type is the row type.

    Raises:
        InvalidArgumentError: A key that does not parse, or parallelism bounds Flink refuses.
    """
    # NumPy and Arrow only here: kg inspect names SQL keys without loading them.
    import numpy as np
    import pyarrow as pa

    from keygroup_cli.core.keygroups import (
        key_groups_for_hashes,
        operator_indexes_for_key_groups,
        require_parallelism_in_bounds,
    )
    from keygroup_cli.core.keys import KeyLocations

    require_parallelism_in_bounds(max_parallelism, parallelism or 1)
    shown, codes = [], []
    for text in texts:
        values = parse_row_key(text, fields)
        codes.append(row_hash_code(encode_row(fields, values)))
        shown.append(json.dumps([_shown(v) for v in values], ensure_ascii=False))
    hashes = np.array(codes, dtype=np.int32)
    groups = key_groups_for_hashes(hashes, max_parallelism)
    subtasks = (
        None if parallelism is None else operator_indexes_for_key_groups(groups, max_parallelism, parallelism)
    )
    keys = pa.array(shown, type=pa.string())
    return KeyLocations(keys, fields.type_name, max_parallelism, parallelism, hashes, groups, subtasks)


def _shown(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return shown_scalar(value)


def shown_scalar(value: Any) -> Any:
    """Return a DECIMAL as its plain text and a TIMESTAMP as Java shows it (JSON has neither); else as is."""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, SqlTimestamp):
        return str(value)
    return value


def _formats(fields: RowFields) -> list[str | None]:
    out = []
    for kind in fields.kinds:
        fmt = next((f for k, f in FIELD_KINDS.values() if k == kind), None)
        out.append(fmt)
    return out


def decode_row(fields: RowFields, row: bytes) -> tuple[str, list[Any]]:
    """Return the row kind (``+I`` …) and the field values of one row's bytes (no length prefix).

    Raises:
        RowDecodeError: A field type kg does not decode, or bytes that do not hold such a row.
    """
    if fields.undecodable:
        raise RowDecodeError(f"a {fields.undecodable} field: kg does not decode it")
    header = fields.header_bytes
    if len(row) < header + 8 * len(fields.kinds) or len(row) % 8:
        raise RowDecodeError(f"{len(row)} bytes cannot hold a row of {len(fields.kinds)} field(s)")
    if row[0] >= len(ROW_KINDS):
        raise RowDecodeError(f"row kind byte {row[0]}")
    values: list[Any] = []
    for i, (kind, fmt) in enumerate(zip(fields.kinds, _formats(fields), strict=True)):
        bit = i + 8
        slot = header + 8 * i
        if row[bit >> 3] & (1 << (bit & 7)):
            values.append(None)
        elif fmt is not None:
            values.append(struct.unpack_from(fmt, row, slot)[0])
        elif kind in ("decimal", "timestamp", "row"):
            values.append(_decode_param(kind, fields.param(i), row, slot))
        else:
            data = _var_bytes(row, slot)
            values.append(data.decode("utf-8") if kind == "string" else data)  # bytes and raw: bytes
    return ROW_KINDS[row[0]], values


def _decode_param(kind: str, param: Any, row: bytes, slot: int) -> Any:
    word = struct.unpack_from("<q", row, slot)[0]
    if kind == "decimal":
        precision, scale = param
        unscaled = (
            word
            if precision <= MAX_COMPACT_DECIMAL
            else int.from_bytes(_var_bytes(row, slot), "big", signed=True)
        )
        return Decimal(unscaled).scaleb(-scale)
    if kind == "timestamp":
        if param <= MAX_COMPACT_TIMESTAMP:
            return SqlTimestamp(word)
        offset, nanos = (word >> 32) & _MASK32, word & _MASK32
        if offset + 8 > len(row) or nanos >= 1_000_000:
            raise RowDecodeError(f"a TIMESTAMP({param}) at {offset} runs past the row")
        return SqlTimestamp(struct.unpack_from("<q", row, offset)[0], nanos)
    return decode_row(param, _var_bytes(row, slot))[1]


def _var_bytes(row: bytes, slot: int) -> bytes:
    word = int.from_bytes(row[slot : slot + 8], "little")
    if word & _INLINE_MARK:
        length = (word >> 56) & 0x7F
        if length > 7:
            raise RowDecodeError(f"inline length {length} at {slot}")
        return bytes(row[slot : slot + length])
    offset, length = word >> 32, word & _MASK32
    if offset + length > len(row):
        raise RowDecodeError(f"variable-length field at {offset} runs past the row")
    return bytes(row[offset : offset + length])


def encode_row(
    fields: RowFields, values: Sequence[Any], kind: int = 0, *, reserve_nulls: bool = True
) -> bytes:
    """Return the bytes of the ``BinaryRowData`` Flink writes for ``values`` (no length prefix).

    ``reserve_nulls``: a null long DECIMAL or fine TIMESTAMP keeps its variable-part space, as the generated
    projections that build key rows write it (``BinaryWriter.createNullSetter``); False writes it as
    ``RowDataSerializer.toBinaryRow`` does (``setNullAt``: no space), as a state value from a
    ``GenericRowData`` is written. Flink reads both alike; only the bytes differ.

    Raises:
        InvalidArgumentError: A value that does not fit its field.
    """
    if len(values) != len(fields.kinds):
        raise InvalidArgumentError(
            f"a key of {fields.type_name} has {len(fields.kinds)} field(s), got {len(values)}",
            code="KEY_PARSE_ERROR",
        )
    header = fields.header_bytes
    fixed = header + 8 * len(values)
    out = bytearray(fixed)
    out[0] = kind
    for i, (field, fmt, value) in enumerate(zip(fields.kinds, _formats(fields), values, strict=True)):
        slot = header + 8 * i
        param = fields.param(i)
        if value is None:
            bit = i + 8
            out[bit >> 3] |= 1 << (bit & 7)
            if reserve_nulls and kind_reserves(field, param):
                # A null long DECIMAL or fine TIMESTAMP keeps its space (writeDecimal(pos, null, p)).
                offset = len(out)
                out += bytes(16 if field == "decimal" else 8)
                struct.pack_into("<Q", out, slot, offset << 32)
        elif fmt is not None:
            struct.pack_into(fmt, out, slot, value)
        elif field == "decimal":
            unscaled = int(value.scaleb(param[1]))
            if param[0] <= MAX_COMPACT_DECIMAL:
                struct.pack_into("<q", out, slot, unscaled)
            else:
                data = unscaled.to_bytes(_signed_bytes(unscaled), "big", signed=True)
                offset = len(out)
                out += data + bytes(16 - len(data))
                struct.pack_into("<Q", out, slot, (offset << 32) | len(data))
        elif field == "timestamp":
            if param <= MAX_COMPACT_TIMESTAMP:
                struct.pack_into("<q", out, slot, value.millisecond)
            else:
                offset = len(out)
                out += struct.pack("<q", value.millisecond)
                struct.pack_into("<Q", out, slot, (offset << 32) | value.nano_of_millisecond)
        elif field == "row":
            data = encode_row(param, value, reserve_nulls=reserve_nulls)
            offset = len(out)
            out += data  # a row is whole 8-byte words: no padding
            struct.pack_into("<Q", out, slot, (offset << 32) | len(data))
        else:
            data = value.encode("utf-8") if field == "string" else bytes(value)
            # RAW values go to the variable part whatever their size (writeRawValue); others up to 7
            # bytes inline.
            if len(data) <= 7 and field != "raw":
                out[slot : slot + len(data)] = data
                out[slot + 7] = 0x80 | len(data)
            else:
                offset = len(out)
                out += data + bytes(-len(data) % 8)
                struct.pack_into("<Q", out, slot, (offset << 32) | len(data))
    return bytes(out)


def kind_reserves(kind: str, param: Any) -> bool:
    """Return whether a null field of this kind keeps its space (long DECIMAL, fine TIMESTAMP)."""
    return (kind == "decimal" and param[0] > MAX_COMPACT_DECIMAL) or (
        kind == "timestamp" and param > MAX_COMPACT_TIMESTAMP
    )


def _signed_bytes(value: int) -> int:
    """Return the length of ``BigInteger.toByteArray()``: the minimal two's complement."""
    return (value if value >= 0 else ~value).bit_length() // 8 + 1


def serialized_row(row: bytes) -> bytes:
    """Return a row as ``RowDataSerializer`` writes it: the big-endian int length, then the bytes."""
    return _BE_INT.pack(len(row)) + row


def row_hash_code(row: bytes) -> int:
    """Return ``BinaryRowData.hashCode()`` of a row's bytes (``MurmurHashUtils.hashBytesByWords``).

    The hash of a ``row`` key (``core.javahash.row_hash_codes``), the key its serialized bytes are.
    """
    # javahash (NumPy, Arrow) only here: kg inspect names SQL keys without loading them.
    from keygroup_cli.core.javahash import hash_code

    if len(row) % 4:
        raise ValueError("a BinaryRowData is a whole number of 8-byte words")
    return hash_code(serialized_row(row), "row")


def parse_row_key(text: str, fields: RowFields) -> tuple[Any, ...]:
    """Parse a SQL key given as text: a JSON array of its fields (``[42, "abc"]``), or one bare field.

    A one-field key may be given bare (``42``, ``abc``); ``null`` is a null field.

    Raises:
        InvalidArgumentError: The text is not such a key (``KEY_PARSE_ERROR``), or a value is out of its
            field's range (``KEY_OUT_OF_RANGE``).
    """
    if fields.unbuildable:
        raise InvalidArgumentError(
            f"kg cannot build keys of {fields.type_name}: a {fields.unbuildable} field",
            code="KEY_TYPE_UNSUPPORTED",
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8, carried as surrogate escapes
        raise InvalidArgumentError(
            f"key {text.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8", code="KEY_PARSE_ERROR"
        ) from None
    stripped = text.strip()
    values: list[Any]
    if stripped.startswith("["):
        try:
            parsed = json.loads(stripped, parse_float=Decimal)  # exact DECIMALs
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(
                f"key {text!r} is not a JSON array ({exc.msg})", code="KEY_PARSE_ERROR"
            ) from None
        values = list(parsed)
    elif len(fields.kinds) == 1:
        values = [_bare(text, fields.kinds[0])]
    else:
        raise InvalidArgumentError(
            f"key {text!r}: a key of {fields.type_name} is a JSON array of {len(fields.kinds)} fields, "
            f"e.g. {_example(fields)}",
            code="KEY_PARSE_ERROR",
        )
    if len(values) != len(fields.kinds):
        raise InvalidArgumentError(
            f"key {text!r} has {len(values)} field(s); {fields.type_name} has {len(fields.kinds)}",
            code="KEY_PARSE_ERROR",
        )
    return tuple(
        _checked(v, kind, text, fields.param(i))
        for i, (v, kind) in enumerate(zip(values, fields.kinds, strict=True))
    )


def _bare(text: str, kind: str) -> Any:
    if kind in ("string", "bytes", "timestamp"):
        return text
    if text.strip() == "null":
        return None
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError:
        raise InvalidArgumentError(f"key {text!r} is not {_a(kind)} value", code="KEY_PARSE_ERROR") from None


def _checked(value: Any, kind: str, text: str, param: Any = None) -> Any:
    if value is None:
        return None
    if kind == "decimal":
        return _decimal(value, param, text)
    if kind == "timestamp":
        return _timestamp(value, param, text)
    if kind == "row":
        if not isinstance(value, list) or len(value) != len(param.kinds):
            raise InvalidArgumentError(
                f"key {text!r}: {value!r} is not a {param.type_name} (a JSON array of {len(param.kinds)})",
                code="KEY_PARSE_ERROR",
            )
        return [
            _checked(v, k, text, param.param(i))
            for i, (v, k) in enumerate(zip(value, param.kinds, strict=True))
        ]
    if kind in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentError(f"key {text!r}: {value!r} is not {_a(kind)}", code="KEY_PARSE_ERROR")
        low, high = _INT_RANGES[kind]
        if not low <= value < high:
            raise InvalidArgumentError(
                f"key {text!r}: {value} is out of {kind} range", code="KEY_OUT_OF_RANGE"
            )
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"key {text!r}: {value!r} is not a boolean", code="KEY_PARSE_ERROR")
        return value
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
            raise InvalidArgumentError(f"key {text!r}: {value!r} is not {_a(kind)}", code="KEY_PARSE_ERROR")
        return float(value)
    if kind == "string":
        if not isinstance(value, str):
            raise InvalidArgumentError(f"key {text!r}: {value!r} is not a string", code="KEY_PARSE_ERROR")
        return value
    if isinstance(value, str):  # bytes: given as text, encoded as UTF-8
        return value.encode("utf-8")
    raise InvalidArgumentError(f"key {text!r}: {value!r} is not a byte string", code="KEY_PARSE_ERROR")


def _decimal(value: Any, param: tuple[int, int], text: str) -> Decimal:
    precision, scale = param
    try:
        if isinstance(value, bool) or not isinstance(value, (int, str, Decimal)):
            raise InvalidOperation
        exact = Decimal(value)
        quantized = exact.quantize(Decimal(1).scaleb(-scale))
    except (InvalidOperation, ValueError):
        raise InvalidArgumentError(
            f"key {text!r}: {value!r} is not a DECIMAL({precision}, {scale})", code="KEY_PARSE_ERROR"
        ) from None
    if quantized != exact or len(quantized.as_tuple().digits) > precision and quantized != 0:
        raise InvalidArgumentError(
            f"key {text!r}: {value} does not fit DECIMAL({precision}, {scale})", code="KEY_OUT_OF_RANGE"
        )
    return quantized


def _timestamp(value: Any, precision: int, text: str) -> SqlTimestamp:
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        parsed = SqlTimestamp.parse(value)
    except ValueError:
        raise InvalidArgumentError(
            f"key {text!r}: {value!r} is not a TIMESTAMP (2024-02-29T12:34:56.789)", code="KEY_PARSE_ERROR"
        ) from None
    unit = 10 ** (9 - precision)
    if (parsed.millisecond % 1000 * 1_000_000 + parsed.nano_of_millisecond) % unit:
        raise InvalidArgumentError(
            f"key {text!r}: {value} has more fractional digits than TIMESTAMP({precision})",
            code="KEY_OUT_OF_RANGE",
        )
    return parsed


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _example(fields: RowFields) -> str:
    samples = {
        "string": '"abc"',
        "bytes": '"abc"',
        "boolean": "true",
        "float": "1.5",
        "double": "1.5",
        "decimal": '"1.25"',
        "timestamp": '"2024-02-29T12:34:56.789"',
        "row": '[1, "abc"]',
    }
    return "[" + ", ".join(samples.get(k, "42") for k in fields.kinds) + "]"


__all__ = [
    "FIELD_KINDS",
    "ROW_KINDS",
    "RowDecodeError",
    "RowFields",
    "SqlTimestamp",
    "arrow_unit",
    "decode_row",
    "encode_row",
    "locate_row_keys",
    "row_fields_from_sql",
    "parse_row_key",
    "row_hash_code",
    "serialized_row",
    "shown_scalar",
]
