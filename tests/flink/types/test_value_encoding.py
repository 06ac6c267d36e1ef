"""Encoding typed values (flink/types/values.py, avro.py) against the bytes Flink's own serializers write.

``fixtures/vectors/serializer_values.json.gz`` holds, per serializer, its snapshot and the bytes Flink 2.3's
``TypeSerializer.serialize`` wrote for edge values (``SerializerVectorGen.java``): empty, null, non-BMP and
lone-surrogate strings, a string of 70,000 chars, NaN with other payloads, extremes, row kinds and null masks
across bytes, null POJO fields and a null POJO, TTL values, SQL rows with long DECIMALs, fine TIMESTAMPs,
nested rows and RAW fields. Each value is stated here in kg's decoded form: it must encode to exactly Flink's
bytes, decode from them, and survive the trip through Arrow. Property tests hold the primitives and strings
to Java's rules over many values; opaque serializers are refused.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import struct
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keygroup_cli.core.errors import ExitCode
from keygroup_cli.flink.types.avro import AvroEncodeError, parse_schema, read_value, write_value
from keygroup_cli.flink.types.binary_row import SqlTimestamp
from keygroup_cli.flink.types.serializer_snapshots import parse_serializer_snapshot
from keygroup_cli.flink.types.serializers import write_string
from keygroup_cli.flink.types.values import (
    Codec,
    NotEncodable,
    TtlValue,
    ValueNotEncodable,
    arrow_values,
    key_type_codec,
    type_codec,
)
from tests.kg_fixture_state import ROOT

VECTORS = ROOT / "fixtures" / "vectors" / "serializer_values.json.gz"
NAN = float("nan")
LONG_STRING = "".join("\u00e9" if i % 7 == 0 else chr(ord("a") + i % 26) for i in range(70000))
ROW_TEN = ["a", 1, "b", 2, "c", 3, "d", 4, "e", 5]
POJO = "kg.fixtures.SerializerVectorGen$Reading"

#: Each vector's values as kg decodes them (same order as SerializerVectorGen writes them).
EXPECTED: dict[str, list[Any]] = {
    "string": ["", "a", "h\u00e9llo", "\U0001f600x", "\ud800", "\x00", "\uffff", LONG_STRING, None],
    "long": [-(2**63), -1, 0, 2**63 - 1],
    "int": [-(2**31), -1, 2**31 - 1],
    "short": [-32768, 32767],
    "byte": [-128, 127],
    "double": [NAN, NAN, -0.0, math.inf, -math.inf, 1.5, 5e-324],
    "float": [NAN, NAN, -0.0, struct.unpack(">f", struct.pack(">f", 1.1))[0], 3.4028234663852886e38],
    "boolean": [True, False],
    "char": ["a", "\ud83d", "\uffff", "\x00"],
    "long[]": [[-(2**63), 0], []],
    "int[]": [[-1, 7]],
    "short[]": [[-1]],
    "double[]": [[NAN, -0.0]],
    "float[]": [[1.5, NAN]],
    "boolean[]": [[True, False]],
    "char[]": [["x", "\ud800"], ["a", "\u00e9"]],
    "byte[]": [b"", b"\x00\xff\x7f"],
    "String[]": [["a", None, "\U0001f600"], []],
    "enum": ["DAYS", "NANOSECONDS"],
    "list-long": [[1, -2], []],
    "list-string": [["a", None]],
    "map": [[("a", 1), ("b", None)], []],
    "time-window": [{"start": -5, "end": 10}, {"start": -(2**63), "end": 2**63 - 1}],
    "void-namespace": [None],
    "global-window": [None],
    "tuple": [{"f0": "x", "f1": 5, "f2": -1}, {"f0": None, "f1": 0, "f2": 0}],
    "row": [
        {"kind": "-U", "fields": ["a", None, "b", 3, None, None, "c", 4, None, 5]},
        {"kind": "-D", "fields": [None] * 10},
        {"kind": "+I", "fields": ROW_TEN},
    ],
    "row-legacy": [{"kind": "+I", "fields": [1, None]}, {"kind": "+I", "fields": [None, "z"]}],
    "pojo": [
        {"count": 42, "level": -3, "samples": [1.0], "sensor": "s1"},
        {"count": None, "level": 0, "samples": None, "sensor": None},
        None,
    ],
    "ttl": [TtlValue("v", 1700000000123), TtlValue(None, -1)],
    "rowdata": [
        {
            "kind": "+U",
            "fields": [
                1,
                "h\u00e9llo w\u00f6rld, long",
                Decimal("-123456789012345.67"),
                SqlTimestamp(-1, 999999),
                -(2**63),
                Decimal("12.30"),
                SqlTimestamp(1700000000123),
                [7, "\U0001f600"],
                True,
                NAN,
                b"\x01\x02",
                write_string("r"),  # RAW<String>: the bytes of its own serializer (StringSerializer)
            ],
        },
        {"kind": "+I", "fields": [None] * 12},
        {
            "kind": "+I",
            "fields": [
                -5,
                "short",
                Decimal("0.01"),
                SqlTimestamp(0, 1),
                0,
                None,
                None,
                [None, "a longer nested string"],
                False,
                -0.0,
                bytes(range(1, 10)),
                write_string("a longer raw value"),
            ],
        },
    ],
}
#: Serializers kg does not decode: refused with their type and reason.
REFUSED = {"kryo": "Kryo", "big-integer": "BigIntSerializer"}


def _vectors() -> dict[str, tuple[Codec, list[bytes]]]:
    cases = json.loads(gzip.decompress(VECTORS.read_bytes()))
    out = {}
    for case in cases:
        snapshot = parse_serializer_snapshot(base64.b64decode(case["snapshot"]), case["name"])
        out[case["name"]] = (type_codec(snapshot), [base64.b64decode(v) for v in case["values"]])
    return out


VECTOR_CODECS = _vectors()


def _same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to NaN (and -0.0 told apart from 0.0), through containers."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, TtlValue) and isinstance(b, TtlValue):
        return a.last_access == b.last_access and _same(a.value, b.value)
    return type(a) is type(b) and a == b


def _expected(name: str) -> list[Any]:
    return EXPECTED[name]


def test_every_vector_is_stated() -> None:
    assert set(VECTOR_CODECS) == set(EXPECTED) | set(REFUSED)
    for name, values in EXPECTED.items():
        assert len(values) == len(VECTOR_CODECS[name][1]), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_values_encode_to_the_bytes_flink_writes(name: str) -> None:
    codec, flink_bytes = VECTOR_CODECS[name]
    assert codec.encodable and codec.write_reason is None
    for value, raw in zip(_expected(name), flink_bytes, strict=True):
        assert codec.write(value) == raw, (name, value)
        assert _same(codec.decode(raw), value), (name, raw)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_values_survive_the_trip_through_arrow(name: str) -> None:
    codec, flink_bytes = VECTOR_CODECS[name]
    # Arrow strings are UTF-8: a Java String or char holding a lone surrogate has no Arrow form.
    pairs = [(codec.decode(raw), raw) for raw in flink_bytes]
    pairs = [(value, raw) for value, raw in pairs if not _lone_surrogate(value)]
    assert pairs
    column = pa.array([codec.to_arrow(value) for value, _ in pairs], type=codec.arrow_type())
    for cell, (_, raw) in zip(arrow_values(column), pairs, strict=True):
        assert codec.encode_arrow(cell) == raw, (name, cell)
    # to_pylist's own forms too (datetimes, map pairs), except for nanoseconds, which it cannot give
    # without pandas.
    if name != "rowdata":
        for cell, (_, raw) in zip(column.to_pylist(), pairs, strict=True):
            assert codec.encode_arrow(cell) == raw, (name, cell)


def _lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_lone_surrogate(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_lone_surrogate(v) for v in value)
    return False


def test_a_sql_key_row_encodes_as_the_key_selector_writes_it() -> None:
    # As a key (the list of its fields) the same row has the same bytes when no long DECIMAL or fine
    # TIMESTAMP is null; a null one keeps its space, as generated key projections write it.
    codec, flink_bytes = VECTOR_CODECS["rowdata"]
    key = key_type_codec(_rowdata_snapshot())
    fields = _expected("rowdata")[2]["fields"]
    assert key.write(fields) == flink_bytes[2]
    assert key.decode(flink_bytes[2]) == codec.decode(flink_bytes[2])["fields"]
    nulls = key.write([None] * 12)
    assert len(nulls) == len(flink_bytes[1]) + 16 + 8  # DECIMAL(20, 2): 16 bytes, TIMESTAMP(9): 8
    assert key.decode(nulls) == [None] * 12
    with pytest.raises(ValueNotEncodable, match="f2"):
        key.write([1, "a", Decimal("0.001"), *([None] * 9)])


def _rowdata_snapshot() -> Any:
    cases = json.loads(gzip.decompress(VECTORS.read_bytes()))
    case = next(c for c in cases if c["name"] == "rowdata")
    return parse_serializer_snapshot(base64.b64decode(case["snapshot"]), "rowdata")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_opaque_serializers_are_refused_with_their_type_and_reason(name: str) -> None:
    codec, flink_bytes = VECTOR_CODECS[name]
    assert not codec.encodable
    assert codec.write_reason and "kept as bytes" not in codec.write_reason
    for raw in flink_bytes:
        for attempt in (codec.write, codec.encode_arrow):
            with pytest.raises(NotEncodable) as caught:
                attempt(raw)
            assert caught.value.type_name == REFUSED[name]
            assert caught.value.reason == codec.write_reason
            assert caught.value.exit_code == ExitCode.UNSUPPORTED
            assert str(caught.value).startswith(f"{REFUSED[name]}: kg cannot encode it (")


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("long", 2**63, "out of the range of Long"),
        ("int", True, "not an integer"),
        ("int", 1.5, "not an integer"),
        ("long", None, "writes no null"),
        ("char", "\U0001f600", "one UTF-16 code unit"),
        ("enum", "WEEKS", "not one of its constants"),
        ("tuple", {"f0": "x", "f1": None, "f2": 1}, ".f1: None"),
        ("tuple", {"f0": "x", "f1": 1}, "no field 'f2'"),
        ("row", {"kind": "+X", "fields": ROW_TEN}, "row kind"),
        ("row-legacy", {"kind": "-D", "fields": [1, None]}, "writes no row kind"),
        ("pojo", ["s1", 42], "a dict of its fields"),
        ("pojo", {"count": "many", "level": 1, "samples": None, "sensor": None}, ".count"),
        ("map", [("a", "not a long")], "['a']"),
        ("list-long", [1, None], "[1]"),
        ("ttl", "plain", "TtlValue"),
        ("rowdata", {"kind": "+I", "fields": [2**31, *([None] * 11)]}, ".f0"),
        ("rowdata", {"kind": "+I", "fields": [None, "\ud800", *([None] * 10)]}, "lone surrogate"),
    ],
)
def test_values_that_do_not_fit_are_refused(name: str, value: Any, problem: str) -> None:
    codec = VECTOR_CODECS[name][0]
    with pytest.raises(ValueNotEncodable) as caught:
        codec.write(value)
    assert problem in str(caught.value)
    assert caught.value.code == "VALUE_DOES_NOT_FIT" and caught.value.exit_code == ExitCode.USAGE


# -- properties ----------------------------------------------------------------------------------------


def _string_value_reference(text: str) -> bytes:
    """``StringValue.writeString`` as Java's loop writes it: length + 1, then each UTF-16 unit, as varints."""
    units = struct.unpack(
        f"<{len(text.encode('utf-16-le', 'surrogatepass')) // 2}H", text.encode("utf-16-le", "surrogatepass")
    )
    out = bytearray()
    for number in (len(units) + 1, *units):
        while number >= 0x80:
            out.append((number & 0x7F) | 0x80)
            number >>= 7
        out.append(number)
    return bytes(out)


