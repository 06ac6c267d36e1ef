"""Benchmark: a fresh `kg rescale --engine spark` of a small savepoint against the local engine (#22).

On a small savepoint the Spark engine's cost is its fixed cost: starting the JVM and the SparkContext, the
Python workers' daemon, the worker probe, and each Spark job's scheduling. This script runs, in fresh
processes, ``--repeat`` times interleaved:

- **local**: ``python -m keygroup_cli rescale SAVEPOINT --to 4 -m 1024 --engine local``;
- **spark**: the same with ``--engine spark`` (embedded ``local[*]``);
- with ``--before DIR``, **spark-before**: the same with the ``keygroup_cli`` package of DIR first on
  ``PYTHONPATH`` (an earlier commit: ``git archive COMMIT keygroup_cli | tar -x -C DIR``).

Reported per run: min / median wall of the whole process, and the ratio of the medians to **local**, and
the CPU seconds of the whole process tree (kg, the JVM, Spark's Python daemon and workers; read from
``/proc`` as ``engine_cost.py`` does), robust to the other load of a shared machine where wall is not.

``--breakdown`` instead starts a bare session in a fresh process, ``--repeat`` times for each of now and
``--before``, and splits its start: importing kg and pyspark, the JVM up to its gateway (spark-submit's
scripts and launcher, or kg's direct start), the SparkContext, the first tiny job (the Python daemon and
its workers; with a cluster master kg's worker probe before it), a second tiny job, and the stop at exit.
No assertion on timings: the figures go to docs/performance.md.

``--overlap`` runs ``kg rescale --engine spark`` of ``--savepoint`` in fresh processes and marks when Spark's
start begins (the engine starts in the background once the input is open), when the driver has finished its
own work (gate, plan) and waits for it, and when it is ready: the wall Spark's start adds to the run is
that wait.

Usage: python benchmarks/spark_start.py [--savepoint DIR] [--repeat 3] [--before DIR] [--breakdown]
[--overlap] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "fixtures" / "flink" / "2.3" / "heap-files-p3-maxp128-long"
sys.path.insert(0, str(ROOT / "benchmarks"))

from engine_cost import TreeCpu, become_subreaper  # noqa: E402

#: Run in a fresh process by ``--breakdown``: one session's start, phase by phase (JSON on stdout).
BREAKDOWN = """
import json, os, sys, time
marks = {"begin": time.perf_counter()}
from keygroup_cli.execution.engines.spark import session, workers
import pyspark
marks["imported"] = time.perf_counter()
init = pyspark.SparkContext.__init__
def timed(self, *args, **kwargs):
    marks.setdefault("gateway", time.perf_counter())
    init(self, *args, **kwargs)
pyspark.SparkContext.__init__ = timed
sc = session.spark_context()
marks["context"] = time.perf_counter()
if not getattr(workers, "kgs_own_workers", lambda sc: False)(sc):
    workers.require_workers(sc)  # as kg runs it: not for its own workers with a local master
sc.parallelize(range(2), 2).map(lambda x: x).collect()
marks["first job"] = time.perf_counter()
sc.parallelize(range(2), 2).map(lambda x: x).collect()
marks["job"] = time.perf_counter()
session._stop_quietly(sc)
marks["stop"] = time.perf_counter()
print(json.dumps(marks))
"""
PHASES = ("imported", "gateway", "context", "first job", "job", "stop")

#: Run in a fresh process by ``--overlap``: ``kg rescale --engine spark``, marking when the engine's start
#: begins (``PendingExecutor``), when the driver has done its own work and waits for it, and when it is
#: ready. Spark's start overlaps the driver's open, gate and plan; what it adds to the run's wall is the
#: wait (JSON of the marks on stderr's last line).
OVERLAP = """
import atexit, json, sys, time
marks = {"begin": time.perf_counter()}
from keygroup_cli.execution import engines
pending = engines.PendingExecutor
init, result = pending.__init__, pending.result
def timed_init(self, *args, **kwargs):
    marks.setdefault("start", time.perf_counter())
    init(self, *args, **kwargs)
def timed_result(self):
    marks.setdefault("wait", time.perf_counter())
    try:
        return result(self)
    finally:
        marks.setdefault("ready", time.perf_counter())
pending.__init__, pending.result = timed_init, timed_result
atexit.register(lambda: print(json.dumps({**marks, "end": time.perf_counter()}), file=sys.stderr))
from keygroup_cli.cli import main
sys.argv = ["kg", *sys.argv[1:]]
main()
"""


def _once(run: str, savepoint: Path, before: Path | None) -> tuple[float, float]:
    env = dict(os.environ)
    if run.endswith("-before") and before is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(before.resolve()), env.get("PYTHONPATH")]))
    engine = "local" if run == "local" else "spark"
    with tempfile.TemporaryDirectory(prefix="kg-spark-start-") as work:
        command = [
            sys.executable,
            "-m",
            "keygroup_cli",
            "rescale",
            str(savepoint),
            "--to",
            "4",
            "-m",
            "1024",
            "--engine",
            engine,
            "--out",
            str(Path(work) / "out"),
            "-q",
        ]
        with TreeCpu() as tree:
            started = time.perf_counter()
            subprocess.run(command, env=env, check=True, cwd=work, stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - started
            _wait_for_descendants()
        return wall, tree.total


def _wait_for_descendants() -> None:
    """Reap every descendant (a JVM that outlives kg is re-parented here), so its CPU is counted."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _breakdown_once(root: Path) -> tuple[dict[str, float], float]:
    env = dict(os.environ, PYTHONPATH=str(root))
    with tempfile.TemporaryDirectory(prefix="kg-spark-start-") as work, TreeCpu() as tree:
        proc = subprocess.run(
            [sys.executable, "-c", BREAKDOWN], env=env, cwd=work, capture_output=True, text=True, check=True
        )
        _wait_for_descendants()
    marks = json.loads(proc.stdout.strip().splitlines()[-1])
    phases, previous = {}, marks["begin"]
    for name in PHASES:
        phases[name] = marks[name] - previous
        previous = marks[name]
    return phases, tree.total


