"""Benchmark: CRC32C and snappy for Flink's compressed state, pure Python / pyarrow vs libraries.

Prints MB/s (of uncompressed bytes) measured in this one run (no assertions; machines are noisy):
  - CRC32C: the pure-Python table-driven reference vs ``google-crc32c`` and ``crc32c``;
  - raw snappy blocks of 64 KiB: pyarrow's codec vs ``cramjam.snappy.compress_raw`` / ``decompress_raw``;
  - framed streams as Flink writes them (``snappy.encode_frames`` / ``decode_frames``): the old
    combination (pure-Python CRC, pyarrow both ways) vs what ``keygroup_cli.flink.io.snappy`` uses now
    (google-crc32c, pyarrow to compress, cramjam to decompress), with a check that both write the same
    bytes.

Input: ``--mib`` MiB (default 8) of synthetic keyed-state blocks laid out as Flink's full snapshot writes
them (``int keyLen, key, int valueLen, value``): a 2-byte key-group prefix, a StringValue key
``user-<n>`` over ~50k distinct users, an 8-byte namespace, and a value that is a long counter, a short
repeated string or 16 random bytes, so snappy shrinks them to about 0.4 of their size.
cramjam's own framed format is not used: it compresses a block whenever it saves 1/8 (Flink's xerial
stream only below a 0.85 ratio) and writes nothing, not even the stream identifier, for an empty stream.
Run: python benchmarks/codecs.py [--mib 8]
"""

from __future__ import annotations

import argparse
import struct
import time
from collections.abc import Callable
from unittest import mock

import google_crc32c
import numpy as np
import pyarrow as pa

from keygroup_cli.flink.io import snappy

# Only compared here, not dependencies: `pip install crc32c cramjam` to see their rows.
try:
    import crc32c as crc32c_lib
except ImportError:
    crc32c_lib = None
try:
    import cramjam
except ImportError:
    cramjam = None

_INT = struct.Struct(">i")


def keyed_bytes(size: int, seed: int = 7) -> bytes:
    """Return ``size`` bytes of keyed-state entries as a full snapshot lays them out."""
    rng = np.random.default_rng(seed)
    words = [b"open", b"closed", b"pending", b"shipped", b"returned"]
    out = bytearray()
    while len(out) < size:
        for user, kind, noise in zip(
            rng.integers(0, 50_000, 4096).tolist(),
            rng.integers(0, 3, 4096).tolist(),
            rng.bytes(16 * 4096)[::16],
            strict=True,
        ):
            name = b"user-%d" % user
            key = struct.pack(">H", user % 128) + bytes([len(name) + 1]) + name + bytes(8)
            if kind == 0:
                value = struct.pack(">q", user * 31)
            elif kind == 1:
                value = words[user % len(words)] * 2
            else:
                value = rng.bytes(16) if noise % 4 == 0 else bytes([noise]) * 16
            out += _INT.pack(len(key)) + key + _INT.pack(len(value)) + value
    return bytes(out[:size])


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _mbs(n: int, seconds: float) -> str:
    return f"{n / seconds / 1e6:9.1f} MB/s"


def _encode_frames_old(data: bytes) -> bytes:
    """``encode_frames`` as it was: pure-Python CRC, pyarrow's snappy."""
    parts = [snappy.STREAM_IDENTIFIER]
    for start in range(0, len(data), snappy.BLOCK_SIZE):
        block = data[start : start + snappy.BLOCK_SIZE]
        crc = snappy.mask_crc(snappy.reference_crc32c(block))
        compressed = bytes(pa.compress(block, codec="snappy", asbytes=True))
        if len(compressed) / len(block) <= snappy.MIN_COMPRESSION_RATIO:
            kind, payload = 0x00, compressed
        else:
            kind, payload = 0x01, block
        parts.append(struct.pack("<II", kind | ((len(payload) + 4) << 8), crc) + payload)
    return b"".join(parts)


