"""read_state: one keyed state as a typed Arrow table, for every layout (Python API)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import keygroup_cli as kg
from tests.kg_fixture_state import FLINK_FIXTURES, expected


@pytest.mark.parametrize("case", ["rocksdb-native-files-p2-maxp128-long", "heap-files-p3-maxp128-long"])
def test_read_state_returns_the_jobs_list_values(case: str) -> None:
    table = kg.read_state(FLINK_FIXTURES / case, "keyed-state", "ids")
    assert isinstance(table, pa.Table)
    assert table.schema.field("key").type == pa.int64()
    assert table.schema.field("value").type == pa.list_(pa.int64())
    want = {k["key"]: k["ids"] for k in expected(case)["keyedOperators"][0]["keys"]}
    assert {r["key"]: r["value"] for r in table.to_pylist()} == want


def test_ttl_values_keep_their_timestamp() -> None:
    table = kg.read_state(FLINK_FIXTURES / "typed-heap-canonical-p2", "typed-state", "ttl-map")
    assert table.schema.field("value").type == pa.struct(
        [("value", pa.int64()), ("ttl_last_access", pa.int64())]
    )
    assert table.num_rows == 24 and all(r["value"]["ttl_last_access"] > 0 for r in table.to_pylist())


@pytest.mark.parametrize(
    ("case", "state"),
    [
        ("rocksdb-canonical-snappy-p2-maxp256-string", "sum"),
        ("rocksdb-canonical-snappy-p2-maxp256-string", "ids"),
        ("rocksdb-canonical-snappy-p2-maxp256-string", "buckets"),
        ("typed-heap-canonical-p2", "bytes"),
        ("typed-heap-canonical-p2", "double"),
        ("typed-heap-canonical-p2", "pojo"),
    ],
)
def test_the_column_wise_path_gives_the_row_paths_table(case: str, state: str) -> None:
    from keygroup_cli.flink.data.lookup import state_codecs
    from keygroup_cli.flink.data.tables import _column_batch, _split_by_state, _typed_batch, state_schema
    from keygroup_cli.flink.io.stream_source import StreamSource
    from keygroup_cli.flink.keyed.decode import decode_keyed_file
    from keygroup_cli.flink.savepoint import open_savepoint

    savepoint = open_savepoint(FLINK_FIXTURES / case)
    taken = 0
    for streams in savepoint.keyed_streams.values():
        for stream in streams:
            codecs = state_codecs(stream)
            with StreamSource(stream.handle.delegate, savepoint.directory) as src:
                compressed = stream.header.compressed
                for batch in decode_keyed_file(src, stream.handle, stream.layout, compressed=compressed):
                    for name, rows in _split_by_state(batch):
                        if name != state:
                            continue
                        schema = state_schema(codecs[name])
                        fast = _column_batch(codecs[name], schema, rows)
                        slow = _typed_batch(codecs[name], schema, rows.to_pylist())
                        if fast is not None:
                            taken += 1
                            assert fast.equals(slow)
    # Fixed-size values, lists of them and byte[] go column-wise; maps and POJOs keep the row path.
    assert (taken > 0) == (state not in ("buckets", "pojo"))


def test_strings_go_column_wise_only_when_short_and_ascii() -> None:
    from keygroup_cli.flink.data.tables import _prefixed_column
    from keygroup_cli.flink.types.serializers import write_string

    short = ["a", "key-42", "x" * 126, ""]
    assert (
        _prefixed_column(pa.array([write_string(t) for t in short], pa.binary()), "string").to_pylist()
        == short
    )
    for texts in (["é"], ["x" * 127]):
        assert _prefixed_column(pa.array([write_string(t) for t in texts], pa.binary()), "string") is None
    assert _prefixed_column(pa.array([b"\x00\x00\x00\x02ab", b"\x00\x00\x00\x05ab"]), "bytes") is None
