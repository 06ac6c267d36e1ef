"""Benchmark: the savepoint rescale pipeline (maxParallelism change) against a raw I/O floor (issue #11).

For each savepoint size (``--keys``, default 2,000,000; a list runs several sizes in one run) this script

1. generates a canonical savepoint with Flink itself (``kg.fixtures.BenchSavepointGen``, fixtures/java, the
   same job as benchmarks/savepoint_rescale.py: parallelism 3, maxParallelism 128, HashMap backend), cached
   under ``--work DIR`` as ``savepoint-<keys>`` so a later run reuses it; or takes ``--savepoint DIR``;
2. times, each in a fresh interpreter, ``--repeat`` times (default 3), one repetition after the other:
   - **floor**: read every state file of the savepoint (every file but ``_metadata``) and write the same
     bytes once into a new directory, plain Python file I/O with 8 MiB buffers, no fsync;
   - **local**: ``rescale(SAVEPOINT, DEST, 4, new_max_parallelism=1024, engine="local")``
     (3 -> 4, maxParallelism 128 -> 1024: every entry decoded, re-hashed and re-encoded);
   - **spark**: the same with ``engine="spark"`` (an embedded ``local[*]`` session); its wall excludes
     nothing: the session start (JVM launch) is inside the ``rescale`` call and inside the figure;
   - **copy**: ``rescale(SAVEPOINT, DEST, 4, engine="local")`` with maxParallelism kept (key-group blocks
     copied as bytes), for reference;
3. reports min / median wall (the ``rescale`` call, or the floor's copy loop, timed inside the child; the
   child's process wall, interpreter start and imports included, is in the JSON), the median's ratio to the
   floor's median and the range of per-repetition ratios (each against the floor of the same repetition),
   MB/s (bytes of the whole savepoint directory / wall), and peak RSS: ``VmHWM`` of the child (the Python
   driver) and, for Spark, of the driver's JVM (polled from /proc every 0.2 s while the child runs: its
   ``VmHWM`` only grows, so the last reading is the peak up to 0.2 s before the JVM exits).

With several sizes, a second table puts the driver peak RSS of each size side by side: the target is that
it does not grow with the state. ``--profile DIR`` also profiles one local maxParallelism change with
cProfile (through benchmarks/savepoint_rescale.py's child) and prints the top cumulative functions.
Ratios come from the same run on the same machine; the load average is printed with them. No assertion on
timings: the figures go to docs/performance.md.

``--repeat 3 1`` with ``--keys 2000000 10000000`` repeats the first size 3 times and the second once.

Usage: nice -n 5 python benchmarks/pipeline.py [--keys 2000000 [10000000 ...]] [--savepoint DIR]
    [--work DIR] [--repeat 3 [1 ...]] [--engines local spark] [--no-copy] [--profile DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))

import savepoint_rescale as sr  # noqa: E402

BUFFER = 8 << 20
RUNS = ("floor", "local", "spark", "copy")
TITLES = {
    "floor": "raw floor: read + write every state file",
    "local": "local, 3->4, maxP 128->1024",
    "spark": "spark local[*], 3->4, maxP 128->1024",
    "copy": "local, 3->4, maxP kept (byte copy)",
}


# -- children (each measurement in a fresh interpreter: ``--child``) ----------------------------------------


def copy_floor(source: Path, dest: Path) -> int:
    """Copy every state file of ``source`` (all but ``_metadata``) under ``dest``; return the bytes."""
    total = 0
    dest.mkdir(parents=True)
    buf = bytearray(BUFFER)
    view = memoryview(buf)
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.name == "_metadata":
            continue
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb", buffering=0) as src, open(target, "wb", buffering=0) as out:
            while n := src.readinto(buf):
                out.write(view[:n])
                total += n
    return total


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _hwm_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class JvmPeak:
    """Poll this process's descendants that run java and keep the largest ``VmHWM`` seen (MiB)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.peak: float | None = None
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> JvmPeak:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._poll()
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        todo = _children(os.getpid())
        while todo:
            pid = todo.pop()
            todo.extend(_children(pid))
            try:
                exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
            except OSError:
                continue
            if exe == "java":
                hwm = _hwm_mib(pid)
                if hwm is not None and (self.peak is None or hwm > self.peak):
                    self.peak = hwm

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._poll()


def child_main(args: list[str]) -> None:
    kind, source, dest = args[0], Path(args[1]), Path(args[2])
    if kind == "floor":
        start = time.perf_counter()
        copied = copy_floor(source, dest)
        result: dict[str, Any] = {"wall_s": time.perf_counter() - start, "bytes_copied": copied}
    else:
        engine, max_p = args[3], int(args[4])
        with JvmPeak() as jvm:
            result = sr.child_kg("direct", engine, source, dest, max_p or None)
        result["jvm_peak_rss_mib"] = jvm.peak
    result["peak_rss_mib"] = sr.peak_rss_mib()
    print(json.dumps(result))


def run_child(*args: str) -> dict[str, Any]:
    """Run one measurement of this script in a fresh interpreter (``savepoint_rescale.run_child``)."""
    return sr.run_child(*args, script=__file__)


