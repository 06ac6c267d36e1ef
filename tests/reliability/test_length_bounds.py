"""No allocation from untrusted sizes: crafted inputs whose lengths and counts claim far more than the bytes.

Each case is one site of the audit in docs/reliability.md ("Length and count bounds: audit") that trusted a
length or count before this was fixed. The claim must fail with one clean ``InvalidInputError`` (exit 3)
within seconds, in a child process limited to 3 GB of address space (as the reliability suite runs kg).
"""

from __future__ import annotations

import json
import resource
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from keygroup_cli.core.errors import ExitCode, InvalidInputError
from keygroup_cli.flink.io.snappy import BLOCK_SIZE, decode_frames, encode_frames
from keygroup_cli.flink.layouts.heap import (
    BYTES_SERIALIZER_SNAPSHOT,
    LIST_SERIALIZER_SNAPSHOT,
    skip_serialized,
)
from keygroup_cli.flink.metadata.reader import parse_metadata
from keygroup_cli.flink.types.serializer_snapshots import SerializerSnapshot
from keygroup_cli.snapshot.manifest import parse_manifest
from keygroup_cli.snapshot.parquet import iter_operator_batches, read_operator_file
from tests.conftest import FIXTURES

ADDRESS_SPACE = 3 * 1024**3
ROCKSDB_NATIVE = FIXTURES / "flink/2.3/rocksdb-native-p2-maxp128-string"


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _limited(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python argv`` under the 3 GB address-space limit."""
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit_address_space,
    )


def _limited_code(code: str) -> str:
    """Run ``code`` (which must print its outcome) under the limit; return what it printed."""
    proc = _limited(["-c", textwrap.dedent(code)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def _one_line_exit_3(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == ExitCode.SNAPSHOT_INVALID, (proc.returncode, proc.stderr[-2000:])
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]


# -- _metadata: a RocksDB handle's key-group count -----------------------------------------------------------


def _metadata_with_huge_key_group_count(tmp_path: Path) -> Path:
    """Copy the RocksDB NATIVE savepoint with its first handle's key-group count set to 2^31-1."""
    data = (ROCKSDB_NATIVE / "_metadata").read_bytes()
    handle = next(
        s.managed_keyed_state
        for op in parse_metadata(data).operators
        for s in op.subtasks
        if s.managed_keyed_state is not None
    )
    backend = handle.backend_identifier.encode()  # type: ignore[union-attr]
    # Tag 11: checkpoint id, backend identifier (writeUTF), key-group start, key-group count.
    count_at = data.index(struct.pack(">H", len(backend)) + backend) + 2 + len(backend) + 4
    assert struct.unpack_from(">i", data, count_at)[0] == handle.num_key_groups
    work = tmp_path / "savepoint"
    shutil.copytree(ROCKSDB_NATIVE, work)
    mutated = bytearray(data)
    struct.pack_into(">i", mutated, count_at, 0x7FFFFFFF)
    (work / "_metadata").write_bytes(bytes(mutated))
    return work


def test_a_keyed_handle_claiming_2_31_key_groups_is_corrupt_metadata(tmp_path: Path) -> None:
    work = _metadata_with_huge_key_group_count(tmp_path)
    with pytest.raises(InvalidInputError) as caught:
        parse_metadata((work / "_metadata").read_bytes())
    assert caught.value.code == "FLINK_METADATA_CORRUPT"
    assert "2147483647 key group(s)" in caught.value.message


@pytest.mark.parametrize("command", ["verify", "rescale-same", "rescale-new"])
def test_a_keyed_handle_claiming_2_31_key_groups_fails_fast_under_3_gb(tmp_path: Path, command: str) -> None:
    # Before: the RocksDB transcoder built a list of 2^31-1 offsets first (MemoryError, exit 70).
    work = _metadata_with_huge_key_group_count(tmp_path)
    out = str(tmp_path / "o")
    argv = {
        "verify": ["verify", str(work)],
        "rescale-same": ["rescale", str(work), "--to", "3", "--out", out, "--engine", "local"],
        "rescale-new": ["rescale", str(work), "--to", "3", "-m", "256", "--out", out],
    }[command]
    proc = _limited(["-m", "keygroup_cli", "--no-color", *argv])
    _one_line_exit_3(proc)
    assert "outside the operator's 128 key groups" in proc.stderr
    assert not (tmp_path / "o").exists()


# -- snappy: a chunk's uncompressed length -------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compressed_chunk_claiming(size: int) -> bytes:
    payload = _varint(size) + b"\x00a"  # the length, then a one-byte literal
    return struct.pack("<I", (len(payload) + 4) << 8) + b"\x00\x00\x00\x00" + payload


@pytest.mark.parametrize("claim", [BLOCK_SIZE + 1, 2**31 - 1, 3_500_000_000, 2**32 - 1, 2**34])
def test_a_snappy_chunk_claiming_more_than_a_block_is_corrupt(claim: int) -> None:
    with pytest.raises(InvalidInputError) as caught:
        decode_frames(_compressed_chunk_claiming(claim), "state")
    assert caught.value.code == "SNAPPY_CORRUPT"
    assert f"claims {claim} uncompressed bytes" in caught.value.message


def test_a_snappy_chunk_claiming_3_5_gb_fails_cleanly_under_3_gb() -> None:
    # Before: the decompressor allocated the claimed 3.5 GB first and the process aborted (SIGABRT).
    printed = _limited_code(
        f"""
        from keygroup_cli.core.errors import InvalidInputError
        from keygroup_cli.flink.io.snappy import decode_frames
        try:
            decode_frames({_compressed_chunk_claiming(3_500_000_000)!r}, "state", verify=True)
        except InvalidInputError as exc:
            print(exc.code, int(exc.exit_code))
        """
    )
    assert printed == "SNAPPY_CORRUPT 3"


def test_full_snappy_blocks_still_decode() -> None:
    data = bytes(range(256)) * 1000  # several 64 KiB chunks, the last one short
    assert decode_frames(encode_frames(data), "state", verify=True) == data


# -- heap layout: a byte[] length ----------------------------------------------------------------------------


def _snapshot(name: str, *nested: SerializerSnapshot) -> SerializerSnapshot:
    return SerializerSnapshot(name, 1, b"", nested)


def test_a_negative_byte_array_length_is_corrupt() -> None:
    data = struct.pack(">i", -4) + b"abcd"
    with pytest.raises(InvalidInputError) as caught:
        skip_serialized(_snapshot(BYTES_SERIALIZER_SNAPSHOT), data, 0, "block")
    assert caught.value.code == "FLINK_STATE_CORRUPT"


def test_a_list_of_2_31_empty_steps_fails_fast() -> None:
    # Before: a byte[] length of -4 moved the walk by 0 bytes, so a list count of 2^31-1 looped 2^31 times
    # (and the heap walker appended an element per step).
    data = struct.pack(">i", 0x7FFFFFFF) + struct.pack(">i", -4) + b"\x00" * 16
    printed = _limited_code(
        f"""
        from keygroup_cli.core.errors import InvalidInputError
        from keygroup_cli.flink.layouts.heap import skip_serialized
        from keygroup_cli.flink.types.serializer_snapshots import SerializerSnapshot
        from keygroup_cli.flink.layouts.heap import BYTES_SERIALIZER_SNAPSHOT, LIST_SERIALIZER_SNAPSHOT
        element = SerializerSnapshot(BYTES_SERIALIZER_SNAPSHOT, 1, b"")
        snap = SerializerSnapshot(LIST_SERIALIZER_SNAPSHOT, 1, b"", (element,))
        try:
            skip_serialized(snap, {data!r}, 0, "block")
        except InvalidInputError as exc:
            print(exc.code, int(exc.exit_code))
        """
    )
    assert printed == "FLINK_STATE_CORRUPT 3"
    assert LIST_SERIALIZER_SNAPSHOT  # the constant the child used


# -- kg manifest: JSON numbers and nesting -------------------------------------------------------------------


def _manifest_document() -> dict[str, object]:
    return json.loads((FIXTURES / "snapshots/valid/_manifest.json").read_text())


@pytest.mark.parametrize(
    "raw",
    [
        '{"format": "kg-snapshot", "format_version": ' + "1" * 5000 + "}",  # int() refuses > 4300 digits
        "[" * 100_000 + "]" * 100_000,  # nested deeper than the recursion limit
    ],
    ids=["5000-digit integer", "100000-deep nesting"],
)
def test_json_the_parser_cannot_hold_is_invalid_json(raw: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_manifest(raw)
    assert caught.value.code == "MANIFEST_JSON_INVALID"
    assert caught.value.exit_code == ExitCode.SNAPSHOT_INVALID


def test_a_row_count_beyond_64_bits_is_invalid() -> None:
    # Before: 10^30 rows (with key_group_rows summing to it) passed parsing, then kg verify and kg rescale
    # failed with OverflowError (exit 70) putting the counts into an int64 array.
    document = _manifest_document()
    keyed = document["operators"][0]["keyed_files"][0]  # type: ignore[index]
    keyed["key_group_rows"][0] += 10**30 - keyed["rows"]
    keyed["rows"] = 10**30
    with pytest.raises(InvalidInputError) as caught:
        parse_manifest(json.dumps(document))
    assert caught.value.code == "MANIFEST_FIELD_INVALID"
    assert "64-bit" in caught.value.message


def test_a_byte_count_beyond_64_bits_is_invalid() -> None:
    document = _manifest_document()
    document["operators"][0]["keyed_files"][0]["bytes"] = 2**63  # type: ignore[index]
    with pytest.raises(InvalidInputError, match="'bytes' must be a 64-bit integer"):
        parse_manifest(json.dumps(document))


def test_a_snapshot_with_such_a_manifest_fails_cleanly(tmp_path: Path) -> None:
    work = tmp_path / "snap"
    shutil.copytree(FIXTURES / "snapshots/valid", work)
    (work / "_manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    proc = _limited(["-m", "keygroup_cli", "--no-color", "verify", str(work)])
    _one_line_exit_3(proc)


# -- Parquet: pyarrow's own errors ---------------------------------------------------------------------------


class _Snapshot:
    def __init__(self, root: Path) -> None:
        self.root = root

    def resolve(self, path: str) -> Path:
        return self.root / path


class _File:
    path = "op.parquet"


def test_a_parquet_column_name_that_is_not_utf8_is_unreadable(tmp_path: Path) -> None:
    pq.write_table(pa.table({"state": ["a"], "value": [b"x"]}), tmp_path / "op.parquet")
    data = (tmp_path / "op.parquet").read_bytes()
    # The footer spells each column name (schema and column chunks); make its first byte invalid UTF-8.
    (tmp_path / "op.parquet").write_bytes(data.replace(b"state", b"\x80tate"))
    with pytest.raises(InvalidInputError) as caught:
        read_operator_file(_Snapshot(tmp_path), _File())  # type: ignore[arg-type]
    assert caught.value.code == "FILE_UNREADABLE"


def test_a_corrupt_parquet_page_is_unreadable(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"state": ["a"] * 1000, "value": [bytes(range(200))] * 1000}),
        tmp_path / "op.parquet",
        compression="snappy",
    )
    data = bytearray((tmp_path / "op.parquet").read_bytes())
    # Damage the compressed bytes of the first data page (right after the 4-byte magic and its header).
    data[40:48] = b"\xff" * 8
    (tmp_path / "op.parquet").write_bytes(bytes(data))
    with pytest.raises(InvalidInputError) as caught:
        list(iter_operator_batches(_Snapshot(tmp_path), _File()))  # type: ignore[arg-type]
    assert caught.value.code in ("FILE_UNREADABLE",)


# -- HA ConfigMap export: JSON / YAML nesting and encoding ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("deep.json", b"[" * 100_000),
        ("deep.yaml", b"kind: " + b"[" * 100_000),
        ("binary.json", b"\xff\xfe\x80kind"),
    ],
)
def test_a_configmap_export_the_parsers_cannot_hold_is_invalid(
    tmp_path: Path, name: str, content: bytes
) -> None:
    from keygroup_cli.ha.configmap import load_configmaps

    (tmp_path / name).write_bytes(content)
    with pytest.raises(InvalidInputError) as caught:
        load_configmaps(str(tmp_path / name))
    assert caught.value.code == "HA_CONFIGMAP_INVALID"


def test_a_segment_claiming_more_than_its_file_reads_only_the_file(tmp_path):
    # A file-merging segment handle's offset and size come from _metadata: a claim of 2^62 bytes must not
    # become a 2^62-byte pread.
    from keygroup_cli.flink.io.stream_handles import SegmentFileHandle
    from keygroup_cli.flink.io.stream_source import StreamSource

    shared = tmp_path / "shared-file"
    shared.write_bytes(bytes(range(100)))
    huge = SegmentFileHandle(10, 2**62, 0, str(shared), "segment")
    with StreamSource(huge, tmp_path) as src:
        assert src.size == 90
        assert src.read(0, 2**62) == bytes(range(10, 100))
    beyond = SegmentFileHandle(2**62, 5, 0, str(shared), "segment")
    with StreamSource(beyond, tmp_path) as src:
        assert src.size == 0 and src.read(0, 5) == b""
