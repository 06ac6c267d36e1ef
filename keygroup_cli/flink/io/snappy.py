"""Snappy *framing format* as Flink writes it for compressed keyed and operator state.

Flink's ``SnappyStreamCompressionDecorator`` wraps state streams in xerial's ``SnappyFramedOutputStream``
(block size 64 KiB, minimum compression ratio 0.85) and reads them with ``SnappyFramedInputStream(in,
false)``, i.e. **without** verifying checksums. The framing format (google/snappy ``framing_format.txt``):

- a stream-identifier chunk ``FF 06 00 00 "sNaPpY"`` (written when the output stream is opened)
- data chunks: 1-byte type (``0x00`` compressed, ``0x01`` uncompressed), 3-byte little-endian length
  (payload + 4), 4-byte little-endian *masked* CRC32C of the uncompressed bytes, then the payload.

Raw snappy blocks are compressed with pyarrow's bundled snappy codec (``pa.compress``) and decompressed
with cramjam's (``cramjam.snappy.decompress_raw``): each the faster of the two in ``benchmarks/codecs.py``
(see ``docs/performance.md``). cramjam's own *framed* format is not used: it compresses a block whenever
that saves 1/8 (xerial only below the 0.85 ratio) and writes no stream identifier for an empty stream, so
the framing stays here. CRC32C comes from ``google-crc32c`` (C, hardware CRC where the CPU has it); Flink
never checks it, so it is written for other readers' sake. ``reference_crc32c`` is the table-driven
pure-Python form the library is tested against.
"""

from __future__ import annotations

import struct

import cramjam
import google_crc32c
import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError

#: The stream-identifier chunk every framed stream starts with.
STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
#: ``SnappyFramedOutputStream.DEFAULT_BLOCK_SIZE``, the uncompressed bytes per chunk Flink writes.
BLOCK_SIZE = 65536
#: ``SnappyFramedOutputStream.DEFAULT_MIN_COMPRESSION_RATIO``: above it a block is stored uncompressed.
MIN_COMPRESSION_RATIO = 0.85

_COMPRESSED = 0x00
_UNCOMPRESSED = 0x01
_IDENTIFIER = 0xFF
_PADDING = 0xFE
_MASK_DELTA = 0xA282EAD8
_CHUNK_HEADER = struct.Struct("<I")


def _crc32c_table() -> tuple[int, ...]:
    # Castagnoli polynomial, reflected (0x82F63B78), as java.util.zip.CRC32C.
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _crc32c_table()


def reference_crc32c(data: bytes) -> int:
    """Return the CRC32C of ``data`` computed table-driven in pure Python (about 3 MB/s).

    The reference the library behind ``crc32c`` is tested against; not used on any hot path.
    """
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c(data: bytes) -> int:
    """Return the CRC32C (Castagnoli) of ``data``, as ``java.util.zip.CRC32C`` computes it."""
    return int(google_crc32c.value(data))


