"""Local copies of inputs on an object store: a savepoint (``flink.download``), a kg snapshot
(``snapshot.download``).

Commands that need a whole input on local disk read through these copies. A copy must hold the same bytes
as the source, nothing more. The file that makes it an input (``_metadata`` or ``_manifest.json``) is written
last, and the copy is removed when the command is done.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.download import copy_savepoint, readable_savepoint
from keygroup_cli.snapshot.download import copy_snapshot, is_snapshot_at, readable_snapshot
from keygroup_cli.storage.locations import location
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
SNAPSHOT = FIXTURES / "snapshots" / "valid"


@pytest.fixture(scope="module")
def bucket(s3_server: Any) -> str:
    uri = s3_server.bucket("kg-copies")
    s3_server.upload(SAVEPOINT, f"{uri}/savepoints/sp-1")
    s3_server.upload(SNAPSHOT, f"{uri}/snapshots/valid")
    return uri


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_savepoint_copy_holds_the_same_bytes(bucket, tmp_path):
    copy_savepoint(location(f"{bucket}/savepoints/sp-1"), tmp_path / "copy")
    assert _files(tmp_path / "copy") == _files(SAVEPOINT)


def test_a_metadata_only_savepoint_copy_holds_metadata_alone(bucket, tmp_path):
    copy_savepoint(location(f"{bucket}/savepoints/sp-1"), tmp_path / "copy", everything=False)
    assert _files(tmp_path / "copy") == {"_metadata": (SAVEPOINT / "_metadata").read_bytes()}


def test_a_savepoint_copy_reports_its_files(bucket, tmp_path):
    seen: list[tuple[str, int, int | None]] = []
    copy_savepoint(
        location(f"{bucket}/savepoints/sp-1"), tmp_path / "copy", on_progress=lambda *a: seen.append(a)
    )
    state_files = len(_files(SAVEPOINT)) - 1
    assert seen and seen[-1][1] == seen[-1][2]
    assert max(done for _, done, _ in seen) in (state_files, sum(len(b) for b in _files(SAVEPOINT).values()))


def test_nothing_at_the_uri_is_an_invalid_input(bucket, tmp_path):
    with pytest.raises(InvalidInputError):
        copy_savepoint(location(f"{bucket}/savepoints/missing"), tmp_path / "copy")
    assert not (tmp_path / "copy" / "_metadata").exists()


def test_readable_savepoint_is_the_path_itself_locally_and_a_removed_copy_remotely(bucket):
    with readable_savepoint(SAVEPOINT) as local:
        assert Path(local) == SAVEPOINT
    with readable_savepoint(f"{bucket}/savepoints/sp-1") as local:
        copied = Path(local)
        assert _files(copied) == _files(SAVEPOINT)
    assert not copied.exists()


def test_a_snapshot_copy_holds_the_same_bytes_and_metadata_only_holds_the_manifest(bucket, tmp_path):
    target = location(f"{bucket}/snapshots/valid")
    assert is_snapshot_at(target)
    assert not is_snapshot_at(location(f"{bucket}/savepoints/sp-1"))
    copy_snapshot(target, tmp_path / "all")
    assert _files(tmp_path / "all") == _files(SNAPSHOT)
    copy_snapshot(target / "_manifest.json", tmp_path / "manifest", everything=False)
    assert _files(tmp_path / "manifest") == {"_manifest.json": (SNAPSHOT / "_manifest.json").read_bytes()}


def test_a_snapshot_copy_for_a_plan_holds_the_operator_state_files_too(bucket, tmp_path):
    copy_snapshot(
        location(f"{bucket}/snapshots/valid"), tmp_path / "plan", everything=False, operator_state=True
    )
    manifest = json.loads((SNAPSHOT / "_manifest.json").read_bytes())
    operator_files = {f["path"] for op in manifest["operators"] for f in op.get("operator_files", [])}
    assert operator_files, "the fixture holds operator state"
    assert set(_files(tmp_path / "plan")) == {"_manifest.json", *operator_files}


def test_readable_snapshot_is_the_path_itself_locally_and_a_removed_copy_remotely(bucket):
    with readable_snapshot(SNAPSHOT) as local:
        assert Path(local) == SNAPSHOT
    with readable_snapshot(f"{bucket}/snapshots/valid") as local:
        copied = Path(local)
        assert _files(copied) == _files(SNAPSHOT)
    assert not copied.exists()
