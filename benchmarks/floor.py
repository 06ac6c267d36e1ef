"""Benchmark: kg's local savepoint rescale against the fsync'd raw floor of the same bytes (issue #22).

One run on one machine, each measurement in a fresh interpreter, ``--repeat`` times interleaved:

- **floor**: read every file of the savepoint (``_metadata`` too) and write the same bytes into a new
  directory, 8 MiB buffers, fsyncing each file (kg's commit fsyncs everything it stages);
- **spill floor**: the floor of a route that spills the state once, as the byte re-key does: read every
  file into one spill file, read the spill back into the new files, fsyncing each, and remove the spill
  (what such a route costs before it computes anything; its MB per CPU s bounds the re-key's);
- **rekey**: ``rescale(SAVEPOINT, DEST, 4, new_max_parallelism=1024, engine="local")``: 3 -> 4 and
  maxParallelism 128 -> 1024, every key re-hashed (the byte-level re-key route);
- **copy**: ``rescale(SAVEPOINT, DEST, 4, engine="local")``: maxParallelism kept, key-group blocks copied
  as bytes and checked in the same pass;
- with ``--engines local spark`` also **spark-rekey**: the re-key on an embedded Spark ``local[*]``;
- with ``--native``, **rekey-native** and **copy-native**: the same with kg's numba kernels (``KG_NATIVE=1``,
  the ``[native]`` extra; **rekey** and **copy** then run with ``KG_NATIVE=0``, the pure-Python reference;
  ``--kernels-only`` leaves those two out).
  The kernels' compile cache is warmed by one untimed run first: each timed run pays the import of numba
  and the load of the cached kernels, as every kg process does;
- with ``--workers N [N ...]``, every kg run once per number of worker threads (``KG_WORKERS``; the
  local engine's re-key and the key-group copy use them), named ``run/wN``; without it kg's default;
- every kg run sets up its process as the ``kg`` command does (``keygroup_cli.core.allocator``) and then calls
  the API;
- with ``--before DIR``, **rekey** and **copy** again with the ``keygroup_cli`` package of DIR (an
  earlier commit, e.g. ``git archive main keygroup_cli | tar -x -C DIR``) imported instead of the installed
  one (each result names the package it ran): before and after, in the same run.

The savepoint is the 2M-key ``kg.fixtures.BenchSavepointGen`` one of benchmarks/pipeline.py (String keys,
p=3, maxParallelism 128, about 206 MB), generated with Flink into ``--work`` (cached there as
``savepoint-<keys>``; keep it outside the repository, e.g. /work/bench-cache) or given with ``--savepoint``.
Reported per run: min / median wall (the ``rescale`` call or the floor's loop, timed inside the child), the
median's ratio to the floor's median, MB/s (bytes of the savepoint / wall), per core (MB/s divided by the
cores the child used: its CPU time / wall), the child's CPU seconds (less sensitive than wall to other load on
a shared machine) and its peak RSS (``VmHWM``). No assertion on timings:
the figures go to docs/performance.md.

Usage: nice -n 5 python benchmarks/floor.py --work /work/bench-cache [--keys 2000000] [--savepoint DIR]
    [--repeat 3] [--engines local [spark]] [--native [--kernels-only]] [--workers 1 2] [--before DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))

import pipeline  # noqa: E402
import savepoint_rescale as sr  # noqa: E402

BUFFER = 8 << 20
#: Set in a child that imports the earlier package (``--before``).
BEFORE_ENV = "KG_BENCH_BEFORE"
TITLES = {
    "floor": "fsync'd raw floor: read + write + fsync every file",
    "spill-floor": "spill floor: read, spill, read back, write + fsync, remove the spill",
    "rekey": "local, 3->4, maxP 128->1024 (re-key)",
    "copy": "local, 3->4, maxP kept (key groups copied)",
    "spark-rekey": "spark local[*], 3->4, maxP 128->1024",
    "rekey-native": "native kernels: local, 3->4, maxP 128->1024 (re-key)",
    "copy-native": "native kernels: local, 3->4, maxP kept (key groups copied)",
    "rekey-before": "before: local, 3->4, maxP 128->1024",
    "copy-before": "before: local, 3->4, maxP kept",
}


def fsync_floor(source: Path, dest: Path) -> int:
    """Copy every file of ``source`` under ``dest``, fsyncing each; return the bytes."""
    total = 0
    dest.mkdir(parents=True)
    buf = bytearray(BUFFER)
    view = memoryview(buf)
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb", buffering=0) as src, open(target, "wb", buffering=0) as out:
            while n := src.readinto(buf):
                out.write(view[:n])
                total += n
            os.fsync(out.fileno())
    return total


def spill_floor(source: Path, dest: Path) -> int:
    """Copy every file of ``source`` under ``dest`` by way of one spill file; return the bytes."""
    dest.mkdir(parents=True)
    spill = dest / ".spill"
    buf = bytearray(BUFFER)
    view = memoryview(buf)
    files = [p for p in sorted(source.rglob("*")) if p.is_file()]
    with open(spill, "wb", buffering=0) as out:
        for path in files:
            with open(path, "rb", buffering=0) as src:
                while n := src.readinto(buf):
                    out.write(view[:n])
    total = 0
    with open(spill, "rb", buffering=0) as back:
        for path in files:
            target = dest / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            left = path.stat().st_size
            with open(target, "wb", buffering=0) as out:
                while left and (n := back.readinto(view[: min(left, BUFFER)])):
                    out.write(view[:n])
                    left -= n
                    total += n
                os.fsync(out.fileno())
    spill.unlink()
    return total


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _use_package(root: str) -> None:
    """Import ``keygroup_cli`` from ``root``: first on ``sys.path``, and no editable install's finder."""
    assert "keygroup_cli" not in sys.modules
    sys.path.insert(0, root)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]


