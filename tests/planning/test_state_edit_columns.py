"""``planning.state_edit``: value states encoded column-wise give the bytes the row-by-row encoder gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from keygroup_cli.flink import (
    arrow_rows,
    encode_arrow_entry,
    find_operator,
    open_savepoint,
    state_codecs,
    state_schema,
)
from keygroup_cli.flink import state_table as export_table
from keygroup_cli.planning.state_edit import WriteRequest, _column_entries, _stamped, write_edit
from tests.kg_fixture_state import FLINK_FIXTURES

HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"
TYPED = FLINK_FIXTURES / "typed-heap-canonical-p2"
NOW = 1_800_000_000_000


def _state(path: Path, operator: str, name: str):  # type: ignore[no-untyped-def]
    sp = open_savepoint(path)
    stream = sp.keyed_streams[find_operator(sp, operator).operator_id][0]
    return state_codecs(stream)[name], stream.layout.codec


def _row_by_row(codecs, data: pa.Table, stamp: int | None) -> dict:  # type: ignore[no-untyped-def, type-arg]
    entries = {
        row["key"]: encode_arrow_entry(codecs, _stamped(codecs, row, stamp, NOW)) for row in arrow_rows(data)
    }
    return {key: (e.namespace, e.value) for key, e in entries.items()}


def _written(codecs, key_codec, data: pa.Table, stamp: int | None) -> dict:  # type: ignore[no-untyped-def, type-arg]
    schema = state_schema(codecs)
    edit = write_edit(
        WriteRequest("op", codecs.name, "upsert", data, stamp),
        codecs,
        key_codec,
        key_codec.key_type,
        128,
        schema,
        NOW,
    )
    assert edit.inserts is not None
    cells = zip(
        edit.inserts.column("namespace").to_pylist(), edit.inserts.column("value").to_pylist(), strict=True
    )
    return dict(zip(edit.inserts.column("key").to_pylist(), cells, strict=True))


@pytest.mark.parametrize(
    ("path", "operator", "state"),
    [(TYPED, "typed-state", "ttl-value"), (TYPED, "typed-state", "int"), (HEAP, "keyed-state", "sum")],
)
def test_column_wise_values_are_the_row_by_row_bytes(path: Path, operator: str, state: str) -> None:
    codecs, key_codec = _state(path, operator, state)
    exported = export_table(path, operator, state).drop_columns(["key_group"])
    if "undecoded" in exported.column_names:
        exported = exported.drop_columns(["undecoded"])
    rng = np.random.default_rng(3)
    n = 500
    key_type = key_codec.key_type
    keys = (
        pa.array([f"k{i}" for i in range(n)])
        if key_type == "string"
        else pa.array(rng.choice(2**31 - 1, n, replace=False).astype(np.int32) + 1000)
    )
    value_type = exported.schema.field("value").type
    if pa.types.is_struct(value_type):  # TTL: some rows' last access given, some null
        inner = value_type.field("value").type
        raw = (
            [f"v{i}" * (i % 9) for i in range(n)]
            if pa.types.is_string(inner)
            else list(range(-n // 2, n // 2))
        )
        stamps = pa.array([None if i % 3 == 0 else NOW - i for i in range(n)], pa.int64())
        values = pa.StructArray.from_arrays(
            [pa.array(raw, inner), stamps], names=["value", "ttl_last_access"]
        )
    else:
        values = pa.array(rng.integers(-(2**31), 2**31 - 1, n), value_type)
    data = pa.concat_tables([exported, pa.table({"key": keys, "value": values}).cast(exported.schema)])
    for stamp in (None, 1234):
        assert _column_entries(codecs, data, key_type, stamp, NOW) is not None  # the column-wise path runs
        assert _written(codecs, key_codec, data, stamp) == _row_by_row(codecs, data, stamp)


def test_what_the_column_path_does_not_take_goes_row_by_row() -> None:
    codecs, key_codec = _state(TYPED, "typed-state", "ttl-value")
    stamps = pa.array([NOW, NOW], pa.int64())
    for text in (["caf\u00e9", "plain"], ["x" * 127, "y"]):  # non-ASCII; a length + 1 over one byte
        values = pa.StructArray.from_arrays([pa.array(text), stamps], names=["value", "ttl_last_access"])
        data = pa.table({"key": pa.array([1, 2], pa.int32()), "value": values})
        assert _column_entries(codecs, data, "int", None, NOW) is None
        assert _written(codecs, key_codec, data, None) == _row_by_row(codecs, data, None)