def mask_crc(crc: int) -> int:
    """Return the masked form of a CRC32C that the framing format stores (``SnappyFramed.maskedCrc32c``)."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """Return the masked CRC32C of the framing format (``SnappyFramed.maskedCrc32c``)."""
    return mask_crc(crc32c(data))


def _uncompressed_length(block: bytes, source: str) -> int:
    # A raw snappy block starts with its uncompressed length as a little-endian base-128 varint.
    value = shift = 0
    for b in block[:5]:
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
    raise InvalidInputError(f"{source}: corrupt snappy block (bad length varint)", code="SNAPPY_CORRUPT")


def decompress_raw(block: bytes, source: str = "<snappy>") -> bytes:
    """Decompress one raw snappy block (no framing)."""
    _uncompressed_length(block, source)
    try:
        out = cramjam.snappy.decompress_raw(block)
    except cramjam.DecompressionError as exc:
        raise InvalidInputError(f"{source}: corrupt snappy block: {exc}", code="SNAPPY_CORRUPT") from None
    return bytes(out)


def compress_raw(data: bytes) -> bytes:
    """Compress ``data`` into one raw snappy block (no framing)."""
    return bytes(pa.compress(data, codec="snappy", asbytes=True))


def decode_frames(data: bytes | memoryview, source: str = "<snappy>", *, verify: bool = False) -> bytes:
    """Decode a framed snappy stream (or a run of its chunks) into the uncompressed bytes.

    The stream identifier is optional (a compressed operator-state element starts mid-stream, at a chunk
    boundary). Padding and skippable chunks are skipped; reserved unskippable chunk types are an error.

    Args:
        data: The framed bytes, ending at a chunk boundary.
        source: What the bytes are, for error messages.
        verify: Check each chunk's CRC (Flink does not).

    Raises:
        InvalidInputError: Truncated or malformed chunks, or a CRC mismatch when ``verify`` is set.
    """
    view = memoryview(data)
    out = bytearray()
    pos, end = 0, len(view)
    while pos < end:
        if pos + 4 > end:
            raise InvalidInputError(
                f"{source}: truncated snappy chunk header at byte {pos}", code="SNAPPY_CORRUPT"
            )
        header = _CHUNK_HEADER.unpack_from(view, pos)[0]
        kind, length = header & 0xFF, header >> 8
        body = pos + 4
        if body + length > end:
            raise InvalidInputError(f"{source}: truncated snappy chunk at byte {pos}", code="SNAPPY_CORRUPT")
        if kind in (_COMPRESSED, _UNCOMPRESSED):
            out += _data_chunk(view, kind, pos, length, source, verify)
        elif kind == _IDENTIFIER:
            if bytes(view[pos : body + length]) != STREAM_IDENTIFIER:
                raise InvalidInputError(
                    f"{source}: bad snappy stream identifier at byte {pos}", code="SNAPPY_CORRUPT"
                )
        elif 0x02 <= kind <= 0x7F:
            raise InvalidInputError(
                f"{source}: reserved unskippable snappy chunk type {kind:#04x} at byte {pos}",
                code="SNAPPY_CORRUPT",
            )
        # 0x80-0xFE (skippable, padding): nothing to decode.
        pos = body + length
    return bytes(out)


def _data_chunk(view: memoryview, kind: int, pos: int, length: int, source: str, verify: bool) -> bytes:
    """Return the uncompressed bytes of the data chunk at ``pos`` (body ``length`` bytes), checked."""
    body = pos + 4
    if length < 4:
        raise InvalidInputError(f"{source}: snappy chunk too short at byte {pos}", code="SNAPPY_CORRUPT")
    payload = bytes(view[body + 4 : body + length])
    # The framing format caps a chunk's uncompressed data at 65536 bytes (xerial's reader refuses
    # more): the claim is checked before a decompressor allocates for it.
    claimed = _uncompressed_length(payload, source) if kind == _COMPRESSED else len(payload)
    if claimed > BLOCK_SIZE:
        raise InvalidInputError(
            f"{source}: snappy chunk at byte {pos} claims {claimed} uncompressed bytes, more than "
            f"the framing format's {BLOCK_SIZE}",
            code="SNAPPY_CORRUPT",
        )
    chunk = decompress_raw(payload, source) if kind == _COMPRESSED else payload
    if verify and masked_crc32c(chunk) != _CHUNK_HEADER.unpack_from(view, body)[0]:
        raise InvalidInputError(f"{source}: snappy CRC mismatch at byte {pos}", code="SNAPPY_CRC")
    return chunk


def encode_chunk(block: bytes) -> bytes:
    """Encode one block (at most ``BLOCK_SIZE`` bytes) as a data chunk, as ``SnappyFramedOutputStream`` does.

    Mirrors ``writeCompressed``: the compressed form is used only when compressed/uncompressed is at most
    ``MIN_COMPRESSION_RATIO``; the CRC covers the uncompressed bytes either way.
    """
    crc = masked_crc32c(block)
    compressed = compress_raw(block)
    if len(compressed) / len(block) <= MIN_COMPRESSION_RATIO:
        kind, payload = _COMPRESSED, compressed
    else:
        kind, payload = _UNCOMPRESSED, block
    return _CHUNK_HEADER.pack(kind | ((len(payload) + 4) << 8)) + _CHUNK_HEADER.pack(crc) + payload


def encode_frames(data: bytes, *, identifier: bool = True) -> bytes:
    """Encode ``data`` as one framed stream that is written and then closed (``SnappyFramedOutputStream``).

    The stream buffers ``BLOCK_SIZE`` bytes and emits a chunk whenever the buffer is full or the stream is
    flushed / closed, so closing after writing ``data`` gives chunks at multiples of ``BLOCK_SIZE``; an
    empty stream is just the identifier.
    """
    parts = [STREAM_IDENTIFIER] if identifier else []
    for start in range(0, len(data), BLOCK_SIZE):
        parts.append(encode_chunk(data[start : start + BLOCK_SIZE]))
    return b"".join(parts)


__all__ = [
    "BLOCK_SIZE",
    "MIN_COMPRESSION_RATIO",
    "STREAM_IDENTIFIER",
    "compress_raw",
    "crc32c",
    "decode_frames",
    "decompress_raw",
    "encode_chunk",
    "encode_frames",
    "mask_crc",
    "masked_crc32c",
    "reference_crc32c",
]
