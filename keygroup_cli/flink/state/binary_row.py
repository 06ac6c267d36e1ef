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
  a null field's slot is zero.

``BinaryRowData.hashCode()`` (the hash ``KeyGroupRangeAssignment`` puts through ``MathUtils.murmurHash``)
is ``MurmurHashUtils.hashBytesByWords`` over the row's bytes: murmur3's 32-bit body over little-endian
4-byte words with seed 42, finalised with the byte length.

Field types come from the nested serializer snapshots of ``RowDataSerializerSnapshot`` (parsed by
``keyed_header``); the SQL type names (``INTEGER``, ``VARCHAR``) from the ``LogicalTypeRoot`` each field's
Java-serialized ``LogicalType`` names, for display only.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from keygroup_cli.errors import InvalidArgumentError
from keygroup_cli.flink.state.keyed_header import SerializerSnapshot
from keygroup_cli.flink.state.serializers import ROW_DATA_SNAPSHOT

if TYPE_CHECKING:
    from keygroup_cli.keys import KeyLocations

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
}
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
}
#: ``RowKind`` short strings by byte value.
ROW_KINDS = ("+I", "-U", "+U", "-D")
#: ``MurmurHashUtils.DEFAULT_SEED`` (``javahash.ROW_HASH_SEED``).
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


@dataclass(frozen=True, slots=True)
class RowFields:
    """The fields of the rows one ``RowDataSerializer`` writes.

    Attributes:
        kinds: Each field's kind (``int``, ``string``, …, or ``?<serializer>`` for one kg does not decode).
        sql_types: Each field's SQL type root (``INTEGER``, ``VARCHAR``), or its kind where not found.
    """

    kinds: tuple[str, ...]
    sql_types: tuple[str, ...]

    @classmethod
    def of(cls, snapshot: SerializerSnapshot) -> RowFields:
        """Read the fields from a ``RowDataSerializerSnapshot`` (its nested snapshots, one per field)."""
        if snapshot.class_name != ROW_DATA_SNAPSHOT:
            raise ValueError(f"not a RowDataSerializer snapshot: {snapshot.class_name}")
        kinds = tuple(
            FIELD_KINDS.get(n.class_name, ("?" + n.serializer_name, None))[0] for n in snapshot.nested
        )
        roots = [
            m.group(1).decode()
            for m in (_TYPE_ROOT.search(c) for c in snapshot.raw.split(_JAVA_STREAM)[1:])
            if m
        ]
        sql = tuple(roots) if len(roots) == len(kinds) else tuple(k.upper() for k in kinds)
        return cls(kinds, sql)

    @property
    def undecodable(self) -> str | None:
        """Return the first field type kg does not decode, else None."""
        return next((k[1:] for k in self.kinds if k.startswith("?")), None)

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


def row_fields_from_sql(spec: str) -> RowFields:
    """Return the fields of key rows named by SQL types: ``INT,STRING`` (any case; ``VARCHAR(10)`` too).

    Raises:
        InvalidArgumentError: An empty list or a type kg does not build keys of (``UNKNOWN_KEY_TYPE``).
    """
    names = [re.sub(r"\(.*\)$", "", part.strip()).strip().upper() for part in spec.split(",")]
    unknown = [n for n in names if n not in SQL_TYPE_KINDS]
    if not spec.strip() or unknown:
        raise InvalidArgumentError(
            f"--sql-key {spec!r}: {', '.join(unknown) or 'no field'} is not a key field type kg builds "
            f"({', '.join(sorted(SQL_TYPE_KINDS))})",
            code="UNKNOWN_KEY_TYPE",
        )
    return RowFields(tuple(SQL_TYPE_KINDS[n] for n in names), tuple(names))


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

    from keygroup_cli.keygroups import (
        check_parallelism_bounds,
        key_groups_for_hashes,
        operator_indexes_for_key_groups,
    )
    from keygroup_cli.keys import KeyLocations

    check_parallelism_bounds(max_parallelism, parallelism or 1)
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
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


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
        else:
            data = _var_bytes(row, slot)
            values.append(data.decode("utf-8") if kind == "string" else data)  # bytes and raw: bytes
    return ROW_KINDS[row[0]], values


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


def encode_row(fields: RowFields, values: Sequence[Any], kind: int = 0) -> bytes:
    """Return the bytes of the ``BinaryRowData`` Flink writes for ``values`` (no length prefix).

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
        if value is None:
            bit = i + 8
            out[bit >> 3] |= 1 << (bit & 7)
        elif fmt is not None:
            struct.pack_into(fmt, out, slot, value)
        else:
            data = value.encode("utf-8") if field == "string" else bytes(value)
            if len(data) <= 7:
                out[slot : slot + len(data)] = data
                out[slot + 7] = 0x80 | len(data)
            else:
                offset = len(out)
                out += data + bytes(-len(data) % 8)
                struct.pack_into("<Q", out, slot, (offset << 32) | len(data))
    return bytes(out)


def serialized_row(row: bytes) -> bytes:
    """Return a row as ``RowDataSerializer`` writes it: the big-endian int length, then the bytes."""
    return _BE_INT.pack(len(row)) + row


def row_hash_code(row: bytes) -> int:
    """Return ``BinaryRowData.hashCode()`` of a row's bytes (``MurmurHashUtils.hashBytesByWords``).

    The hash of a ``row`` key (``javahash.row_hash_codes``), the key its serialized bytes are.
    """
    # javahash (NumPy, Arrow) only here: kg inspect names SQL keys without loading them.
    from keygroup_cli.javahash import hash_code

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
            parsed = json.loads(stripped)
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
    return tuple(_checked(v, kind, text) for v, kind in zip(values, fields.kinds, strict=True))


def _bare(text: str, kind: str) -> Any:
    if kind in ("string", "bytes"):
        return text
    if text.strip() == "null":
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise InvalidArgumentError(f"key {text!r} is not {_a(kind)} value", code="KEY_PARSE_ERROR") from None


def _checked(value: Any, kind: str, text: str) -> Any:
    if value is None:
        return None
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
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgumentError(f"key {text!r}: {value!r} is not {_a(kind)}", code="KEY_PARSE_ERROR")
        return float(value)
    if kind == "string":
        if not isinstance(value, str):
            raise InvalidArgumentError(f"key {text!r}: {value!r} is not a string", code="KEY_PARSE_ERROR")
        return value
    if isinstance(value, str):  # bytes: given as text, encoded as UTF-8
        return value.encode("utf-8")
    raise InvalidArgumentError(f"key {text!r}: {value!r} is not a byte string", code="KEY_PARSE_ERROR")


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _example(fields: RowFields) -> str:
    samples = {"string": '"abc"', "bytes": '"abc"', "boolean": "true", "float": "1.5", "double": "1.5"}
    return "[" + ", ".join(samples.get(k, "42") for k in fields.kinds) + "]"


__all__ = [
    "FIELD_KINDS",
    "ROW_KINDS",
    "RowDecodeError",
    "RowFields",
    "decode_row",
    "encode_row",
    "locate_row_keys",
    "row_fields_from_sql",
    "parse_row_key",
    "row_hash_code",
    "serialized_row",
]