ANY_CHARS = st.characters(exclude_categories=())  # lone surrogates included


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=ANY_CHARS, max_size=200))
def test_strings_are_written_as_java_writes_them(text: str) -> None:
    codec = VECTOR_CODECS["string"][0]
    raw = codec.write(text)
    assert raw == _string_value_reference(text)
    assert codec.decode(raw) == text


def test_strings_longer_than_an_unsigned_short() -> None:
    codec = VECTOR_CODECS["string"][0]
    for text in ("x" * 65536, "\U0001f600" * 40000, LONG_STRING):
        raw = codec.write(text)
        assert raw == _string_value_reference(text)
        assert codec.decode(raw) == text


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_longs_and_narrower_ints_are_big_endian_twos_complement(number: int) -> None:
    for name, bits, fmt in (("long", 64, ">q"), ("int", 32, ">i"), ("short", 16, ">h"), ("byte", 8, ">b")):
        codec = VECTOR_CODECS[name][0]
        if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
            assert codec.write(number) == struct.pack(fmt, number)
            assert codec.decode(codec.write(number)) == number
        else:
            with pytest.raises(ValueNotEncodable, match="out of the range"):
                codec.write(number)


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_doubles_are_written_as_double_to_long_bits(number: float) -> None:
    codec = VECTOR_CODECS["double"][0]
    raw = codec.write(number)
    if math.isnan(number):
        assert raw == VECTOR_CODECS["double"][1][0]  # Flink's NaN, whatever the payload
    else:
        assert raw == struct.pack(">d", number)
        assert _same(codec.decode(raw), number)


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=True))
def test_floats_are_written_as_float_to_int_bits(number: float) -> None:
    codec = VECTOR_CODECS["float"][0]
    raw = codec.write(number)
    if math.isnan(number):
        assert raw == VECTOR_CODECS["float"][1][0]
    else:
        assert raw == struct.pack(">f", number)
        assert _same(codec.decode(raw), number)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(alphabet=ANY_CHARS, max_size=20)), max_size=20))