# -- one size -----------------------------------------------------------------------------------------------


def savepoint_for(
    keys: int, work: Path, log: Callable[[str], None], backend: str = "hashmap"
) -> tuple[Path, dict[str, Any] | None]:
    """Return the cached ``work/savepoint-<keys>``, generating it with Flink first if missing.

    ``backend="rocksdb"`` (cached as ``savepoint-<keys>-rocksdb``) makes the job keep its state in RocksDB
    instead of the heap, so savepoints of several GB need no larger heap: the savepoint is the same canonical
    format (the three states, the same keys and values; the entries of a key group in RocksDB's byte order).
    """
    suffix = "" if backend == "hashmap" else f"-{backend}"
    path = work / f"savepoint-{keys}{suffix}"
    if path.exists():
        return path, None
    partial = work / f"savepoint-{keys}{suffix}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    log(f"generating a {keys}-key savepoint with Flink ({backend}) into {path} ...")
    summary, wall, peak = sr.java(
        sr.classpath(),
        "BenchSavepointGen",
        str(partial),
        "--keys",
        str(keys),
        "--payload-bytes",
        "24",
        "--backend",
        backend,
        "--status-timeout",
        "900",
    )
    partial.rename(path)
    return path, {"wall_s": wall, "java_peak_rss_mib": peak, **summary}


def measure(
    source: Path, work: Path, runs: list[str], repeat: int, log: Callable[[str], None]
) -> dict[str, list[dict[str, Any]]]:
    """Time every run ``repeat`` times, interleaved (floor, local, spark, copy; floor, ...)."""
    results: dict[str, list[dict[str, Any]]] = {run: [] for run in runs}
    for i in range(repeat):
        for run in runs:
            dest = work / f"out-{run}"
            shutil.rmtree(dest, ignore_errors=True)
            log(f"  [{i + 1}/{repeat}] {run} (load {os.getloadavg()[0]:.1f}) ...")
            if run == "floor":
                r = run_child("floor", str(source), str(dest))
            else:
                engine = "spark" if run == "spark" else "local"
                max_p = sr.NEW_MAX_P if run in ("local", "spark") else 0
                r = run_child("kg", str(source), str(dest), engine, str(max_p))
            r["load_average_after"] = os.getloadavg()
            jvm = f", JVM {r['jvm_peak_rss_mib']:.0f} MiB" if r.get("jvm_peak_rss_mib") else ""
            log(f"    {r['wall_s']:.2f} s, driver peak RSS {r['peak_rss_mib']:.0f} MiB{jvm}")
            results[run].append(r)
            shutil.rmtree(dest, ignore_errors=True)
    return results


def summarise(results: dict[str, list[dict[str, Any]]], size_bytes: int) -> dict[str, dict[str, Any]]:
    """Min / median wall, ratios to the floor (of the medians, and per repetition), MB/s, peak RSS."""
    floor = [r["wall_s"] for r in results.get("floor", [])]
    out: dict[str, dict[str, Any]] = {}
    for run, rs in results.items():
        walls = [r["wall_s"] for r in rs]
        med = statistics.median(walls)
        s: dict[str, Any] = {
            "min_s": min(walls),
            "median_s": med,
            "max_s": max(walls),
            "mb_per_s": size_bytes / 1e6 / med,
            "driver_rss_mib": [r["peak_rss_mib"] for r in rs],
            "jvm_rss_mib": [r["jvm_peak_rss_mib"] for r in rs if r.get("jvm_peak_rss_mib")],
        }
        if floor:
            s["ratio_median"] = med / statistics.median(floor)
            per_rep = [w / f for w, f in zip(walls, floor, strict=False)]
            s["ratio_min"], s["ratio_max"] = min(per_rep), max(per_rep)
        out[run] = s
    return out


