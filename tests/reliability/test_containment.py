"""Containment: kg reads nothing outside the input it is given and writes nothing into it.

- a relative state handle that climbs out (``../outside/f``, ``../../../../etc/passwd``) or a state file
  that is a link to outside is refused (exit 3, ``STATE_FILE_OUTSIDE``), and its bytes never reach an
  output;
- an absolute state path outside the checkpoint's own directories is refused unless its root is named in
  ``KG_STATE_ROOTS``;
- a destination equal to, inside or around the input is refused before anything is written;
- several concurrent ``kg rescale … --out SAME``: exactly one commits, the others refuse with one line.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from keygroup_cli.flink.io.stream_handles import FileHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from tests.conftest import FIXTURES
from tests.execution.snapshots import tree_digest

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
SECRET = b"kg-containment-secret-" * 64


def _with_keyed_path(tmp_path: Path, rewrite) -> Path:
    """Copy the savepoint; rewrite the first keyed handle's file reference with ``rewrite(handle)``."""
    copy = tmp_path / "savepoint"
    shutil.copytree(SAVEPOINT, copy)
    metadata = read_flink_metadata(copy).metadata
    done = False
    operators = []
    for op in metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if not done and isinstance(keyed, KeyGroupsHandle) and keyed.delegate is not None:
                keyed = dataclasses.replace(keyed, delegate=rewrite(keyed.delegate, copy))
                sub = dataclasses.replace(sub, managed_keyed_state=keyed)
                done = True
            subtasks.append(sub)
        operators.append(dataclasses.replace(op, subtasks=tuple(subtasks)))
    assert done
    (copy / "_metadata").write_bytes(
        write_metadata(dataclasses.replace(metadata, operators=tuple(operators)))
    )
    return copy


@pytest.mark.parametrize("escape", ["../outside/f", "../../../../etc/passwd", "/etc/passwd"])
def test_relative_handles_that_climb_out_are_refused(kg, tmp_path, escape):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(SECRET)

    def rewrite(handle: RelativeFileHandle, _copy: Path) -> RelativeFileHandle:
        return dataclasses.replace(handle, relative_path=escape)

    savepoint = _with_keyed_path(tmp_path, rewrite)
    for args in (("inspect", savepoint), ("rescale", savepoint, "--to", "4", "--out", tmp_path / "out")):
        done = kg(*args, "--json")
        assert done.exit_code == 3, done.stderr
        error = done.json()["error"]
        # rescale verifies its whole input first (INPUT_FAILS_VERIFY), naming the same cause.
        assert error["code"] in ("STATE_FILE_OUTSIDE", "INPUT_FAILS_VERIFY") and "outside" in error["message"]
    assert not (tmp_path / "out").exists()


def test_a_state_file_that_links_outside_is_refused(kg, tmp_path):
    copy = tmp_path / "savepoint"
    shutil.copytree(SAVEPOINT, copy)
    metadata = read_flink_metadata(copy).metadata
    keyed = next(
        s.managed_keyed_state
        for op in metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed_state, KeyGroupsHandle)
    )
    target = copy / keyed.delegate.relative_path
    secret = tmp_path / "secret"
    secret.write_bytes(target.read_bytes())  # even a plausible file: it is outside
    target.unlink()
    target.symlink_to(secret)
    done = kg("rescale", copy, "--from", "3", "--to", "4", "--out", tmp_path / "out", "--json")
    assert done.exit_code == 3, done.stderr
    error = done.json()["error"]
    assert error["code"] in ("STATE_FILE_OUTSIDE", "INPUT_FAILS_VERIFY") and "outside" in error["message"]
    assert not (tmp_path / "out").exists()


def test_absolute_state_paths_outside_need_a_named_root(kg, tmp_path, tmp_path_factory, monkeypatch):
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # not under the savepoint's parent

    def rewrite(handle: RelativeFileHandle, copy: Path) -> FileHandle:
        moved = elsewhere / handle.relative_path
        shutil.move(copy / handle.relative_path, moved)
        return FileHandle(path=f"file://{moved}", size=handle.size)

    savepoint = _with_keyed_path(tmp_path, rewrite)
    refused = kg("inspect", savepoint, "--json")
    assert refused.exit_code == 3 and refused.json()["error"]["code"] == "STATE_FILE_OUTSIDE"
    assert "KG_STATE_ROOTS" in refused.json()["error"]["message"]
    monkeypatch.setenv("KG_STATE_ROOTS", str(elsewhere))
    assert kg("inspect", savepoint).exit_code == 0


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_a_destination_in_or_around_the_input_is_refused(kg, tmp_path, where):
    snapshot = tmp_path / "work" / "snap"
    assert kg("rescale", FIXTURES / "snapshots" / "valid", "--to", "3", "--out", snapshot,
              "--engine", "local").exit_code == 0  # fmt: skip
    before = tree_digest(snapshot)
    dest = {"same": snapshot, "inside": snapshot / "counter" / "new", "around": tmp_path / "work"}[where]
    done = kg("rescale", snapshot, "--to", "4", "--out", dest, "--engine", "local", "--json")
    assert done.exit_code == 2
    assert done.json()["error"]["code"] in ("DESTINATION_INSIDE_INPUT", "DESTINATION_EXISTS")
    assert tree_digest(snapshot) == before
    assert kg("verify", snapshot).exit_code == 0


def test_concurrent_writers_to_one_destination_have_exactly_one_winner(tmp_path):
    dest = tmp_path / "out"
    env = {**os.environ, "COLUMNS": "100"}
    args = [sys.executable, "-m", "keygroup_cli", "rescale", str(SAVEPOINT), "--from", "3", "--to", "4",
            "-m", "256", "--out", str(dest), "--engine", "local", "-q"]  # fmt: skip
    procs = [
        subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)
    ]
    results = [(p.wait(120), p.stderr.read().decode()) for p in procs]
    winners = [r for r in results if r[0] == 0]
    losers = [r for r in results if r[0] != 0]
    assert len(winners) == 1, results
    for code, stderr in losers:
        assert code == 2 and stderr.count("\n") == 1 and "destination exists" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging left behind
    done = subprocess.run([*args[:3], "check", str(dest), "-p", "4", "-m", "256"], env=env, check=False)
    assert done.returncode == 0
