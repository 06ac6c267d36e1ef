"""Keyed state as data on both engines (execution/routes/state_data.py): Spark writes and reads what local
does.

``kg export --engine spark`` decodes each keyed file in a Spark task and must write the very files the local
engine writes; ``kg.read_state(..., engine="spark")`` must hold the local table's rows. Both run on the one
SparkSession of the test run (the CLI takes the active session).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import keygroup_cli
from keygroup_cli.core.errors import InvalidArgumentError

FLINK = Path(__file__).parents[3] / "fixtures" / "flink" / "2.3"

pytestmark = pytest.mark.spark


def test_export_on_spark_writes_the_files_the_local_engine_writes(kg, spark: object, tmp_path: Path) -> None:
    # NATIVE: the canonical rewrite's _metadata is what the Spark tasks open.
    case = FLINK / "typed-rocksdb-native-p2"
    local = kg("export", case, "-o", "typed-state", "--out", tmp_path / "local", "--json")
    on_spark = kg(
        "export", case, "-o", "typed-state", "--out", tmp_path / "spark", "--engine", "spark", "--json"
    )
    assert local.exit_code == 0 and on_spark.exit_code == 0, on_spark.stderr
    states = local.json()["states"]
    assert len(states) > 15 and sum(s["rows"] for s in states) > 100
    assert [(s["name"], s["rows"]) for s in on_spark.json()["states"]] == [
        (s["name"], s["rows"]) for s in states
    ]
    files = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "spark").iterdir())
    for name in files:
        assert (tmp_path / "spark" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name


@pytest.mark.parametrize(
    ("case", "state"),
    [
        ("typed-rocksdb-canonical-p2", "pojo"),
        ("typed-rocksdb-canonical-p2", "tuple-map"),
        ("sql-heap-canonical-p2", "accState"),
    ],
)
def test_read_state_on_spark_is_a_dataframe_of_the_local_tables_rows(
    spark: Any, case: str, state: str
) -> None:
    operator = "typed-state" if case.startswith("typed") else _typed_query_uid(case)
    table = keygroup_cli.read_state(FLINK / case, operator, state)
    frame = keygroup_cli.read_state(FLINK / case, operator, state, engine="spark", spark=spark)
    assert frame.columns == table.column_names
    schema = _micros(table.schema)
    got = sorted((_plain(r.asDict(recursive=True), schema) for r in frame.collect()), key=repr)
    want = sorted((_plain(r, schema) for r in table.cast(schema, safe=False).to_pylist()), key=repr)
    assert len(got) == table.num_rows > 0 and got == want


def test_read_state_names_an_unknown_engine_and_state(spark: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown engine 'flink'"):
        keygroup_cli.read_state(FLINK / "typed-rocksdb-canonical-p2", "typed-state", "pojo", engine="flink")
    with pytest.raises(InvalidArgumentError, match="no state 'nope'"):
        keygroup_cli.read_state(
            FLINK / "typed-rocksdb-canonical-p2", "typed-state", "nope", engine="spark", spark=spark
        )


def _typed_query_uid(case: str) -> str:
    import json

    doc = json.loads((FLINK / case / "expected-sql-state.json").read_text(encoding="utf-8"))
    return next(q["uid"] for q in doc["queries"] if q["name"] == "typed")


def _micros(schema: pa.Schema) -> pa.Schema:
    """The schema with timestamps in microseconds, Spark's unit (a TIMESTAMP(9) has no Python datetime)."""

    def conform(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", t.tz)
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(conform(f.type)) for f in t])
        return t

    return pa.schema([f.with_type(conform(f.type)) for f in schema])


def _plain(row: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    return {f.name: _norm(row[f.name], f.type) for f in schema}


def _norm(value: Any, arrow: pa.DataType) -> Any:
    """One form for both sides: maps (Arrow: [(k, v)], Spark: a dict) as sorted pairs, NaN as text."""
    if value is None:
        return None
    if pa.types.is_map(arrow):
        pairs = value.items() if isinstance(value, dict) else value
        return sorted(((_norm(k, arrow.key_type), _norm(v, arrow.item_type)) for k, v in pairs), key=repr)
    if pa.types.is_struct(arrow):
        return {f.name: _norm(value[f.name], f.type) for f in arrow}
    if pa.types.is_list(arrow):
        return [_norm(v, arrow.value_type) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, bytearray):
        return bytes(value)
    return value
