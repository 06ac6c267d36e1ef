"""``write_state``, ``compact_state`` and ``transform`` on real Flink 2.3 savepoints: each edit, read back."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.execution.routes.state_edit import compact_state, transform, write_state
from keygroup_cli.flink import arrow_rows, open_savepoint, state_table
from keygroup_cli.flink.check.verify import verify_flink
from tests.kg_fixture_state import FLINK_FIXTURES

HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"
ROCKS = FLINK_FIXTURES / "rocksdb-canonical-p3-maxp10-long"
TYPED = FLINK_FIXTURES / "typed-heap-canonical-p2"


def _rows(table: pa.Table) -> list[str]:
    """Return a table's rows (without the key group) in a canonical order, for comparing states."""
    return sorted(map(repr, arrow_rows(table.drop_columns(["key_group"]))))


def _by_key(table: pa.Table) -> dict[Any, Any]:
    return {r["key"]: r["value"] for r in table.to_pylist()}


def _verified(path: Path) -> None:
    report = verify_flink(open_savepoint(path))
    assert [f for f in report.findings if f.severity == "error"] == []


def test_replace_with_the_export_round_trips_every_state(tmp_path: Path) -> None:
    for n, (source, operator, state) in enumerate(
        [
            (HEAP, "keyed-state", "sum"),
            (HEAP, "keyed-state", "ids"),
            (HEAP, "keyed-state", "buckets"),
            (HEAP, "keyed-state", "_timer_state/event_user-timers"),
            (ROCKS, "keyed-state", "buckets"),
            (TYPED, "typed-state", "pojo"),
            (TYPED, "typed-state", "ttl-list"),
            (TYPED, "typed-state", "ttl-map"),
            (TYPED, "typed-state", "tuple-map"),
            (FLINK_FIXTURES / "sql-heap-canonical-p2", "29_group-aggregate", "accState"),  # RowData keys
            (FLINK_FIXTURES / "avro-heap-canonical-p2", "avro-state", "event-map"),
        ]
    ):
        before = state_table(source, operator, state)
        out = tmp_path / f"out-{n}"
        result = write_state(source, out, operator, state, "replace", before)
        after = state_table(out, operator, state)
        assert after.schema.equals(before.schema) and _rows(after) == _rows(before), (source.name, state)
        assert result.plan.checkpoint_id == open_savepoint(out).metadata.checkpoint_id
        assert result.plan.totals()[0]["after"] == before.num_rows
        _verified(out)


def test_upsert_changes_the_given_keys_only(tmp_path: Path) -> None:
    before = state_table(HEAP, "keyed-state", "sum")
    chosen = before.filter(pc.starts_with(before.column("key"), "key-1"))
    data = chosen.set_column(
        chosen.schema.get_field_index("value"), "value", pa.array([-7] * chosen.num_rows)
    )
    new = pa.table({"key": ["brand-new"], "value": pa.array([42], pa.int64())})
    out = tmp_path / "out"
    result = write_state(
        HEAP, out, "keyed-state", "sum", "upsert", pa.concat_tables([data, new], promote_options="default")
    )
    after = _by_key(state_table(out, "keyed-state", "sum"))
    want = {k: (-7 if k.startswith("key-1") else v) for k, v in _by_key(before).items()} | {"brand-new": 42}
    assert after == want
    total = result.plan.totals()[0]
    assert (total["before"], total["written"], total["deleted"], total["after"]) == (200, 112, 111, 201)
    # The other states of the operator and the other operator are untouched.
    for state in ("ids", "buckets", "_timer_state/event_user-timers"):
        assert _rows(state_table(out, "keyed-state", state)) == _rows(state_table(HEAP, "keyed-state", state))
    other = "9887c2fb29a6e66df7039a0be00a90dd"
    assert _rows(state_table(out, other, "n")) == _rows(state_table(HEAP, other, "n"))
    _verified(out)


def test_each_key_lands_in_the_key_group_flink_computes(tmp_path: Path) -> None:
    from keygroup_cli.core.javahash import hash_code
    from keygroup_cli.core.keygroups import key_group_for_hash

    data = pa.table(
        {"key": pa.array(range(1000, 1050), pa.int64()), "value": pa.array(range(50), pa.int64())}
    )
    out = tmp_path / "out"
    write_state(ROCKS, out, "keyed-state", "sum", "upsert", data)
    table = state_table(out, "keyed-state", "sum")
    added = table.filter(pc.is_in(table.column("key"), value_set=data.column("key"))).to_pylist()
    assert len(added) == 50
    assert all(r["key_group"] == key_group_for_hash(hash_code(r["key"], "long"), 10) for r in added)


