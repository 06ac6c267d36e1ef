"""Enums, names, offsets and lengths read from _metadata and state files: damage is exit 3, never a crash.

Issue #27: a flipped byte in an operator state's distribution-mode name (``SPLIT_DISTRIBUTE`` read as
``SpLIT_DISTRIBUTE``) made ``kg rescale`` end with ``KeyError`` (exit 70), a negative key-group offset
reached ``os.pread`` (``OSError: [Errno 22]``, exit 70), and a broadcast state renamed in its stream's
header (or its mode ordinal flipped in ``_metadata``) was rescaled as if nothing were wrong. Each is now an
``InvalidInputError`` with a stable code, found by ``kg verify`` and refused by every rescale route.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.check.verify import verify_flink
from keygroup_cli.flink.io.binary import DataInput, DataOutput
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.metadata.handles import (
    FILE_STREAM_STATE_HANDLE,
    RELATIVE_STREAM_STATE_HANDLE,
    SEGMENT_FILE_HANDLE,
    IncrementalKeyedHandle,
    OperatorStateHandle,
    read_stream_handle,
)
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.operator.codec import header_state_order
from keygroup_cli.flink.operator.header import OperatorStateHeader, read_operator_header
from keygroup_cli.flink.types.serializer_snapshots import StateMetaInfo

FLINK = Path(__file__).resolve().parents[3] / "fixtures" / "flink" / "2.3"
FILES = FLINK / "heap-files-p3-maxp10-long"  # split, union and broadcast states in files
INLINE = FLINK / "heap-inline-p4-maxp10-string"  # operator state inline in _metadata
NATIVE = FLINK / "uid-heap-native-p3"
SNAPPY = FLINK / "heap-snappy-files-p3-maxp128-long"
INCREMENTAL = FLINK / "uid-rocksdb-incremental-p3"
INCREMENTAL_CHK = "0000000000006b670000000000007569/chk-3"


def _utf(text: str) -> bytes:
    return len(text).to_bytes(2, "big") + text.encode()


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "in"
    shutil.copytree(source, target)
    return target


def _flip(path: Path, position: int, mask: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def _operator_file(savepoint: Path, state: str) -> tuple[OperatorStateHandle, Path]:
    for op in read_flink_metadata(savepoint).metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_operator_state
            if (
                isinstance(handle, OperatorStateHandle)
                and isinstance(handle.delegate, RelativeFileHandle)
                and any(e.name == state for e in handle.states)
            ):
                return handle, savepoint / handle.delegate.relative_path
    raise AssertionError(f"no operator-state file holds {state!r}")


def _codes(savepoint: Path, *, blocks: bool = True) -> list[str]:
    return [f.code for f in verify_flink(savepoint, blocks=blocks).findings]


def _messages(savepoint: Path) -> str:
    return "\n".join(f.message for f in verify_flink(savepoint).findings)


def _refused_by_every_rescale(savepoint: Path, tmp_path: Path, kg: object, code: str) -> None:
    """``kg rescale`` (same and new maxP) is exit 3 in one line; the Python ``rescale()`` raises ``code``."""
    for extra in ([], ["-m", "256"]):
        dest = tmp_path / f"cli{len(extra)}"
        result = kg(
            "-q", "rescale", str(savepoint), "--to", "2", *extra, "--out", str(dest), "--engine", "local"
        )  # type: ignore[operator]
        assert result.exit_code == 3, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not dest.exists()
    for new_max in (None, 256):
        dest = tmp_path / f"api{new_max}"
        with pytest.raises(InvalidInputError) as caught:
            rescale(savepoint, dest, 2, new_max_parallelism=new_max, engine="local")
        assert caught.value.code == code, caught.value.message
        assert not dest.exists()


# -- enums: distribution modes and state types --------------------------------------------------------------


@pytest.mark.parametrize("mask", [0x20, 0x01], ids=["case", "bit0"])
def test_a_flipped_mode_name_in_an_operator_state_file_is_refused(
    tmp_path: Path, kg: object, mask: int
) -> None:
    savepoint = _copy(FILES, tmp_path)
    _handle, path = _operator_file(savepoint, "split-ids")
    at = path.read_bytes().index(_utf("SPLIT_DISTRIBUTE")) + 2
    _flip(path, at + 1, mask)  # SpLIT_DISTRIBUTE, SQLIT_DISTRIBUTE
    with pytest.raises(InvalidInputError) as caught:
        read_operator_header(path.read_bytes(), str(path))
    assert caught.value.code == "FLINK_STATE_META_INFO_INVALID"
    assert "distribution mode" in caught.value.message
    assert _codes(savepoint) == ["FLINK_STATE_HEADER_INVALID"]
    result = kg("inspect", str(savepoint))  # type: ignore[operator]
    assert result.exit_code == 3 and len(result.stderr.strip().splitlines()) == 1
    _refused_by_every_rescale(savepoint, tmp_path, kg, "INPUT_FAILS_VERIFY")


@pytest.mark.parametrize("source", [INLINE, NATIVE], ids=["inline-in-metadata", "native"])
def test_a_flipped_mode_name_is_refused_in_every_layout(tmp_path: Path, kg: object, source: Path) -> None:
    savepoint = _copy(source, tmp_path)
    files = [savepoint / "_metadata", *(p for p in sorted(savepoint.iterdir()) if p.name != "_metadata")]
    path = next(p for p in files if p.is_file() and _utf("SPLIT_DISTRIBUTE") in p.read_bytes())
    _flip(path, path.read_bytes().index(_utf("SPLIT_DISTRIBUTE")) + 3, 0x20)
    assert "distribution mode 'SpLIT_DISTRIBUTE'" in _messages(savepoint)
    _refused_by_every_rescale(savepoint, tmp_path, kg, "INPUT_FAILS_VERIFY")


def test_the_writer_refuses_a_mode_name_it_does_not_know() -> None:
    info = StateMetaInfo("ids", 1, (("OPERATOR_STATE_DISTRIBUTION_MODE", "SpLIT_DISTRIBUTE"),), ())
    header = OperatorStateHeader(6, False, (info,), (), 10)
    with pytest.raises(InvalidInputError) as caught:
        header_state_order(header, "header")
    assert caught.value.code == "FLINK_STATE_META_INFO_INVALID"


@pytest.mark.parametrize(("at", "mask"), [(1, 0x20), (4, 0x03)], ids=["vALUE", "VALUF"])
def test_a_keyed_state_type_that_is_no_flink_type_is_refused(tmp_path: Path, at: int, mask: int) -> None:
    savepoint = _copy(FILES, tmp_path)
    handle = next(
        s.managed_keyed_state
        for op in read_flink_metadata(savepoint).metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed_state, KeyGroupsHandle)
    )
    path = savepoint / handle.delegate.relative_path
    data = path.read_bytes()
    first = min(o for o in handle.offsets if o)
    _flip(
        path,
        data.index(_utf("KEYED_STATE_TYPE") + _utf("VALUE")) + len(_utf("KEYED_STATE_TYPE")) + 2 + at,
        mask,
    )
    with pytest.raises(InvalidInputError) as caught:
        read_keyed_header(path.read_bytes()[:first], str(path), first)
    assert caught.value.code == "FLINK_STATE_META_INFO_INVALID"
    assert "FLINK_STATE_HEADER_INVALID" in _codes(savepoint)


# -- names and modes: _metadata against the stream's header --------------------------------------------------


def test_a_broadcast_state_renamed_in_its_header_is_refused(tmp_path: Path, kg: object) -> None:
    savepoint = _copy(FILES, tmp_path)
    _handle, path = _operator_file(savepoint, "bcast")
    _flip(path, path.read_bytes().index(_utf("bcast")) + 2, 0x01)  # "ccast"
    assert "operator state 'bcast' in _metadata is not declared by the stream's header" in _messages(
        savepoint
    )
    _refused_by_every_rescale(savepoint, tmp_path, kg, "INPUT_FAILS_VERIFY")


@pytest.mark.parametrize(("mask", "modes"), [(0x01, "UNION"), (0x02, "BROADCAST")])
def test_a_mode_ordinal_flipped_in_metadata_is_refused(
    tmp_path: Path, kg: object, mask: int, modes: str
) -> None:
    savepoint = _copy(FILES, tmp_path)
    handle, _path = _operator_file(savepoint, "split-ids")
    entry = next(e for e in handle.states if e.name == "split-ids")
    metadata = savepoint / "_metadata"
    _flip(
        metadata,
        metadata.read_bytes().index(_utf("split-ids") + bytes((entry.mode,))) + len(_utf("split-ids")),
        mask,
    )
    assert f"'split-ids' is {modes} in _metadata and SPLIT_DISTRIBUTE in the stream's header" in _messages(
        savepoint
    )
    result = kg("inspect", str(savepoint))  # type: ignore[operator]
    assert result.exit_code == 3 and "SPLIT_DISTRIBUTE in the stream's header" in result.stderr
    _refused_by_every_rescale(savepoint, tmp_path, kg, "INPUT_FAILS_VERIFY")


# -- offsets and lengths --------------------------------------------------------------------------------


def test_a_negative_offset_never_reaches_pread(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_bytes(bytes(range(16)))
    for handle in (RelativeFileHandle("state", 16), ByteStreamHandle("inline", bytes(range(16)))):
        with StreamSource(handle, tmp_path) as src:
            assert src.read(4, 8) == bytes(range(4, 8))
            assert src.read(8, 4) == b""  # an end before the start is empty, not a slice from the end
            with pytest.raises(InvalidInputError) as caught:
                src.read(-2, 4)
            assert caught.value.code == "FLINK_STATE_OFFSET_INVALID"


def test_a_negative_key_group_offset_in_a_native_savepoint_is_exit_3(tmp_path: Path, kg: object) -> None:
    # The OSError: [Errno 22]: the sign bit of a heap-layout key-group offset in _metadata.
    savepoint = _copy(NATIVE, tmp_path)
    handle = next(
        s.managed_keyed_state
        for op in read_flink_metadata(savepoint).metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed_state, KeyGroupsHandle)
    )
    n = len(handle.offsets)
    metadata = savepoint / "_metadata"
    at = metadata.read_bytes().index(struct.pack(f">ii{n}q", handle.key_group_start, n, *handle.offsets))
    _flip(metadata, at + 8, 0x80)
    dest = tmp_path / "out"
    for args in (["verify"], ["-q", "rescale", "--to", "2", "--out", str(dest), "--engine", "local"]):
        result = kg(*args, str(savepoint))  # type: ignore[operator]
        assert result.exit_code == 3, result.stderr
        assert "negative offset" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not dest.exists()


def test_a_file_segment_with_a_negative_start_or_size_is_corrupt_metadata() -> None:
    for start, size in ((-10, 20), (10, -20)):
        out = DataOutput()
        out.write_byte(SEGMENT_FILE_HANDLE)
        out.write_long(start)
        out.write_long(size)
        out.write_int(0)
        out.write_utf("file:/shared/merged")
        out.write_utf("logical")
        with pytest.raises(InvalidInputError) as caught:
            read_stream_handle(DataInput(out.getvalue(), "_metadata"))
        assert caught.value.code == "FLINK_METADATA_CORRUPT"


@pytest.mark.parametrize("tag", [FILE_STREAM_STATE_HANDLE, RELATIVE_STREAM_STATE_HANDLE])
def test_a_file_size_below_minus_one_is_corrupt_metadata(tag: int) -> None:
    # FileStateHandle: checkArgument(stateSize >= -1), -1 meaning unknown.
    for size, ok in ((-1, True), (-2, False), (-(2**63), False)):
        out = DataOutput()
        out.write_byte(tag)
        if tag == RELATIVE_STREAM_STATE_HANDLE:
            out.write_utf("state")
        out.write_long(size)
        if tag == FILE_STREAM_STATE_HANDLE:
            out.write_utf("file:/checkpoints/state")
        reader = DataInput(out.getvalue(), "_metadata")
        if ok:
            assert read_stream_handle(reader).size == size  # type: ignore[union-attr]
            continue
        with pytest.raises(InvalidInputError) as caught:
            read_stream_handle(reader)
        assert caught.value.code == "FLINK_METADATA_CORRUPT"


def test_a_list_element_offset_moved_by_one_byte_is_found(tmp_path: Path, kg: object) -> None:
    savepoint = _copy(FILES, tmp_path)
    handle, _path = _operator_file(savepoint, "split-ids")
    entry = next(e for e in handle.states if e.name == "split-ids")
    metadata = savepoint / "_metadata"
    needle = _utf("split-ids") + struct.pack(
        f">bi{len(entry.offsets)}q", entry.mode, len(entry.offsets), *entry.offsets
    )
    # The lowest bit of the third element's offset: two LongSerializer elements become 7 and 9 bytes.
    _flip(metadata, metadata.read_bytes().index(needle) + len(_utf("split-ids")) + 5 + 8 * 2 + 7, 0x01)
    assert "FLINK_OPERATOR_STATE_CORRUPT" in _codes(savepoint)
    assert "state 'split-ids': value runs past the end of its bytes" in _messages(savepoint)
    _refused_by_every_rescale(savepoint, tmp_path, kg, "INPUT_FAILS_VERIFY")


def test_the_python_rescale_checks_operator_streams_as_kg_verify_does(tmp_path: Path) -> None:
    # A snappy frame whose CRC does not hold decodes to the right bytes: only kg verify's strictness refuses
    # it, and the rescale's operator-state read applies it without the CLI's check in front.
    savepoint = _copy(SNAPPY, tmp_path)
    handle, path = _operator_file(savepoint, "split-ids")
    start = min(o for e in handle.states for o in e.offsets if o)
    data = bytearray(path.read_bytes())
    assert data[start - 10 : start] == b"\xff\x06\x00\x00sNaPpY"
    struct.pack_into("<I", data, start + 4, struct.unpack_from("<I", data, start + 4)[0] ^ 1)
    path.write_bytes(bytes(data))
    assert _codes(savepoint, blocks=False) == ["FLINK_SNAPPY_CRC"]
    dest = tmp_path / "out"
    with pytest.raises(InvalidInputError) as caught:
        rescale(savepoint, dest, 2, new_max_parallelism=256, engine="local")
    assert caught.value.code == "INPUT_FAILS_VERIFY" and "FLINK_SNAPPY_CRC" in caught.value.message
    assert not dest.exists()


def test_a_native_layout_s_file_sizes_are_verified(tmp_path: Path) -> None:
    # Heap and RocksDB layouts are verified through their canonical rewrite; the original files' recorded
    # sizes are checked too (kg check's state-file gate, now part of kg verify for them).
    savepoint = _copy(NATIVE, tmp_path)
    handle = next(
        s.managed_keyed_state
        for op in read_flink_metadata(savepoint).metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed_state, KeyGroupsHandle)
    )
    metadata = savepoint / "_metadata"
    needle = _utf(handle.delegate.relative_path) + handle.delegate.size.to_bytes(8, "big")
    _flip(metadata, metadata.read_bytes().index(needle) + len(needle) - 1, 0x01)
    for blocks in (True, False):
        assert "FLINK_STATE_FILE_SIZE" in _codes(savepoint, blocks=blocks)


def test_a_rocksdb_handle_s_key_group_range_is_checked_before_a_rescale(tmp_path: Path, kg: object) -> None:
    root = _copy(INCREMENTAL, tmp_path)
    checkpoint = root / INCREMENTAL_CHK
    handle = next(
        s.managed_keyed_state
        for op in read_flink_metadata(checkpoint).metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed_state, IncrementalKeyedHandle) and s.managed_keyed_state.key_group_start
    )
    metadata = checkpoint / "_metadata"
    needle = _utf(handle.backend_identifier) + struct.pack(
        ">ii", handle.key_group_start, handle.num_key_groups
    )
    _flip(metadata, metadata.read_bytes().index(needle) + len(needle) - 5, 0x01)
    assert "FLINK_KEY_GROUP_RANGE" in _codes(checkpoint, blocks=False)
    dest = tmp_path / "out"
    result = kg(
        "-q", "rescale", str(checkpoint), "--to", "2", "-m", "256", "--out", str(dest), "--engine", "local"
    )  # type: ignore[operator]
    assert result.exit_code == 3 and "FLINK_KEY_GROUP_RANGE" in result.stderr, result.stderr
    assert not dest.exists()
