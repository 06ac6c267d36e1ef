"""Benchmark: a fresh `kg rescale --engine spark` of a small savepoint against the local engine (#22).

On a small savepoint the Spark engine's cost is its fixed cost: starting the JVM and the SparkContext, the
Python workers' daemon, the worker probe, and each Spark job's scheduling. This script runs, in fresh
processes, ``--repeat`` times interleaved:

- **local**: ``python -m keygroup_cli rescale SAVEPOINT --to 4 -m 1024 --engine local``;
- **spark**: the same with ``--engine spark`` (embedded ``local[*]``);
- with ``--before DIR``, **spark-before**: the same with the ``keygroup_cli`` package of DIR first on
  ``PYTHONPATH`` (an earlier commit: ``git archive COMMIT keygroup_cli | tar -x -C DIR``).

Reported per run: min / median wall of the whole process, and the ratio of the medians to **local**. No
assertion on timings: the figures go to docs/performance.md.

Usage: python benchmarks/spark_start.py [--savepoint DIR] [--repeat 3] [--before DIR] [--json]
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


def _once(run: str, savepoint: Path, before: Path | None) -> float:
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
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, cwd=work, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--savepoint", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = ["local", "spark", *(["spark-before"] if args.before else [])]
    walls: dict[str, list[float]] = {run: [] for run in runs}
    _once("spark", args.savepoint, None)  # untimed: Spark's class archive and the compile caches
    for _ in range(args.repeat):
        for run in runs:
            walls[run].append(_once(run, args.savepoint, args.before))
    base = statistics.median(walls["local"])
    result = {
        run: {
            "min": round(min(times), 2),
            "median": round(statistics.median(times), 2),
            "ratio_to_local": round(statistics.median(times) / base, 1),
        }
        for run, times in walls.items()
    }
    if args.json:
        print(json.dumps({"savepoint": str(args.savepoint), "repeat": args.repeat, "runs": result}))
        return
    print(f"{args.savepoint} ({args.repeat} repetitions, load {os.getloadavg()[0]:.1f} at the end)")
    print("| run | wall min / median | ratio to local (median) |")
    print("|---|---:|---:|")
    for run, row in result.items():
        print(f"| {run} | {row['min']:.2f} / {row['median']:.2f} s | {row['ratio_to_local']}x |")


if __name__ == "__main__":
    main()
