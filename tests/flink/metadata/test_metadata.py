"""kg's _metadata parser against Flink's own reading of every committed Flink fixture."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keygroup_cli.core.errors import InvalidInputError, KgError, UnsupportedFormatError
from keygroup_cli.flink.io.stream_handles import (
    ByteStreamHandle,
    FileHandle,
    KeyGroupsHandle,
    RelativeFileHandle,
    StreamHandle,
)
from keygroup_cli.flink.metadata import handles as h
from keygroup_cli.flink.metadata.locate import find_metadata, read_flink_metadata
from keygroup_cli.flink.metadata.reader import parse_metadata
from keygroup_cli.flink.metadata.writer import write_metadata

FLINK_FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "flink"
CASES = sorted(p.parent for p in FLINK_FIXTURES.glob("*/*/flink-report.json"))


def _report(case: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((case / "flink-report.json").read_text(encoding="utf-8"))
    return data


def test_fixture_cases_exist() -> None:
    assert len(CASES) >= 5


def _stream_matches(kg: StreamHandle | None, flink: dict[str, Any] | None) -> None:
    if flink is None:
        assert kg is None
        return
    assert kg is not None
    assert kg.size == flink["stateSize"]
    if flink["class"] == "ByteStreamStateHandle":
        assert isinstance(kg, ByteStreamHandle)
        assert kg.handle_name == flink["handleName"]
        assert len(kg.data) == flink["inlineSize"]
    elif flink["class"] == "RelativeFileStateHandle":
        assert isinstance(kg, RelativeFileHandle)
        assert kg.relative_path == flink["relativePath"]
    elif flink["class"] == "FileStateHandle":
        assert isinstance(kg, FileHandle)
        assert kg.path == flink["absolutePath"]
    else:
        raise AssertionError(f"unexpected handle class {flink['class']}")


def _keyed_matches(kg: h.KeyedHandle | None, flink: list[dict[str, Any]]) -> None:
    if not flink:
        assert kg is None
        return
    (f,) = flink
    assert kg is not None
    assert kg.size == f["stateSize"]
    expected_range = f["keyGroupRange"]
    assert ([kg.key_group_start, kg.key_group_end] if kg.key_group_end >= kg.key_group_start else []) == (
        expected_range
    )
    if f["class"] in ("KeyGroupsSavepointStateHandle", "KeyGroupsStateHandle"):
        assert isinstance(kg, KeyGroupsHandle)
        assert kg.tag == (
            h.SAVEPOINT_KEY_GROUPS_HANDLE if f["class"].startswith("KeyGroupsSavepoint") else 12
        )
        assert list(kg.offsets) == f["offsets"]
        if kg.tag == h.KEY_GROUPS_HANDLE_V2:
            assert kg.handle_id == f["stateHandleId"]
        _stream_matches(kg.delegate, f["delegate"])
    elif f["class"] == "ChangelogStateBackendHandleImpl":  # the changelog backend (state.changelog.enabled)
        assert isinstance(kg, h.ChangelogBackendHandle)
        assert kg.handle_id == f["stateHandleId"]
        assert kg.checkpointed_size == f["checkpointedSize"]
        assert f"basePartSize={len(kg.materialized)}" in f["toString"]
        assert f"deltaPartSize={len(kg.non_materialized)}" in f["toString"]
    else:
        assert f["class"] == "IncrementalRemoteKeyedStateHandle"
        assert isinstance(kg, h.IncrementalKeyedHandle)
        assert kg.checkpoint_id == f["checkpointId"]
        assert kg.backend_identifier == f["backendIdentifier"]
        assert kg.handle_id == f["stateHandleId"]
        assert kg.checkpointed_size == f["checkpointedSize"]
        _stream_matches(kg.metadata, f["metaDataStateHandle"])
        for ours, theirs in ((kg.shared, f["sharedState"]), (kg.private, f["privateState"])):
            assert [x.local_path for x in ours] == [x["localPath"] for x in theirs]
            for x, y in zip(ours, theirs, strict=False):
                _stream_matches(x.handle, y["handle"])


def _operator_handle_matches(kg: h.OperatorStateHandle | None, flink: list[dict[str, Any]]) -> None:
    if not flink:
        assert kg is None
        return
    (f,) = flink
    assert kg is not None
    assert kg.size == f["stateSize"]
    assert {e.name: {"distributionMode": e.mode_name, "offsets": list(e.offsets)} for e in kg.states} == f[
        "states"
    ]
    _stream_matches(kg.delegate, f["delegate"])


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_parse_matches_flink_report(case: Path) -> None:
    report = _report(case)["metadata"]
    metadata_path = case / report["metadataFile"]
    raw = metadata_path.read_bytes()
    md = parse_metadata(raw, str(metadata_path))
    assert f"0x{struct.unpack('>I', raw[:4])[0]:08x}" == report["magic"]
    assert md.version == report["metadataVersion"]
    assert md.checkpoint_id == report["checkpointId"]
    assert [(m.name, m.version, len(m.payload)) for m in md.master_states] == [
        (m["name"], m["version"], m["size"]) for m in report["masterStates"]
    ]
    props = report["properties"]
    assert md.properties is not None
    assert md.properties.is_savepoint == props["isSavepoint"]
    assert md.properties.type_name == props["checkpointTypeName"]
    assert md.properties.format_type == props["savepointFormatType"]
    assert len(md.operators) == report["operatorCount"]
    for op, fop in zip(md.operators, report["operators"], strict=False):
        assert op.operator_id == fop["operatorId"]
        assert op.name == fop["operatorName"]
        assert op.uid == fop["operatorUid"]
        assert (op.parallelism, op.max_parallelism) == (fop["parallelism"], fop["maxParallelism"])
        assert op.fully_finished == fop["fullyFinished"]
        coordinator = op.coordinator_state
        assert (coordinator is not None) == fop["coordinatorStatePresent"]
        if coordinator is not None:
            assert coordinator.data.hex() == fop["coordinatorStateHex"]
        # Flink's report counts a FullyFinishedOperatorState's subtask states as -1, as _metadata stores it.
        assert (-1 if op.fully_finished else len(op.subtasks)) == fop["subtaskStatesCount"]
        for sub, fsub in zip(op.subtasks, fop["subtasks"], strict=False):
            assert sub.index == fsub["index"]
            assert sub.finished == fsub["finished"]
            assert sub.has_state == fsub["hasState"]
            assert sub.keyed_bytes + sub.operator_state_bytes == fsub["stateSize"]
            _keyed_matches(sub.managed_keyed_state, fsub["managedKeyedState"])
            _keyed_matches(sub.raw_keyed_state, fsub["rawKeyedState"])
            _operator_handle_matches(sub.managed_operator_state, fsub["managedOperatorState"])
            _operator_handle_matches(sub.raw_operator_state, fsub["rawOperatorState"])
            assert len(sub.input_channel_state) == fsub["inputChannelStateCount"]
            assert len(sub.result_subpartition_state) == fsub["resultSubpartitionStateCount"]
        assert op.has_state == (fop["stateSize"] > 0 or fop["coordinatorStatePresent"])


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_writer_reproduces_flink_bytes(case: Path) -> None:
    metadata_path = case / _report(case)["metadata"]["metadataFile"]
    raw = metadata_path.read_bytes()
    assert write_metadata(parse_metadata(raw)) == raw


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_find_metadata_accepts_case_directory_and_file(case: Path) -> None:
    expected = case / _report(case)["metadata"]["metadataFile"]
    assert find_metadata(case).resolve() == expected.resolve()
    assert find_metadata(expected) == expected
    assert find_metadata(expected.parent).resolve() == expected.resolve()


def test_checkpoint_root_picks_latest_completed_chk(tmp_path: Path) -> None:
    source = next(c for c in CASES if "checkpoint" in c.name)
    raw = (source / _report(source)["metadata"]["metadataFile"]).read_bytes()
    for n in (3, 7):
        (tmp_path / f"chk-{n}").mkdir()
        (tmp_path / f"chk-{n}" / "_metadata").write_bytes(raw)
    (tmp_path / "chk-12").mkdir()  # in progress: no _metadata yet
    (tmp_path / "shared").mkdir()
    assert find_metadata(tmp_path) == tmp_path / "chk-7" / "_metadata"
    snapshot = read_flink_metadata(tmp_path)
    assert snapshot.is_savepoint is False


def test_checkpoint_root_without_completed_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "chk-1").mkdir()
    with pytest.raises(InvalidInputError) as info:
        find_metadata(tmp_path)
    assert info.value.code == "NO_COMPLETED_CHECKPOINT"


def test_not_a_savepoint(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="not a Flink savepoint"):
        find_metadata(tmp_path)
    with pytest.raises(InvalidInputError, match="no such file"):
        find_metadata(tmp_path / "missing")


def _sample() -> bytes:
    case = next(c for c in CASES if "inline" in c.name)
    return (case / "_metadata").read_bytes()


def test_wrong_magic_is_invalid() -> None:
    with pytest.raises(InvalidInputError, match="Unexpected magic number") as info:
        parse_metadata(b"PK\x03\x04" + _sample()[4:])
    assert info.value.exit_code == 3


@pytest.mark.parametrize("version", [2, 7, 99, -1])
def test_unknown_version_is_unsupported(version: int) -> None:
    raw = _sample()
    with pytest.raises(
        UnsupportedFormatError, match=f"Unrecognized checkpoint version number: {version}"
    ) as info:
        parse_metadata(raw[:4] + struct.pack(">i", version) + raw[8:])
    assert info.value.exit_code == 4


def test_version_1_is_refused_with_flinks_message() -> None:
    raw = _sample()
    with pytest.raises(UnsupportedFormatError, match=r"Flink 1.1 / 1.2"):
        parse_metadata(raw[:4] + struct.pack(">i", 1) + raw[8:])


def test_truncations_are_invalid_snapshot_errors() -> None:
    raw = _sample()
    for cut in (0, 3, 8, 15, 100, len(raw) // 2, len(raw) - 746):
        with pytest.raises(InvalidInputError):
            parse_metadata(raw[:cut])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_metadata_never_raises_anything_but_kg_errors(data: st.DataObject) -> None:
    raw = bytearray(_sample())
    mode = data.draw(st.sampled_from(["truncate", "flip", "overwrite", "random"]))
    if mode == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    elif mode == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
    elif mode == "overwrite":
        i = data.draw(st.integers(8, len(raw) - 1))
        chunk = data.draw(st.binary(min_size=1, max_size=16))
        raw[i : i + len(chunk)] = chunk
    else:
        raw = bytearray(b"\x49\x60\x67\x2d" + data.draw(st.binary(max_size=200)))
    try:
        parse_metadata(bytes(raw))
    except KgError:
        pass