def test_string_arrays_and_lists_round_trip(items: list[str | None]) -> None:
    for name in ("String[]", "list-string"):
        codec = VECTOR_CODECS[name][0]
        raw = codec.write(items)
        assert raw[:4] == struct.pack(">i", len(items))
        assert raw[4:] == b"".join(_string_value_reference(s) if s is not None else b"\x00" for s in items)
        assert codec.decode(raw) == items


# -- Avro (values in the fixtures cover records, strings, longs, doubles, unions and enums) -------------

AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Everything",
        "namespace": "kg.test",
        "fields": [
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "f", "type": "float"},
            {"name": "by", "type": "bytes"},
            {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
            {"name": "e", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}},
            {"name": "a", "type": {"type": "array", "items": "long"}},
            {"name": "m", "type": {"type": "map", "values": ["null", "string"]}},
            {"name": "u", "type": ["null", "int", "string"]},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {
                "name": "decf",
                "type": {
                    "type": "fixed",
                    "name": "D",
                    "size": 8,
                    "logicalType": "decimal",
                    "precision": 12,
                    "scale": 3,
                },
            },
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
)


def _avro_bytes() -> bytes:
    """One record written field by field by DataOutputEncoder's rules (the docstring of avro.py)."""
    return b"".join(
        [
            b"\x01",
            struct.pack(">i", -7),
            struct.pack(">f", 2.5),
            struct.pack(">i", 3) + b"abc",
            b"wxyz",
            struct.pack(">i", 1),
            b"\x02" + struct.pack(">q", 1) + struct.pack(">q", -1) + b"\x00",
            b"\x02"
            + struct.pack(">i", 1)
            + b"k"
            + struct.pack(">i", 0)
            + struct.pack(">i", 1)
            + b"n"
            + struct.pack(">i", 1)
            + struct.pack(">i", 2)
            + b"hi"
            + b"\x00",
            struct.pack(">i", 2) + struct.pack(">i", 2) + b"ok",
            struct.pack(">i", 2) + (-12345).to_bytes(2, "big", signed=True),
            (1234567).to_bytes(8, "big", signed=True),
            struct.pack(">i", 19000),
            struct.pack(">q", 1_700_000_000_123_456),
        ]
    )