def breakdown(args: argparse.Namespace) -> None:
    """Print the start's phases, median of ``--repeat`` fresh sessions, now and (``--before``) before."""
    roots = {"now": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    for root in roots.values():
        _breakdown_once(root)  # untimed: class archives, compile caches, the learnt launch
    runs: dict[str, list[tuple[dict[str, float], float]]] = {name: [] for name in roots}
    for _ in range(args.repeat):
        for name, root in roots.items():
            runs[name].append(_breakdown_once(root))
    result = {
        name: {
            **{p: round(statistics.median(r[0][p] for r in rows), 2) for p in PHASES},
            "start_wall": round(statistics.median(sum(r[0][p] for p in PHASES[:4]) for r in rows), 2),
            "cpu": round(statistics.median(r[1] for r in rows), 2),
        }
        for name, rows in runs.items()
    }
    if args.json:
        print(json.dumps({"repeat": args.repeat, "breakdown": result}))
        return
    print(f"{args.repeat} fresh sessions each, median; load {os.getloadavg()[0]:.1f} at the end")
    print("| phase (wall s) | " + " | ".join(result) + " |")
    print("|---|" + "---:|" * len(result))
    for phase in (*PHASES, "start_wall", "cpu"):
        print(f"| {phase} | " + " | ".join(f"{row[phase]:.2f}" for row in result.values()) + " |")


def _overlap_once(savepoint: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="kg-spark-start-") as work:
        command = [sys.executable, "-c", OVERLAP, "rescale", str(savepoint), "--to", "4", "-m", "1024"]
        command += ["--engine", "spark", "--out", str(Path(work) / "out"), "-q"]
        proc = subprocess.run(command, cwd=work, capture_output=True, text=True, check=True)
        _wait_for_descendants()
    marks = json.loads(proc.stderr.strip().splitlines()[-1])
    return {
        "before_start": marks["start"] - marks["begin"],
        "driver_meanwhile": marks["wait"] - marks["start"],
        "start": marks["ready"] - marks["start"],
        "spark_adds": marks["ready"] - marks["wait"],
        "wall": marks["end"] - marks["begin"],
    }


def overlap(args: argparse.Namespace) -> None:
    """Print how much of Spark's start a ``kg rescale`` waits for (median of ``--repeat`` fresh runs)."""
    _overlap_once(args.savepoint)  # untimed: class archive, compile caches, the learnt launch
    rows = [_overlap_once(args.savepoint) for _ in range(args.repeat)]
    result = {key: round(statistics.median(row[key] for row in rows), 2) for key in rows[0]}
    if args.json:
        print(json.dumps({"savepoint": str(args.savepoint), "repeat": args.repeat, "overlap": result}))
        return
    print(f"{args.savepoint} ({args.repeat} fresh runs, median; load {os.getloadavg()[0]:.1f} at the end)")
    labels = {
        "before_start": "process start to Spark's start (imports, open)",
        "driver_meanwhile": "the driver's own work meanwhile (gate, plan)",
        "start": "Spark's start (JVM, context, workers)",
        "spark_adds": "of which the run waits for",
        "wall": "whole run",
    }
    print("| phase | wall s |")
    print("|---|---:|")
    for key, label in labels.items():
        print(f"| {label} | {result[key]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--savepoint", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--breakdown", action="store_true", help="split a bare session's start")
    parser.add_argument("--overlap", action="store_true", help="how much of the start a kg rescale waits for")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    become_subreaper()
    if args.breakdown:
        breakdown(args)
        return
    if args.overlap:
        overlap(args)
        return
    runs = ["local", "spark", *(["spark-before"] if args.before else [])]
    walls: dict[str, list[float]] = {run: [] for run in runs}
    cpus: dict[str, list[float]] = {run: [] for run in runs}
    _once("spark", args.savepoint, None)  # untimed: Spark's class archive and the compile caches
    if args.before:
        _once("spark-before", args.savepoint, args.before)
    for _ in range(args.repeat):
        for run in runs:
            wall, cpu = _once(run, args.savepoint, args.before)
            walls[run].append(wall)
            cpus[run].append(cpu)
    base = statistics.median(walls["local"])
    result = {
        run: {
            "min": round(min(times), 2),
            "median": round(statistics.median(times), 2),
            "ratio_to_local": round(statistics.median(times) / base, 1),
            "cpu_median": round(statistics.median(cpus[run]), 2),
        }
        for run, times in walls.items()
    }
    if args.json:
        print(json.dumps({"savepoint": str(args.savepoint), "repeat": args.repeat, "runs": result}))
        return
    print(f"{args.savepoint} ({args.repeat} repetitions, load {os.getloadavg()[0]:.1f} at the end)")
    print("| run | wall min / median | ratio to local (median) | CPU s (median) |")
    print("|---|---:|---:|---:|")
    for run, row in result.items():
        print(
            f"| {run} | {row['min']:.2f} / {row['median']:.2f} s | {row['ratio_to_local']}x "
            f"| {row['cpu_median']:.2f} |"
        )


if __name__ == "__main__":
    main()
