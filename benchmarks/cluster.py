"""Benchmark: `kg rescale --master spark://...` on a Spark standalone cluster of 1 worker, then of 2 workers.

One run on one machine (no assertion on timings; they are measured again wherever it matters):

1. generates a kg snapshot with ``kg generate`` (one operator, long keys, parallelism 4, maxParallelism
   128; ``--keys`` keys, about 6.5 keyed rows and 170 bytes per key), or with ``--input savepoint`` converts
   it into a canonical Flink savepoint with ``kg convert``; not timed;
2. starts a standalone master and 1 worker of 1 core (``tests/cluster/standalone.py``, the cluster suite's
   own code: pyspark's ``spark-class``, 127.0.0.1), and times ``kg rescale IN --to 4 --max-parallelism
   1024`` on it (a re-hash: every row crosses Spark's shuffle); the cluster is stopped;
3. the same with 2 workers of 1 core each;
4. the same with ``--engine local`` (no Spark) as a reference.

Reported per run: the kg process's wall seconds (Spark driver start, executor start and the work), kg's
own ``wall_seconds`` (from its ``--json``), keyed rows/s and input MB/s of the process wall, and from
Spark's event log the application's start-up (to the rescale job's start: executors launching, the worker
probe) and the rescale job itself (its read and write stages); then the ratios 1 worker / 2 workers of
the process wall and of the rescale job. Cluster start-up (master and workers registering) is not in
the figures.
The executors run this interpreter (``PYSPARK_PYTHON``), with the start-up JVM options the cluster suite
gives them.

``--savepoint DIR`` takes a real Flink savepoint instead (for instance the 2M-key ``BenchSavepointGen``
savepoint of benchmarks/pipeline.py): its keyed rows come from the local engine's run.

A worker of one core is a scheduling slot, not a CPU limit: on one machine its executor's JVM (shuffle,
compression, GC) runs beside its Python worker on any free CPU, so "1 worker" already uses part of a
second core. ``--pin`` pins worker *i* and everything it starts to CPU *i*, which is what a cluster of
one-core machines gives; the driver stays unpinned in both runs.

Usage: flock /tmp/kg-bench.lock nice -n 10 python benchmarks/cluster.py [--keys 300000]
    [--input snapshot|savepoint | --savepoint DIR] [--pin] [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.standalone import StandaloneCluster  # noqa: E402

KG = Path(sys.executable).parent / "kg"
OLD_P, NEW_P, OLD_MAX_P, NEW_MAX_P = 4, 4, 128, 1024


def kg(*args: str | Path, env: dict[str, str] | None = None) -> tuple[dict[str, Any], float]:
    """Run the ``kg`` script with ``--json``; return its document and the process's wall seconds."""
    start = time.perf_counter()
    proc = subprocess.run(
        [str(KG), *map(str, args), "--json"], capture_output=True, text=True, env=env, check=False
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"kg {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc, wall


def kg_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return env


def make_input(work: Path, keys: int, kind: str) -> tuple[Path, int, int]:
    """Write the input; return its path, keyed rows and bytes on disk."""
    snapshot = work / "in.kg"
    doc, _ = kg("generate", snapshot, "-q", "-o", f"events:long:{keys}:{OLD_P}:{OLD_MAX_P}", "--seed", "7")
    rows = sum(op["keyed_rows"] for op in doc["operators"])
    source = snapshot
    if kind == "savepoint":
        source = work / "in.sp"
        kg("convert", snapshot, "--out", source, "-q")
    size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
    return source, rows, size


def rescale_on_cluster(work: Path, source: Path, workers: int, pin: bool = False) -> dict[str, Any]:
    """Start a cluster of ``workers`` 1-core workers (each pinned to its own CPU with ``pin``), time one
    rescale on it, stop it."""
    cluster = StandaloneCluster.start(work / f"cluster-{workers}", workers=workers, pin=pin)
    try:
        events = work / f"events-{workers}"
        events.mkdir(exist_ok=True)
        conf = {
            "spark.cores.max": str(workers),
            "spark.scheduler.minRegisteredResourcesRatio": "1",
            "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(events),
            "spark.eventLog.compress": "false",
        }
        args: list[str | Path] = ["--engine", "spark", "--master", cluster.master_url]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        result = _rescale(source, work / f"out-{workers}", args)
        result.update(stage_seconds(events))
        return result
    finally:
        cluster.stop()


def stage_seconds(events: Path) -> dict[str, float]:
    """Split the application's time, from Spark's event log: start-up, the rescale job's stages, the rest.

    ``startup_s``: application start to the rescale job's start (executors launching and registering,
    the worker probe); ``job_s``: the rescale job (its read and write stages), whose throughput is the
    part that more workers can scale.
    """
    log = next(p for p in events.rglob("*") if p.is_file() and p.name.startswith(("app-", "events_")))
    app_start = app_end = None
    jobs: dict[int, list[float]] = {}
    with open(log, encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                app_start = event["Timestamp"] / 1000
            elif kind == "SparkListenerApplicationEnd":
                app_end = event["Timestamp"] / 1000
            elif kind == "SparkListenerJobStart":
                jobs[event["Job ID"]] = [event["Submission Time"] / 1000]
            elif kind == "SparkListenerJobEnd":
                jobs[event["Job ID"]].append(event["Completion Time"] / 1000)
    # The last job is the rescale (the first one is the worker probe).
    start, end = jobs[max(jobs)]
    assert app_start is not None and app_end is not None
    return {"startup_s": start - app_start, "job_s": end - start, "after_s": app_end - end}


def _rescale(source: Path, out: Path, args: list[str | Path]) -> dict[str, Any]:
    doc, wall = kg(
        "rescale",
        source,
        "--to",
        str(NEW_P),
        "--max-parallelism",
        str(NEW_MAX_P),
        "--out",
        out,
        "-q",
        *args,
        env=kg_env(),
    )
    return {
        "wall_s": wall,
        "kg_wall_s": doc["wall_seconds"],
        "engine": doc["engine"],
        "keyed_rows": sum(s["keyed_rows"] or 0 for op in doc["operators"] for s in op.get("subtasks", [])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=300_000, help="distinct keys (default 300000)")
    parser.add_argument("--input", choices=("snapshot", "savepoint"), default="snapshot")
    parser.add_argument("--savepoint", type=Path, help="a Flink savepoint to rescale (instead of --input)")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin worker i (JVM, executor, Python workers) to CPU i: a 1-core worker then has one CPU",
    )
    parser.add_argument("--keep", type=Path, help="work directory to keep (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    options = parser.parse_args()

    work = options.keep or Path(tempfile.mkdtemp(prefix="kg-bench-cluster-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if options.savepoint is not None:
            source, rows = options.savepoint.resolve(), 0
            size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
            options.input, options.keys = f"savepoint {source.name}", 0
        else:
            source, rows, size = make_input(work, options.keys, options.input)
        results: dict[str, dict[str, Any]] = {}
        for workers in (1, 2):
            results[f"{workers} worker{'s' * (workers > 1)}"] = rescale_on_cluster(
                work, source, workers, options.pin
            )
        results["local engine"] = _rescale(source, work / "out-local", ["--engine", "local"])
    finally:
        if options.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    rows = rows or results["local engine"]["keyed_rows"]
    for result in results.values():
        result["rows_per_s"] = rows / result["wall_s"]
        result["mb_per_s"] = size / 1e6 / result["wall_s"]
    ratio = results["1 worker"]["wall_s"] / results["2 workers"]["wall_s"]
    job_ratio = results["1 worker"]["job_s"] / results["2 workers"]["job_s"]
    if options.json:
        print(
            json.dumps(
                {
                    "input": options.input,
                    "pinned": options.pin,
                    "keys": options.keys,
                    "keyed_rows": rows,
                    "bytes": size,
                    "runs": results,
                    "one_over_two_workers": ratio,
                    "job_one_over_two_workers": job_ratio,
                },
                indent=1,
            )
        )
        return
    print(
        f"kg rescale on a Spark standalone cluster (one run): {options.input}, {options.keys:,} keys, "
        f"{rows:,} keyed rows, {size / 1e6:.1f} MB; p {OLD_P} -> {NEW_P}, maxP {OLD_MAX_P} -> {NEW_MAX_P}; "
        f"{os.cpu_count()} CPUs"
    )
    for name, r in results.items():
        split = ""
        if "job_s" in r:
            split = f"  (start-up {r['startup_s']:4.1f} s, rescale job {r['job_s']:5.1f} s)"
        print(
            f"  {name:<13} wall {r['wall_s']:6.1f} s (kg {r['kg_wall_s']:6.1f} s)  "
            f"{r['rows_per_s'] / 1e3:8.0f} k rows/s  {r['mb_per_s']:6.2f} MB/s{split}"
        )
    print(f"  1 worker / 2 workers: process wall {ratio:.2f}x, rescale job {job_ratio:.2f}x")


if __name__ == "__main__":
    main()
