"""kg works from any install: its ``kg`` script run from a venv that is not activated, decoys on PATH.

The Spark engine once started its Python workers with whatever ``python3`` came first on PATH, and CI
stayed green only because the machine had kg's dependencies in its system Python. Here ``kg`` is started
the way pipx or a CI job starts it (the venv's script by path, no ``VIRTUAL_ENV``, no ``PYTHONPATH``) with
interpreters first on PATH that fail loudly, and rescales with the default engine (Spark, installed in
this venv) and a maxParallelism change: a kg snapshot and a real Flink savepoint. The outputs are checked
by kg's own ``verify``/``check`` and against the same rescale with the local engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DECOY_MARK, FIXTURES, write_decoys

pytestmark = pytest.mark.spark

KG = Path(sys.executable).parent / "kg"
SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
SNAPSHOT = FIXTURES / "snapshots" / "valid"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment like a fresh login shell's: decoys first on PATH, no venv activated."""
    decoy = write_decoys(tmp_path_factory.mktemp("decoy"))
    keep = {"HOME", "LANG", "LC_ALL", "JAVA_HOME", "TMPDIR", "USER"}
    base = {k: v for k, v in os.environ.items() if k in keep}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    # Java is found as a user's shell would find it; the venv's bin directory is not on PATH.
    path = [p for p in path if Path(p).resolve() != KG.parent.resolve()]
    base["PATH"] = os.pathsep.join([str(decoy), *path])
    base["KG_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    base["COLUMNS"] = "100"
    # Off a terminal kg prints a line per stage; tests/cli/test_progress.py holds those, these the rest.
    base["KG_PROGRESS"] = "off"
    return base


def _kg(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KG), *map(str, args)], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_kg_script_is_installed_in_the_test_venv() -> None:
    # The README installs kg into .venv; the suite runs with that venv's interpreter.
    assert KG.is_file(), f"{KG} is missing: install kg with pip install -e '.[spark,test]'"


def test_decoys_really_fail(env: dict[str, str]) -> None:
    # The decoys must be found first and fail, or the tests below would prove nothing.
    done = subprocess.run(["python3", "-c", "print(1)"], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 97 and DECOY_MARK in done.stderr


def test_the_default_engine_is_local_on_one_machine_and_spark_once_a_master_is_set(
    env: dict[str, str], tmp_path: Path
) -> None:
    alone = _kg(env, "rescale", SNAPSHOT, "--to", "4", "-m", "64", "--out", tmp_path / "alone", "--json")
    assert alone.returncode == 0, alone.stderr
    doc = json.loads(alone.stdout)
    assert doc["engine"] == "local" and doc["engine_reason"].startswith("default engine: one machine")
    # A cache of its own: the first Spark start in the module's cache is the next test's to see.
    master = dict(env, SPARK_MASTER="local[2]", KG_CACHE_DIR=str(tmp_path / "cache"))
    cluster = _kg(
        master, "rescale", SNAPSHOT, "--to", "4", "-m", "64", "--out", tmp_path / "master", "--json"
    )
    assert cluster.returncode == 0, cluster.stderr
    doc = json.loads(cluster.stdout)
    assert (doc["engine"], doc["engine_reason"]) == (
        "spark",
        "default engine: a Spark master is set (local[2])",
    )


def test_spark_rescales_a_snapshot_and_a_savepoint_from_an_unactivated_venv(
    env: dict[str, str], tmp_path: Path
) -> None:
    snapshot_out = tmp_path / "snapshot-m64"
    first = _kg(
        env, "rescale", SNAPSHOT, "--to", "4", "--max-parallelism", "64", "--out", snapshot_out, "--json",
        "--engine", "spark",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert DECOY_MARK not in first.stderr
    doc = json.loads(first.stdout)
    assert (doc["engine"], doc["engine_reason"]) == ("spark", "--engine spark")
    assert {op["to_max_parallelism"] for op in doc["operators"]} == {64}
    # The one-time class-data-sharing archive is announced when it is written, and only then.
    assert "one-time archive of Spark's classes" in first.stderr

    savepoint_out = tmp_path / "savepoint-m1024"
    second = _kg(
        env, "rescale", SAVEPOINT, "--from", "3", "--to", "4", "-m", "1024", "--out", savepoint_out, "--json",
        "--engine", "spark",
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert DECOY_MARK not in second.stderr
    assert "one-time archive" not in second.stderr
    doc = json.loads(second.stdout)
    assert (doc["engine"], doc["output_format"]) == ("spark", "flink-savepoint")

    # The results are right: kg's own deep check of the snapshot, the gate on the savepoint, and both
    # identical in content to the local engine's output of the same rescale.
    assert _kg(env, "verify", snapshot_out).returncode == 0
    gate = _kg(env, "check", savepoint_out, "--parallelism", "4", "--max-parallelism", "1024", "--json")
    assert gate.returncode == 0, gate.stdout
    local_out = tmp_path / "snapshot-m64-local"
    local = _kg(env, "rescale", SNAPSHOT, "--to", "4", "-m", "64", "--out", local_out, "--engine", "local")
    assert local.returncode == 0, local.stderr
    diff = _kg(env, "diff", snapshot_out, local_out, "--json")
    assert diff.returncode == 0, diff.stdout

    # Spark's console log went to kg's cache directory and was removed at exit (both runs succeeded).
    logs = Path(env["KG_CACHE_DIR"]) / "logs"
    assert logs.is_dir() and not list(logs.iterdir())


def test_a_worker_python_without_kg_exits_6_with_one_line(env: dict[str, str], tmp_path: Path) -> None:
    # PYSPARK_PYTHON (the user's choice) wins over kg's interpreter: here the decoy, so the worker fails.
    broken = dict(env, PYSPARK_PYTHON="python3")
    args = (
        "rescale",
        SNAPSHOT,
        "--to",
        "4",
        "-m",
        "64",
        "--out",
        tmp_path / "out",
        "--json",
        "--engine",
        "spark",
    )
    done = _kg(broken, *args)
    assert done.returncode == 6, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "SPARK_WORKER_FAILED"
    assert DECOY_MARK in error["message"] and "PYSPARK_PYTHON" in error["message"]
    assert "Traceback" not in done.stderr
    # One line, besides the one-time notice of Spark's class archive when this is the cache's first
    # Spark start (this test run alone).
    lines = [line for line in done.stderr.strip().splitlines() if "one-time archive" not in line]
    assert len(lines) == 1, done.stderr
    assert not (tmp_path / "out").exists()