def _as_the_cli_does() -> None:
    """Set up the process as ``kg`` does before it runs a command (the allocator's thresholds)."""
    import importlib.util

    if importlib.util.find_spec("keygroup_cli.core.allocator") is not None:  # an earlier package may lack it
        from keygroup_cli.core.allocator import keep_freed_memory

        keep_freed_memory()


def child_main(args: list[str]) -> None:
    if os.environ.get(BEFORE_ENV):
        _use_package(os.environ[BEFORE_ENV])
    kind, source, dest = args[0], Path(args[1]), Path(args[2])
    cpu = _cpu_s()
    if kind in ("floor", "spill-floor"):
        start = time.perf_counter()
        copied = (fsync_floor if kind == "floor" else spill_floor)(source, dest)
        result: dict[str, Any] = {"wall_s": time.perf_counter() - start, "bytes_copied": copied}
    else:
        engine, max_p = args[3], int(args[4])
        _as_the_cli_does()
        with pipeline.JvmPeak() as jvm:
            result = sr.child_kg("direct", engine, source, dest, max_p or None)
        result["jvm_peak_rss_mib"] = jvm.peak
        import keygroup_cli

        result["package"] = str(Path(keygroup_cli.__file__).parent)
    result["cpu_s"] = _cpu_s() - cpu
    result["peak_rss_mib"] = sr.peak_rss_mib()
    print(json.dumps(result))