def _span(values: list[float], fmt: str = "{:.0f}") -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def table(sizes: list[dict[str, Any]]) -> str:
    """Markdown table: one row per (savepoint, run)."""
    lines = [
        "| savepoint | run | wall min / median | ratio to floor: median (per rep.) | MB/s | "
        "driver peak RSS | JVM peak RSS |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        label = f"{size['keys'] / 1e6:g}M keys, {size['bytes'] / 1e6:.0f} MB, {size['repeat']} rep."
        for run, s in size["summary"].items():
            ratio = "-"
            if run == "floor":
                ratio = "1"
            elif "ratio_median" in s:
                ratio = f"{s['ratio_median']:.1f}x ({s['ratio_min']:.1f}-{s['ratio_max']:.1f})"
            jvm = f"{_span(s['jvm_rss_mib'])} MiB" if s["jvm_rss_mib"] else "-"
            lines.append(
                f"| {label} | {TITLES[run]} | {s['min_s']:.2f} / {s['median_s']:.2f} s | {ratio} | "
                f"{s['mb_per_s']:.0f} | {_span(s['driver_rss_mib'])} MiB | {jvm} |"
            )
    return "\n".join(lines)


def rss_table(sizes: list[dict[str, Any]]) -> str:
    """Driver peak RSS (MiB, max over repetitions) per run, the sizes side by side."""
    head = " | ".join(f"{s['keys'] / 1e6:g}M keys ({s['bytes'] / 1e6:.0f} MB)" for s in sizes)
    lines = [f"| driver peak RSS | {head} |", "|---|" + "---:|" * len(sizes)]
    for run in sizes[0]["summary"]:
        cells = []
        for s in sizes:
            summ = s["summary"].get(run)
            cell = f"{max(summ['driver_rss_mib']):.0f} MiB" if summ else "-"
            if summ and summ["jvm_rss_mib"]:
                cell += f" (JVM {max(summ['jvm_rss_mib']):.0f})"
            cells.append(cell)
        lines.append(f"| {TITLES[run]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def profile_top(source: Path, work: Path, out_dir: Path, top: int = 10) -> str:
    """Profile a local maxParallelism change (savepoint_rescale.py's profile child); return the top."""
    import io
    import pstats

    out_dir.mkdir(parents=True, exist_ok=True)
    stats = out_dir / f"pipeline-local-maxp{sr.NEW_MAX_P}.pstats"
    dest = work / "out-profile"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        sr.run_child("profile", str(source), str(dest), str(stats), str(sr.NEW_MAX_P))
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    text = io.StringIO()
    pstats.Stats(str(stats), stream=text).sort_stats("cumulative").print_stats(top)
    text.write("\n")
    pstats.Stats(str(stats), stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def git_state() -> dict[str, Any]:
    """The commit measured and the files of keygroup_cli/ that differ from it (a shared checkout)."""

    def git(*cmd: str) -> str:
        proc = subprocess.run(["git", *cmd], cwd=sr.ROOT, capture_output=True, text=True, check=False)
        return proc.stdout.rstrip("\n")

    dirty = [line[3:] for line in git("status", "--porcelain", "--", "keygroup_cli").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD"), "keygroup_cli_uncommitted": dirty}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[2_000_000])
    parser.add_argument(
        "--savepoint", type=Path, help="Reuse this BenchSavepointGen savepoint (p=3, maxP=128; one --keys)."
    )
    parser.add_argument("--work", type=Path, help="Cache savepoints and write outputs here (kept).")
    parser.add_argument(
        "--repeat",
        type=int,
        nargs="+",
        default=[3],
        help="Repetitions per size, in --keys order; the last value holds for the remaining sizes.",
    )
    parser.add_argument("--engines", nargs="+", choices=("local", "spark"), default=["local", "spark"])
    parser.add_argument("--no-copy", action="store_true", help="Skip the same-maxParallelism byte copy.")
    parser.add_argument("--profile", type=Path, help="Also profile a local run; write pstats files here.")
    parser.add_argument("--json", action="store_true", help="Print the figures as one JSON document.")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return
    if args.savepoint and len(args.keys) != 1:
        parser.error("--savepoint takes one --keys value (the savepoint's key count)")
    work = args.work or Path(tempfile.mkdtemp(prefix="kg-bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:  # progress on stderr, in JSON mode too (stdout stays one document)
        print(message, file=sys.stderr, flush=True)

    runs = ["floor", *args.engines, *([] if args.no_copy else ["copy"])]
    figures: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_start": os.getloadavg(),
        },
        "git": git_state(),
        "sizes": [],
    }
    try:
        for i, keys in enumerate(args.keys):
            repeat = args.repeat[min(i, len(args.repeat) - 1)]
            if args.savepoint:
                source, generation = args.savepoint, None
            else:
                source, generation = savepoint_for(keys, work, log)
            size_bytes = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
            log(f"savepoint {source}: {keys} keys, {size_bytes / 1e6:.1f} MB")
            results = measure(source, work, runs, repeat, log)
            size: dict[str, Any] = {
                "keys": keys,
                "bytes": size_bytes,
                "repeat": repeat,
                "savepoint": str(source),
                "generation": generation,
                "runs": results,
                "summary": summarise(results, size_bytes),
            }
            if args.profile:
                log("  profiling local (maxP 128->1024) ...")
                size["profile"] = profile_top(source, work, args.profile)
            figures["sizes"].append(size)
        figures["machine"]["load_average_end"] = os.getloadavg()
        figures["table"] = table(figures["sizes"])
        figures["rss_table"] = rss_table(figures["sizes"])
        if args.json:
            print(json.dumps(figures, indent=2))
        else:
            m = figures["machine"]
            print(
                f"{m['cpus']} CPUs, {m['platform']}, Python {m['python']}; load average "
                f"{'/'.join(f'{x:.1f}' for x in m['load_average_start'])} at start, "
                f"{'/'.join(f'{x:.1f}' for x in m['load_average_end'])} at end"
            )
            g = figures["git"]
            dirty = ", ".join(g["keygroup_cli_uncommitted"]) or "none"
            print(f"commit {g['commit']}; uncommitted changes in keygroup_cli/: {dirty}")
            print()
            print(figures["table"])
            print()
            print(figures["rss_table"])
            for size in figures["sizes"]:
                if "profile" in size:
                    print(f"\ncProfile, local, {size['keys']} keys:\n{size['profile']}")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
