"""Smoke test of the savepoint-rescale benchmark's Java side (benchmarks/savepoint_rescale.py).

``kg.fixtures.BenchSavepointGen`` writes a small savepoint of the benchmark job with real Flink, and
``kg.fixtures.BenchRestoreTimer`` restores it rescaled 3 -> 4, counting the keys Flink restored per state and
subtask. kg must read the same savepoint (every key, list and map entry) and Flink's restored key-group ranges
must be Flink's own for parallelism 4. No timing is asserted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.core.keygroups import subtask_ranges
from keygroup_cli.snapshot import open_snapshot
from tests.restore.harness import JVM_FLAGS, _tool_env

pytestmark = pytest.mark.flink

KEYS = 1000
# BenchSavepointGen: every key has "profile" and "events"; every 8th key ("i % 8 == 0") 3 "tags" entries.
TAGGED = (KEYS + 7) // 8


def _java(classpath: str, main: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        ["java", *JVM_FLAGS, "-cp", classpath, f"kg.fixtures.{main}", *args],
        capture_output=True,
        text=True,
        env=_tool_env(),
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return summary


@pytest.fixture(scope="module")
def bench_savepoint(flink_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "savepoint"
    summary = _java(flink_classpath, "BenchSavepointGen", str(out), "--keys", str(KEYS))
    assert (summary["keys"], summary["parallelism"], summary["maxParallelism"]) == (KEYS, 3, 128)
    assert (out / "_metadata").is_file()
    return out


def test_flink_restores_the_generated_savepoint_rescaled_to_4(
    flink_classpath: str, bench_savepoint: Path
) -> None:
    report = _java(
        flink_classpath, "BenchRestoreTimer", str(bench_savepoint), "--parallelism", "4", "--keys", str(KEYS)
    )
    assert report["keys"] == {"profile": KEYS, "events": KEYS, "tags": TAGGED}
    assert [tuple(s["keyGroupRange"]) for s in report["subtasks"]] == [
        (r.start, r.end) for r in subtask_ranges(128, 4)
    ]
    assert report["submitToRestoredMs"] >= report["maxSubtaskRestoreMs"] >= 0


def test_kg_reads_every_entry_of_the_generated_savepoint(bench_savepoint: Path, tmp_path: Path) -> None:
    savepoint_to_snapshot(bench_savepoint, tmp_path / "kg")
    [keyed] = [op for op in open_snapshot(tmp_path / "kg").manifest.operators if op.uid == "bench-keyed"]
    assert (keyed.parallelism, keyed.max_parallelism, keyed.key_type) == (3, 128, "string")
    # One row per value and per list, one per map entry.
    assert keyed.keyed_rows == KEYS + KEYS + 3 * TAGGED