def run_child(
    run: str, source: Path, dest: Path, before: Path | None, native: bool = False
) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (with ``before``'s package first for ``*-before``).

    With ``native`` (a ``--native`` run) kg's kernels are on in ``*-native`` runs and off in the others.
    """
    env = dict(os.environ)
    env.pop(BEFORE_ENV, None)
    run, _, workers = run.partition("/w")
    if workers:
        env["KG_WORKERS"] = workers
    # An installed kg runs from compiled bytecode; with PYTHONDONTWRITEBYTECODE set (as in some shells and
    # CI images) every child would compile kg's modules from source again, about 0.5 s of each kg run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if native:
        env["KG_NATIVE"] = "1" if run.endswith("-native") else "0"
    if run.endswith("-before") and before is not None:
        env[BEFORE_ENV] = str(before.resolve())
    if run in ("floor", "spill-floor"):
        args = [run, str(source), str(dest)]
    else:
        engine = "spark" if run.startswith("spark") else "local"
        max_p = sr.NEW_MAX_P if "rekey" in run else 0
        args = ["kg", str(source), str(dest), engine, str(max_p)]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(f"{run} failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = time.perf_counter() - start
    return result


def summarise(results: dict[str, list[dict[str, Any]]], size: int) -> dict[str, dict[str, Any]]:
    floor = statistics.median(r["wall_s"] for r in results["floor"])
    floor_min = min(r["wall_s"] for r in results["floor"])
    out = {}
    for run, rs in results.items():
        walls = [r["wall_s"] for r in rs]
        med = statistics.median(walls)
        cores = statistics.median(r["cpu_s"] / r["wall_s"] for r in rs)
        out[run] = {
            "min_s": min(walls),
            "median_s": med,
            "ratio": med / floor,
            "min_ratio": min(walls) / floor_min,
            "mb_per_s": size / 1e6 / med,
            "mb_per_s_per_core": size / 1e6 / med / max(cores, 1.0),
            "cores_used": cores,
            "median_cpu_s": statistics.median(r["cpu_s"] for r in rs),
            # Throughput per CPU second: what a core would do alone, less disturbed by load than MB/s.
            "mb_per_cpu_s": size / 1e6 / statistics.median(r["cpu_s"] for r in rs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
            "jvm_peak_rss_mib": max((r.get("jvm_peak_rss_mib") or 0 for r in rs), default=0) or None,
        }
    return out


def table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| run | wall min / median | ratio to floor (min / median) | MB/s | MB/s per core | CPU s (median) "
        "| MB per CPU s | peak RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run, s in summary.items():
        jvm = f" (JVM {s['jvm_peak_rss_mib']:.0f})" if s["jvm_peak_rss_mib"] else ""
        base, _, workers = run.partition("/w")
        title = TITLES[base] + (f", {workers} worker{'s' if workers != '1' else ''}" if workers else "")
        lines.append(
            f"| {title} | {s['min_s']:.2f} / {s['median_s']:.2f} s | "
            f"{s['min_ratio']:.2f}x / {s['ratio']:.2f}x | "
            f"{s['mb_per_s']:.0f} | {s['mb_per_s_per_core']:.0f} | {s['median_cpu_s']:.1f} | "
            f"{s['mb_per_cpu_s']:.0f} | "
            f"{s['peak_rss_mib']:.0f} MiB{jvm} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument(
        "--savepoint", type=Path, help="Reuse this BenchSavepointGen savepoint (p=3, maxP=128)."
    )
    parser.add_argument("--work", type=Path, help="Cache the savepoint and write outputs here.")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engines", nargs="+", choices=("local", "spark"), default=["local"])
    parser.add_argument("--before", type=Path, help="A directory holding an earlier keygroup_cli package.")
    parser.add_argument(
        "--native", action="store_true", help="Also run with the native kernels (KG_NATIVE=1)."
    )
    parser.add_argument(
        "--workers", type=int, nargs="+", help="Run every kg run once per number of worker threads."
    )
    parser.add_argument(
        "--kernels-only",
        action="store_true",
        help="With --native: leave out the pure-Python runs (rekey, copy), e.g. to repeat the others more.",
    )
    parser.add_argument("--json", action="store_true", help="Print the figures as one JSON document.")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="kg-floor-"))
    work.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    source = args.savepoint or pipeline.savepoint_for(args.keys, work, log)[0]
    size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
    runs = ["floor", "spill-floor", "rekey", "copy"]
    if "spark" in args.engines:
        runs.append("spark-rekey")
    if args.before is not None:
        runs += ["rekey-before", "copy-before"]
    if args.native:
        if args.kernels_only:
            runs = [run for run in runs if run not in ("rekey", "copy")]
        runs += ["rekey-native", "copy-native"]
        log("warming the native kernels' compile cache (one untimed re-key) ...")
        warm = work / "out-warm"
        shutil.rmtree(warm, ignore_errors=True)
        run_child("rekey-native", source, warm, None, native=True)
        shutil.rmtree(warm, ignore_errors=True)
    if args.workers:
        runs = [run if "floor" in run else f"{run}/w{n}" for run in runs for n in args.workers]
        runs = list(dict.fromkeys(runs))
    results: dict[str, list[dict[str, Any]]] = {run: [] for run in runs}
    for i in range(args.repeat):
        for run in runs:
            dest = work / f"out-{run.replace('/', '-')}"
            shutil.rmtree(dest, ignore_errors=True)
            log(f"[{i + 1}/{args.repeat}] {run} (load {os.getloadavg()[0]:.1f}) ...")
            r = run_child(run, source, dest, args.before, native=args.native)
            r["load_average_after"] = os.getloadavg()
            log(f"  {r['wall_s']:.2f} s, peak RSS {r['peak_rss_mib']:.0f} MiB")
            results[run].append(r)
            shutil.rmtree(dest, ignore_errors=True)
    summary = summarise(results, size)
    figures = {
        "savepoint": {"path": str(source), "bytes": size, "keys": args.keys},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "native": args.native,
        "git": pipeline.git_state(),
        "summary": summary,
        "runs": results,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"savepoint: {args.keys / 1e6:g}M keys, {size / 1e6:.0f} MB; {args.repeat} repetitions")
    print(table(summary))
    print(load_line(results))


def load_line(results: dict[str, list[dict[str, Any]]]) -> str:
    """Return the range of the 1-minute load average after each run (the machine may be shared)."""
    loads = [r["load_average_after"][0] for rs in results.values() for r in rs]
    return f"1-minute load average after each run: {min(loads):.1f}-{max(loads):.1f} ({os.cpu_count()} CPUs)"


if __name__ == "__main__":
    main()
