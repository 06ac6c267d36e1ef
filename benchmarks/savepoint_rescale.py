"""Benchmark: kg's offline savepoint rescale against real Flink's restore-time rescale (issue #5).

One run on one machine:

1. writes a canonical savepoint of a keyed job with Flink itself (``kg.fixtures.BenchSavepointGen``,
   fixtures/java): 2,000,000 String keys, HashMap backend, parallelism 3, maxParallelism 128, about 200 MB
   of keyed state (per key: ValueState<byte[24]>, ListState<Long> of 2, and for every 8th key a
   MapState<String, Long> of 3); not timed, or reuse one with ``--savepoint``;
2. times Flink restoring it (``kg.fixtures.BenchRestoreTimer``, in-process MiniCluster, same backend) at
   parallelism 3 (no rescale: the cost of the restore alone) and at 4 (Flink redistributes key groups
   while restoring: the comparison point). Reported: the java process wall (JVM + cluster start
   included), and in-JVM the time from job submission until every keyed subtask has restored and opened;
3. times kg rescaling the savepoint 3 -> 4, and 3 -> 4 with maxParallelism 128 -> 1024, for each engine,
   each in a fresh interpreter (wall, the phases seen through ``on_progress``, peak RSS = ``VmHWM``);
4. restores the kg-written savepoints in Flink (p=4; maxParallelism 128 and 1024) and checks that every key
   came back (the restore timer fails on a wrong count), timing them too.

kg's savepoint rescale is the direct path (``rescale(SAVEPOINT, DEST, 4, ...)``, what ``kg rescale SAVEPOINT
--to 4 --out DEST`` runs: key-group blocks copied as bytes when maxParallelism stays, decoded and re-encoded
when it changes), or with ``--mode emulated`` the steps spelled out: convert to a kg snapshot, rescale,
convert back. Ratios are kg wall / Flink wall from the same run.
No assertion on timings: the figures go to docs/performance.md.

Usage: flock /tmp/kg-bench.lock python benchmarks/savepoint_rescale.py [--keys 2000000] [--savepoint DIR]
    [--engines local spark] [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUILD_SH = ROOT / "fixtures" / "java" / "build.sh"
OLD_P, NEW_P, OLD_MAX_P, NEW_MAX_P = 3, 4, 128, 1024
# A TaskManager-like JVM: default (G1) collector and JIT; heap big enough for 2M keys on 4 heap backends.
JAVA_FLAGS = ("-Xmx6g",)


# -- Java ---------------------------------------------------------------------------------------------------


def _tool_env() -> dict[str, str]:
    # build.sh finds the Flink jars with `python3 -c "import pyflink"`: use this interpreter.
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def classpath() -> str:
    """Compile fixtures/java if needed and return the classpath."""
    proc = subprocess.run(
        ["bash", str(BUILD_SH)], capture_output=True, text=True, env=_tool_env(), check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"fixtures/java/build.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1]


def java(cp: str, main: str, *args: str) -> tuple[dict[str, Any], float, float]:
    """Run a kg.fixtures main class; return its JSON summary (last stdout line), wall and peak RSS (MiB).

    The peak is the child's own ``ru_maxrss`` from ``wait4`` (at least this small parent's RSS at fork).
    """
    cmd = ["java", *JAVA_FLAGS, "-cp", cp, f"kg.fixtures.{main}", *args]
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=_tool_env())
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        err.seek(0)
        stderr = err.read()
    lines = out.strip().splitlines()
    summary: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if proc.returncode != 0 or summary.get("error"):
        raise SystemExit(
            f"{main} {' '.join(args)} failed ({proc.returncode}): {summary.get('error')}\n{stderr[-4000:]}"
        )
    return summary, wall, usage.ru_maxrss / 1024


def flink_restore(cp: str, savepoint: Path, parallelism: int, keys: int) -> dict[str, Any]:
    """Time Flink restoring ``savepoint`` at ``parallelism``; fails unless all ``keys`` come back."""
    summary, wall, peak = java(
        cp, "BenchRestoreTimer", str(savepoint), "--parallelism", str(parallelism), "--keys", str(keys)
    )
    return {
        "wall_s": wall,
        "peak_rss_mib": peak,
        "restore_s": summary["submitToRestoredMs"] / 1000,
        "slowest_subtask_s": summary["maxSubtaskRestoreMs"] / 1000,
        "cluster_start_s": summary["clusterStartMs"] / 1000,
        "max_parallelism": summary["maxParallelism"],
        "keys": summary["keys"],
    }


# -- kg (each measurement in a fresh interpreter: ``--child``) ----------------------------------------------


def kg_mode() -> str:
    """Return "direct" when kg rescales savepoints itself, else "emulated" (convert, rescale, convert)."""
    try:
        from keygroup_cli.execution.routes import savepoint  # noqa: F401
    except ImportError:
        return "emulated"
    return "direct"


class Phases:
    """Time spent per ``on_progress`` stage (a stage lasts until the next one is first reported)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._stage: str | None = None
        self._since = time.perf_counter()

    def __call__(self, stage: str, _completed: int, _total: int | None) -> None:
        if stage != self._stage:
            self.mark(stage)

    def mark(self, stage: str | None) -> None:
        now = time.perf_counter()
        if self._stage is not None:
            self.seconds[self._stage] = self.seconds.get(self._stage, 0.0) + now - self._since
        self._stage, self._since = stage, now


