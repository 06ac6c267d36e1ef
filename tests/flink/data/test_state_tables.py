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


def _rows_of(case: str, state: str) -> tuple[object, list[dict[str, object]]]:
    """Return ``state``'s codecs and its rows (kg keyed schema, raw bytes) in the first file that has some."""
    from keygroup_cli.flink.data.lookup import state_codecs
    from keygroup_cli.flink.data.tables import _split_by_state
    from keygroup_cli.flink.io.stream_source import StreamSource
    from keygroup_cli.flink.keyed.decode import decode_keyed_file
    from keygroup_cli.flink.savepoint import open_savepoint

    savepoint = open_savepoint(FLINK_FIXTURES / case)
    for streams in savepoint.keyed_streams.values():
        for stream in streams:
            with StreamSource(stream.handle.delegate, savepoint.directory) as src:
                compressed = stream.header.compressed
                for batch in decode_keyed_file(src, stream.handle, stream.layout, compressed=compressed):
                    for name, rows in _split_by_state(batch):
                        if name == state and rows.num_rows > 1:
                            return state_codecs(stream)[name], rows.to_pylist()
    raise AssertionError(f"no rows of {state} in {case}")


def test_a_char_with_an_unpaired_surrogate_keeps_its_bytes_in_undecoded() -> None:
    """A Java char or String may hold an unpaired surrogate, which Arrow cannot: its bytes are kept."""
    from keygroup_cli.flink.data.tables import _typed_batch, state_schema

    codecs, rows = _rows_of("typed-heap-canonical-p2", "char")
    lone = codecs.value.write("\ud800")
    rows[0] = {**rows[0], "value": lone}
    table = _typed_batch(codecs, state_schema(codecs), rows)
    assert table.column("value")[0].as_py() is None
    assert table.column("undecoded")[0].as_py() == lone
    # The other rows decode as before.
    assert table.column("value").null_count == 1
    assert table.column("undecoded").null_count == table.num_rows - 1
    assert codecs.value.decode(lone) == "\ud800"


def test_a_key_with_an_unpaired_surrogate_is_refused_in_one_line() -> None:
    from keygroup_cli.core.errors import ExitCode, UnsupportedFormatError
    from keygroup_cli.flink.data.tables import _typed_batch, state_schema
    from keygroup_cli.flink.types.serializers import write_string

    codecs, rows = _rows_of("heap-files-p3-maxp128-string", "sum")
    rows[1] = {**rows[1], "key": write_string("user-\udc00")}
    with pytest.raises(UnsupportedFormatError) as caught:
        _typed_batch(codecs, state_schema(codecs), rows)
    assert caught.value.code == "STRING_NOT_UNICODE"
    assert caught.value.exit_code == ExitCode.UNSUPPORTED
    assert "unpaired UTF-16 surrogate" in str(caught.value) and "\n" not in str(caught.value)
