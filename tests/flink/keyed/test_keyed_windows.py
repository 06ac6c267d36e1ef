"""A large key-group block read window by window: the rows, and the refusals, of reading it whole.

``keyed_decode._windowed_block`` decodes an uncompressed block in windows of whole entries so that a read
task's memory follows the window, not the key group (a 100 GB savepoint at maxParallelism 128 has blocks
of about 800 MB). Windows here are a few bytes, so every block of the fixtures is cut everywhere: inside
runs, at state ids, before the END mark, inside entries larger than the window.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kg_fixture_state import CANONICAL_CASES, FLINK_FIXTURES

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import _windowed_block, decode_block_batches, decode_keyed_file
from keygroup_cli.flink.keyed.layout import KeyedLayout
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.write.keyed_tasks import keyed_header
from keygroup_cli.flink.write.regroup import keyed_handles
from tests.flink.keyed.test_block_check import _damage, _encoded
from tests.flink.keyed.test_keyed_state_columns import _blocks, _mixed_rows, _reference


class _Bytes:
    """A stream of bytes in memory, read as ``StreamSource`` is (``read`` clips to the end)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.source = "mem"
        self.reads: list[int] = []

    def read(self, start: int, end: int) -> bytes:
        self.reads.append(min(end, len(self.data)) - start)
        return self.data[start:end]


def _windowed(block: bytes, group: int, layout: KeyedLayout, window: int, batch_rows: int) -> pa.Table:
    source = _Bytes(block)
    batches = _windowed_block(source, group, 0, len(block), layout, batch_rows, True, window)  # type: ignore[arg-type]
    return pa.Table.from_batches(list(batches), schema=_reference(block, group, layout).schema)


@pytest.mark.parametrize("case", CANONICAL_CASES)
@pytest.mark.parametrize("window", [1, 9, 64, 700])
def test_flinks_blocks_in_windows_are_their_rows(case: str, window: int) -> None:
    blocks = _blocks(case)
    for layout, group, block in blocks:
        want = pa.Table.from_batches([_reference(block, group, layout)])
        assert _windowed(block, group, layout, window, 5).equals(want)
    assert blocks


def test_windows_bound_what_is_read_at_once() -> None:
    # The whole block is never read when every window decodes: reads stay near the window's size.
    layout, group, block = max(_blocks(CANONICAL_CASES[0]), key=lambda b: len(b[2]))
    source = _Bytes(block)
    rows = sum(b.num_rows for b in _windowed_block(source, group, 0, len(block), layout, 64, True, 256))  # type: ignore[arg-type]
    assert rows == _reference(block, group, layout).num_rows
    assert len(block) > 1024 and len(source.reads) > 3
    assert max(source.reads) <= 256


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mixed_rows(), st.data())
def test_a_damaged_block_in_windows_is_refused_or_read_as_a_whole_block_reads_it(
    case: tuple[KeyedLayout, Any], data: Any
) -> None:
    layout, batch = case
    for one in _encoded(layout, batch):
        block = _damage(one.block, data, 0, 2)
        window = data.draw(st.integers(1, 80))
        batch_rows = data.draw(st.integers(1, 5))
        whole = _outcome(_whole, block, one.key_group, layout, batch_rows)
        windowed = _outcome(_windowed, block, one.key_group, layout, window, batch_rows)
        if isinstance(whole, pa.Table):
            assert isinstance(windowed, pa.Table) and windowed.equals(whole)
        else:
            assert windowed == whole


def _whole(block: bytes, group: int, layout: KeyedLayout, batch_rows: int) -> pa.Table:
    batches = decode_block_batches(block, group, layout, "mem", batch_rows, whole=True)
    return pa.Table.from_batches(list(batches), schema=_reference(block, group, layout).schema)


def _outcome(read: Any, *args: Any) -> pa.Table | tuple[type, str]:
    """The rows a read gives, or the type and code of the error it raises."""
    try:
        table: pa.Table = read(*args)
        return table
    except (InvalidInputError, UnsupportedFormatError) as exc:
        return type(exc), exc.code


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_a_keyed_file_read_in_windows_is_the_file_read_whole(case: str) -> None:
    snapshot = read_flink_metadata(FLINK_FIXTURES / case)
    compared = 0
    for op in snapshot.metadata.operators:
        for handle in keyed_handles(op):
            with StreamSource(handle.delegate, snapshot.directory) as src:
                _raw, header = keyed_header(src, handle)
                layout = KeyedLayout.from_header(header, op.max_parallelism, case)
                assert _file_rows(src, handle, layout, header.compressed, 16).equals(
                    _file_rows(src, handle, layout, header.compressed, 1 << 30)
                )
                compared += 1
    assert compared > 0


def _file_rows(
    src: StreamSource, handle: KeyGroupsHandle, layout: KeyedLayout, compressed: bool, window: int
) -> pa.Table:
    batches = decode_keyed_file(src, handle, layout, compressed=compressed, strict=True, window_bytes=window)
    return pa.Table.from_batches(list(batches))


def test_a_string_key_with_a_lone_surrogate_is_refused_in_one_line() -> None:
    # Java strings may hold an unpaired UTF-16 surrogate, and StringValue writes it (0xD800 as the
    # varint 80 B0 03); kg's String keys are UTF-8 text, so the block is refused, not a traceback.
    from keygroup_cli.flink.keyed.decode import decode_block_batch
    from keygroup_cli.flink.types.serializers import STRING_SERIALIZER_SNAPSHOT
    from tests.flink.keyed.test_keyed_state_columns import STATES, _layout

    layout = _layout(STRING_SERIALIZER_SNAPSHOT, 1, *STATES)
    key = bytes([0x80 | 5, 0x02, 0x80, 0xB0, 0x03, 0x00])  # prefix (key group 5, last entry), "\ud800", void
    value = b"\x07"
    block = (
        b"\x00\x00"  # state "v"
        + len(key).to_bytes(4, "big")
        + key
        + len(value).to_bytes(4, "big")
        + value
        + b"\xff\xff"  # END_OF_KEY_GROUP_MARK
    )
    with pytest.raises(UnsupportedFormatError) as info:
        decode_block_batch(block, 5, layout, "sp")
    assert info.value.code == "FLINK_KEY_NOT_UNICODE"
    assert "\n" not in str(info.value)
    windowed = _outcome(_windowed, block, 5, layout, 4, 2)
    assert windowed == (UnsupportedFormatError, "FLINK_KEY_NOT_UNICODE")
