"""``state_file_findings``: kg check's stat-only gate on the files a Flink ``_metadata`` names.

Every state file must exist, be a regular file kg can open and have the size its handles need, with every
offset inside its stream: what kg inspect, verify and rescale refuse (and Flink's restore fails on). The
gate reads no state byte, and words each problem as the deep walk (``verify_flink``) does, so that
``kg check --deep`` reports it once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.flink.check.verify import verify_flink
from keygroup_cli.flink.io.stream_handles import FileHandle, KeyGroupsHandle, SegmentFileHandle, StreamHandle
from keygroup_cli.flink.metadata import handles as h
from keygroup_cli.flink.metadata.locate import FlinkCheckpoint, read_flink_metadata
from keygroup_cli.flink.metadata.state_files import state_file_findings

FLINK_FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "flink"
HEAP_P3 = FLINK_FIXTURES / "2.3" / "heap-files-p3-maxp128-long"
INCREMENTAL = FLINK_FIXTURES / "2.3" / "uid-rocksdb-incremental-p3"
#: keyed-state subtask 2's keyed file, and op-state subtask 0's operator-state file, in HEAP_P3.
KEYED_FILE = "02baa70e-fc39-4f01-bb62-04defc78557b"
OPERATOR_FILE = "3a5cf631-16a6-4005-bcb6-44f78e6cc4e2"


def _copy(tmp_path: Path, case: Path = HEAP_P3) -> Path:
    return Path(shutil.copytree(case, tmp_path / case.name))


def _gate(path: Path) -> list[Finding]:
    return state_file_findings(read_flink_metadata(path))


def _deep(path: Path) -> set[Finding]:
    return set(verify_flink(path).findings)


@pytest.mark.parametrize("metadata", sorted(FLINK_FIXTURES.glob("**/_metadata")), ids=str)
def test_every_fixture_passes(metadata: Path) -> None:
    assert _gate(metadata) == []


def test_a_missing_keyed_file(tmp_path: Path) -> None:
    sp = _copy(tmp_path)
    (sp / KEYED_FILE).unlink()
    (finding,) = _gate(sp)
    assert finding == Finding(
        "FLINK_STATE_FILE_MISSING",
        Severity.ERROR,
        "keyed-state subtask 2",
        f"{sp / KEYED_FILE}: state file is missing",
    )
    assert finding in _deep(sp)


def test_a_missing_operator_state_file(tmp_path: Path) -> None:
    sp = _copy(tmp_path)
    (sp / OPERATOR_FILE).unlink()
    assert [(f.code, f.subject) for f in _gate(sp)] == [("FLINK_STATE_FILE_MISSING", "op-state subtask 0")]


def test_a_directory_in_place_of_a_file_is_unreadable(tmp_path: Path) -> None:
    sp = _copy(tmp_path)
    (sp / KEYED_FILE).unlink()
    (sp / KEYED_FILE).mkdir()
    (finding,) = _gate(sp)
    assert finding == Finding(
        "FLINK_STATE_FILE_UNREADABLE",
        Severity.ERROR,
        "keyed-state subtask 2",
        f"{sp / KEYED_FILE}: cannot read state file: Is a directory",
    )
    assert finding in _deep(sp)


def test_a_file_without_read_permission_is_unreadable(tmp_path: Path) -> None:
    # Root reads a chmod 000 file, so as root the gate runs in a real unprivileged process (setpriv, user
    # nobody) over a copy it may traverse; otherwise in this one.
    root = tmp_path
    if os.geteuid() == 0:
        root = Path(tempfile.mkdtemp(prefix="kg-unreadable-"))
        root.chmod(0o755)
    try:
        sp = _copy(root)
        (sp / KEYED_FILE).chmod(0)
        if os.geteuid() == 0:
            code = (
                "import json, sys\n"
                "from keygroup_cli.flink.metadata.locate import read_flink_metadata\n"
                "from keygroup_cli.flink.metadata.state_files import state_file_findings\n"
                "findings = state_file_findings(read_flink_metadata(sys.argv[1]))\n"
                "print(json.dumps([[f.code, f.message] for f in findings]))\n"
            )
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
            done = subprocess.run(
                [*command, "-c", code, str(sp)],
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).resolve().parents[3],
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
            )
            found = [tuple(f) for f in json.loads(done.stdout)]
        else:
            found = [(f.code, f.message) for f in _gate(sp)]
    finally:
        if root is not tmp_path:
            shutil.rmtree(root)
    assert found == [
        ("FLINK_STATE_FILE_UNREADABLE", f"{sp / KEYED_FILE}: cannot read state file: Permission denied")
    ]


def test_a_truncated_keyed_file(tmp_path: Path) -> None:
    sp = _copy(tmp_path)
    victim = sp / KEYED_FILE
    size = victim.stat().st_size
    os.truncate(victim, size - 1)
    (finding,) = _gate(sp)
    assert finding == Finding(
        "FLINK_STATE_FILE_SIZE",
        Severity.ERROR,
        "keyed-state subtask 2",
        f"{victim}: {size - 1} bytes, its handle records {size}",
    )
    assert finding in _deep(sp)


def test_a_keyed_file_cut_before_its_last_key_groups(tmp_path: Path) -> None:
    sp = _copy(tmp_path)
    victim = sp / KEYED_FILE
    handle = next(
        sub.managed_keyed_state
        for op in read_flink_metadata(sp).metadata.operators
        for sub in op.subtasks
        if op.label == "keyed-state" and sub.index == 2
    )
    assert isinstance(handle, KeyGroupsHandle)
    last = max(handle.offsets)
    os.truncate(victim, last)
    codes = [f.code for f in _gate(sp)]
    assert codes == ["FLINK_STATE_FILE_SIZE", "FLINK_KEY_GROUP_OFFSETS"]
    offsets = next(f for f in _gate(sp) if f.code == "FLINK_KEY_GROUP_OFFSETS")
    assert f"at offset {last} is outside the stream ({last} bytes)" in offsets.message
    assert set(_gate(sp)) <= _deep(sp)


def test_a_longer_file_is_another_file(tmp_path: Path) -> None:
    # Flink records each file's size in its handle; kg inspect and verify refuse another size too.
    sp = _copy(tmp_path)
    with open(sp / OPERATOR_FILE, "ab") as fh:
        fh.write(b"\0")
    assert [f.code for f in _gate(sp)] == ["FLINK_STATE_FILE_SIZE"]
    assert set(_gate(sp)) <= _deep(sp)


def test_a_missing_shared_file_of_an_incremental_checkpoint(tmp_path: Path) -> None:
    cp = _copy(tmp_path, INCREMENTAL)
    snapshot = read_flink_metadata(cp)
    keyed = next(
        sub.managed_keyed_state
        for op in snapshot.metadata.operators
        for sub in op.subtasks
        if isinstance(sub.managed_keyed_state, h.IncrementalKeyedHandle)
    )
    assert isinstance(keyed, h.IncrementalKeyedHandle)
    shared = keyed.shared[0].handle
    assert isinstance(shared, FileHandle)
    name = shared.path.rsplit("/", 1)[-1]
    (snapshot.directory.parent / "shared" / name).unlink()  # type: ignore[operator]
    findings = _gate(cp)
    assert [f.code for f in findings] == ["FLINK_STATE_FILE_MISSING"]
    assert findings[0].message.endswith(f"{name}: state file is missing")


def _with_keyed_delegate(snapshot: FlinkCheckpoint, delegate: StreamHandle) -> FlinkCheckpoint:
    """Return the snapshot with keyed-state subtask 2's keyed handle pointing at ``delegate``."""
    operators = []
    for op in snapshot.metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if op.label == "keyed-state" and sub.index == 2 and isinstance(keyed, KeyGroupsHandle):
                sub = dataclasses.replace(
                    sub, managed_keyed_state=dataclasses.replace(keyed, delegate=delegate)
                )
            subtasks.append(sub)
        operators.append(dataclasses.replace(op, subtasks=tuple(subtasks)))
    metadata = dataclasses.replace(snapshot.metadata, operators=tuple(operators))
    return FlinkCheckpoint(snapshot.metadata_path, metadata)