def test_avro_records_encode_as_data_output_encoder_writes_them() -> None:
    node = parse_schema(AVRO_SCHEMA)
    raw = _avro_bytes()
    value, end = read_value(node, raw, 0)
    assert end == len(raw)
    assert write_value(node, value) == raw
    assert value["m"] == {"k": None, "n": "hi"} and value["u"] == {"string": "ok"}
    # Through Arrow and back (the export's form, then pyarrow's own Python objects).
    column = pa.array([node.to_arrow(value)], type=node.arrow)
    for cell in (arrow_values(column)[0], column.to_pylist()[0]):
        assert write_value(node, node.from_arrow(cell)) == raw
    # An empty array and map are one 0 byte each (no block).
    empty = dict(value, a=[], m={})
    again = write_value(node, empty)
    assert read_value(node, again, 0)[0] == empty
    assert len(again) == len(raw) - 17 - 25  # [1, -1]: 18 bytes; {"k": None, "n": "hi"}: 26


@pytest.mark.parametrize(
    ("field", "bad", "problem"),
    [
        ("e", "BLUE", "not a symbol"),
        ("fx", b"abc", "holds 4 bytes"),
        ("u", {"double": 1.0}, "no branch 'double'"),
        ("dec", Decimal("1.234"), "decimal places"),
        ("dec", Decimal("12345678.9"), "more digits"),
        ("i", 2**31, "out of the range"),
        ("a", [1, "x"], "[1]"),
    ],
)
def test_avro_values_that_do_not_fit_are_refused(field: str, bad: Any, problem: str) -> None:
    node = parse_schema(AVRO_SCHEMA)
    value = dict(read_value(node, _avro_bytes(), 0)[0], **{field: bad})
    with pytest.raises(AvroEncodeError, match=problem.replace("[", r"\[")):
        write_value(node, value)
