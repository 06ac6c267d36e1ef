"""Snappy framing as Flink (xerial SnappyFramedOutputStream) writes it."""

from __future__ import annotations

import os
import random

import pytest
from kg_fixture_state import FLINK_FIXTURES

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.io.snappy import (
    BLOCK_SIZE,
    STREAM_IDENTIFIER,
    crc32c,
    decode_frames,
    decompress_raw,
    encode_frames,
    masked_crc32c,
    reference_crc32c,
)
from keygroup_cli.flink.io.stream_handles import key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.metadata.locate import read_flink_metadata


@pytest.mark.parametrize("crc", [crc32c, reference_crc32c], ids=["library", "reference"])
def test_crc32c_known_vectors(crc) -> None:
    # RFC 3720 (iSCSI) test vectors for CRC32C.
    assert crc(b"") == 0
    assert crc(b"123456789") == 0xE3069283
    assert crc(bytes(32)) == 0x8A9136AA
    assert crc(bytes([0xFF] * 32)) == 0x62A8AB43
    assert crc(bytes(range(32))) == 0x46DD794E
    assert crc(bytes(range(31, -1, -1))) == 0x113FDB5C


def test_library_crc32c_equals_the_pure_python_reference() -> None:
    rng = random.Random(20261123)
    sizes = [*range(70), 255, 256, 257, 1000, 4095, 4096, 4097, BLOCK_SIZE - 1, BLOCK_SIZE]
    for size in sizes + [rng.randrange(1, 3 * BLOCK_SIZE) for _ in range(20)]:
        data = rng.randbytes(size)
        assert crc32c(data) == reference_crc32c(data), size


def test_corrupt_raw_block_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="corrupt snappy block"):
        decompress_raw(b"\x10" + bytes(range(20)), "f")
    with pytest.raises(InvalidInputError, match="bad length varint"):
        decompress_raw(b"\xff" * 6, "f")


def test_masked_crc_matches_flinks_chunks() -> None:
    # Every chunk in Flink's compressed key groups carries the masked CRC32C of its uncompressed bytes.
    snapshot = read_flink_metadata(FLINK_FIXTURES / "rocksdb-canonical-snappy-p2-maxp256-string")
    checked = 0
    for op in snapshot.metadata.operators:
        for subtask in op.subtasks:
            handle = subtask.managed_keyed_state
            if handle is None:
                continue
            with StreamSource(handle.delegate, snapshot.directory) as src:
                for _group, start, end in key_group_extents(handle, src.size):  # type: ignore[arg-type]
                    raw = src.read(start, end)
                    assert raw.startswith(STREAM_IDENTIFIER)
                    decode_frames(raw, verify=True)
                    checked += 1
    assert checked > 100


@pytest.mark.parametrize("size", [0, 1, 100, BLOCK_SIZE, BLOCK_SIZE + 1, 3 * BLOCK_SIZE + 17])
def test_encode_decode_round_trip(size: int) -> None:
    data = (os.urandom(size // 2) + b"a" * (size - size // 2))[:size]
    framed = encode_frames(data)
    assert framed.startswith(STREAM_IDENTIFIER)
    assert decode_frames(framed, verify=True) == data
    # One chunk per started 64 KiB block.
    chunks, pos = 0, len(STREAM_IDENTIFIER)
    while pos < len(framed):
        chunks += 1
        pos += 4 + int.from_bytes(framed[pos + 1 : pos + 4], "little")
    assert chunks == -(-size // BLOCK_SIZE)


def test_incompressible_block_is_stored_uncompressed() -> None:
    data = os.urandom(1000)
    framed = encode_frames(data, identifier=False)
    assert framed[0] == 0x01 and framed[8:] == data
    assert int.from_bytes(framed[4:8], "little") == masked_crc32c(data)


def test_compressible_block_is_compressed() -> None:
    framed = encode_frames(b"x" * 5000, identifier=False)
    assert framed[0] == 0x00 and len(framed) < 300


def test_corrupt_streams_are_clear_errors() -> None:
    framed = encode_frames(b"hello world" * 10)
    with pytest.raises(InvalidInputError, match="truncated snappy chunk"):
        decode_frames(framed[:-3], "f")
    with pytest.raises(InvalidInputError, match="reserved unskippable"):
        decode_frames(b"\x05\x01\x00\x00\x00", "f")
    bad = bytearray(framed)
    bad[14] ^= 0xFF  # inside the CRC of the first data chunk
    with pytest.raises(InvalidInputError, match="CRC mismatch"):
        decode_frames(bytes(bad), "f", verify=True)
    assert decode_frames(bytes(bad), "f") == b"hello world" * 10  # Flink does not verify either
