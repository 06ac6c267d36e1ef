"""kill -9 of a rescale while it uploads to S3: no ``_metadata``/``_manifest.json`` is ever visible early.

An object store has no rename, so the commit point is the metadata file, written last. Killing the whole
process group at several points of the upload must leave the target either without its metadata file (not
a snapshot or savepoint, whatever else is there) or complete and verified, and the input untouched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from tests.execution.snapshots import generate, tree_digest

KG = [sys.executable, "-m", "keygroup_cli"]
#: Objects seen at the target when kg is killed; KG_RELIABILITY_FULL=1 kills at many more points.
KILL_POINTS = tuple(range(1, 101)) if os.environ.get("KG_RELIABILITY_FULL") == "1" else (1, 3, 12)


@pytest.fixture(scope="module")
def big_input(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> tuple[Path, str]:
    """A kg snapshot of a few tens of MB in many files, on local disk and in the bucket."""
    local = generate(
        tmp_path_factory.mktemp("crash") / "in",
        ("events", "long", 150_000, 8, 128),
        ("sessions", "string", 50_000, 8, 128),
        row_group_rows=50_000,
    )
    uri = s3_server.bucket("kg-crash") + "/input"
    s3_server.upload(local, uri)
    return local, uri


def _kill_during_upload(s3_server: Any, args: list[str], target: str, objects: int) -> tuple[int, int]:
    """Run kg, SIGKILL its process group once ``objects`` objects exist under ``target``.

    Returns ``(objects seen when killed, exit status)``; objects seen is 0 if kg finished first.
    """
    env = {**os.environ, **s3_server.env}
    proc = subprocess.Popen([*KG, *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    seen = 0
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        seen = len(s3_server.keys(target))
        if seen >= objects:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    status = proc.wait(30)
    return (seen if status == -signal.SIGKILL else 0), status


@pytest.mark.parametrize("kind", ["snapshot", "savepoint"])
def test_kill_9_mid_upload_never_shows_a_commit_file(kg, s3_server, big_input, tmp_path, kind):
    local, uri = big_input
    parallelism = "5"
    if kind == "savepoint":
        # A real Flink savepoint, rescaled to many subtasks: hundreds of state files to upload.
        local = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
        uri = s3_server.upload(local, uri.replace("/input", "/input-savepoint"))
        parallelism = "48"
    before = s3_server.keys(uri)
    commit = "_metadata" if kind == "savepoint" else "_manifest.json"
    killed_mid_upload = 0
    for round_, objects in enumerate(KILL_POINTS):
        target = f"{uri}-out-{round_}"
        args = ["rescale", uri, "--to", parallelism, "-m", "256", "--out", target, "--engine", "local", "-q"]
        seen, status = _kill_during_upload(s3_server, args, target, objects)
        keys = s3_server.keys(target)
        if status == -signal.SIGKILL:
            killed_mid_upload += 1
            assert commit not in keys, f"killed after {seen} objects, yet {commit} is visible"
            assert kg("inspect", target).exit_code == 3  # not a snapshot or savepoint
            # The leftover is recognised as kg's own uncommitted upload; a rerun removes it and succeeds.
            assert ".kg-writer" in keys
            rerun = kg(*args)
            assert rerun.exit_code == 0, rerun.stderr
            assert commit in s3_server.keys(target) and ".kg-writer" not in s3_server.keys(target)
            assert kg("check", target, "-p", parallelism, "-m", "256").exit_code == 0
        else:
            # It finished before the kill point: then it must be complete and valid.
            assert status == 0 and commit in keys
            assert kg("check", target, "-p", parallelism, "-m", "256").exit_code == 0
        assert s3_server.keys(uri) == before  # the input is never modified
    assert killed_mid_upload >= len(KILL_POINTS) - 1, "the upload finished too fast to be interrupted"
    assert tree_digest(local)  # the local original is intact (read above)