def child_kg(mode: str, engine: str, source: Path, dest: Path, max_p: int | None) -> dict[str, Any]:
    """Rescale the savepoint ``source`` 3 -> 4 (and maxParallelism to ``max_p``) into ``dest``."""
    from keygroup_cli.execution.routes.rescale import rescale

    phases = Phases()
    start = time.perf_counter()
    if mode == "direct":
        # What `kg rescale SAVEPOINT --to 4 [--max-parallelism M] --out DEST --engine E` runs.
        rescale(source, dest, NEW_P, new_max_parallelism=max_p, engine=engine, on_progress=phases)
    else:
        from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
        from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint

        scratch = Path(tempfile.mkdtemp(prefix=".kg-bench-", dir=dest.parent))
        try:
            phases.mark("read savepoint")
            savepoint_to_snapshot(source, scratch / "in")
            rescale(
                scratch / "in",
                scratch / "out",
                NEW_P,
                new_max_parallelism=max_p,
                engine=engine,
                on_progress=phases,
            )
            phases.mark("write savepoint")
            snapshot_to_savepoint(scratch / "out", dest)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    phases.mark(None)
    return {"wall_s": time.perf_counter() - start, "phases_s": phases.seconds}


def child_profile(source: Path, dest: Path, out: Path, max_p: int | None) -> dict[str, Any]:
    """Profile the local-engine rescale with cProfile; write the stats to ``out``."""
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    result = child_kg(kg_mode(), "local", source, dest, max_p)
    profiler.disable()
    profiler.dump_stats(str(out))
    return result


