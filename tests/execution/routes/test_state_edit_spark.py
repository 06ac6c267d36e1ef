"""``write_state(..., engine="spark")``: Spark runs the same edit tasks and writes the same state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from keygroup_cli.execution.routes.state_edit import write_state
from keygroup_cli.flink import open_savepoint, state_table
from tests.kg_fixture_state import FLINK_FIXTURES

pytestmark = pytest.mark.spark

UID = FLINK_FIXTURES / "uid-heap-canonical-p3"


@pytest.mark.parametrize("max_parallelism", [None, 256])
def test_spark_writes_what_the_local_engine_writes(
    spark: Any, tmp_path: Path, max_parallelism: int | None
) -> None:
    data = pa.table({"key": pa.array([7, 123], pa.int64()), "value": pa.array([70, 1230], pa.int64())})
    local, remote = tmp_path / "local", tmp_path / "spark"
    write_state(UID, local, "keyed-long", "sum", "upsert", data, new_max_parallelism=max_parallelism)
    done = write_state(
        UID,
        remote,
        "keyed-long",
        "sum",
        "upsert",
        data,
        new_max_parallelism=max_parallelism,
        engine="spark",
        spark=spark,
    )
    rows = [sorted(map(repr, state_table(p, "keyed-long", "sum").to_pylist())) for p in (local, remote)]
    assert rows[0] == rows[1]
    assert sum(c.written for c in done.plan.changes) == 2
    ops = [
        {o.label: o.max_parallelism for o in open_savepoint(p).metadata.operators} for p in (local, remote)
    ]
    assert ops[0] == ops[1] and ops[1]["keyed-long"] == (max_parallelism or 128)


def test_spark_compacts_what_the_local_engine_compacts(spark: Any, tmp_path: Path) -> None:
    from keygroup_cli.execution.routes.state_edit import compact_state

    heap = FLINK_FIXTURES / "heap-files-p3-maxp128-string"
    local, remote = tmp_path / "local", tmp_path / "spark"
    rule = {"operators": ["keyed-state"], "where": "key LIKE 'key-1%'", "timers_before": 4102444800100}
    compact_state(heap, local, **rule)  # type: ignore[arg-type]
    done = compact_state(heap, remote, engine="spark", spark=spark, **rule)  # type: ignore[arg-type]
    for state in ("sum", "ids", "buckets", "_timer_state/event_user-timers"):
        rows = [sorted(map(repr, state_table(p, "keyed-state", state).to_pylist())) for p in (local, remote)]
        assert rows[0] == rows[1], state
    assert {r["state"]: r["deleted"] for r in done.plan.totals()}["sum"] == 111


def test_a_spark_dataframe_is_data_as_its_arrow_table(spark: Any, tmp_path: Path) -> None:
    """``write_state`` takes a Spark DataFrame in the export's shape, as it takes the same Arrow table."""
    data = pa.table({"key": pa.array([7, 123], pa.int64()), "value": pa.array([70, 1230], pa.int64())})
    frame = spark.createDataFrame(data.to_pylist(), schema="key long, value long")
    from_table, from_frame = tmp_path / "table", tmp_path / "frame"
    write_state(UID, from_table, "keyed-long", "sum", "upsert", data)
    write_state(UID, from_frame, "keyed-long", "sum", "upsert", frame)
    paths = (from_table, from_frame)
    rows = [sorted(map(repr, state_table(p, "keyed-long", "sum").to_pylist())) for p in paths]
    assert rows[0] == rows[1]
    values = {r["key"]: r["value"] for r in state_table(from_frame, "keyed-long", "sum").to_pylist()}
    assert values[7] == 70 and values[123] == 1230


def test_other_data_is_refused_in_one_line(tmp_path: Path) -> None:
    from keygroup_cli.core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as caught:
        write_state(UID, tmp_path / "o", "keyed-long", "sum", "upsert", {"key": [1]})
    assert caught.value.code == "DATA_UNREADABLE" and not (tmp_path / "o").exists()