def test_a_segment_must_lie_inside_its_file(tmp_path: Path) -> None:
    sp = _copy(tmp_path)
    snapshot = read_flink_metadata(sp)
    path = sp / KEYED_FILE
    size = path.stat().st_size

    def segment(start: int, length: int) -> SegmentFileHandle:
        return SegmentFileHandle(start, length, 0, f"file:{path}", "logical")

    assert state_file_findings(_with_keyed_delegate(snapshot, segment(0, size))) == []
    (short,) = state_file_findings(_with_keyed_delegate(snapshot, segment(0, size + 5)))
    assert (short.code, short.message) == (
        "FLINK_STATE_FILE_SIZE",
        f"{path}: {size} bytes, its handle records {size + 5}",
    )
    findings = state_file_findings(_with_keyed_delegate(snapshot, segment(100, size)))
    assert [f.code for f in findings][0] == "FLINK_STATE_FILE_SIZE"
    assert findings[0].message == f"{path}: {size - 100} bytes, its handle records {size}"


def test_the_gate_reads_no_state_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sp = _copy(tmp_path)
    snapshot = read_flink_metadata(sp)
    real_open = open

    def refuse(file: object, *args: object, **kwargs: object) -> object:
        if str(file).startswith(str(sp)):
            raise AssertionError(f"the gate read {file}")
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", refuse)
    assert state_file_findings(snapshot) == []
