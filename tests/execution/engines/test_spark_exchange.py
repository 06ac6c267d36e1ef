"""The Spark engine's shared-store exchange writes the local engine's bytes, a retried read attempt included.

With ``spark.kg.exchange=shared`` the byte route's read tasks append their parts to spill files of their
own attempt in a directory every executor reaches and return only where they wrote; write tasks read their
buckets back in read-task order (``execution.engines.spill``). Here real Flink fixtures are re-keyed by the
local engine, by Spark through the shared store and by Spark through its own shuffle, and every keyed file
(bytes and key-group offsets) must be the same; then a whole ``kg rescale`` whose first read attempt
leaves a wrong spill file behind and fails is retried by Spark and still writes the local engine's files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.execution.engines.local import LocalExecutor
from keygroup_cli.execution.engines.spark.jobs import SparkExecutor
from keygroup_cli.execution.engines.spark.tasks import FAIL_FIRST_SPILL
from keygroup_cli.execution.jobs import model as pipeline
from keygroup_cli.execution.jobs.savepoint import FlinkPartRead, plan_keyed_jobs
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.execution.routes.savepoint import open_input
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.storage.exchange import EXCHANGE_PREFIX

pytestmark = pytest.mark.spark

FIXTURES = Path(__file__).parents[3] / "fixtures" / "flink" / "2.3"
ROOT = Path(__file__).parents[3]


def _ignore(_stage: str, _done: int, _total: int | None) -> None:
    return None


def _jobs(savepoint: Path, out: Path, scratch: Path, new_p: int, new_max: int) -> list[Any]:
    """The keyed jobs of a re-key, each old file cut into three read tasks, with the same file names."""
    view = open_input(
        savepoint, scratch, RescaleRequest(new_p, new_max_parallelism=new_max), _ignore
    ).savepoint
    targets = {op.operator_id: (new_p, new_max) for op in view.metadata.operators}
    out.mkdir()
    jobs = plan_keyed_jobs(view, targets, str(out), pieces=3)
    return [
        replace(j, writes=tuple(replace(w, name=f"{j.operator_id}-{w.subtask}") for w in j.writes))
        for j in jobs
    ]


def _written(executor: Any, jobs: list[Any], out: Path, scratch: Path) -> dict[tuple[str, int], Any]:
    written = executor.run(jobs, scratch)
    return {
        (op_id, f.subtask): (f.handle.offsets, (out / f.handle.delegate.relative_path).read_bytes())
        for op_id, files in written.items()
        for f in files
    }


@pytest.mark.parametrize(
    ("name", "new_p", "new_max", "tiny_buckets"),
    [
        ("heap-files-p3-maxp128-long", 4, 1024, False),
        ("heap-inline-p3-maxp10-string", 3, 64, False),
        ("rocksdb-canonical-snappy-p2-maxp256-string", 5, 37, False),
        # A bucket per key group (what a large state gets): many stretches per read task.
        ("heap-files-p3-maxp128-string", 3, 1000, True),
    ],
)
def test_the_shared_store_exchange_writes_the_local_engines_bytes(
    spark, tmp_path, monkeypatch, name, new_p, new_max, tiny_buckets
):
    if tiny_buckets:
        monkeypatch.setattr(pipeline, "BUCKET_BYTES", 64)
    runs = {}
    for label, make in (
        ("local", lambda: LocalExecutor(batch_rows=500, workers=2)),
        ("shared", lambda: SparkExecutor(session=spark, batch_rows=500, exchange="shared")),
        ("shuffle", lambda: SparkExecutor(session=spark, batch_rows=500, exchange="shuffle")),
    ):
        out, scratch = tmp_path / label, tmp_path / f"scratch-{label}"
        jobs = _jobs(FIXTURES / name, out, scratch, new_p, new_max)
        assert jobs and all(j.parts and isinstance(r, FlinkPartRead) for j in jobs for r in j.reads)
        assert sum(len(j.reads) for j in jobs) > len(jobs)  # several read tasks a job: their order counts
        executor = make()
        runs[label] = _written(executor, jobs, out, scratch)
        if label == "shared":
            # The exchange ran through the scratch directory, and its spill files are gone.
            assert executor.exchange == executor.exchange_for(jobs) == "shared"
        # No exchange is left in the scratch directory (nor was one made for Spark's shuffle).
        assert list(scratch.glob(f"{EXCHANGE_PREFIX}*")) == []
    assert runs["local"] and sum(len(data) for _offsets, data in runs["local"].values()) > 0
    assert runs["shared"] == runs["local"]
    assert runs["shuffle"] == runs["local"]


def test_the_exchange_comes_from_a_spark_setting_and_a_wrong_one_is_refused(spark):
    from keygroup_cli.core.errors import InvalidArgumentError

    # The test run's session is local: auto is the shared store.
    assert SparkExecutor(session=spark).exchange == "shared"
    assert SparkExecutor(session=spark, exchange="shuffle").exchange == "shuffle"
    with pytest.raises(InvalidArgumentError, match="unknown spark.kg.exchange 'carrier-pigeon'") as info:
        SparkExecutor(session=spark, exchange="carrier-pigeon")
    assert info.value.code == "UNKNOWN_EXCHANGE"


def _keyed_files(savepoint: Path) -> list[bytes]:
    return sorted(p.read_bytes() for p in savepoint.iterdir() if p.is_file() and p.name != "_metadata")


def test_a_retried_read_attempt_leaves_the_output_the_local_engines(tmp_path):
    # Its own process: a local master that retries (local[2,3]) and the fault, which the workers inherit
    # from kg's environment. The first attempt of read task 0 writes a complete spill file with a byte
    # flipped, notes itself, and fails; the retry writes a file of its own, and only its stretches are used.
    savepoint = FIXTURES / "heap-files-p3-maxp128-string"
    local = rescale(savepoint, tmp_path / "local", 4, new_max_parallelism=1024, engine="local")
    faults = tmp_path / "faults"
    faults.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({FAIL_FIRST_SPILL: str(faults), "PYTHONPATH": str(ROOT)})
    command = [sys.executable, "-m", "keygroup_cli", "rescale", str(savepoint), "--to", "4", "-m", "1024"]
    command += ["--out", str(tmp_path / "spark"), "--engine", "spark", "--master", "local[2,3]", "-q"]
    command += ["--conf", "spark.kg.exchange=shared"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The fault did strike (once per job of the byte route), and Spark retried past it.
    assert sorted(p.name for p in faults.iterdir()) and all(
        p.name.endswith("-0-a0") for p in faults.iterdir()
    )
    assert _keyed_files(tmp_path / "spark") == _keyed_files(local.output)
    assert len(_keyed_files(local.output)) >= 4
