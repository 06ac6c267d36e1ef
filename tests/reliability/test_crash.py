"""Crash safety, measured: SIGKILL of the whole process group at seeded random moments of a rescale.

For each path (a kg snapshot with the local engine and with Spark, a savepoint with the same and with a new
maxParallelism) kg runs in a process group of its own (Python, the JVM and Spark's Python workers) and is
killed at a random moment within the time an uninterrupted run takes. After every kill:

- the input is byte-identical;
- the destination is absent, or complete and verified (``kg verify``);
- no process of the group survives;
- a rerun succeeds, and leaves no staging or scratch directory behind (the killed run's are recognised as
  kg's and removed).

The CI sample kills a few times per path; ``KG_RELIABILITY_FULL=1`` kills 100 times per path.
``KG_RELIABILITY_SEED`` changes the seed; ``KG_RELIABILITY_KILLS=N`` sets the kills per path. The counts
are printed as a table (``pytest -s`` shows it; a line per kill too) and the full-size figures are in
docs/reliability.md. The object-store target is covered by ``tests/storage/test_s3_crash.py``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.execution.snapshots import generate, tree_digest

FULL = os.environ.get("KG_RELIABILITY_FULL") == "1"
#: Kills per path, overriding the CI sample and the full size's 100 (for a run that must fit a time budget).
KILLS = int(os.environ["KG_RELIABILITY_KILLS"]) if os.environ.get("KG_RELIABILITY_KILLS") else None
SEED = int(os.environ.get("KG_RELIABILITY_SEED", "20261123"))
KG = [sys.executable, "-m", "keygroup_cli"]
SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"

#: path -> (arguments after the input, kills in the CI sample)
PATHS = {
    "snapshot, local engine": (["--to", "5", "-m", "256", "--engine", "local"], 4),
    "snapshot, Spark engine": (["--to", "5", "-m", "256", "--engine", "spark"], 2),
    "savepoint, same maxParallelism": (["--from", "3", "--to", "4", "--engine", "local"], 4),
    "savepoint, new maxParallelism": (["--from", "3", "--to", "4", "-m", "1024", "--engine", "local"], 4),
}
COLUMNS = ("runs", "killed", "finished first", "crashes", "hangs", "inputs modified", "partial outputs",
           "survivors", "rerun failed", "leftovers")  # fmt: skip
#: Seconds a run may take before it counts as a hang (and is killed).
HANG = 300
TABLE: dict[str, Counter[str]] = {}


@pytest.fixture(scope="module")
def snapshot_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(
        tmp_path_factory.mktemp("crash") / "in",
        ("events", "long", 120_000, 4, 128),
        ("sessions", "string", 40_000, 4, 128),
        row_group_rows=20_000,
    )


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


def _run(args: list[str], env: dict[str, str], kill_after: float | None) -> tuple[int | None, bool, int]:
    """Run kg; SIGKILL its process group after ``kill_after`` s. Return (status, killed, pgid).

    The status is None for a hang: no exit within ``HANG`` s (the group is killed then).
    """
    proc = subprocess.Popen([*KG, *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    killed = False
    if kill_after is not None:
        try:
            proc.wait(kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
    try:
        return proc.wait(HANG), killed, proc.pid
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        return None, killed, proc.pid


def _verify(dest: Path, env: dict[str, str]) -> bool:
    return subprocess.run([*KG, "verify", str(dest), "-q"], env=env, capture_output=True).returncode == 0


def _leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".kg-staging-" in p.name]


@pytest.mark.parametrize("path", list(PATHS))
def test_kill_9_at_random_moments(path: str, snapshot_input: Path, tmp_path: Path) -> None:
    args, sample = PATHS[path]
    source = snapshot_input if path.startswith("snapshot") else SAVEPOINT
    env = {**os.environ, "COLUMNS": "100"}
    before = tree_digest(source)
    # How long an uninterrupted run takes: the window the kill moments are drawn from.
    started = time.monotonic()
    status, _, _ = _run(["rescale", str(source), *args, "--out", str(tmp_path / "whole")], env, None)
    window = time.monotonic() - started
    assert status == 0 and _verify(tmp_path / "whole", env)

    rng = random.Random(f"{SEED}:{path}")
    counts: Counter[str] = Counter()
    for i in range(KILLS if KILLS is not None else 100 if FULL else sample):
        out = tmp_path / f"run-{i}"
        dest = out / "dest"
        out.mkdir()
        status, killed, pgid = _run(
            ["rescale", str(source), *args, "--out", str(dest)], env, rng.uniform(0.05, window)
        )
        counts["runs"] += 1
        counts["killed" if killed else "finished first"] += 1
        counts["hangs"] += status is None
        counts["crashes"] += not killed and status not in (0, None)  # finished by itself, but failed
        deadline = time.monotonic() + 10
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        counts["survivors"] += bool(_group_alive(pgid))
        counts["inputs modified"] += tree_digest(source) != before
        if dest.exists():
            counts["partial outputs"] += not _verify(dest, env)
        else:
            rerun, _, _ = _run(["rescale", str(source), *args, "--out", str(dest)], env, None)
            counts["hangs"] += rerun is None
            counts["rerun failed"] += rerun != 0 or not _verify(dest, env)
        counts["leftovers"] += bool(_leftovers(out))
        shutil.rmtree(out, ignore_errors=True)
        # One line per kill, so a run stopped early still shows what it measured.
        print(f"{path} kill {i}: " + " ".join(f"{c}={counts[c]}" for c in COLUMNS), flush=True)
    TABLE[path] = counts
    _print_table()
    assert counts["killed"] >= 1, f"no run was killed before it finished: {dict(counts)}"
    for bad in (
        "crashes",
        "hangs",
        "inputs modified",
        "partial outputs",
        "survivors",
        "rerun failed",
        "leftovers",
    ):
        assert counts[bad] == 0, f"{bad}: {dict(counts)}"


def _print_table() -> None:
    print(f"\nkill -9 of the process group at random moments (seed {SEED})")
    print(f"{'path':32}" + "".join(f"{c:>16}" for c in COLUMNS))
    for name, counts in TABLE.items():
        print(f"{name:32}" + "".join(f"{counts[c]:>16}" for c in COLUMNS))
