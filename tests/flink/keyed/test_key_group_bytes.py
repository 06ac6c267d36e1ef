"""Bytes per key group from offsets, checked against Flink's own report, the decoder and expected state."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from kg_fixture_state import CANONICAL_CASES, FLINK_FIXTURES, expected

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import _Columns, decode_block
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.keyed.key_group_bytes import OperatorKeyGroupBytes, operator_key_group_bytes
from keygroup_cli.flink.keyed.layout import KeyedLayout
from keygroup_cli.flink.metadata.locate import read_flink_metadata

#: Every case whose keyed handles carry key-group offsets (canonical savepoints and the heap checkpoint).
OFFSET_CASES = (*CANONICAL_CASES, "heap-checkpoint-p2-maxp128-string")
NATIVE_CASES = ("rocksdb-native-p2-maxp128-string", "rocksdb-native-files-p2-maxp128-long")


def _report(case: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (FLINK_FIXTURES / case / "flink-report.json").read_text(encoding="utf-8")
    )
    return data


def _case_dir(case: str) -> Path:
    report = _report(case)
    return (FLINK_FIXTURES / case / report["metadata"]["metadataFile"]).parent


def _by_name(directory: Path) -> dict[str, OperatorKeyGroupBytes]:
    """Return the measured operators by name (expected-state.json names them; ids may be generated)."""
    return {m.name or "": m for m in _measured(directory).values()}


def _measured(directory: Path) -> dict[str, OperatorKeyGroupBytes]:
    snapshot = read_flink_metadata(directory)
    return {
        op.operator_id: operator_key_group_bytes(op, snapshot.directory)
        for op in snapshot.metadata.operators
        if op.has_keyed_state
    }


def _flink_stream_size(case: str, delegate: dict[str, Any]) -> int:
    """Return the stream size as Flink's report gives it: inline length, or the file's size on disk."""
    if delegate["class"] == "ByteStreamStateHandle":
        return int(delegate["inlineSize"])
    # resolvedPath is relative to the case directory, as are the keys of the report's file list.
    return int(_report(case)["files"][delegate["resolvedPath"]])


@pytest.mark.parametrize("case", OFFSET_CASES)
def test_bytes_add_up_to_the_stream_minus_its_header_per_flinks_report(case: str) -> None:
    measured = _measured(_case_dir(case))
    checked = 0
    for op in _report(case)["metadata"]["operators"]:
        for sub in op["subtasks"]:
            for keyed in sub["managedKeyedState"]:
                ours = next(h for h in measured[op["operatorId"]].handles if h.subtask == sub["index"])
                size = _flink_stream_size(case, keyed["delegate"])
                first = min(o for o in keyed["offsets"] if o)
                assert ours.stream_bytes == size == keyed["stateSize"]
                assert ours.data_bytes == size - first
                assert ours.header_bytes == first
                assert [ours.key_group_start, ours.key_group_end] == keyed["keyGroupRange"]
                # Flink's offset 0 marks a key group without data: exactly the ones sized 0.
                assert [b == 0 for b in ours.bytes] == [o == 0 for o in keyed["offsets"]]
                checked += 1
    assert checked >= 4


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_each_size_is_exactly_one_decodable_block(case: str) -> None:
    """A block of the measured length decodes to its END_OF_KEY_GROUP mark; one byte less does not."""
    snapshot = read_flink_metadata(_case_dir(case))
    measured = _measured(_case_dir(case))
    blocks = 0
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if not isinstance(handle, KeyGroupsHandle):
                continue
            sizes = next(h for h in measured[op.operator_id].handles if h.subtask == sub.index)
            with StreamSource(handle.delegate, snapshot.directory) as src:
                data = src.read(0, src.size)
            header = read_keyed_header(data[: sizes.header_bytes], case, sizes.header_bytes)
            layout = KeyedLayout.from_header(header, op.max_parallelism, case)
            for j, (offset, length) in enumerate(zip(handle.offsets, sizes.bytes, strict=True)):
                if not offset:
                    continue
                group = handle.key_group_start + j
                raw = data[offset : offset + length]
                block = decode_frames(raw) if header.compressed else raw
                decode_block(block, group, layout, _Columns(), case)
                assert block.endswith(b"\xff\xff")
                with pytest.raises(InvalidInputError):
                    short = decode_frames(raw[:-1]) if header.compressed else raw[:-1]
                    decode_block(short, group, layout, _Columns(), case)
                blocks += 1
    assert blocks >= 10


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_empty_key_groups_are_the_ones_without_expected_keys(case: str) -> None:
    state = expected(case)
    measured = _by_name(_case_dir(case))
    for keyed_op in state["keyedOperators"]:
        sizes = measured[keyed_op["name"]]
        groups_with_keys = {k["keyGroup"] for k in keyed_op["keys"]}
        sized = {h.key_group_start + j for h in sizes.handles for j, b in enumerate(h.bytes) if b}
        assert sized == groups_with_keys


def test_heap_checkpoint_empty_key_groups_are_the_smallest_blocks() -> None:
    # The heap checkpoint layout writes a block for every key group, even one without keys.
    case = "heap-checkpoint-p2-maxp128-string"
    state = expected(case)
    measured = _by_name(_case_dir(case))
    for keyed_op in state["keyedOperators"]:
        groups_with_keys = {k["keyGroup"] for k in keyed_op["keys"]}
        handles = measured[keyed_op["name"]].handles
        by_group = {h.key_group_start + j: b for h in handles for j, b in enumerate(h.bytes)}
        empty = {by_group[g] for g in by_group if g not in groups_with_keys}
        full = [by_group[g] for g in groups_with_keys]
        assert len(empty) == 1 and all(b > 0 for b in empty)
        assert max(empty) < min(full)


@pytest.mark.parametrize("case", NATIVE_CASES)
def test_native_savepoints_are_unavailable_not_an_error(case: str) -> None:
    for sizes in _measured(_case_dir(case)).values():
        assert not sizes.available
        assert sizes.unavailable_code == "NATIVE_FORMAT"
        assert "canonical" in (sizes.unavailable_reason or "")
        assert sizes.handles == ()


def _copy(case: str, tmp_path: Path) -> Path:
    target = tmp_path / case
    shutil.copytree(_case_dir(case), target)
    return target


def _keyed_file(directory: Path) -> Path:
    snapshot = read_flink_metadata(directory)
    op = next(o for o in snapshot.metadata.operators if o.uid == "keyed-state")
    handle = op.subtasks[0].managed_keyed_state
    assert isinstance(handle, KeyGroupsHandle)
    return directory / handle.delegate.relative_path  # type: ignore[union-attr]


def test_missing_state_file_names_the_file(tmp_path: Path) -> None:
    directory = _copy("heap-files-p3-maxp128-long", tmp_path)
    victim = _keyed_file(directory)
    victim.unlink()
    with pytest.raises(InvalidInputError) as info:
        _measured(directory)
    assert info.value.code == "STATE_FILE_MISSING"
    assert str(victim) in info.value.message


def test_truncated_state_file_is_invalid(tmp_path: Path) -> None:
    directory = _copy("heap-files-p3-maxp128-long", tmp_path)
    victim = _keyed_file(directory)
    data = victim.read_bytes()
    victim.write_bytes(data[:1900])  # past the header, before the last blocks' offsets
    with pytest.raises(InvalidInputError) as info:
        _measured(directory)
    assert info.value.code == "FLINK_STATE_CORRUPT"
    assert str(victim) in info.value.message


def test_file_larger_than_recorded_is_sized_by_stat_with_a_warning(tmp_path: Path) -> None:
    directory = _copy("heap-files-p3-maxp128-long", tmp_path)
    before = _measured(directory)
    victim = _keyed_file(directory)
    with open(victim, "ab") as fh:
        fh.write(b"\0" * 10)
    after = _measured(directory)
    op_id = next(k for k, v in after.items() if v.uid == "keyed-state")
    assert after[op_id].handles[0].data_bytes == before[op_id].handles[0].data_bytes + 10
    assert any("_metadata recorded" in w for w in after[op_id].warnings)
