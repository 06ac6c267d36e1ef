"""``transform(..., engine="spark")``: ``fn`` runs in Spark's read tasks; the files are the local ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from keygroup_cli.core.errors import ExecutionError, InvalidArgumentError, UnsupportedFormatError
from keygroup_cli.execution.routes.state_edit import transform
from keygroup_cli.flink import open_savepoint, state_table
from keygroup_cli.flink.check.verify import verify_flink
from tests.execution.jobs.test_state_edit_transform import key_in_group, keyed_files
from tests.kg_fixture_state import FLINK_FIXTURES

pytestmark = pytest.mark.spark

UID = FLINK_FIXTURES / "uid-heap-canonical-p3"
HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"
TYPED = FLINK_FIXTURES / "typed-heap-canonical-p2"


@pytest.mark.parametrize(
    ("source", "operator", "key_type"),
    [(UID, "keyed-long", pa.int64()), (HEAP, "keyed-state", pa.string())],
)
def test_spark_runs_fn_in_its_tasks_and_writes_the_local_bytes(
    spark: Any, tmp_path: Path, source: Path, operator: str, key_type: pa.DataType
) -> None:
    """Double every value, drop one key, move one key to another subtask's key group (HEAP: one holding
    other states' rows too): the files are byte for byte the local engine's, and they verify."""
    before = {r["key"]: r["value"] for r in state_table(source, operator, "sum").to_pylist()}
    groups = {r["key"]: r["key_group"] for r in state_table(source, operator, "sum").to_pylist()}
    by_group = sorted(before, key=lambda k: (groups[k], repr(k)))
    drop, move = by_group[1], by_group[0]  # both in subtask 0's key groups
    typed = "long" if pa.types.is_integer(key_type) else "string"
    to = key_in_group(
        groups[by_group[-1]], typed, (lambda n: 7 + n) if typed == "long" else (lambda n: f"m{n}")
    )
    factor = 2  # a closure: Spark's cloudpickle takes fn by value

    def fn(batch: pa.RecordBatch) -> pa.Table:
        table = pa.Table.from_batches([batch])
        value = table.schema.get_field_index("value")
        table = table.set_column(value, "value", pc.multiply(table.column(value), factor))
        table = table.filter(pc.not_equal(table.column("key"), pa.scalar(drop, key_type)))
        moved = pc.if_else(
            pc.equal(table.column("key"), pa.scalar(move, key_type)),
            pa.scalar(to, key_type),
            table.column("key"),
        )
        return table.set_column(table.schema.get_field_index("key"), "key", moved)

    local, remote = tmp_path / "local", tmp_path / "spark"
    transform(source, local, operator, "sum", fn)
    done = transform(source, remote, operator, "sum", fn, engine="spark", spark=spark)
    assert keyed_files(local) == keyed_files(remote)
    expected = {k: factor * v for k, v in before.items() if k not in (drop, move)} | {
        to: factor * before[move]
    }
    after = state_table(remote, operator, "sum").to_pylist()
    assert {r["key"]: r["value"] for r in after} == expected
    assert sum(c.written for c in done.plan.changes) == len(expected)
    assert open_savepoint(remote).metadata.checkpoint_id == open_savepoint(source).metadata.checkpoint_id
    report = verify_flink(open_savepoint(remote))
    assert [f for f in report.findings if f.severity == "error"] == []


def test_an_fn_that_raises_on_an_executor_is_one_kg_line_and_nothing_is_written(
    spark: Any, tmp_path: Path
) -> None:
    def broken(batch: pa.RecordBatch) -> pa.RecordBatch:
        raise ValueError(f"cannot handle {batch.num_rows} rows\nmore")

    with pytest.raises(ExecutionError) as caught:
        transform(UID, tmp_path / "out", "keyed-long", "sum", broken, engine="spark", spark=spark)
    assert caught.value.code == "TRANSFORM_FN_FAILED" and caught.value.exit_code == 5
    text = str(caught.value)
    assert text.startswith("transform: fn raised ValueError: cannot handle ") and text.endswith(" rows")
    assert "\n" not in text and "py4j" not in text.lower()
    assert list(tmp_path.iterdir()) == []


def test_what_kg_cannot_encode_is_exit_2_or_4_and_nothing_is_written(spark: Any, tmp_path: Path) -> None:
    def strings(batch: pa.RecordBatch) -> pa.Table:
        return pa.table({"key": batch.column("key"), "value": pa.array(["x"] * batch.num_rows)})

    with pytest.raises(InvalidArgumentError) as caught:
        transform(UID, tmp_path / "out", "keyed-long", "sum", strings, engine="spark", spark=spark)
    assert caught.value.code == "VALUE_DOES_NOT_FIT" and caught.value.exit_code == 2
    assert "'x'" in str(caught.value)
    with pytest.raises(UnsupportedFormatError) as refused:
        transform(TYPED, tmp_path / "kryo", "typed-state", "kryo", lambda b: b, engine="spark", spark=spark)
    assert refused.value.code == "TYPE_NOT_ENCODABLE" and refused.value.exit_code == 4
    assert list(tmp_path.iterdir()) == []


def test_a_spark_dry_run_plans_without_running_fn(spark: Any, tmp_path: Path) -> None:
    def never(batch: pa.RecordBatch) -> pa.RecordBatch:
        raise AssertionError("fn ran in a dry run")

    done = transform(
        UID, tmp_path / "out", "keyed-long", "sum", never, engine="spark", spark=spark, dry_run=True
    )
    assert done.dry_run and done.plan.operators[0].states == ("sum",) and done.plan.changes == ()
    assert list(tmp_path.iterdir()) == []
