"""Benchmark: CPU per byte of the Spark engine against the local engine, past the fixed start (issue #39).

For one input at two sizes (BenchSavepointGen savepoints of ``--keys`` keys, default 1,000,000 and
2,000,000, generated with Flink into ``--work`` by ``benchmarks/pipeline.py``'s ``savepoint_for`` and cached
there), this script runs, each in a fresh process, one after the other:

- ``kg rescale SP --to 4 -m 1024 --out DEST`` (**re-key**: maxParallelism 128 -> 1024, every entry
  decoded, re-hashed, shuffled and re-encoded) and ``kg rescale SP --to 4 --out DEST`` (**copy**: the same
  maxParallelism, key-group blocks copied as bytes); ``--modes`` also takes ``native-rekey`` and
  ``native-copy`` (the same with ``--format native``: RocksDB databases, needs the [rocksdb] extra);
- with each engine of ``--engines``: ``local``, ``spark`` (``--engine spark``, embedded ``local[*]``), or
  ``spark-shuffle`` / ``spark-shared`` (Spark with ``--conf spark.kg.exchange=shuffle|shared``: the parts
  exchanged through Spark's shuffle, or through spill files in a directory every executor reaches).

Reported per run: wall of the process, and **CPU seconds summed over the whole process tree** (the kg
process, the JVM, Spark's Python daemon and workers): each descendant's own user + system time read from
``/proc`` every 50 ms, its last reading counting (``TreeCpu``; ``getrusage(RUSAGE_CHILDREN)`` cannot be
used alone: pyspark's daemon ignores ``SIGCHLD``, so its workers' times are discarded by the kernel; the
JSON has that figure too, as ``cpu_reaped_s``). This script makes itself a child subreaper
(``prctl(PR_SET_CHILD_SUBREAPER)``), so a process that outlives its parent (the JVM) stays in the tree it
watches, and waits for every descendant to exit before a run ends. Then, per engine and mode, the
**slope** between the two sizes: CPU seconds per 100 MB of savepoint past the fixed cost
(``(cpu_large - cpu_small) / (MB_large - MB_small)``), MB per CPU-second, and its ratio to the local
engine's. The fixed cost is the intercept of the same line. Every figure comes from one run; no assertion
on timings.

Usage: python benchmarks/engine_cost.py [--keys 1000000 2000000] [--work DIR]
    [--engines local spark] [--modes rekey copy [native-rekey native-copy]] [--repeat 1] [--kg DIR]
    [--native 0|1] [--json] [--table SAVED.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
sys.path.insert(0, str(BENCHMARKS))

import pipeline  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
MODES = {
    "rekey": ["-m", "1024"],
    "copy": [],
    "native-rekey": ["-m", "1024", "--format", "native"],
    "native-copy": ["--format", "native"],
}
EXCHANGES = {"spark-shuffle": "shuffle", "spark-shared": "shared"}


def become_subreaper() -> None:
    """Make orphaned descendants (a JVM whose kg exited first) this process's children, to reap and count."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reap_all(deadline_s: float = 60.0) -> None:
    """Wait for every remaining descendant (re-parented here) to exit, so its CPU counts."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > end:
                raise SystemExit("descendants of a kg run did not exit within a minute")
            time.sleep(0.05)


class TreeCpu:
    """Poll the CPU of every descendant of this process from ``/proc`` (own user + system time of each).

    ``getrusage(RUSAGE_CHILDREN)`` misses Spark's Python workers: pyspark's daemon ignores ``SIGCHLD``, so
    its exited workers are reaped by the kernel and their times are discarded. Here each descendant's own
    ``utime + stime`` (``/proc/PID/stat``) is read every ``interval`` seconds, and the last reading of each
    process (by pid and start time) counts: a process's time after its last reading (at most ``interval``
    of it) is missed, and the times of a process are never counted twice.
    """

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.seen: dict[tuple[int, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> TreeCpu:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def total(self) -> float:
        return sum(self.seen.values())

    def _poll(self) -> None:
        me = os.getpid()
        while True:
            self._sample(me)
            if self._stop.wait(self.interval):
                self._sample(me)
                return

    def _sample(self, me: int) -> None:
        stats: dict[int, tuple[int, int, float]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            fields = raw[raw.rindex(b")") + 2 :].split()
            # After the name: state, ppid (fields 3, 4); utime, stime (14, 15); starttime (22).
            cpu = (int(fields[11]) + int(fields[12])) / self.TICK
            stats[int(entry.name)] = (int(fields[1]), int(fields[19]), cpu)
        children: dict[int, list[int]] = {}
        for pid, (ppid, _start, _cpu) in stats.items():
            children.setdefault(ppid, []).append(pid)
        todo = list(children.get(me, ()))
        while todo:
            pid = todo.pop()
            _ppid, start, cpu = stats[pid]
            self.seen[(pid, start)] = cpu
            todo.extend(children.get(pid, ()))


def run_kg(
    engine: str, mode: str, source: Path, dest: Path, kg_root: Path = ROOT, native: str | None = None
) -> dict[str, Any]:
    """Run one ``kg rescale`` in a fresh process; return its wall, tree CPU and kg's JSON summary."""
    shutil.rmtree(dest, ignore_errors=True)
    command = [sys.executable, "-m", "keygroup_cli", "rescale", str(source), "--to", "4", *MODES[mode]]
    command += ["--out", str(dest), "--json", "-q"]
    if engine in EXCHANGES:
        command += ["--engine", "spark", "--conf", f"spark.kg.exchange={EXCHANGES[engine]}"]
    else:
        command += ["--engine", engine]
    env = {k: v for k, v in os.environ.items() if k not in ("KG_ENGINE", "KG_MASTER", "KG_WORKERS")}
    env["PYTHONPATH"] = str(kg_root)
    if native is not None:
        env["KG_NATIVE"] = native  # the Spark workers inherit it
    _reap_all()
    before = _cpu_children()
    with TreeCpu() as tree:
        start = time.perf_counter()
        # Not from kg's checkout: ``python -m`` puts the working directory before PYTHONPATH.
        proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=dest.parent, check=False)
        wall = time.perf_counter() - start
        _reap_all()
    reaped = _cpu_children() - before
    shutil.rmtree(dest, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return {
        "wall_s": wall,
        "cpu_s": tree.total,
        "cpu_reaped_s": reaped,
        "processes": len(tree.seen),
        "engine_reported": summary.get("engine"),
    }


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def slope(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Return (CPU seconds per MB, intercept) of the line through the (MB, CPU) points (least squares)."""
    if len(points) < 2:
        return float("nan"), float("nan")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    per_mb = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return per_mb, my - per_mb * mx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 2_000_000])
    parser.add_argument("--work", type=Path, default=Path("/tmp/kg-engine-cost"))
    parser.add_argument("--engines", nargs="+", default=["local", "spark"])
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=["rekey", "copy"])
    parser.add_argument("--repeat", type=int, default=1, help="Runs of each case (the median counts).")
    parser.add_argument(
        "--kg", type=Path, default=ROOT, help="Where kg is imported from (e.g. a `git archive` of a commit)."
    )
    parser.add_argument(
        "--native", choices=["0", "1"], help="KG_NATIVE for kg and its workers (0: the numpy reference)."
    )
    parser.add_argument("--json", action="store_true", help="Print the runs and fits as one JSON document.")
    parser.add_argument("--table", type=Path, help="Print the table of a saved --json document and exit.")
    args = parser.parse_args()
    args.work, args.kg = args.work.resolve(), args.kg.resolve()
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    become_subreaper()
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for keys in args.keys:
        path, _generated = pipeline.savepoint_for(keys, args.work, log)
        sizes[keys] = (path, size_mb(path))
    runs: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        for keys, (path, mb) in sizes.items():
            for mode in args.modes:
                for engine in args.engines:
                    log(f"{engine} {mode} {keys} keys ({mb:.0f} MB), load {os.getloadavg()[0]:.1f} ...")
                    r = run_kg(engine, mode, path, args.work / "out", args.kg, args.native)
                    r.update(engine=engine, mode=mode, keys=keys, mb=mb, load=os.getloadavg()[0])
                    log(f"  wall {r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s")
                    runs.append(r)

    doc = {
        "runs": runs,
        "sizes": {str(k): mb for k, (_p, mb) in sizes.items()},
        "modes": args.modes,
        "engines": args.engines,
        "repeat": args.repeat,
        "native": args.native,
        "cpus": os.cpu_count(),
        "load_at_end": os.getloadavg()[0],
    }
    doc["fits"] = [{"engine": e, "mode": m, **f} for (e, m), f in fit_all(doc).items()]
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(table(doc))


def _values(doc: dict[str, Any], engine: str, mode: str, keys: int, what: str) -> list[float]:
    return [r[what] for r in doc["runs"] if (r["engine"], r["mode"], r["keys"]) == (engine, mode, keys)]


def fit_all(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, float]]:
    """Return, per (engine, mode), the slope and fixed CPU from the medians and from the minima."""
    fits: dict[tuple[str, str], dict[str, float]] = {}
    for mode in doc["modes"]:
        for engine in doc["engines"]:
            fit: dict[str, float] = {}
            for label, pick in (("median", statistics.median), ("min", min)):
                points = [
                    (mb, pick(_values(doc, engine, mode, int(k), "cpu_s"))) for k, mb in doc["sizes"].items()
                ]
                per_mb, fixed = slope(points)
                fit[f"cpu_s_per_100mb_{label}"] = 100 * per_mb
                fit[f"fixed_cpu_s_{label}"] = fixed
            fits[(engine, mode)] = fit
    return fits


def table(doc: dict[str, Any]) -> str:
    """Return the report of one run (``doc``, what ``--json`` prints) as an aligned table."""
    fits = fit_all(doc)
    kernels = {"0": "numpy reference", "1": "native kernels"}.get(doc["native"] or "", "KG_NATIVE unset")
    lines = [
        f"cores {doc['cpus']}, load at the end {doc['load_at_end']:.1f}, {doc['repeat']} run(s) each, "
        f"{kernels}; CPU: median (min); slope: CPU s per 100 MB past the fixed cost, from the medians "
        "(from the minima)"
    ]
    header = ["mode", "engine"]
    for keys, mb in doc["sizes"].items():
        header += [f"{int(keys) // 1000}k ({mb:.0f} MB) wall", "CPU s"]
    header += ["slope", "MB per CPU-s", "fixed CPU s", "slope vs local"]
    rows = [header]

    def pair(a: float, b: float, fmt: str = "{:.2f}") -> str:
        return f"{fmt.format(a)} ({fmt.format(b)})"

    for mode in doc["modes"]:
        base = fits.get(("local", mode))
        for engine in doc["engines"]:
            row = [mode, engine]
            for keys in doc["sizes"]:
                cpu = _values(doc, engine, mode, int(keys), "cpu_s")
                wall = statistics.median(_values(doc, engine, mode, int(keys), "wall_s"))
                row += [f"{wall:.2f}", pair(statistics.median(cpu), min(cpu))]
            f = fits[(engine, mode)]
            per, per_min = f["cpu_s_per_100mb_median"], f["cpu_s_per_100mb_min"]
            rate = [f"{100 / x:.0f}" if x > 0 else "-" for x in (per, per_min)]
            row += [
                pair(per, per_min),
                f"{rate[0]} ({rate[1]})",
                pair(f["fixed_cpu_s_median"], f["fixed_cpu_s_min"]),
                pair(per / base["cpu_s_per_100mb_median"], per_min / base["cpu_s_per_100mb_min"], "{:.2f}x")
                if base
                else "-",
            ]
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
