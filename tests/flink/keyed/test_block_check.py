"""The encoder's block check: a claim of entry boundaries is accepted only where the bytes prove it.

``keyed_decode.check_block`` checks, without a Python step per entry, that a block reads (as Flink's
``readKvStatesFromKeyGroup`` reads it) as exactly the entries the encoder says it wrote. The savepoint
writers rely on it instead of decoding their keyed output again, so it must refuse every block whose
sequential read differs from the claim.
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kg_fixture_state import CANONICAL_CASES

from keygroup_cli.core.errors import ExecutionError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.keyed.decode import _scan_block, check_block, decode_block_batches
from keygroup_cli.flink.keyed.encode import _Block, _encode_columns, _require_reads_back, _Rows
from keygroup_cli.flink.keyed.layout import KeyedLayout, _vector_states
from tests.flink.keyed.test_keyed_state_columns import _blocks, _mixed_rows, _reference


def _encoded(layout: KeyedLayout, batch: Any) -> list[_Block]:
    blocks = _encode_columns(_Rows.of(batch, layout.state_ids()), layout)
    assert blocks is not None
    return blocks


def _sequential(block: bytes, layout: KeyedLayout) -> list[int] | None:
    """The entry ends of the sequential read up to an END mark that is the block's last byte, or None."""
    scanned = _scan_block(block, _vector_states(layout))
    if scanned is None or scanned[2] != len(block):
        return None
    return list(scanned[0])


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_flinks_blocks_re_encoded_pass_with_their_entry_counts(case: str) -> None:
    checked = 0
    for layout, group, block in _blocks(case):
        batch = _reference(block, group, layout)
        encoded = _encode_columns(_Rows.of(batch, layout.state_ids()), layout)
        if encoded is None:
            continue
        [one] = encoded
        assert bytes(one.block) == block
        assert one.value_ends is not None and one.run_end is not None
        assert check_block(one.block, group, layout, one.value_ends, one.run_end) == batch.num_rows
        # The claim is where the sequential read finds the entries.
        assert list(one.value_ends) == list(_scan_block(block, _vector_states(layout))[0])
        checked += 1
    assert checked > 0


def _damage(block: bytes | memoryview, data: Any, least: int, most: int) -> bytes:
    """Return ``block`` with ``least`` to ``most`` bytes (drawn by hypothesis) set to drawn values."""
    out = bytearray(block)
    for _ in range(data.draw(st.integers(least, most))):
        out[data.draw(st.integers(0, len(out) - 1))] = data.draw(st.integers(0, 255))
    return bytes(out)


def _flip(block: bytes, at: int, mask: int = 0xFF) -> bytes:
    out = bytearray(block)
    out[at] ^= mask
    return bytes(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mixed_rows())
def test_each_kind_of_damage_is_refused(case: tuple[KeyedLayout, Any]) -> None:
    layout, batch = case
    for one in _encoded(layout, batch):
        block, group = bytes(one.block), one.key_group
        ends, run_end = one.value_ends, one.run_end
        assert ends is not None and run_end is not None
        assert check_block(block, group, layout, ends, run_end) == one.rows
        first_key = 2 + 4
        klen = struct.unpack_from(">i", block, 2)[0]
        damaged = {
            "key length": _flip(block, 5, 0x01),
            "value length": _flip(block, first_key + klen + 3, 0x01),
            "run-end flag": _flip(block, first_key, 0x80),
            "key-group prefix": _flip(block, first_key, 0x01),
            "first state id": _flip(block, 1, 0x7F),
            "END mark": _flip(block, len(block) - 1, 0x01),
            "trailing byte": block + b"\x00",
            "truncated": block[:-1],
        }
        for what, bad in damaged.items():
            assert check_block(bad, group, layout, ends, run_end) is None, what
        shifted = ends.copy()
        shifted[0] += 1
        assert check_block(block, group, layout, shifted, run_end) is None
        if len(run_end) > 1:
            claimed = run_end.copy()
            claimed[0] = not claimed[0]
            assert check_block(block, group, layout, ends, claimed) is None
        assert check_block(block, group + 1, layout, ends, run_end) is None
        assert check_block(block, group, layout, ends[:-1], run_end[:-1]) is None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mixed_rows(), st.data())
def test_an_accepted_claim_is_what_the_sequential_read_finds(
    case: tuple[KeyedLayout, Any], data: Any
) -> None:
    layout, batch = case
    for one in _encoded(layout, batch):
        block = _damage(one.block, data, 1, 3)
        assert one.value_ends is not None and one.run_end is not None
        counted = check_block(block, one.key_group, layout, one.value_ends, one.run_end)
        if counted is None:
            continue
        # Accepted: the sequential read finds exactly the claimed entries (check_block is structural: a
        # changed byte inside a key or value is content, which the encoder's round-trip tests cover).
        assert _sequential(block, layout) == list(one.value_ends)
        assert counted == len(one.value_ends)


def test_a_block_that_does_not_read_back_is_not_written() -> None:
    from keygroup_cli.flink.types.serializers import LONG_SERIALIZER_SNAPSHOT
    from tests.flink.keyed.test_keyed_state_columns import STATES, _layout, _rows

    layout = _layout(LONG_SERIALIZER_SNAPSHOT, 1, *STATES)
    [one] = _encoded(layout, _rows("long", list(range(6)), [3] * 6))
    _require_reads_back(one, layout)
    bad = _Block(one.key_group, _flip(bytes(one.block), 5, 0x01), one.rows, one.value_ends, one.run_end)
    with pytest.raises(ExecutionError, match="does not read back") as info:
        _require_reads_back(bad, layout)
    assert info.value.code == "OUTPUT_VERIFICATION_FAILED"
    # The reference encoder's blocks (no claim) are decoded again instead.
    plain = _Block(one.key_group, bytes(one.block), one.rows)
    _require_reads_back(plain, layout)
    with pytest.raises(ExecutionError, match="7 entries"):
        _require_reads_back(_Block(one.key_group, bytes(one.block), 7), layout)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mixed_rows(), st.data())
def test_a_damaged_block_read_in_windows_is_refused_or_read_as_the_reference_reads_it(
    case: tuple[KeyedLayout, Any], data: Any
) -> None:
    layout, batch = case
    for one in _encoded(layout, batch):
        block = _damage(one.block, data, 0, 2)
        window = data.draw(st.integers(1, 5))
        try:
            windows = pa.Table.from_batches(
                list(decode_block_batches(block, one.key_group, layout, "w", window, whole=True))
            )
        except (InvalidInputError, UnsupportedFormatError):
            continue
        # Accepted window by window: exactly the rows of the per-entry read of the whole block.
        assert windows == pa.Table.from_batches([_reference(block, one.key_group, layout)])
