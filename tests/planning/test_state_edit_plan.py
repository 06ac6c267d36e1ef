"""``planning.state_edit``: data in the export's shape made into an edit, placed by Flink's key-group math."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from keygroup_cli.core.errors import InvalidArgumentError, UnsupportedFormatError
from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import KeyGroupRange, key_group_for_hash
from keygroup_cli.flink import find_operator, open_savepoint, state_codecs, state_schema
from keygroup_cli.planning.state_edit import (
    KeyGroupChange,
    StateEditPlan,
    WriteRequest,
    edit_in_range,
    read_data,
    require_encodable,
    touched_key_groups,
    write_edit,
)
from tests.kg_fixture_state import FLINK_FIXTURES

HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"
TYPED = FLINK_FIXTURES / "typed-heap-canonical-p2"


def _state(path: Path, operator: str, name: str):  # type: ignore[no-untyped-def]
    sp = open_savepoint(path)
    stream = sp.keyed_streams[find_operator(sp, operator).operator_id][0]
    return state_codecs(stream)[name], stream.layout.codec


def test_upsert_rows_are_encoded_and_placed_in_flinks_key_groups() -> None:
    codecs, key_codec = _state(HEAP, "keyed-state", "buckets")
    data = pa.table(
        {"key": ["a", "b", "a"], "user_key": ["x", "x", "y"], "value": pa.array([1, 2, 3], pa.int64())}
    )
    edit = write_edit(
        WriteRequest("keyed-state", "buckets", "upsert", data),
        codecs,
        key_codec,
        "string",
        128,
        state_schema(codecs),
    )
    assert edit.states == frozenset({"buckets"}) and not edit.replace
    inserts = edit.inserts.to_pylist()
    assert {(r["key"], r["user_key"], r["value"]) for r in inserts} == {
        ("a", b"\x02x", (1).to_bytes(8, "big")),
        ("b", b"\x02x", (2).to_bytes(8, "big")),
        ("a", b"\x02y", (3).to_bytes(8, "big")),
    }
    assert all(r["key_group"] == key_group_for_hash(hash_code(r["key"], "string"), 128) for r in inserts)
    assert edit.matches.column_names == ["key_group", "state", "key", "namespace", "user_key"]
    groups = touched_key_groups(edit, 128)
    assert groups == sorted({r["key_group"] for r in inserts})
    first = edit_in_range(edit, KeyGroupRange(groups[0], groups[0]))
    assert {r["key_group"] for r in first.inserts.to_pylist()} == {groups[0]}


def test_delete_matches_on_the_columns_given_and_replace_drops_the_state() -> None:
    codecs, key_codec = _state(HEAP, "keyed-state", "sum")
    schema = state_schema(codecs)
    delete = write_edit(
        WriteRequest("o", "sum", "delete", pa.table({"key": ["k"]})), codecs, key_codec, "string", 128, schema
    )
    assert delete.inserts is None and delete.matches.column_names == ["key_group", "state", "key"]
    data = pa.table({"key": ["k"], "value": pa.array([5], pa.int64())})
    replace = write_edit(WriteRequest("o", "sum", "replace", data), codecs, key_codec, "string", 128, schema)
    assert replace.replace and replace.matches is None and touched_key_groups(replace, 128) is None
    with pytest.raises(InvalidArgumentError, match="2 rows for one entry"):
        write_edit(
            WriteRequest("o", "sum", "upsert", pa.concat_tables([data, data])),
            codecs,
            key_codec,
            "string",
            128,
            schema,
        )
    with pytest.raises(InvalidArgumentError, match="--mode 'merge'"):
        write_edit(WriteRequest("o", "sum", "merge", data), codecs, key_codec, "string", 128, schema)


def test_ttl_stamps_fill_or_override() -> None:
    codecs, key_codec = _state(TYPED, "typed-state", "ttl-value")
    schema = state_schema(codecs)
    inner = schema.field("value").type.field("value").type
    data = pa.table(
        {
            "key": [1, 2],
            "value": [{"value": None, "ttl_last_access": 5}, {"value": None, "ttl_last_access": None}],
        }
    )
    data = data.cast(
        pa.schema(
            [
                schema.field("key"),
                pa.field("value", pa.struct([("value", inner), ("ttl_last_access", pa.int64())])),
            ]
        )
    )
    given = write_edit(
        WriteRequest("o", "ttl-value", "upsert", data),
        codecs,
        key_codec,
        _key_type(TYPED),
        128,
        schema,
        now_ms=99,
    )
    stamps = sorted(
        int.from_bytes(v[:8], "big", signed=True) for v in given.inserts.column("value").to_pylist()
    )
    assert stamps == [5, 99]
    chosen = write_edit(
        WriteRequest("o", "ttl-value", "upsert", data, ttl_timestamp=7),
        codecs,
        key_codec,
        _key_type(TYPED),
        128,
        schema,
        now_ms=99,
    )
    assert [int.from_bytes(v[:8], "big") for v in chosen.inserts.column("value").to_pylist()] == [7, 7]


def _key_type(path: Path) -> str:
    sp = open_savepoint(path)
    return next(iter(sp.key_types.values()))


def test_types_kg_cannot_encode_are_refused_by_column() -> None:
    codecs, _ = _state(TYPED, "typed-state", "kryo")
    with pytest.raises(UnsupportedFormatError, match="column 'value'") as caught:
        require_encodable(codecs, ["key", "value"], "upsert")
    assert caught.value.exit_code == 4
    require_encodable(codecs, ["key"], "delete")


def test_read_data_takes_parquet_and_both_arrow_formats(tmp_path: Path) -> None:
    table = pa.table({"key": ["a"], "value": [1]})
    pq.write_table(table, tmp_path / "d.parquet")
    with ipc.new_file(tmp_path / "d.arrow", table.schema) as w:
        w.write_table(table)
    with ipc.new_stream(tmp_path / "d.stream", table.schema) as w:
        w.write_table(table)
    for name in ("d.parquet", "d.arrow", "d.stream"):
        assert read_data(str(tmp_path / name)).equals(table)
    (tmp_path / "junk").write_bytes(b"junk")
    with pytest.raises(InvalidArgumentError) as caught:
        read_data(str(tmp_path / "junk"))
    assert caught.value.code == "DATA_UNREADABLE"


def test_plan_totals_add_up_per_state() -> None:
    changes = (KeyGroupChange("op", "s", 1, 10, 2, 3), KeyGroupChange("op", "s", 2, 5, 0, 5))
    plan = StateEditPlan("write", "sp", 7, (), "upsert", changes, {("op", "s"): 40}, {("op", "s"): 100})
    assert plan.totals() == [
        {
            "operator": "op",
            "state": "s",
            "before": 100,
            "written": 2,
            "deleted": 8,
            "kept": 92,
            "after": 94,
            "removed_bytes": 40,
        }
    ]
    assert changes[0].kept == 7 and changes[0].after == 9