def test_delete_removes_every_entry_of_the_keys_or_only_the_given_map_entries(tmp_path: Path) -> None:
    doomed = pa.table({"key": ["key-3", "key-4"]})
    write_state(HEAP, tmp_path / "a", "keyed-state", "buckets", "delete", doomed)
    buckets = state_table(tmp_path / "a", "keyed-state", "buckets")
    original = state_table(HEAP, "keyed-state", "buckets")
    gone = pc.is_in(original.column("key"), value_set=pa.array(["key-3", "key-4"]))
    assert _rows(buckets) == _rows(original.filter(pc.invert(gone)))
    one = original.filter(
        pc.and_(pc.equal(original.column("key"), "key-5"), pc.equal(original.column("user_key"), "b1"))
    )
    assert one.num_rows == 1
    write_state(HEAP, tmp_path / "b", "keyed-state", "buckets", "delete", one.select(["key", "user_key"]))
    left = state_table(tmp_path / "b", "keyed-state", "buckets")
    assert left.num_rows == original.num_rows - 1
    assert {(r["key"], r["user_key"]) for r in left.to_pylist()} == {
        (r["key"], r["user_key"]) for r in original.to_pylist()
    } - {("key-5", "b1")}


def test_dry_run_prints_what_the_run_does_and_writes_nothing(tmp_path: Path) -> None:
    data = pa.table({"key": ["key-1", "key-2", "absent"]})
    out = tmp_path / "out"
    planned = write_state(HEAP, out, "keyed-state", "ids", "delete", data, dry_run=True)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    done = write_state(HEAP, out, "keyed-state", "ids", "delete", data)
    assert planned.plan.changes == done.plan.changes and planned.plan.totals() == done.plan.totals()
    assert sum(c.deleted for c in done.plan.changes) == 2


