"""Decode canonical keyed state and write it back, checked against Flink's own files and expected state."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pytest
from kg_fixture_state import (
    CANONICAL_CASES,
    FLINK_FIXTURES,
    expected_keyed_state,
    logical_keyed_state,
)

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import decode_block, decode_keyed_file
from keygroup_cli.flink.keyed.encode import encode_block, write_keyed_file
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.keyed.layout import KeyedLayout, StateLayout
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.types.serializers import VOID_NAMESPACE_SERIALIZER_SNAPSHOT, key_codec


def _keyed_files(case: str) -> list[tuple[str, int, KeyGroupsHandle, bytes, KeyedLayout, bool]]:
    """Return (operator, maxP, handle, bytes, layout, compressed) of every keyed handle of a case."""
    snapshot = read_flink_metadata(FLINK_FIXTURES / case)
    out = []
    for op in snapshot.metadata.operators:
        for subtask in op.subtasks:
            handle = subtask.managed_keyed_state
            if handle is None:
                continue
            assert isinstance(handle, KeyGroupsHandle) and handle.tag == 7
            with StreamSource(handle.delegate, snapshot.directory) as src:
                data = src.read(0, src.size)
            first = min([o for o in handle.offsets if o] or [len(data)])
            header = read_keyed_header(data[:first], case, first)
            layout = KeyedLayout.from_header(header, op.max_parallelism, case)
            out.append((op.name or "", op.max_parallelism, handle, data, layout, header.compressed))
    return out


def _decode(case: str) -> dict[str, list[dict[str, Any]]]:
    snapshot = read_flink_metadata(FLINK_FIXTURES / case)
    rows: dict[str, list[dict[str, Any]]] = {}
    for name, _maxp, handle, _data, layout, compressed in _keyed_files(case):
        with StreamSource(handle.delegate, snapshot.directory) as src:
            for batch in decode_keyed_file(src, handle, layout, compressed=compressed, batch_rows=97):
                rows.setdefault(name, []).extend(batch.to_pylist())
    return rows


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_decoded_keyed_state_equals_flinks_expected_state(case: str) -> None:
    rows = _decode(case)
    main, counts = expected_keyed_state(case)
    assert logical_keyed_state(rows["keyed-state"]) == main
    assert logical_keyed_state(rows["count-no-uid"]) == counts


def test_null_map_values_of_rocksdb_become_null() -> None:
    rows = _decode("rocksdb-canonical-snappy-p2-maxp256-string")["keyed-state"]
    nulls = [r for r in rows if r["state"] == "buckets" and r["value"] is None]
    # Keys k with k % 10 == 3 hold "null-value" -> null: 20 keys.
    assert len(nulls) == 20
    assert {r["user_key"] for r in nulls} == {b"\x0bnull-value"}


@pytest.mark.parametrize("case", [c for c in CANONICAL_CASES if "snappy" not in c])
def test_decode_then_encode_reproduces_flinks_bytes(case: str) -> None:
    snapshot = read_flink_metadata(FLINK_FIXTURES / case)
    for _name, _maxp, handle, data, layout, compressed in _keyed_files(case):
        first = min(o for o in handle.offsets if o)
        with StreamSource(handle.delegate, snapshot.directory) as src:
            batches = list(decode_keyed_file(src, handle, layout, compressed=compressed, batch_rows=50))
        out = io.BytesIO()
        written = write_keyed_file(
            out,
            data[:first],
            layout,
            batches,
            KeyGroupRange(handle.key_group_start, handle.key_group_end),
            compressed=False,
        )
        assert written.offsets == handle.offsets
        assert out.getvalue() == data


@pytest.mark.parametrize(
    "case", ["heap-snappy-files-p3-maxp128-long", "rocksdb-canonical-snappy-p2-maxp256-string"]
)
def test_compressed_files_round_trip_to_the_same_rows(case: str) -> None:
    snapshot = read_flink_metadata(FLINK_FIXTURES / case)
    for _name, _maxp, handle, data, layout, compressed in _keyed_files(case):
        assert compressed
        first = min(o for o in handle.offsets if o)
        with StreamSource(handle.delegate, snapshot.directory) as src:
            original = pa.Table.from_batches(list(decode_keyed_file(src, handle, layout, compressed=True)))
        out = io.BytesIO()
        rng = KeyGroupRange(handle.key_group_start, handle.key_group_end)
        written = write_keyed_file(out, data[:first], layout, [original], rng, compressed=True)
        # Same key groups present; each block starts with a snappy stream identifier.
        assert [o != 0 for o in written.offsets] == [o != 0 for o in handle.offsets]
        raw = out.getvalue()
        assert raw[4] == 1
        assert all(raw[o : o + 10] == b"\xff\x06\x00\x00sNaPpY" for o in written.offsets if o)
        again = KeyGroupsHandle(7, handle.key_group_start, written.offsets, None)
        src2 = _BytesSource(raw)
        decoded = pa.Table.from_batches(list(decode_keyed_file(src2, again, layout, compressed=True)))  # type: ignore[arg-type]
        assert decoded.equals(original)


class _BytesSource:
    def __init__(self, data: bytes) -> None:
        self.data, self.size, self.source = data, len(data), "<test>"

    def read(self, start: int, end: int) -> bytes:
        return self.data[start:end]


def test_uncompressed_rows_can_be_written_compressed_and_back() -> None:
    case = "heap-files-p2-maxp256-string"
    snapshot = read_flink_metadata(FLINK_FIXTURES / case)
    _name, _maxp, handle, data, layout, _c = _keyed_files(case)[0]
    first = min(o for o in handle.offsets if o)
    with StreamSource(handle.delegate, snapshot.directory) as src:
        original = pa.Table.from_batches(list(decode_keyed_file(src, handle, layout, compressed=False)))
    out = io.BytesIO()
    rng = KeyGroupRange(handle.key_group_start, handle.key_group_end)
    written = write_keyed_file(out, data[:first], layout, [original], rng, compressed=True)
    header = read_keyed_header(out.getvalue()[:first], "x", first)
    assert header.compressed
    again = KeyGroupsHandle(7, handle.key_group_start, written.offsets, None)
    decoded = pa.Table.from_batches(
        list(decode_keyed_file(_BytesSource(out.getvalue()), again, layout, compressed=True))  # type: ignore[arg-type]
    )
    assert decoded.equals(original)


def test_prefix_width_follows_max_parallelism() -> None:
    layout1 = KeyedLayout(
        key_codec("org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot"),
        1,
        (StateLayout("v", "value", VOID_NAMESPACE_SERIALIZER_SNAPSHOT),),
    )
    layout2 = KeyedLayout(layout1.codec, 2, layout1.states)
    entries = [(0, b"\x00" * 7 + b"\x05" + b"\x00", b"\x00" * 8)]
    one = encode_block(100, entries, 1)
    two = encode_block(300, entries, 2)
    # short state id, int key length, prefix with the last-entry flag, ...
    assert one[6] == 0x80 | 100 and one[2:6] == (1 + 9).to_bytes(4, "big")
    assert two[6:8] == (0x8000 | 300).to_bytes(2, "big") and two[2:6] == (2 + 9).to_bytes(4, "big")
    assert one[-2:] == two[-2:] == b"\xff\xff"
    for block, group, layout in ((one, 100, layout1), (two, 300, layout2)):
        cols = _cols()
        decode_block(block, group, layout, cols, "t")
        assert cols.key == [5] and cols.key_group == [group] and cols.namespace == [b"\x00"]


def _cols() -> Any:
    from keygroup_cli.flink.keyed.decode import _Columns

    return _Columns()


def test_truncated_block_is_a_clear_error() -> None:
    layout = KeyedLayout(
        key_codec("org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot"),
        1,
        (StateLayout("v", "value", VOID_NAMESPACE_SERIALIZER_SNAPSHOT),),
    )
    block = encode_block(3, [(0, b"\x00" * 8 + b"\x00", b"\x00" * 8)], 1)
    with pytest.raises(InvalidInputError, match="END_OF_KEY_GROUP|truncated"):
        decode_block(block[:-3], 3, layout, _cols(), "file-x")
    with pytest.raises(InvalidInputError, match="another key group.s prefix"):
        decode_block(block, 4, layout, _cols(), "file-x")


def test_opaque_key_map_state_is_refused_clearly() -> None:
    codec = key_codec("com.example.PojoSerializerSnapshot")
    assert codec.key_type == "binary"
    layout = KeyedLayout(codec, 1, (StateLayout("m", "map", VOID_NAMESPACE_SERIALIZER_SNAPSHOT),))
    block = encode_block(1, [(0, b"abc" + b"\x00" + b"uk", b"\x00v")], 1)
    with pytest.raises(UnsupportedFormatError, match="cannot split the composite key"):
        decode_block(block, 1, layout, _cols(), "f")


def test_opaque_key_value_state_keeps_key_bytes() -> None:
    layout = KeyedLayout(
        key_codec("com.example.PojoSerializerSnapshot"),
        1,
        (StateLayout("v", "value", VOID_NAMESPACE_SERIALIZER_SNAPSHOT),),
    )
    block = encode_block(1, [(0, b"abc" + b"\x00", b"val")], 1)
    cols = _cols()
    decode_block(block, 1, layout, cols, "f")
    assert cols.key == [b"abc"] and cols.namespace == [b"\x00"] and cols.value == [b"val"]