def peak_rss_mib() -> float:
    """This process's peak RSS in MiB (``VmHWM`` restarts at exec; ``ru_maxrss`` keeps the parent's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(*args: str, script: str = __file__) -> dict[str, Any]:
    """Run one measurement (``script --child ARGS``) in a fresh interpreter; return the JSON it printed last.

    benchmarks/pipeline.py runs its own children through this too (``script=`` its file).
    """
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, script, "--child", *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"kg {args} failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = time.perf_counter() - start
    return result


def child_main(args: list[str]) -> None:
    kind = args[0]
    if kind == "profile":
        result = child_profile(Path(args[1]), Path(args[2]), Path(args[3]), int(args[4]) or None)
    else:
        mode, engine, source, dest, max_p = args
        result = child_kg(mode, engine, Path(source), Path(dest), int(max_p) or None)
    result["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(result))


# -- report -------------------------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]], flink_wall: float, flink_restore: float) -> str:
    """Markdown table; ratios against Flink's restore at p=4 (process wall, and in-process time)."""
    head = (
        "| run | process wall | in-process | wall / Flink p=4 wall | in-process / Flink p=4 restore "
        "| peak RSS |\n|---|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        ratio = r["wall_s"] / flink_wall
        work_ratio = r["work_s"] / flink_restore
        rss = f"{r['peak_rss_mib']:.0f} MiB" if r.get("peak_rss_mib") is not None else "-"
        lines.append(
            f"| {r['name']} | {r['wall_s']:.1f} s | {r['work_s']:.1f} s | {ratio:.2f} | "
            f"{work_ratio:.2f} | {rss} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--payload-bytes", type=int, default=24)
    parser.add_argument(
        "--savepoint", type=Path, help="Reuse this BenchSavepointGen savepoint (p=3, maxP=128)."
    )
    parser.add_argument("--engines", nargs="+", choices=("local", "spark"), default=["local", "spark"])
    parser.add_argument("--mode", choices=("auto", "direct", "emulated"), default="auto")
    parser.add_argument("--profile", type=Path, help="Also profile the local runs; write pstats files here.")
    parser.add_argument("--keep", type=Path, help="Work in this directory and keep it.")
    parser.add_argument("--json", action="store_true", help="Print the figures as one JSON document.")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return
    mode = kg_mode() if args.mode == "auto" else args.mode
    work = args.keep or Path(tempfile.mkdtemp(prefix="kg-bench-sp-"))
    work.mkdir(parents=True, exist_ok=True)
    log: Callable[[str], None] = (
        (lambda _m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    )
    figures: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average": os.getloadavg(),
        },
        "kg_mode": mode,
    }
    try:
        cp = classpath()
        source = args.savepoint
        if source is None:
            source = work / "savepoint-p3"
            if not source.exists():
                log(f"generating the savepoint ({args.keys} keys) with Flink ...")
                gen, gen_wall, _ = java(
                    cp,
                    "BenchSavepointGen",
                    str(source),
                    "--keys",
                    str(args.keys),
                    "--payload-bytes",
                    str(args.payload_bytes),
                )
                figures["generation"] = {"wall_s": gen_wall, **gen}
        keys = args.keys
        figures["savepoint"] = {
            "path": str(source),
            "bytes": sum(p.stat().st_size for p in source.rglob("*") if p.is_file()),
            "keys": keys,
        }
        log(f"savepoint: {figures['savepoint']['bytes'] / 1e6:.1f} MB; Flink restores at p=3 and p=4 ...")
        flink = {q: flink_restore(cp, source, q, keys) for q in (OLD_P, NEW_P)}
        figures["flink"] = {f"p{q}": f for q, f in flink.items()}
        rows: list[dict[str, Any]] = []
        for q in (OLD_P, NEW_P):
            f = flink[q]
            what = "no rescale" if q == OLD_P else "rescale 3->4 at restore"
            rows.append(
                {
                    "name": f"Flink restore p={q} ({what})",
                    "wall_s": f["wall_s"],
                    "work_s": f["restore_s"],
                    "peak_rss_mib": f["peak_rss_mib"],
                }
            )
        kg_runs: dict[str, Any] = {}
        outputs: dict[int, tuple[str, Path]] = {}  # maxParallelism -> (engine, first output written)
        for max_p in (OLD_MAX_P, NEW_MAX_P):
            for engine in args.engines:
                name = f"kg {mode} {engine} 3->4" + (
                    f", maxP {OLD_MAX_P}->{max_p}" if max_p != OLD_MAX_P else ""
                )
                dest = work / f"kg-{engine}-maxp{max_p}"
                shutil.rmtree(dest, ignore_errors=True)
                log(f"{name} ...")
                r = run_child(mode, engine, str(source), str(dest), str(max_p if max_p != OLD_MAX_P else 0))
                kg_runs[name] = r
                rows.append(
                    {
                        "name": name,
                        "wall_s": r["process_wall_s"],
                        "work_s": r["wall_s"],
                        "peak_rss_mib": r["peak_rss_mib"],
                    }
                )
                if max_p in outputs:
                    shutil.rmtree(dest, ignore_errors=True)
                else:
                    outputs[max_p] = (engine, dest)
        figures["kg"] = kg_runs
        restored = {}
        for max_p, (engine, dest) in outputs.items():
            log(f"Flink restores kg's {engine} output (maxP {max_p}) at p=4 ...")
            f = flink_restore(cp, dest, NEW_P, keys)
            restored[f"kg-{engine}-maxp{max_p}"] = f
            rows.append(
                {
                    "name": f"Flink restore p=4 of kg's output (maxP {max_p})",
                    "wall_s": f["wall_s"],
                    "work_s": f["restore_s"],
                    "peak_rss_mib": f["peak_rss_mib"],
                }
            )
            shutil.rmtree(dest, ignore_errors=True)
        figures["flink_restores_kg_output"] = restored
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            figures["profile"] = {}
            for max_p in (OLD_MAX_P, NEW_MAX_P):
                dest = work / "kg-profile"
                shutil.rmtree(dest, ignore_errors=True)
                stats = args.profile / f"local-3to4-maxp{max_p}.pstats"
                log(f"profiling kg local 3->4 (maxP {max_p}) into {stats} ...")
                figures["profile"][str(stats)] = run_child(
                    "profile", str(source), str(dest), str(stats), str(max_p if max_p != OLD_MAX_P else 0)
                )
                shutil.rmtree(dest, ignore_errors=True)
        figures["table"] = table(rows, flink[NEW_P]["wall_s"], flink[NEW_P]["restore_s"])
        if args.json:
            print(json.dumps(figures, indent=2))
        else:
            print(json.dumps({k: v for k, v in figures.items() if k != "table"}, indent=1))
            print()
            print(figures["table"])
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
