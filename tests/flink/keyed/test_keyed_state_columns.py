"""The column-wise keyed-state decoder and encoder give the per-entry reference path's rows and bytes."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kg_fixture_state import CANONICAL_CASES, FLINK_FIXTURES

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.core.schema import keyed_schema
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import (
    _Columns,
    decode_block,
    decode_block_batches,
    decode_block_columns,
    decode_keyed_file,
)
from keygroup_cli.flink.keyed.encode import (
    _Block,
    _encode_columns,
    _encode_per_entry,
    _Rows,
    write_keyed_file,
)
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.keyed.layout import KeyedLayout, StateLayout
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.types.serializers import (
    BOOLEAN_SERIALIZER_SNAPSHOT,
    INT_SERIALIZER_SNAPSHOT,
    LONG_SERIALIZER_SNAPSHOT,
    STRING_SERIALIZER_SNAPSHOT,
    TIME_WINDOW_SERIALIZER_SNAPSHOT,
    VOID_NAMESPACE_SERIALIZER_SNAPSHOT,
    key_codec,
)


def _reference(block: bytes, group: int, layout: KeyedLayout) -> pa.RecordBatch:
    columns = _Columns()
    decode_block(block, group, layout, columns, "ref")
    return columns.batch(layout)


def _blocks(case: str) -> list[tuple[KeyedLayout, int, bytes]]:
    snapshot = read_flink_metadata(FLINK_FIXTURES / case)
    out = []
    for op in snapshot.metadata.operators:
        for subtask in op.subtasks:
            handle = subtask.managed_keyed_state
            if not isinstance(handle, KeyGroupsHandle):
                continue
            with StreamSource(handle.delegate, snapshot.directory) as src:
                data = src.read(0, src.size)
            extents = key_group_extents(handle, len(data))
            header = read_keyed_header(data[: extents[0][1]], case, extents[0][1])
            layout = KeyedLayout.from_header(header, op.max_parallelism, case)
            for group, start, end in extents:
                raw = data[start:end]
                out.append((layout, group, decode_frames(raw, case) if header.compressed else raw))
    return out


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_column_decoder_equals_the_reference_on_flinks_blocks(case: str) -> None:
    used = 0
    for layout, group, block in _blocks(case):
        fast = decode_block_columns(block, group, layout)
        if fast is not None:
            used += 1
            assert fast.equals(_reference(block, group, layout))
    # Blocks of value, list and map states and timers take the column-wise path (non-ASCII keys do not).
    assert used > 0


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_blocks_with_timers_are_decoded_column_wise(case: str) -> None:
    timers = 0
    for layout, group, block in _blocks(case):
        reference = _reference(block, group, layout)
        if reference.column("timestamp").null_count == reference.num_rows:
            continue
        keys = reference.column("key").to_pylist()
        if layout.codec.key_type == "string" and not all(k.isascii() and len(k) <= 126 for k in keys):
            continue  # the fixtures' non-ASCII keys take the reference path
        timers += 1
        fast = decode_block_columns(block, group, layout)
        assert fast is not None
        assert fast.equals(reference)
        rows = _Rows.of(reference, layout.state_ids())
        encoded = _encode_columns(rows, layout)
        assert encoded is not None
        assert _pairs(encoded) == [(group, block)]
    assert timers > 0


def _pairs(blocks: Iterable[_Block]) -> list[tuple[int, bytes]]:
    return [(b.key_group, bytes(b.block)) for b in blocks]


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_column_encoder_equals_the_reference_on_flinks_rows(case: str) -> None:
    used = 0
    for layout, group, block in _blocks(case):
        batch = _reference(block, group, layout)
        rows = _Rows.of(batch, layout.state_ids())
        reference = _pairs(_encode_per_entry(rows, layout))
        assert reference == [(group, block)]
        fast = _encode_columns(rows, layout)
        if fast is not None:
            used += 1
            assert _pairs(fast) == reference
    assert used > 0


# -- synthetic layouts: every key type, maps with null values, two-byte prefixes, interleaved states ----


def _layout(key_serializer: str, max_parallelism_prefix: int, *states: StateLayout) -> KeyedLayout:
    return KeyedLayout(key_codec(key_serializer), max_parallelism_prefix, states)


STATES = (
    StateLayout("v", "value", VOID_NAMESPACE_SERIALIZER_SNAPSHOT),
    StateLayout("m", "map", VOID_NAMESPACE_SERIALIZER_SNAPSHOT),
    StateLayout("l", "list", VOID_NAMESPACE_SERIALIZER_SNAPSHOT),
    StateLayout("w", "value", TIME_WINDOW_SERIALIZER_SNAPSHOT),
    StateLayout("t", "timer", VOID_NAMESPACE_SERIALIZER_SNAPSHOT),
    StateLayout("tw", "timer", TIME_WINDOW_SERIALIZER_SNAPSHOT),
)
#: Timer timestamps, the extremes included (the sign bit is flipped on the wire).
TIMESTAMPS = (0, -1, 1, -(2**63), 2**63 - 1, 1_700_000_000_000, -1_700_000_000_000)


def _rows(key_type: str, keys: list[Any], groups: list[int]) -> pa.RecordBatch:
    """Rows whose states interleave inside each key group (m, t, v, m, l, ...), map values partly null."""
    names = ["m", "t", "v", "m", "l", "w", "tw", "v", "t"]
    out: dict[str, list[Any]] = {c: [] for c in keyed_schema(key_type).names}
    for i, (key, group) in enumerate(zip(keys, groups, strict=True)):
        name = names[i % len(names)]
        timer = name in ("t", "tw")
        out["key_group"].append(group)
        out["state"].append(name)
        out["key"].append(key)
        out["namespace"].append(bytes(range(16)) if name in ("w", "tw") else b"\x00")
        out["user_key"].append(b"\x03uk" + bytes([i % 7]) if name == "m" else None)
        if timer:
            out["value"].append(None)
            out["timestamp"].append(TIMESTAMPS[i % len(TIMESTAMPS)])
        else:
            out["value"].append(None if name == "m" and i % 4 == 0 else b"val" * (i % 5))
            out["timestamp"].append(None)
    return pa.RecordBatch.from_pydict(out, schema=keyed_schema(key_type))


@pytest.mark.parametrize(
    ("serializer", "key_type", "keys"),
    [
        (STRING_SERIALIZER_SNAPSHOT, "string", [f"user-{i}" for i in range(40)] + ["", "x" * 126]),
        (
            LONG_SERIALIZER_SNAPSHOT,
            "long",
            [(i - 20) * 1_000_000_007 for i in range(40)] + [-(2**63), 2**63 - 1],
        ),
        (INT_SERIALIZER_SNAPSHOT, "int", [(i - 20) * 100_003 for i in range(40)] + [-(2**31), 2**31 - 1]),
        (BOOLEAN_SERIALIZER_SNAPSHOT, "boolean", [i % 3 == 0 for i in range(42)]),
    ],
)
@pytest.mark.parametrize("prefix_bytes", [1, 2])
def test_round_trip_of_every_key_type_equals_the_reference(
    serializer: str, key_type: str, keys: list[Any], prefix_bytes: int
) -> None:
    layout = _layout(serializer, prefix_bytes, *STATES)
    first = 100 if prefix_bytes == 1 else 300
    groups = sorted(first + i // 9 for i in range(len(keys)))
    batch = _rows(key_type, keys, groups)
    rows = _Rows.of(batch, layout.state_ids())
    fast = _encode_columns(rows, layout)
    assert fast is not None
    encoded = _pairs(fast)
    assert encoded == _pairs(_encode_per_entry(rows, layout))
    for group, block in encoded:
        decoded = decode_block_columns(block, group, layout)
        assert decoded is not None
        assert decoded.equals(_reference(block, group, layout))
    # Through the file writer and reader too: rows come back in block (run) order.
    out = io.BytesIO()
    header = b"\x00" * 8
    written = write_keyed_file(
        out,
        header,
        layout,
        [batch.slice(0, 17), batch.slice(17)],
        KeyGroupRange(first, first + 10),
        compressed=False,
    )
    assert written.rows == len(keys)
    handle = KeyGroupsHandle(7, first, written.offsets, None)
    back = pa.Table.from_batches(
        list(decode_keyed_file(_Bytes(out.getvalue()), handle, layout, compressed=False))  # type: ignore[arg-type]
    )
    assert sorted(map(repr, back.to_pylist())) == sorted(map(repr, batch.to_pylist()))


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data, self.size, self.source = data, len(data), "<test>"

    def read(self, start: int, end: int) -> bytes:
        return self.data[start:end]


def test_keys_the_column_paths_do_not_cover_fall_back_to_the_reference() -> None:
    layout = _layout(STRING_SERIALIZER_SNAPSHOT, 1, *STATES)
    for keys in (["é-non-ascii"] * 6, ["y" * 127] * 6):
        batch = _rows("string", keys, [5] * 6)
        rows = _Rows.of(batch, layout.state_ids())
        assert _encode_columns(rows, layout) is None
        [(group, block)] = _pairs(_encode_per_entry(rows, layout))
        assert decode_block_columns(bytes(block), group, layout) is None
        # The file writer still writes them (through the reference path).
        out = io.BytesIO()
        write_keyed_file(out, b"\x00" * 8, layout, [batch], KeyGroupRange(0, 9), compressed=False)
        assert bytes(block) in out.getvalue()


def test_corrupt_blocks_are_left_to_the_reference_decoder() -> None:
    layout = _layout(LONG_SERIALIZER_SNAPSHOT, 1, *STATES)
    batch = _rows("long", list(range(6)), [3] * 6)
    [(group, block)] = _pairs(_encode_per_entry(_Rows.of(batch, layout.state_ids()), layout))
    assert decode_block_columns(block, group, layout) is not None
    assert decode_block_columns(block[:-3], group, layout) is None  # truncated
    assert decode_block_columns(block, group + 1, layout) is None  # another key group's prefix
    bad_length = block[:2] + (2**30).to_bytes(4, "big") + block[6:]
    assert decode_block_columns(bad_length, group, layout) is None


def test_timer_rows_the_reference_rejects_or_ignores() -> None:
    layout = _layout(LONG_SERIALIZER_SNAPSHOT, 1, *STATES)
    batch = _rows("long", list(range(9)), [4] * 9)
    # A timer's value is not written (valueLen 0), as in the reference.
    values = batch.column("value").to_pylist()
    values[1] = b"ignored"
    with_value = batch.set_column(
        batch.schema.get_field_index("value"), "value", pa.array(values, pa.binary())
    )
    rows = _Rows.of(with_value, layout.state_ids())
    fast = _encode_columns(rows, layout)
    assert fast is not None
    assert _pairs(fast) == _pairs(_encode_per_entry(rows, layout))
    # A timer without a timestamp is the reference path's error.
    stamps = batch.column("timestamp").to_pylist()
    stamps[1] = None
    without = batch.set_column(
        batch.schema.get_field_index("timestamp"), "timestamp", pa.array(stamps, pa.int64())
    )
    rows = _Rows.of(without, layout.state_ids())
    assert _encode_columns(rows, layout) is None
    with pytest.raises(InvalidInputError, match="without timestamp"):
        list(_encode_per_entry(rows, layout))


def test_truncated_timers_are_left_to_the_reference_decoder() -> None:
    layout = _layout(
        STRING_SERIALIZER_SNAPSHOT, 1, StateLayout("t", "timer", VOID_NAMESPACE_SERIALIZER_SNAPSHOT)
    )
    # keyLen 5: prefix and 4 bytes of an 8-byte timestamp.
    block = b"\x00\x00" + (5).to_bytes(4, "big") + b"\x83" + b"\x80\x00\x00\x00" + b"\x00" * 4 + b"\xff\xff"
    assert decode_block_columns(block, 3, layout) is None
    with pytest.raises(InvalidInputError, match="timer element too short"):
        decode_block(block, 3, layout, _Columns(), "ref")


_KEYS = {
    "string": (STRING_SERIALIZER_SNAPSHOT, st.text(alphabet=st.characters(max_codepoint=127), max_size=126)),
    "long": (LONG_SERIALIZER_SNAPSHOT, st.integers(-(2**63), 2**63 - 1)),
    "int": (INT_SERIALIZER_SNAPSHOT, st.integers(-(2**31), 2**31 - 1)),
}


@st.composite
def _mixed_rows(draw: st.DrawFn) -> tuple[KeyedLayout, pa.RecordBatch]:
    key_type = draw(st.sampled_from(sorted(_KEYS)))
    serializer, keys = _KEYS[key_type]
    prefix_bytes = draw(st.sampled_from([1, 2]))
    layout = _layout(serializer, prefix_bytes, *STATES)
    count = draw(st.integers(1, 40))
    groups = sorted(
        draw(st.lists(st.integers(0, 127 if prefix_bytes == 1 else 1000), min_size=count, max_size=count))
    )
    out: dict[str, list[Any]] = {c: [] for c in keyed_schema(key_type).names}
    for group in groups:
        state = draw(st.sampled_from(STATES))
        out["key_group"].append(group)
        out["state"].append(state.name)
        out["key"].append(draw(keys))
        out["namespace"].append(
            draw(st.binary(min_size=16, max_size=16)) if state.namespace_size == 16 else b"\x00"
        )
        out["user_key"].append(draw(st.binary(max_size=6)) if state.kind == "map" else None)
        if state.kind == "timer":
            out["value"].append(None)
            out["timestamp"].append(draw(st.integers(-(2**63), 2**63 - 1)))
        else:
            nullable = state.kind == "map"
            out["value"].append(
                draw(st.none() | st.binary(max_size=8)) if nullable else draw(st.binary(max_size=8))
            )
            out["timestamp"].append(None)
    return layout, pa.RecordBatch.from_pydict(out, schema=keyed_schema(key_type))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mixed_rows())
def test_generated_rows_with_timers_equal_the_reference(case: tuple[KeyedLayout, pa.RecordBatch]) -> None:
    layout, batch = case
    rows = _Rows.of(batch, layout.state_ids())
    fast = _encode_columns(rows, layout)
    assert fast is not None
    encoded = _pairs(fast)
    assert encoded == _pairs(_encode_per_entry(rows, layout))
    for group, block in encoded:
        decoded = decode_block_columns(block, group, layout)
        assert decoded is not None
        assert decoded.equals(_reference(block, group, layout))


# -- a block decoded window by window -------------------------------------------------------------------


@pytest.mark.parametrize("case", CANONICAL_CASES)
@pytest.mark.parametrize("batch_rows", [1, 3, 1000])
def test_windows_of_a_block_are_its_rows_in_order(case: str, batch_rows: int) -> None:
    for layout, group, block in _blocks(case)[:20]:
        reference = _reference(block, group, layout)
        windows = list(decode_block_batches(block, group, layout, case, batch_rows))
        if decode_block_columns(block, group, layout) is not None:
            assert all(w.num_rows <= batch_rows for w in windows)
        assert pa.Table.from_batches(windows).combine_chunks() == pa.Table.from_batches([reference])


def test_a_window_that_needs_the_reference_decoder_takes_the_rest_of_the_block_from_it() -> None:
    layout = _layout(STRING_SERIALIZER_SNAPSHOT, 1, *STATES)
    # Row 15's state ("tw") forms the block's last run, so its non-ASCII key is the block's last entry but 1.
    keys = [f"k{i}" for i in range(15)] + ["ключ", "z0", "z1"]
    batch = _rows("string", keys, [7] * len(keys))
    [(group, block)] = _pairs(_encode_per_entry(_Rows.of(batch, layout.state_ids()), layout))
    windows = list(decode_block_batches(block, group, layout, "synthetic", 4))
    # Four column-wise windows; the one holding the non-ASCII key and the rest come from the per-entry
    # decoder, as one slice.
    assert [w.num_rows for w in windows] == [4, 4, 4, 4, 2]
    reference = _reference(block, group, layout)
    assert "ключ" in reference.column("key").to_pylist()[16:]
    assert pa.Table.from_batches(windows).combine_chunks() == pa.Table.from_batches([reference])


@pytest.mark.parametrize("column_wise", [True, False])
def test_whole_refuses_bytes_after_the_end_mark(column_wise: bool) -> None:
    layout = _layout(STRING_SERIALIZER_SNAPSHOT, 1, *STATES)
    keys = [f"k{i}" for i in range(9)] if column_wise else [f"k{i}" for i in range(8)] + ["ключ"]
    [(group, block)] = _pairs(
        _encode_per_entry(_Rows.of(_rows("string", keys, [5] * len(keys)), layout.state_ids()), layout)
    )
    assert (decode_block_columns(block, group, layout) is not None) is column_wise
    padded = block + b"\x00\x00"
    # Flink reads up to the END mark and seeks to the next block: the lenient read takes the rows ...
    rows = pa.Table.from_batches(list(decode_block_batches(padded, group, layout, "p", 4)))
    assert rows.num_rows == len(keys)
    # ... kg verify (and a strict read) refuses the bytes after it.
    with pytest.raises(InvalidInputError, match="2 byte"):
        list(decode_block_batches(padded, group, layout, "p", 4, whole=True))
    assert pa.Table.from_batches(list(decode_block_batches(block, group, layout, "p", 4, whole=True))) == rows
