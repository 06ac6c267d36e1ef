"""``transform`` as the engines' jobs: ``fn`` in the read tasks, a shuffle by key group, the driver's bytes.

The local engine runs the same jobs the Spark engine runs (``execute`` with a ``TransformRequest``); the
Spark engine itself is tested in ``tests/execution/routes/test_state_edit_transform_spark.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from keygroup_cli.core.errors import ExecutionError, InvalidArgumentError, UnsupportedFormatError
from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import key_group_for_hash
from keygroup_cli.execution.jobs.state_edit import apply_fn
from keygroup_cli.execution.routes.state_edit import (
    EngineChoice,
    StateEditResult,
    TransformRequest,
    execute,
    plan_transform,
    transform,
)
from keygroup_cli.flink import open_savepoint, state_table
from keygroup_cli.flink.check.verify import verify_flink
from tests.kg_fixture_state import FLINK_FIXTURES

UID = FLINK_FIXTURES / "uid-heap-canonical-p3"
HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"
TYPED = FLINK_FIXTURES / "typed-heap-canonical-p2"


def keyed_files(path: Path) -> dict[tuple[str, int], tuple[Any, ...]]:
    """Return each keyed file's range and offsets in ``_metadata`` and its bytes, by (operator, subtask)."""
    savepoint = open_savepoint(path)
    out = {}
    for operator_id, streams in savepoint.keyed_streams.items():
        for stream in streams:
            name = Path(str(stream.handle.delegate.relative_path)).name  # type: ignore[union-attr]
            handle = stream.handle
            content = (path / name).read_bytes()
            out[(operator_id, stream.subtask)] = (handle.key_group_start, tuple(handle.offsets), content)
    return out


def key_in_group(group: int, key_type: str, make: Any, max_parallelism: int = 128) -> Any:
    """Return the first key ``make(n)`` whose key group is ``group``."""
    n = 0
    while key_group_for_hash(hash_code(make(n), key_type), max_parallelism) != group:
        n += 1
    return make(n)


def moving_fn(drop: Any, move: Any, to: Any, key_type: pa.DataType) -> Any:
    """Return an fn that doubles ``value``, drops key ``drop`` and renames key ``move`` to ``to``."""

    def fn(batch: pa.RecordBatch) -> pa.Table:
        table = pa.Table.from_batches([batch])
        value = table.schema.get_field_index("value")
        table = table.set_column(value, "value", pc.multiply(table.column(value), 2))
        table = table.filter(pc.not_equal(table.column("key"), pa.scalar(drop, key_type)))
        keys = pc.if_else(
            pc.equal(table.column("key"), pa.scalar(move, key_type)),
            pa.scalar(to, key_type),
            table.column("key"),
        )
        return table.set_column(table.schema.get_field_index("key"), "key", keys)

    return fn


def as_jobs(source: Path, out: Path, operator: str, state: str, fn: Any, **kw: Any) -> StateEditResult:
    """Run ``transform`` as the local engine's jobs (what ``engine="spark"`` runs on Spark)."""
    request = TransformRequest(state, fn, None, 0)
    return execute(
        source,
        out,
        lambda opened: plan_transform(opened, operator, state),
        engine=EngineChoice("local", transform=request),
        **kw,
    )


def _verified(path: Path) -> None:
    report = verify_flink(open_savepoint(path))
    assert [f for f in report.findings if f.severity == "error"] == []


def test_the_jobs_write_the_bytes_the_driver_writes_when_keys_move(tmp_path: Path) -> None:
    before = {r["key"]: r["value"] for r in state_table(UID, "keyed-long", "sum").to_pylist()}
    keys = sorted(before)
    drop, move = keys[0], keys[1]
    old_group = key_group_for_hash(hash_code(move, "long"), 128)
    # A key group of another subtask (p3, maxP 128: [0, 42], [43, 85], [86, 127]).
    target = 120 if old_group < 86 else 10
    to = key_in_group(target, "long", lambda n: 7 + n)
    assert to not in before
    fn = moving_fn(drop, move, to, pa.int64())
    driver, jobs = tmp_path / "driver", tmp_path / "jobs"
    transform(UID, driver, "keyed-long", "sum", fn)
    done = as_jobs(UID, jobs, "keyed-long", "sum", fn)
    assert keyed_files(driver) == keyed_files(jobs)
    after = state_table(jobs, "keyed-long", "sum")
    expected = {k: 2 * v for k, v in before.items() if k not in (drop, move)} | {to: 2 * before[move]}
    assert {r["key"]: r["value"] for r in after.to_pylist()} == expected
    assert {r["key"]: r["key_group"] for r in after.to_pylist()}[to] == target
    assert sum(c.written for c in done.plan.changes) == len(expected)
    assert open_savepoint(jobs).metadata.checkpoint_id == open_savepoint(UID).metadata.checkpoint_id
    _verified(jobs)


def test_a_moved_key_lands_after_the_other_states_of_its_new_key_group(tmp_path: Path) -> None:
    """Rows routed from an earlier read task into a key group that holds other states' rows keep the
    driver's order (other states first): the write task orders them, so the bytes still match."""
    sums = state_table(HEAP, "keyed-state", "sum").to_pylist()
    by_group = {r["key_group"]: r["key"] for r in sums}
    move = by_group[min(by_group)]  # in subtask 0's range
    target = max(by_group)  # subtask 2's, where ids, buckets and timers live too
    to = key_in_group(target, "string", lambda n: f"moved-{n}")
    fn = moving_fn("no-such-key", move, to, pa.string())
    driver, jobs = tmp_path / "driver", tmp_path / "jobs"
    transform(HEAP, driver, "keyed-state", "sum", fn)
    as_jobs(HEAP, jobs, "keyed-state", "sum", fn)
    assert keyed_files(driver) == keyed_files(jobs)
    for state in ("ids", "buckets", "_timer_state/event_user-timers"):
        assert state_table(jobs, "keyed-state", state).equals(state_table(HEAP, "keyed-state", state))
    _verified(jobs)


