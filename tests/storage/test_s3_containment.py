"""Containment on an object store: a savepoint's handles are read under its own prefix, or where allowed.

A savepoint on S3 (moto's server) whose keyed handle names an object outside its prefix, with ``..``
(``s3://b/sp/input/../stolen/f``) or directly, is refused by ``kg verify`` and ``kg rescale`` (exit 3,
``STATE_FILE_OUTSIDE``) and the object is never requested; with ``KG_STATE_ROOTS`` naming its prefix it
is read. An absolute handle under the savepoint's own prefix (``s3p://``, Flink's alias) is read.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.flink.io.stream_handles import FileHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from tests.conftest import FIXTURES

CASE = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
BUCKET = "kg-containment"


def _savepoint_naming(s3_server: Any, tmp_path: Path, name: str, where: str) -> tuple[str, str]:
    """Upload CASE as ``<bucket>/<name>/input`` with keyed-state's subtask-2 file moved to ``where``.

    ``where`` (a format string of the savepoint's ``input`` path, bucket first, and the ``file`` name) is
    the object the handle names; the file is put there. Returns the savepoint's URI and the object's key.
    """
    local = Path(shutil.copytree(CASE, tmp_path / name))
    prefix = f"{s3_server.bucket(BUCKET)}/{name}"
    metadata = read_flink_metadata(local).metadata
    moved: list[tuple[str, str]] = []
    operators = []
    for op in metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if op.uid == "keyed-state" and sub.index == 2 and isinstance(keyed, KeyGroupsHandle):
                assert isinstance(keyed.delegate, RelativeFileHandle)
                file = keyed.delegate.relative_path
                target = where.format(input=f"{BUCKET}/{name}/input", file=file)
                moved.append((file, target))
                keyed = dataclasses.replace(keyed, delegate=FileHandle(target, keyed.delegate.size))
                sub = dataclasses.replace(sub, managed_keyed_state=keyed)
            subtasks.append(sub)
        operators.append(dataclasses.replace(op, subtasks=tuple(subtasks)))
    ((file, target),) = moved
    rewritten = dataclasses.replace(metadata, operators=tuple(operators))
    (local / "_metadata").write_bytes(write_metadata(rewritten))
    data = (local / file).read_bytes()
    (local / file).unlink()
    s3_server.upload(local, f"{prefix}/input")
    normalized = re.sub(r"[^/]+/\.\./", "", re.sub(r"^s3p?://", "s3://", target))
    s3_server.put(normalized, data)
    return f"{prefix}/input", normalized.removeprefix(f"s3://{BUCKET}/")


@pytest.mark.parametrize(
    "where",
    ["s3://{input}/../stolen/{file}", "s3://" + BUCKET + "/elsewhere/{file}"],
    ids=["dot-dot", "another prefix"],
)
def test_a_handle_outside_the_savepoints_prefix_is_refused_until_named(
    kg: Any, s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.delenv("KG_STATE_ROOTS", raising=False)
    name = "dot-dot" if ".." in where else "other"
    uri, key = _savepoint_naming(s3_server, tmp_path, name, where)
    start = s3_server.log.stat().st_size
    rescale = ("rescale", uri, "--to", "4", "--out", tmp_path / "out", "--engine", "local")
    for args in (("verify", uri), rescale):
        done = kg(*args, "--json")
        assert done.exit_code == 3, done.stdout
        error = done.json()["error"]
        assert error["code"] == "STATE_FILE_OUTSIDE" and "KG_STATE_ROOTS" in error["message"], error
    requests = s3_server.log.read_bytes()[start:].decode(errors="replace")
    assert f"/{BUCKET}/{key}" not in requests  # neither fetched nor looked up
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("KG_STATE_ROOTS", f"s3://{BUCKET}/{key.rsplit('/', 1)[0]}")
    assert kg("verify", uri).exit_code == 0


def test_an_absolute_handle_under_the_savepoints_own_prefix_is_read(
    kg: Any, s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KG_STATE_ROOTS", raising=False)
    uri, _key = _savepoint_naming(s3_server, tmp_path, "own", "s3p://{input}/{file}")
    done = kg("verify", uri)
    assert done.exit_code == 0, done.stdout + done.stderr
