"""SQL jobs' ``BinaryRowData`` keys and rows (flink/types/binary_row.py) against real Flink 2.3 and 1.20.

The SqlJob fixtures (fixtures/flink/README-sql.md) hold five GROUP BY aggregates keyed by an INT, a BIGINT, a
STRING (empty, inline, long and non-ASCII strings), a composite INT, nullable STRING, BOOLEAN key, and an INT
key whose COUNT(DISTINCT) keeps a MapState. Every key in them is decoded, must re-encode to the exact bytes
Flink wrote, and must hash to the key group Flink stored it under; every aggregate's value must equal the
last result the job itself emitted for that key, and the distinct values must be as many as it counted.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.javahash import hash_codes
from keygroup_cli.core.keygroups import key_group_for_hash, key_groups_for_hashes, operator_id_for_uid
from keygroup_cli.flink.data.lookup import state_codecs, typed_entry
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import decode_keyed_file
from keygroup_cli.flink.layouts.heap import canonical_view, needs_canonical_view
from keygroup_cli.flink.savepoint import Savepoint, open_savepoint
from keygroup_cli.flink.types.binary_row import (
    RowDecodeError,
    RowFields,
    SqlTimestamp,
    decode_row,
    encode_row,
    parse_row_key,
    row_hash_code,
    shown_scalar,
)

ALL_FLINK = Path(__file__).resolve().parents[3] / "fixtures" / "flink"
SQL_CASES = (
    "2.3/sql-heap-canonical-p2",
    "2.3/sql-rocksdb-canonical-p2",
    "2.3/sql-rocksdb-native-p2",
    "1.20/sql-heap-canonical-p2",
)
#: The SQL types of each query's key, as the key serializer's snapshot names them.
KEY_TYPES = {
    "int": ("INTEGER",),
    "bigint": ("BIGINT",),
    "string": ("VARCHAR",),
    "composite": ("INTEGER", "VARCHAR", "BOOLEAN"),
    "distinct": ("INTEGER",),
    # A compact and a long DECIMAL, a compact and a fine TIMESTAMP, a nested ROW (README-sql.md).
    "typed": ("DECIMAL(10, 2)", "DECIMAL(25, 4)", "TIMESTAMP(3)", "TIMESTAMP(9)", "ROW<INTEGER, VARCHAR>"),
}
#: SqlJob's k_str values (SqlJob.STRINGS).
STRINGS = {"a", "bb", "seven77", "eight888", "a-longer-key-with-more-than-16-bytes", "é€😀", ""}


def _expected(case: str) -> dict[str, Any]:
    return json.loads((ALL_FLINK / case / "expected-sql-state.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", SQL_CASES)
def test_every_key_rehashes_to_its_key_group_and_holds_the_jobs_result(case: str, tmp_path: Path) -> None:
    savepoint = open_savepoint(ALL_FLINK / case)
    if needs_canonical_view(savepoint):  # NATIVE: its RocksDB files rewritten as key groups first
        savepoint = Savepoint.rewritten(canonical_view(savepoint, tmp_path / "canonical"), savepoint)
    want = _expected(case)
    assert [q["name"] for q in want["queries"]] == [*KEY_TYPES]
    for query in want["queries"]:
        streams = savepoint.keyed_streams[operator_id_for_uid(query["uid"])]  # by id: 1.20 records no uids
        fields = RowFields.of(streams[0].header.key_serializer)
        assert fields.sql_types == KEY_TYPES[query["name"]]
        acc: dict[str, Any] = {}
        distinct: dict[str, set[str]] = {}
        for stream in streams:
            codecs = state_codecs(stream)
            with StreamSource(stream.handle.delegate, savepoint.directory) as src:
                batches = decode_keyed_file(
                    src, stream.handle, stream.layout, compressed=stream.header.compressed
                )
                rows = []
                for batch in batches:
                    # The vectorised hash of the key column (kg rescale's re-key) agrees with Flink's groups.
                    codes = hash_codes(batch.column("key"), "row")
                    groups = key_groups_for_hashes(codes, want["maxParallelism"])
                    assert groups.tolist() == batch.column("key_group").to_pylist()
                    rows += batch.to_pylist()
                for row in rows:
                    raw = row["key"]
                    assert struct.unpack_from(">i", raw)[0] == len(raw) - 4  # RowDataSerializer's length
                    kind, decoded = decode_row(fields, raw[4:])
                    assert kind == "+I"
                    # Flink's bytes again, null long DECIMALs and fine TIMESTAMPs' reserved space included.
                    assert encode_row(fields, decoded) == raw[4:], decoded
                    values = _as_json(decoded)  # as the job wrote its keys: DECIMAL and TIMESTAMP as text
                    group = key_group_for_hash(row_hash_code(raw[4:]), want["maxParallelism"])
                    assert group == row["key_group"], values
                    entry = typed_entry(codecs[row["state"]], row)
                    if row["state"] == "accState":
                        acc[json.dumps(values)] = entry.value["fields"]
                    else:  # COUNT(DISTINCT k_str): the distinct strings, a MapState under the key row
                        assert (row["state"], entry.note, entry.value) == ("distinctAcc_0", None, 1)
                        distinct.setdefault(json.dumps(values), set()).add(entry.user_key)
        results = {json.dumps(k["key"]): k["result"] for k in query["keys"]}
        if query["name"] == "distinct":
            # The accumulators: COUNT(*), COUNT(DISTINCT), the data view's RAW placeholder.
            assert {k: v[:2] for k, v in acc.items()} == results
            assert {k: len(v) for k, v in distinct.items()} == {k: r[1] for k, r in results.items()}
            assert set().union(*distinct.values()) == set(STRINGS)
        else:
            assert acc == results, query["name"]


def _as_json(value: Any) -> Any:
    return [_as_json(v) for v in value] if isinstance(value, list) else shown_scalar(value)


def test_the_value_rows_are_typed_from_their_snapshot() -> None:
    savepoint = open_savepoint(ALL_FLINK / SQL_CASES[0])
    stream = next(iter(savepoint.keyed_streams.values()))[0]
    codecs = state_codecs(stream)
    assert codecs["accState"].value is not None
    assert codecs["accState"].value.type_name == "RowData<BIGINT, BIGINT>"
    assert codecs["accState"].key.type_name.startswith("RowData<")
    assert codecs["accState"].notes == ()


def _fields(*kinds: str) -> RowFields:
    return RowFields(kinds, tuple(k.upper() for k in kinds))


@pytest.mark.parametrize(
    ("kinds", "values"),
    [
        (("string",), [""]),
        (("string",), ["1234567"]),  # the longest inline string
        (("string",), ["12345678"]),  # the shortest one in the variable part
        (("string", "string"), ["é€😀 and more", None]),
        (("bytes", "int"), [b"\x00\xff" * 9, -7]),
        (("boolean", "tinyint", "smallint", "float", "double"), [False, -128, 32767, 1.5, -0.25]),
        (("bigint",) * 60, [None if i % 7 == 0 else i * 10**12 for i in range(60)]),  # two header words
    ],
)
def test_rows_round_trip(kinds: tuple[str, ...], values: list[Any]) -> None:
    fields = _fields(*kinds)
    row = encode_row(fields, values)
    assert len(row) % 8 == 0 and len(row) >= fields.header_bytes + 8 * len(kinds)
    assert decode_row(fields, row) == ("+I", values)


def test_header_words_grow_with_the_arity() -> None:
    assert [_fields(*("int",) * n).header_bytes for n in (1, 56, 57, 120, 121)] == [8, 8, 16, 16, 24]


def test_rows_that_do_not_fit_are_refused() -> None:
    fields = _fields("string")
    row = bytearray(encode_row(fields, ["a-long-string-value"]))
    with pytest.raises(RowDecodeError, match="runs past"):
        decode_row(fields, bytes(row[:16]))
    with pytest.raises(RowDecodeError, match="cannot hold"):
        decode_row(_fields("int", "int"), bytes(row[:16]))
    with pytest.raises(RowDecodeError, match="kg does not decode"):
        decode_row(RowFields(("?DecimalDataSerializer",), ("DECIMAL",)), bytes(16))


def test_keys_parse_from_json_arrays_or_one_bare_field() -> None:
    composite = _fields("int", "string", "boolean")
    assert parse_row_key('[42, "abc", true]', composite) == (42, "abc", True)
    assert parse_row_key("[42, null, false]", composite) == (42, None, False)
    assert parse_row_key("42", _fields("int")) == (42,)
    assert parse_row_key("null", _fields("bigint")) == (None,)
    assert parse_row_key(" a b ", _fields("string")) == (" a b ",)  # a bare string is taken as it is
    assert parse_row_key('["[x]"]', _fields("string")) == ("[x]",)  # one that starts with [ goes in an array
    assert parse_row_key('["abc"]', _fields("bytes")) == (b"abc",)


@pytest.mark.parametrize(
    ("text", "kinds", "code", "message"),
    [
        ("42", ("int", "string"), "KEY_PARSE_ERROR", 'a JSON array of 2 fields, e.g. [42, "abc"]'),
        ("[42]", ("int", "string"), "KEY_PARSE_ERROR", "has 1 field(s)"),
        ("[42, 1]", ("int", "string"), "KEY_PARSE_ERROR", "is not a string"),
        ('["x"]', ("int",), "KEY_PARSE_ERROR", "is not an int"),
        ("[true]", ("bigint",), "KEY_PARSE_ERROR", "is not a bigint"),
        ("[2147483648]", ("int",), "KEY_OUT_OF_RANGE", "out of int range"),
        ("[1, 2", ("int", "int"), "KEY_PARSE_ERROR", "not a JSON array"),
        ("abc", ("int",), "KEY_PARSE_ERROR", "not an int value"),
        (b'["\xff"]'.decode("utf-8", "surrogateescape"), ("string",), "KEY_PARSE_ERROR", "not valid UTF-8"),
    ],
)
def test_bad_keys_are_named(text: str, kinds: tuple[str, ...], code: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        parse_row_key(text, _fields(*kinds))
    assert raised.value.code == code and message in raised.value.message


def test_a_key_rows_length_prefix_delimits_it() -> None:
    from keygroup_cli.core.errors import InvalidInputError
    from keygroup_cli.flink.types.serializers import ROW_DATA_SERIALIZER_SNAPSHOT, key_codec

    codec = key_codec(ROW_DATA_SERIALIZER_SNAPSHOT)
    row = encode_row(_fields("int"), [7])
    data = struct.pack(">i", len(row)) + row + b"\x00namespace"
    assert (codec.key_type, codec.self_delimiting) == ("row", True)
    assert codec.read(data, 0) == (data[: 4 + len(row)], 4 + len(row))
    with pytest.raises(InvalidInputError, match="runs past"):
        codec.read(struct.pack(">i", 64) + row, 0)


@pytest.mark.parametrize(
    ("text", "millisecond", "nanos"),
    [
        ("1970-01-01T00:00", 0, 0),
        ("1969-12-31T23:59:58.123456789", -1877, 456789),
        ("2024-02-29T12:34:56.789", 1709210096789, 0),
        ("0001-01-01T00:00:00.000001", -62135596800000, 1000),
    ],
)
def test_timestamps_read_and_show_as_java_does(text: str, millisecond: int, nanos: int) -> None:
    value = SqlTimestamp.parse(text.replace("T", " ") if nanos else text)
    assert (value.millisecond, value.nano_of_millisecond) == (millisecond, nanos)
    assert str(value) == text  # LocalDateTime.toString(): seconds and fraction only when not zero


def test_long_decimals_fine_timestamps_and_rows_round_trip_and_reserve_space_when_null() -> None:
    from decimal import Decimal

    from keygroup_cli.flink.types.binary_row import row_fields_from_sql

    fields = row_fields_from_sql("DECIMAL(25, 4), TIMESTAMP(9), ROW<a INT, b STRING>, DECIMAL(5, 2)")
    values = [Decimal("-12345678901234567890.1234"), SqlTimestamp(-1, 999_999), [7, "a long string"], None]
    row = encode_row(fields, values)
    assert decode_row(fields, row)[1] == values
    nulls = encode_row(fields, [None, None, None, None])
    # Header and four slots, then 16 bytes for the null DECIMAL(25, 4) and 8 for the null TIMESTAMP(9).
    assert len(nulls) == 8 + 4 * 8 + 16 + 8
    assert decode_row(fields, nulls)[1] == [None, None, None, None]
    with pytest.raises(InvalidArgumentError, match="does not fit DECIMAL"):
        parse_row_key('["1.23456", null, null, null]', fields)
    with pytest.raises(InvalidArgumentError, match="more fractional digits"):
        parse_row_key("2024-02-29T12:34:56.7891", row_fields_from_sql("TIMESTAMP(3)"))
    assert parse_row_key('["-0.5", "1970-01-01 00:00:01.5", [1, null], 1.25]', fields) == (
        Decimal("-0.5000"),
        SqlTimestamp(1500),
        [1, None],
        Decimal("1.25"),
    )
