"""kill -9 of a rescale while it uploads to S3: no ``_metadata``/``_manifest.json`` is ever visible early.

An object store has no rename, so the commit point is the metadata file, written last. Killing the whole
process group at several points of the upload must leave the target either without its metadata file (not
a snapshot or savepoint, whatever else is there) or complete and verified, and the input untouched. A kill
after the commit (before the writer mark is removed) leaves a complete output: ``kg clean`` removes the
mark. ``KG_RELIABILITY_FULL=1`` kills at 1 to 100 objects; the table counts what each run found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from tests.execution.snapshots import generate, tree_digest

KG = [sys.executable, "-m", "keygroup_cli"]
#: Objects seen at the target when kg is killed; KG_RELIABILITY_FULL=1 kills at many more points.
KILL_POINTS = tuple(range(1, 101)) if os.environ.get("KG_RELIABILITY_FULL") == "1" else (1, 3, 12)
if os.environ.get("KG_RELIABILITY_KILL_POINTS"):  # e.g. "51-100": one shard of a full run
    _first, _last = map(int, os.environ["KG_RELIABILITY_KILL_POINTS"].split("-"))
    KILL_POINTS = tuple(range(_first, _last + 1))


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


#: Columns of the printed table; docs/reliability.md has the full-size figures.
COLUMNS = ("runs", "killed", "killed after the commit", "finished first", "crashes", "hangs",
           "inputs modified", "partial outputs", "survivors", "rerun failed", "leftovers")  # fmt: skip
TABLE: dict[str, Counter[str]] = {}


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def _kill_during_upload(
    s3_server: Any, args: list[str], target: str, objects: int
) -> tuple[int, int | None, int]:
    """Run kg, SIGKILL its process group once ``objects`` objects exist under ``target``.

    Returns ``(objects seen when killed, exit status, pgid)``; objects seen is 0 if kg finished first; the
    status is None if kg neither finished nor reached the kill point within 240 s (a hang: it is killed).
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
    if proc.poll() is None and time.monotonic() >= deadline:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        return 0, None, proc.pid
    status = proc.wait(30)
    return (seen if status == -signal.SIGKILL else 0), status, proc.pid


@pytest.mark.parametrize("kind", ["snapshot", "savepoint"])
def test_kill_9_mid_upload_never_shows_a_commit_file(kg, s3_server, big_input, tmp_path, kind):
    local, uri = big_input
    parallelism = "5"
    if kind == "savepoint":
        # A real Flink savepoint, rescaled to many subtasks: hundreds of state files to upload.
        local = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
        uri = s3_server.upload(local, uri.replace("/input", "/input-savepoint"))
        parallelism = "48"
    local_before = tree_digest(local)
    before = s3_server.keys(uri)
    commit = "_metadata" if kind == "savepoint" else "_manifest.json"
    counts: Counter[str] = Counter()
    problems: list[str] = []
    reported = 0
    size_of_output = 0  # objects in a complete output, once one exists
    for round_, objects in enumerate(KILL_POINTS):
        target = f"{uri}-out-{round_}"
        args = ["rescale", uri, "--to", parallelism, "-m", "256", "--out", target, "--engine", "local", "-q"]
        seen, status, pgid = _kill_during_upload(s3_server, args, target, objects)
        counts["runs"] += 1
        deadline = time.monotonic() + 10
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _group_alive(pgid):
            counts["survivors"] += 1
            problems.append(f"kill point {objects}: processes of the group survive")
        keys = s3_server.keys(target)
        if status is None:
            counts["hangs"] += 1
            problems.append(f"kill point {objects}: no progress within 240 s")
        elif status == -signal.SIGKILL and commit in keys:
            # Killed after the commit (between writing the commit file and removing the writer mark, or
            # just before exiting): the output must be complete; a rerun is refused (kg never overwrites),
            # and kg clean removes the writer mark a kill may leave inside it.
            counts["killed"] += 1
            counts["killed after the commit"] += 1
            if kg("check", target, "-p", parallelism, "-m", "256").exit_code != 0:
                counts["partial outputs"] += 1
                problems.append(
                    f"kill point {objects}: killed after the commit, but the output fails kg check"
                )
            if ".kg-writer" in keys and kg("clean", target).exit_code != 0:
                problems.append(f"kill point {objects}: kg clean failed on the committed output")
        elif status == -signal.SIGKILL:
            counts["killed"] += 1
            # No commit file: not a snapshot or savepoint, whatever else is there.
            if kg("inspect", target).exit_code != 3:
                counts["partial outputs"] += 1
                problems.append(f"kill point {objects}: killed after {seen} objects, yet kg inspect reads it")
            # The leftover is recognised as kg's own uncommitted upload; a rerun removes it and succeeds.
            if ".kg-writer" not in keys:
                problems.append(f"kill point {objects}: no writer mark in the uncommitted upload")
            rerun = kg(*args)
            if rerun.exit_code != 0 or kg("check", target, "-p", parallelism, "-m", "256").exit_code != 0:
                counts["rerun failed"] += 1
                problems.append(f"kill point {objects}: rerun exit {rerun.exit_code}: {rerun.stderr.strip()}")
        else:
            # It finished before the kill point: then it must be complete and valid.
            counts["finished first"] += 1
            if status != 0 or commit not in keys:
                counts["crashes"] += 1
                problems.append(f"kill point {objects}: finished with exit {status}")
            elif kg("check", target, "-p", parallelism, "-m", "256").exit_code != 0:
                counts["partial outputs"] += 1
                problems.append(f"kill point {objects}: finished, but the output fails kg check")
        size_of_output = max(size_of_output, len(s3_server.keys(target)))
        if ".kg-writer" in s3_server.keys(target):
            counts["leftovers"] += 1
            problems.append(f"kill point {objects}: the writer mark is left after the rerun")
        if s3_server.keys(uri) != before:  # the input is never modified
            counts["inputs modified"] += 1
            problems.append(f"kill point {objects}: the input changed")
        # One line per kill point, so a run stopped early still shows what it measured.
        print(f"{kind} kill point {objects}: " + " ".join(f"{c}={counts[c]}" for c in COLUMNS), flush=True)
        for problem in problems[reported:]:
            print(f"  PROBLEM {problem}", flush=True)
        reported = len(problems)
    counts["inputs modified"] += tree_digest(local) != local_before  # the local original is intact
    TABLE[f"S3 target, {kind}"] = counts
    _print_table()
    assert not problems, problems
    # Every kill point below the output's object count is reached before kg finishes (one may be missed
    # between two polls); the points above it cannot be.
    reachable = sum(1 for objects in KILL_POINTS if objects < size_of_output)
    assert counts["killed"] >= reachable - 1, (
        f"the upload finished too fast to be interrupted: {dict(counts)}"
    )


def _print_table() -> None:
    print(f"\nkill -9 of the process group during the upload to S3 ({len(KILL_POINTS)} kill points)")
    print(f"{'path':28}" + "".join(f"{c:>{max(16, len(c) + 2)}}" for c in COLUMNS))
    for name, counts in TABLE.items():
        print(f"{name:28}" + "".join(f"{counts[c]:>{max(16, len(c) + 2)}}" for c in COLUMNS))