def test_nothing_is_written_from_an_input_that_fails_verify(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(HEAP, broken)
    op = next(o for o in open_savepoint(broken).metadata.operators if o.uid == "keyed-state")
    name = op.subtasks[1].managed_keyed_state.delegate.relative_path
    raw = bytearray((broken / name).read_bytes())
    raw[-1] ^= 0xFF  # the last key group's END_OF_KEY_GROUP mark
    (broken / name).write_bytes(bytes(raw))
    out = tmp_path / "out"
    with pytest.raises(InvalidInputError) as caught:
        write_state(broken, out, "keyed-state", "sum", "upsert", pa.table({"key": ["x"], "value": [1]}))
    assert caught.value.exit_code == 3 and caught.value.code == "INPUT_FAILS_VERIFY"
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["broken"]


def test_a_type_kg_cannot_encode_is_refused_by_column_before_anything_is_written(tmp_path: Path) -> None:
    kryo = state_table(TYPED, "typed-state", "kryo")
    with pytest.raises(UnsupportedFormatError) as caught:
        write_state(TYPED, tmp_path / "out", "typed-state", "kryo", "upsert", kryo)
    assert caught.value.exit_code == 4 and "'value'" in str(caught.value) and "Kryo" in str(caught.value)
    assert list(tmp_path.iterdir()) == []
    # Deleting keys needs only the key: that works.
    write_state(TYPED, tmp_path / "out", "typed-state", "kryo", "delete", kryo.select(["key"]).slice(0, 1))
    assert state_table(tmp_path / "out", "typed-state", "kryo").num_rows == kryo.num_rows - 1


def test_data_not_in_the_export_shape_is_a_usage_error(tmp_path: Path) -> None:
    for data, words in [
        (pa.table({"key": ["a"], "value": [1], "extra": [1]}), "extra"),
        (pa.table({"key": ["a"]}), "lacks"),
        (pa.table({"key": ["a", "a"], "value": [1, 2]}), "2 rows for one entry"),
        (pa.table({"key": ["a"], "value": ["not a long"]}), ""),
    ]:
        with pytest.raises(InvalidArgumentError) as caught:
            write_state(HEAP, tmp_path / "out", "keyed-state", "sum", "upsert", data)
        assert caught.value.exit_code == 2 and words in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def _ttl_stamps(table: pa.Table) -> list[int]:
    out = []
    for v in table.column("value").to_pylist():
        out.extend(e["ttl_last_access"] for e in (v if isinstance(v, list) else [v]))
    return out


def test_ttl_timestamp_is_the_users_choice_and_compaction_expires_as_flink_would(tmp_path: Path) -> None:
    table = state_table(TYPED, "typed-state", "ttl-value")
    write_state(
        TYPED, tmp_path / "w", "typed-state", "ttl-value", "upsert", table.slice(0, 3), ttl_timestamp=1234
    )
    written = state_table(tmp_path / "w", "typed-state", "ttl-value")
    stamps = {r["key"]: r["value"]["ttl_last_access"] for r in written.to_pylist()}
    assert [stamps[k] for k in table.column("key").to_pylist()[:3]] == [1234] * 3
    for state in ("ttl-value", "ttl-list", "ttl-map"):
        t = state_table(TYPED, "typed-state", state)
        stamps_all = sorted(_ttl_stamps(t))
        cut = stamps_all[len(stamps_all) // 2]  # now = the median stamp + ttl: older entries expire
        ttl = 1000
        out = tmp_path / f"c-{state}"
        result = compact_state(
            TYPED, out, operators=["typed-state"], states=[state], ttl_ms=ttl, now_ms=cut + ttl
        )
        kept = _ttl_stamps(state_table(out, "typed-state", state))
        assert sorted(kept) == [s for s in stamps_all if s + ttl > cut + ttl]
        assert result.plan.totals()[0]["deleted"] >= 1 or state == "ttl-list"


def test_compact_where_keeps_or_drops_keys_and_timers_before(tmp_path: Path) -> None:
    compact_state(ROCKS, tmp_path / "drop", operators=["keyed-state"], where="key >= 10 AND key < 20")
    compact_state(
        ROCKS, tmp_path / "keep", operators=["keyed-state"], where="key >= 10 AND key < 20", keep_where=True
    )
    sums = _by_key(state_table(ROCKS, "keyed-state", "sum"))
    assert set(_by_key(state_table(tmp_path / "drop", "keyed-state", "sum"))) == {
        k for k in sums if not 10 <= k < 20
    }
    assert set(_by_key(state_table(tmp_path / "keep", "keyed-state", "sum"))) == {
        k for k in sums if 10 <= k < 20
    }
    timers = state_table(HEAP, "keyed-state", "_timer_state/event_user-timers")
    cut = sorted(timers.column("timestamp").to_pylist())[100]
    result = compact_state(HEAP, tmp_path / "timers", timers_before=cut)
    left = state_table(tmp_path / "timers", "keyed-state", "_timer_state/event_user-timers")
    assert sorted(left.column("timestamp").to_pylist()) == sorted(
        t for t in timers.column("timestamp").to_pylist() if t >= cut
    )
    assert _rows(state_table(tmp_path / "timers", "keyed-state", "sum")) == _rows(
        state_table(HEAP, "keyed-state", "sum")
    )
    removed = {(r["operator"], r["state"]): r for r in result.plan.totals()}
    assert removed[("keyed-state", "_timer_state/event_user-timers")]["deleted"] == 100
    assert removed[("keyed-state", "_timer_state/event_user-timers")]["removed_bytes"] > 0
    assert result.bytes_saved["keyed-state"] > 0


def test_keys_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_text("key-1\nkey-2\n", encoding="utf-8")
    where = f"key IN FILE '{tmp_path / 'keys.txt'}'"
    compact_state(
        HEAP, tmp_path / "out", operators=["keyed-state"], states=["sum"], where=where, keep_where=True
    )
    assert set(_by_key(state_table(tmp_path / "out", "keyed-state", "sum"))) == {"key-1", "key-2"}


def test_transform_maps_the_export_batches(tmp_path: Path) -> None:
    def double(batch: pa.RecordBatch) -> pa.RecordBatch:
        index = batch.schema.get_field_index("value")
        return batch.set_column(index, batch.schema.field(index), pc.multiply(batch.column(index), 2))

    out = tmp_path / "out"
    result = transform(HEAP, out, "keyed-state", "sum", double)
    assert result.plan.command == "transform"
    assert _by_key(state_table(out, "keyed-state", "sum")) == {
        k: 2 * v for k, v in _by_key(state_table(HEAP, "keyed-state", "sum")).items()
    }
    with pytest.raises(InvalidArgumentError):
        transform(HEAP, tmp_path / "bad", "keyed-state", "sum", lambda b: 3)  # type: ignore[arg-type,return-value]
    assert not (tmp_path / "bad").exists()


def test_the_destination_must_be_absent(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(InvalidArgumentError) as caught:
        compact_state(HEAP, tmp_path / "out", timers_before=0)
    assert caught.value.code == "DESTINATION_EXISTS"
    with pytest.raises(InvalidArgumentError) as caught:
        compact_state(HEAP, tmp_path / "other")
    assert caught.value.code == "NO_RULE"


def test_a_write_can_rescale_max_parallelism_in_the_same_pass(tmp_path: Path) -> None:
    from keygroup_cli.core.javahash import hash_code
    from keygroup_cli.core.keygroups import key_group_for_hash

    source = FLINK_FIXTURES.parent / "2.3" / "uid-heap-canonical-p3"
    before = state_table(source, "keyed-long", "sum")
    data = pa.table({"key": pa.array([7], pa.int64()), "value": pa.array([70], pa.int64())})
    out = tmp_path / "out"
    write_state(source, out, "keyed-long", "sum", "upsert", data, new_max_parallelism=256)
    op = next(o for o in open_savepoint(out).metadata.operators if o.uid == "keyed-long")
    assert op.max_parallelism == 256
    after = state_table(out, "keyed-long", "sum")
    assert _by_key(after) == _by_key(before) | {7: 70}
    assert all(
        r["key_group"] == key_group_for_hash(hash_code(r["key"], "long"), 256) for r in after.to_pylist()
    )
    strings = next(o for o in open_savepoint(out).metadata.operators if o.uid == "keyed-string")
    assert strings.max_parallelism == 10  # the other operators keep theirs
    _verified(out)
    # Where a stateless operator may share a task with the edited one, kg refuses as kg rescale -m does.
    with pytest.raises(InvalidArgumentError) as caught:
        write_state(
            HEAP,
            tmp_path / "refused",
            "keyed-state",
            "sum",
            "upsert",
            data.cast(pa.schema([pa.field("key", pa.string()), pa.field("value", pa.int64())])),
            new_max_parallelism=256,
        )
    assert caught.value.code == "CHAIN_AMBIGUOUS" and not (tmp_path / "refused").exists()
