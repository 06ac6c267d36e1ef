"""Avro values (flink/types/avro.py): the writer schema from AvroSerializerSnapshot, values as flink-avro's
DataOutputEncoder writes them; and, for every avro-* fixture (real Flink 1.20 and 2.3, HashMap and RocksDB,
canonical and NATIVE; HashMap NATIVE's layout is walked value by value with the writer schema), kg's values
(the ``kg get`` and ``state_table`` paths) equal the job's own dump.

The byte builders below follow DataOutputEncoder (fixed-width big-endian numbers, int-length strings and
bytes, varint block counts, int union and enum indexes); the fixtures show that real Flink writes the same.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from keygroup_cli.cli.get_render import lookup_document, plain
from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.data.lookup import lookup_keys
from keygroup_cli.flink.data.tables import open_canonical, state_batches, state_table, typed_states
from keygroup_cli.flink.layouts.heap import skip_serialized
from keygroup_cli.flink.savepoint import open_savepoint
from keygroup_cli.flink.types.avro import AvroInstant, AvroSchemaError, avro_serializer_snapshot, parse_schema
from keygroup_cli.flink.types.serializer_snapshots import (
    AVRO_SERIALIZER_SNAPSHOT,
    SerializerSnapshot,
    parse_serializer_snapshot,
)
from keygroup_cli.flink.types.serializers import write_string
from keygroup_cli.flink.types.values import NotDecodable, type_codec
from tests.kg_fixture_state import FLINK_FIXTURES

ALL_FLINK = FLINK_FIXTURES.parent
AVRO_CASES = tuple(
    f"{version}/{case}"
    for version in ("2.3", "1.20")
    for case in (
        "avro-heap-canonical-p2",
        "avro-heap-native-p2",
        "avro-rocksdb-canonical-p2",
        "avro-rocksdb-native-p2",
    )
)


# -- bytes as DataOutputEncoder writes them ---------------------------------------------------------------


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _long(v: int) -> bytes:
    return struct.pack(">q", v)


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _int(len(raw)) + raw


def _count(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _utf(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw


def _snapshot(version: int, schema: str, runtime: str = "org.apache.avro.generic.GenericRecord") -> bytes:
    """A versioned AvroSerializerSnapshot (class name, version, body) of snapshot ``version``."""
    if version == 1:
        body = _utf(schema)
    elif version == 2:
        body = _utf(runtime) + _utf(schema)
    else:
        body = write_string(runtime) + write_string(schema)
    return _utf(AVRO_SERIALIZER_SNAPSHOT) + _int(version) + body


def _codec(schema: Any, version: int = 3) -> Any:
    raw = _snapshot(version, json.dumps(schema))
    return type_codec(SerializerSnapshot(AVRO_SERIALIZER_SNAPSHOT, version, raw))


EVERY_TYPE = {
    "type": "record",
    "name": "All",
    "namespace": "t",
    "fields": [
        {"name": "n", "type": "null"},
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "y", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "x", "type": {"type": "fixed", "name": "F", "size": 3}},
        {"name": "a", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "o", "type": ["null", "E"]},
        {"name": "u", "type": ["int", "string", "null"]},
        {"name": "r", "type": {"type": "record", "name": "R", "fields": [{"name": "z", "type": "F"}]}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}},
        {"name": "decf", "type": {"type": "fixed", "name": "D", "size": 2, "logicalType": "decimal",
                                  "precision": 4, "scale": 1}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}  # fmt: skip

EVERY_VALUE = b"".join(
    [
        b"\x01",  # b
        _int(-7),  # i
        _long(1 << 40),  # l
        struct.pack(">f", 1.5),  # f
        struct.pack(">d", -0.25),  # d
        _str("é€😀"),  # s
        _int(2) + b"\x00\xff",  # y
        _int(1),  # e: B
        b"abc",  # x
        _count(2) + _int(1) + _int(2) + _count(1) + _int(3) + _count(0),  # a: two blocks
        _count(1) + _str("k") + _str("v") + _count(0),  # m
        _int(1) + _int(0),  # o: E.A
        _int(1) + _str("s"),  # u: the string branch
        b"xyz",  # r.z
        _int(2) + (-12345).to_bytes(2, "big", signed=True),  # dec: -123.45
        (999).to_bytes(2, "big", signed=True),  # decf: 99.9
        _int(-1),  # day
        _long(-1),  # ms
        _long(1_500),  # us
        _int(61_000),  # t: time-millis, read as its int
        _str("6f1c2a52-0000-4000-8000-000000000001"),  # id
    ]
)


def test_every_type_decodes_and_types() -> None:
    codec = _codec(EVERY_TYPE)
    assert codec.reason is None and codec.type_name == "Avro t.All"
    value = codec.decode(EVERY_VALUE)
    assert value == {
        "n": None,
        "b": True,
        "i": -7,
        "l": 1 << 40,
        "f": 1.5,
        "d": -0.25,
        "s": "é€😀",
        "y": b"\x00\xff",
        "e": "B",
        "x": b"abc",
        "a": [1, 2, 3],
        "m": {"k": "v"},
        "o": "A",
        "u": {"string": "s"},
        "r": {"z": b"xyz"},
        "dec": Decimal("-123.45"),
        "decf": Decimal("99.9"),
        "day": dt.date(1969, 12, 31),
        "ms": AvroInstant(-1, "ms"),
        "us": AvroInstant(1500, "us"),
        "t": 61_000,
        "id": "6f1c2a52-0000-4000-8000-000000000001",
    }
    arrow = codec.arrow_type()
    assert arrow.field("u").type == pa.struct([("int", pa.int32()), ("string", pa.string())])
    assert arrow.field("o").type == pa.string()  # [null, enum]: the enum, nullable
    assert arrow.field("x").type == pa.binary(3)
    assert arrow.field("m").type == pa.map_(pa.string(), pa.string())
    assert arrow.field("dec").type == pa.decimal128(5, 2)
    assert arrow.field("day").type == pa.date32()
    assert arrow.field("ms").type == pa.timestamp("ms", tz="UTC")
    assert arrow.field("us").type == pa.timestamp("us", tz="UTC")
    row = pa.array([codec.to_arrow(value)], type=arrow).to_pylist()[0]
    assert row["u"] == {"int": None, "string": "s"}
    assert row["m"] == [("k", "v")]
    assert row["day"] == dt.date(1969, 12, 31)
    assert row["us"] == dt.datetime(1970, 1, 1, 0, 0, 0, 1500, tzinfo=dt.timezone.utc)
    assert row["dec"] == Decimal("-123.45")


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0, "ms", "1970-01-01T00:00:00Z"),
        (1, "ms", "1970-01-01T00:00:00.001Z"),
        (-1, "ms", "1969-12-31T23:59:59.999Z"),
        (1_500, "us", "1970-01-01T00:00:00.001500Z"),
        (1_700_000_000_000_007, "us", "2023-11-14T22:13:20.000007Z"),
    ],
)
def test_instants_read_as_javas_instant_to_string(value: int, unit: str, text: str) -> None:
    assert str(AvroInstant(value, unit)) == text


def test_dates_and_instants_beyond_datetime_keep_their_count() -> None:
    # Year 10000 and beyond: Python's datetime has no such value; JSON shows the count, Arrow takes it.
    far = 2_932_897  # days from 1970-01-01 to 10000-01-01
    codec = _codec(
        {
            "type": "record",
            "name": "Far",
            "fields": [
                {"name": "day", "type": {"type": "int", "logicalType": "date"}},
                {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            ],
        }
    )
    value = codec.decode(_int(far) + _long(far * 86_400_000))
    assert value == {"day": far, "ms": AvroInstant(far * 86_400_000, "ms")}
    assert plain(value) == {"day": far, "ms": far * 86_400_000}
    assert pa.array([codec.to_arrow(value)], type=codec.arrow_type()).cast(
        pa.struct([("day", pa.int32()), ("ms", pa.int64())])
    ).to_pylist() == [{"day": far, "ms": far * 86_400_000}]
    assert AvroInstant(-62_135_596_800_000 + 1, "ms").iso() == "0001-01-01T00:00:00.001Z"


@pytest.mark.parametrize("version", [1, 2, 3])
def test_each_snapshot_version_gives_the_schema_and_parses_in_a_header(version: int) -> None:
    schema = json.dumps(EVERY_TYPE)
    raw = _snapshot(version, schema)
    runtime, text = avro_serializer_snapshot(raw, version)
    assert text == schema
    assert runtime == (None if version == 1 else "org.apache.avro.generic.GenericRecord")
    if version == 1:  # also written with the runtime class first
        with_class = _utf(AVRO_SERIALIZER_SNAPSHOT) + _int(1) + _utf("a.B") + _utf(schema)
        assert avro_serializer_snapshot(with_class, 1) == ("a.B", schema)
        assert parse_serializer_snapshot(with_class, "test").raw == with_class
    # The header grammar finds the body's end from the strings (v2, v3: known, not backtracked).
    parsed = parse_serializer_snapshot(raw, "test")
    assert (parsed.class_name, parsed.version, parsed.known, parsed.raw) == (
        AVRO_SERIALIZER_SNAPSHOT,
        version,
        version > 1,
        raw,
    )


def test_a_null_item_array_and_an_empty_record_take_no_bytes() -> None:
    codec = _codec({"type": "array", "items": "null"})
    assert codec.decode(_count(3) + _count(0)) == [None, None, None]
    empty = _codec({"type": "record", "name": "E", "fields": []})
    assert empty.decode(b"") == {}


@pytest.mark.parametrize(
    ("schema", "data", "why"),
    [
        ("long", _long(1)[:7], "runs past"),
        ("long", _long(1) + b"\x00", "left after"),
        ("string", _int(5) + b"ab", "runs past"),
        ("string", _int(-1), "runs past"),
        ("string", _int(1) + b"\xff", "UTF-8"),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, _int(1), "out of range"),
        (["null", "int"], _int(2) + _int(1), "out of range"),
        ({"type": "array", "items": "long"}, _count(3) + _long(1), "runs past"),
        ({"type": "array", "items": "null"}, _count(1 << 40) + _count(0), "runs past"),
        ({"type": "array", "items": "int"}, _count(1) + _int(1), "runs past"),  # no end block
        ({"type": "map", "values": "int"}, b"\xff" * 11, "longer than a long"),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 0},
            _int(1) + b"\x7f",
            "digits",
        ),
    ],
)
def test_damaged_bytes_are_not_decodable_and_say_why(schema: Any, data: bytes, why: str) -> None:
    with pytest.raises(NotDecodable, match=why):
        _codec(schema).decode(data)


def test_a_schema_kg_cannot_type_stays_bytes_with_a_note() -> None:
    recursive = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    codec = _codec(recursive)
    assert codec.reason is not None and "recursive" in codec.reason
    with pytest.raises(AvroSchemaError, match="unknown type name"):
        parse_schema('{"type": "array", "items": "Nope"}')
    bad = type_codec(SerializerSnapshot(AVRO_SERIALIZER_SNAPSHOT, 9, _snapshot(3, '"int"')))
    assert bad.reason is not None and "version 9" in bad.reason
    for version in (1, 2, 3):  # a body cut short, or with bytes after the schema
        raw = _snapshot(version, '"int"')
        for damaged in (raw[:-1], raw + b"\x00"):
            with pytest.raises(AvroSchemaError, match="AvroSerializerSnapshot"):
                avro_serializer_snapshot(damaged, version)


def test_named_types_resolve_through_namespaces() -> None:
    schema = {
        "type": "record",
        "name": "a.Outer",
        "fields": [
            {"name": "x", "type": {"type": "fixed", "name": "H", "size": 1}},
            {"name": "y", "type": "a.H"},
            {"name": "z", "type": "H"},
        ],
    }
    assert _codec(schema).decode(b"123") == {"x": b"1", "y": b"2", "z": b"3"}
    # A short name means the enclosing namespace's type first, as Avro resolves it.
    shadowed = {
        "type": "record",
        "name": "Outer",
        "fields": [
            {"name": "x", "type": {"type": "fixed", "name": "H", "size": 1}},
            {
                "name": "y",
                "type": {
                    "type": "record",
                    "name": "a.In",
                    "fields": [
                        {"name": "h", "type": {"type": "fixed", "name": "H", "size": 2}},
                        {"name": "r", "type": "H"},
                    ],
                },
            },
            {"name": "z", "type": "H"},
        ],
    }
    assert _codec(shadowed).decode(b"122334") == {"x": b"1", "y": {"h": b"22", "r": b"33"}, "z": b"4"}


# -- the fixtures: kg's values equal the job's own dump, key by key ----------------------------------------


def _want(case: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((ALL_FLINK / case / "expected-avro-state.json").read_text("utf-8"))
    return doc


def _json_of_arrow(value: Any, arrow: pa.DataType) -> Any:
    """Return an Arrow value (``to_pylist``) of type ``arrow`` in the dump's JSON form."""
    if value is None:
        return None
    if pa.types.is_map(arrow):
        return {k: _json_of_arrow(v, arrow.item_type) for k, v in value}
    if pa.types.is_struct(arrow):
        return {f.name: _json_of_arrow(value[f.name], f.type) for f in arrow}
    if pa.types.is_list(arrow):
        return [_json_of_arrow(v, arrow.value_type) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        micros = (value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)
        unit = arrow.unit
        return str(AvroInstant(micros // 1000 if unit == "ms" else micros, unit))
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _union_as_branch(value: Any) -> Any:
    """The dump names the set branch of a non-null union only; Arrow's struct lists every branch."""
    if isinstance(value, dict):
        set_fields = [k for k, v in value.items() if v is not None]
        if set(value) == {"int", "string", "kg.avro.Inner"} and len(set_fields) == 1:
            return {set_fields[0]: _union_as_branch(value[set_fields[0]])}
        return {k: _union_as_branch(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_union_as_branch(v) for v in value]
    return value


@pytest.mark.parametrize("case", AVRO_CASES)
def test_kg_get_values_equal_the_jobs_own_dump(case: str) -> None:
    want = _want(case)
    keys = [k["key"] for k in want["keys"]]
    doc = lookup_document(
        lookup_keys(open_savepoint(ALL_FLINK / case), want["uid"], keys), str(ALL_FLINK / case)
    )
    assert [s["notes"] for s in doc["states"]] == [[] for _ in doc["states"]]
    for found, expect in zip(doc["keys"], want["keys"], strict=True):
        assert (found["key"], found["key_group"], found["found"]) == (expect["key"], expect["keyGroup"], True)
        states = found["states"]
        got = {
            "reading": states["reading"]["entries"][0]["value"],
            "events": states["events"]["entries"][0]["value"],
            "event-map": {e["user_key"]: e["value"] for e in states["event-map"]["entries"]},
        }
        assert json.loads(json.dumps(got)) == expect["states"], (case, expect["key"])


@pytest.mark.parametrize("case", AVRO_CASES)
def test_read_state_tables_equal_the_jobs_own_dump(case: str) -> None:
    want = {k["key"]: k["states"] for k in _want(case)["keys"]}
    # kg.read_state's path, every state in one pass over the files (a NATIVE case is rewritten once).
    batches: dict[str, list[pa.RecordBatch]] = {}
    with open_canonical(ALL_FLINK / case) as savepoint:
        schemas = {s.name: s.schema for s in typed_states(savepoint, "avro-state")}
        for name, batch in state_batches(savepoint, "avro-state"):
            batches.setdefault(name, []).append(batch)
        if case == AVRO_CASES[0]:
            reading = state_table(savepoint, "avro-state", "reading")
    tables = {
        s: pa.Table.from_batches(batches[s], schema=schemas[s]) for s in ("reading", "events", "event-map")
    }
    if case == AVRO_CASES[0]:
        assert reading.equals(tables["reading"])
    for state, table in tables.items():
        assert table.column("undecoded").null_count == table.num_rows
        got: dict[str, Any] = {}
        for row in table.to_pylist():
            value = _union_as_branch(_json_of_arrow(row["value"], table.schema.field("value").type))
            if state == "event-map":
                got.setdefault(row["key"], {})[row["user_key"]] = value
            else:
                got[row["key"]] = value
        assert got == {k: v[state] for k, v in want.items()}, (case, state)


def test_the_heap_layout_walks_avro_values_and_refuses_what_it_cannot_read() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    snap = parse_serializer_snapshot(_snapshot(3, json.dumps(schema)), "test")
    value = _str("abc")
    assert skip_serialized(snap, value + b"rest", 0, "f") == len(value)
    with pytest.raises(InvalidInputError, match="Avro value does not read"):
        skip_serialized(snap, value[:-1], 0, "f")
    recursive = {"type": "record", "name": "N", "fields": [{"name": "n", "type": ["null", "N"]}]}
    with pytest.raises(UnsupportedFormatError) as refused:
        skip_serialized(parse_serializer_snapshot(_snapshot(2, json.dumps(recursive)), "test"), b"", 0, "f")
    assert refused.value.code == "FLINK_HEAP_SERIALIZER_UNKNOWN"