def test_two_rows_for_one_entry_from_different_tasks_are_refused(tmp_path: Path) -> None:
    # fn maps every key to one key: rows for one entry meet in the write task (across batches and tasks).
    def one_key(batch: pa.RecordBatch) -> pa.Table:
        table = pa.Table.from_batches([batch])
        same = pa.array([7] * table.num_rows, pa.int64())
        return table.set_column(table.schema.get_field_index("key"), "key", same)

    with pytest.raises(InvalidArgumentError) as caught:
        as_jobs(UID, tmp_path / "out", "keyed-long", "sum", one_key)
    assert caught.value.code == "DATA_DUPLICATE_ENTRY" and caught.value.exit_code == 2
    assert not (tmp_path / "out").exists()


def test_apply_fn_takes_a_batch_a_table_or_none() -> None:
    factor = 3
    batch = pa.record_batch({"x": [2]})
    assert apply_fn(lambda b: None, batch) is None
    doubled = apply_fn(lambda b: pa.table({"x": pc.multiply(b.column("x"), factor)}), batch)
    assert doubled is not None and doubled.column("x").to_pylist() == [6]
    assert apply_fn(lambda b: b, batch).num_rows == 1  # type: ignore[union-attr]
    with pytest.raises(InvalidArgumentError) as caught:
        apply_fn(lambda b: 3, batch)  # type: ignore[arg-type,return-value]
    assert caught.value.code == "TRANSFORM_RESULT"


@pytest.mark.parametrize("jobs", [False, True])
def test_an_fn_that_raises_is_one_line_exit_5_and_nothing_is_written(tmp_path: Path, jobs: bool) -> None:
    def broken(batch: pa.RecordBatch) -> pa.RecordBatch:
        raise ValueError("no column\nsecond line")

    out = tmp_path / "out"
    with pytest.raises(ExecutionError) as caught:
        if jobs:
            as_jobs(UID, out, "keyed-long", "sum", broken)
        else:
            transform(UID, out, "keyed-long", "sum", broken)
    assert caught.value.code == "TRANSFORM_FN_FAILED" and caught.value.exit_code == 5
    assert str(caught.value) == "transform: fn raised ValueError: no column"
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("jobs", [False, True])
def test_a_value_that_does_not_fit_is_exit_2_and_nothing_is_written(tmp_path: Path, jobs: bool) -> None:
    def strings(batch: pa.RecordBatch) -> pa.Table:
        return pa.table({"key": batch.column("key"), "value": pa.array(["x"] * batch.num_rows)})

    out = tmp_path / "out"
    with pytest.raises(InvalidArgumentError) as caught:
        if jobs:
            as_jobs(UID, out, "keyed-long", "sum", strings)
        else:
            transform(UID, out, "keyed-long", "sum", strings)
    assert caught.value.code == "VALUE_DOES_NOT_FIT" and caught.value.exit_code == 2
    assert "'x'" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_state_kg_cannot_encode_is_exit_4_before_fn_runs(tmp_path: Path) -> None:
    called = []
    for run in (transform, as_jobs):
        with pytest.raises(UnsupportedFormatError) as caught:
            run(TYPED, tmp_path / "out", "typed-state", "kryo", lambda b: called.append(b))
        assert caught.value.code == "TYPE_NOT_ENCODABLE" and caught.value.exit_code == 4
    assert called == [] and list(tmp_path.iterdir()) == []


def test_a_dry_run_of_the_jobs_plans_without_calling_fn(tmp_path: Path) -> None:
    called = []
    done = as_jobs(UID, tmp_path / "out", "keyed-long", "sum", lambda b: called.append(b), dry_run=True)
    assert done.dry_run and done.plan.command == "transform" and done.plan.operators[0].states == ("sum",)
    assert called == [] and not (tmp_path / "out").exists()


def test_a_local_dry_run_calls_fn_and_counts_what_it_would_write(tmp_path: Path) -> None:
    seen: list[int] = []

    def halve(batch: pa.RecordBatch) -> pa.RecordBatch:
        seen.append(batch.num_rows)
        return batch.slice(0, batch.num_rows // 2)

    done = transform(UID, tmp_path / "out", "keyed-long", "sum", halve, dry_run=True)
    (totals,) = done.plan.totals()
    assert done.dry_run and sum(seen) == totals["before"] == totals["deleted"] == 120
    assert totals["written"] == sum(n // 2 for n in seen) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("state", ["ids", "buckets", "_timer_state/event_user-timers"])
def test_lists_maps_and_timers_go_through_the_jobs_as_through_the_driver(tmp_path: Path, state: str) -> None:
    def some(batch: pa.RecordBatch) -> pa.Table:  # row by row: the keys ending in 0 to 4
        table = pa.Table.from_batches([batch])
        return table.filter(pc.match_substring_regex(table.column("key"), "[0-4]$"))

    driver, jobs = tmp_path / "driver", tmp_path / "jobs"
    transform(HEAP, driver, "keyed-state", state, some)
    as_jobs(HEAP, jobs, "keyed-state", state, some)
    assert keyed_files(driver) == keyed_files(jobs)
    before = state_table(HEAP, "keyed-state", state).num_rows
    assert 0 < state_table(jobs, "keyed-state", state).num_rows < before
