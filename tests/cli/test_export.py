"""``kg export``: keyed state as typed Parquet, equal to the jobs' own values (real Flink 2.3 fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.kg_fixture_state import FLINK_FIXTURES, expected


@pytest.mark.parametrize("case", ["heap-snappy-files-p3-maxp128-long", "heap-checkpoint-p2-maxp128-string"])
def test_a_directory_of_states_equals_expected_state(kg, tmp_path: Path, case: str) -> None:
    out = tmp_path / "keyed-state"
    result = kg("export", FLINK_FIXTURES / case, "-o", "keyed-state", "--out", out, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    files = {s["name"]: s["file"] for s in doc["states"]}
    assert Path(files["_timer_state/event_user-timers"]).name == "_timer_state%2Fevent_user-timers.parquet"
    assert sorted(p.name for p in out.iterdir()) == sorted(Path(f).name for f in files.values())
    want = {k["key"]: k for k in expected(case)["keyedOperators"][0]["keys"]}
    sums = pq.read_table(files["sum"]).to_pylist()
    ids = pq.read_table(files["ids"]).to_pylist()
    buckets = pq.read_table(files["buckets"])
    assert buckets.schema.field("user_key").type == "string" and "namespace" not in buckets.schema.names
    assert {r["key"]: r["value"] for r in sums} == {k: w["sum"] for k, w in want.items()}
    assert {r["key"]: r["value"] for r in ids} == {k: w["ids"] for k, w in want.items()}
    grouped: dict = {}
    for r in buckets.to_pylist():
        grouped.setdefault(r["key"], {})[r["user_key"]] = r["value"]
    assert grouped == {k: w["buckets"] for k, w in want.items()}
    timers = pq.read_table(files["_timer_state/event_user-timers"]).to_pylist()
    assert sorted((r["key"], r["timestamp"]) for r in timers) == sorted(
        (k, t) for k, w in want.items() for t in w["eventTimers"]
    )
    assert all(s["rows"] > 0 for s in doc["states"])


def test_one_state_is_one_typed_file(kg, tmp_path: Path) -> None:
    case = FLINK_FIXTURES / "typed-rocksdb-canonical-p2"
    want = json.loads((case / "expected-typed-state.json").read_text(encoding="utf-8"))["keys"]
    out = tmp_path / "pojo.parquet"
    result = kg("export", case, "-o", "typed-state", "--state", "pojo", "--out", out)
    assert result.exit_code == 0, result.stderr
    table = pq.read_table(out)
    assert table.schema.field("value").type.num_fields == 5  # color, id, inner, name, score
    assert {r["key"]: r["value"] for r in table.to_pylist()} == {k["key"]: k["states"]["pojo"] for k in want}
    kryo = tmp_path / "kryo.parquet"
    text = kg("export", case, "-o", "typed-state", "-s", "kryo", "--out", kryo)
    assert text.exit_code == 0 and "note: Kryo" in text.stdout
    assert pq.read_table(kryo).schema.field("value").type == "binary"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kryo.parquet", "pojo.parquet"]


def test_refusals(kg, tmp_path: Path) -> None:
    case = FLINK_FIXTURES / "heap-files-p3-maxp128-long"
    (tmp_path / "exists").mkdir()
    taken = kg("export", case, "-o", "keyed-state", "--out", tmp_path / "exists")
    assert taken.exit_code == 2 and "destination exists" in taken.stderr
    missing = kg("export", case, "-o", "keyed-state", "-s", "nope", "--out", tmp_path / "x.parquet")
    assert missing.exit_code == 2 and "no state 'nope'" in missing.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"]


def test_a_sql_jobs_keys_are_struct_columns(kg, tmp_path: Path) -> None:
    case = FLINK_FIXTURES / "sql-rocksdb-canonical-p2"
    doc = json.loads((case / "expected-sql-state.json").read_text(encoding="utf-8"))
    query = next(q for q in doc["queries"] if q["name"] == "composite")
    out = tmp_path / "acc.parquet"
    result = kg("export", case, "-o", query["uid"], "-s", "accState", "--out", out)
    assert result.exit_code == 0, result.stderr
    table = pq.read_table(out)
    assert str(table.schema.field("key").type) == "struct<f0: int32, f1: string, f2: bool>"
    rows = {(r["key"]["f0"], r["key"]["f1"], r["key"]["f2"]): r["value"] for r in table.to_pylist()}
    assert rows == {
        tuple(k["key"]): {"kind": "+I", "f0": k["result"][0], "f1": k["result"][1]} for k in query["keys"]
    }


def test_decimal_timestamp_and_row_key_fields_are_typed_columns(kg, tmp_path: Path) -> None:
    from decimal import Decimal

    from keygroup_cli.flink.types.binary_row import SqlTimestamp

    case = FLINK_FIXTURES / "sql-rocksdb-native-p2"
    doc = json.loads((case / "expected-sql-state.json").read_text(encoding="utf-8"))
    query = next(q for q in doc["queries"] if q["name"] == "typed")
    out = tmp_path / "typed.parquet"
    assert kg("export", case, "-o", query["uid"], "-s", "accState", "--out", out).exit_code == 0
    table = pq.read_table(out)
    assert str(table.schema.field("key").type) == (
        "struct<f0: decimal128(10, 2), f1: decimal128(25, 4), f2: timestamp[ms], f3: timestamp[ns], "
        "f4: struct<f0: int32, f1: string>>"
    )
    keys = table.column("key").combine_chunks()
    # Fields one by one: a timestamp[ns] of 1969 has no datetime (Python's stop at microseconds).
    f0, f1, f4 = (keys.field(i).to_pylist() for i in (0, 1, 4))
    f2, f3 = (keys.field(i).cast("int64").to_pylist() for i in (2, 3))
    totals = [v["f1"] for v in table.column("value").to_pylist()]
    rows = {
        (str(f0[i]), None if f1[i] is None else str(f1[i]), f2[i], f3[i], (f4[i]["f0"], f4[i]["f1"])): totals[
            i
        ]
        for i in range(table.num_rows)
    }

    def expected(key: list) -> tuple:
        dec, big, ts, ts9, row = key
        return (
            str(Decimal(dec)),
            None if big is None else str(Decimal(big)),
            SqlTimestamp.parse(ts).arrow_value(3),
            None if ts9 is None else SqlTimestamp.parse(ts9).arrow_value(9),
            tuple(row),
        )

    assert rows == {expected(k["key"]): k["result"][1] for k in query["keys"]}


def test_avro_values_are_typed_parquet_columns(kg, tmp_path: Path) -> None:
    case = FLINK_FIXTURES / "avro-rocksdb-canonical-p2"
    want = json.loads((case / "expected-avro-state.json").read_text(encoding="utf-8"))["keys"]
    out = tmp_path / "reading.parquet"
    result = kg("export", case, "-o", "avro-state", "--state", "reading", "--out", out)
    assert result.exit_code == 0, result.stderr
    table = pq.read_table(out)
    value = table.schema.field("value").type
    assert (value.field("amount").type, value.field("atUs").type) == (
        pa.decimal128(12, 2),
        pa.timestamp("us", tz="UTC"),
    )
    rows = {r["key"]: r["value"] for r in table.to_pylist()}
    assert table.column("undecoded").null_count == table.num_rows == len(want)
    assert {k: (v["name"], str(v["amount"]), v["day"].isoformat()) for k, v in rows.items()} == {
        k["key"]: (
            k["states"]["reading"]["name"],
            k["states"]["reading"]["amount"],
            k["states"]["reading"]["day"],
        )
        for k in want
    }