def _decompress_raw_old(block: bytes, source: str = "<snappy>") -> bytes:
    """``decompress_raw`` as it was: pyarrow's snappy, told the size from the block's varint."""
    size = shift = 0
    for b in block[:5]:
        size |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return bytes(pa.decompress(block, decompressed_size=size, codec="snappy", asbytes=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=8, help="MiB of keyed-state bytes (default 8)")
    args = parser.parse_args()
    data = keyed_bytes(args.mib << 20)
    n = len(data)
    blocks = [data[i : i + snappy.BLOCK_SIZE] for i in range(0, n, snappy.BLOCK_SIZE)]
    print(f"kg codecs benchmark (one run): {n / 2**20:.0f} MiB of keyed-state bytes, 64 KiB blocks")

    print("CRC32C")
    sample = data[: 1 << 20]  # the pure-Python CRC is too slow for all of it
    pure = _best(lambda: snappy.reference_crc32c(sample), repeat=1)
    lib = _best(lambda: [google_crc32c.value(b) for b in blocks], 5)
    print(f"  pure Python (1 MiB)     {_mbs(len(sample), pure)}")
    print(f"  google-crc32c           {_mbs(n, lib)}   {(n / lib) / (len(sample) / pure):8.0f}x")
    if crc32c_lib is not None:
        other = _best(lambda: [crc32c_lib.crc32c(b) for b in blocks], 5)
        print(f"  crc32c                  {_mbs(n, other)}   {(n / other) / (len(sample) / pure):8.0f}x")
    assert snappy.crc32c(sample) == snappy.reference_crc32c(sample)

    print("raw snappy, 64 KiB blocks")
    pa_blocks = [bytes(pa.compress(b, codec="snappy", asbytes=True)) for b in blocks]
    ratio = sum(map(len, pa_blocks)) / n
    timings = {
        "pyarrow compress": _best(lambda: [pa.compress(b, codec="snappy", asbytes=True) for b in blocks], 5),
        "pyarrow decompress": _best(
            lambda: [
                pa.decompress(c, decompressed_size=len(b), codec="snappy", asbytes=True)
                for c, b in zip(pa_blocks, blocks, strict=True)
            ],
            5,
        ),
    }
    if cramjam is not None:
        raw = cramjam.snappy
        timings["cramjam compress"] = _best(lambda: [bytes(raw.compress_raw(b)) for b in blocks], 5)
        timings["cramjam decompress"] = _best(lambda: [bytes(raw.decompress_raw(c)) for c in pa_blocks], 5)
    for label, seconds in timings.items():
        print(f"  {label:<24}{_mbs(n, seconds)}")
    print(f"  compressed/uncompressed {ratio:.2f}")
    if cramjam is not None:
        same = sum(bytes(cramjam.snappy.compress_raw(b)) == c for b, c in zip(blocks, pa_blocks, strict=True))
        print(f"  raw blocks identical to pyarrow's: {same}/{len(blocks)} (both are valid snappy)")

    print("framed stream (Flink's format)")
    old = _encode_frames_old(data)
    new = snappy.encode_frames(data)
    enc_old = _best(lambda: _encode_frames_old(data), repeat=1)
    enc_new = _best(lambda: snappy.encode_frames(data), 5)
    with mock.patch.object(snappy, "decompress_raw", _decompress_raw_old):
        dec_old = _best(lambda: snappy.decode_frames(new), 5)
    dec = _best(lambda: snappy.decode_frames(new), 5)
    dec_verify = _best(lambda: snappy.decode_frames(new, verify=True), 5)
    print(f"  encode, before          {_mbs(n, enc_old)}")
    print(f"  encode, now             {_mbs(n, enc_new)}   {enc_old / enc_new:8.0f}x")
    print(f"  decode, before          {_mbs(n, dec_old)}")
    print(f"  decode, now             {_mbs(n, dec)}   {dec_old / dec:8.1f}x")
    print(f"  decode, verify CRC      {_mbs(n, dec_verify)}")
    back = snappy.decode_frames(new, verify=True)
    print(f"  same bytes before/now: {old == new}; round trip: {back == data}")


if __name__ == "__main__":
    main()
