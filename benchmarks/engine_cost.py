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
  exchanged through Spark's shuffle, or through spill files in a directory every executor reaches);
  ``cluster-1`` / ``cluster-2``: a Spark standalone cluster on this machine (``tests/cluster/standalone.py``)
  of 1 or 2 workers of one core each, worker *i* and everything it starts pinned to CPU *i* (what a
  cluster of one-core machines gives), started before that engine's runs and not timed; the exchange is
  ``--cluster-exchange`` (default ``shared``: the executors reach kg's scratch directory).

Every Spark run writes Spark's event log (``spark.eventLog.enabled``, uncompressed, under ``--work``);
from it: the application's start (to the first rescale job), each rescale stage's summed task run time
and the executors' JVM CPU time, and the **job throughput per executor core** (input MB per second of task
run time: one task holds one core). Only the jobs in kg's job group count (a cluster's worker probe does not).
The **peak RSS per executor** comes from ``/proc`` (every 50 ms): for local[*] the driver JVM with its Python
workers, for a cluster each executor JVM with its Python workers; for the local engine the kg process.
The target is a peak independent of the input's size.

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

The machine this runs on is usually shared: CPU seconds are robust to other load, wall seconds (and so
the wall ratios: Spark local[*] against local, 1 -> 2 workers) are not. Prefer the CPU figures.

Usage: python benchmarks/engine_cost.py [--keys 1000000 2000000] [--work DIR]
    [--engines local spark [cluster-1 cluster-2]] [--modes rekey copy [native-rekey native-copy]]
    [--repeat 1] [--kg DIR] [--native 0|1] [--warmup] [--generator-backend hashmap|rocksdb] [--json]
    [--table SAVED.json]
    (``benchmarks/wall_model.py SAVED.json`` fits the wall-time model of docs/performance.md on it)
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

sys.path.insert(0, str(ROOT))

from tests.cluster.standalone import StandaloneCluster  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
MODES = {
    "rekey": ["-m", "1024"],
    "copy": [],
    "native-rekey": ["-m", "1024", "--format", "native"],
    "native-copy": ["--format", "native"],
}
EXCHANGES = {"spark-shuffle": "shuffle", "spark-shared": "shared"}
#: Engines that run on a standalone cluster of this many pinned one-core workers.
CLUSTERS = {"cluster-1": 1, "cluster-2": 2}
#: What a process's command line says it is (the first match), for the peak RSS per executor.
ROLES = (
    # kg's prestarted Python daemon (local[*]) and the workers it forks: the driver JVM's Python workers.
    ("spark.prestart", "workers"),
    ("CoarseGrainedExecutorBackend", "executor"),
    ("deploy.worker.Worker", "cluster"),
    ("deploy.master.Master", "cluster"),
    ("SparkSubmit", "driver-jvm"),
)


def become_subreaper() -> None:
    """Make orphaned descendants (a JVM whose kg exited first) this process's children, to reap and count."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reap_all(deadline_s: float = 60.0, keep: frozenset[int] = frozenset()) -> None:
    """Wait for every remaining descendant (re-parented here) to exit, so its CPU counts.

    ``keep``: process groups that stay (a standalone cluster's daemons); their executors, which end with
    the application, are waited for too.
    """
    end = time.monotonic() + deadline_s
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if keep and not _running_descendants(keep):
                return
            if time.monotonic() > end:
                raise SystemExit("descendants of a kg run did not exit within a minute")
            time.sleep(0.05)


def _running_descendants(keep: frozenset[int]) -> list[int]:
    """Descendants of this process that are not a kept daemon (an executor of a worker counts)."""
    me, left = os.getpid(), []
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            fields = raw[raw.rindex(b")") + 2 :].split()
            if fields[0] != b"Z":
                parents[int(entry.name)] = int(fields[1])
    for pid in parents:
        p = pid
        while p in parents and p != me:
            p = parents[p]
        daemon = pid in keep or _cmdline_has(pid, ("deploy.worker.Worker", "deploy.master.Master"))
        if pid != me and p == me and not daemon:
            left.append(pid)
    return left


def _cmdline_has(pid: int, needles: tuple[str, ...]) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            line = fh.read().decode(errors="replace")
    except OSError:
        return False
    return any(n in line for n in needles)


class TreeCpu:
    """Poll the CPU of every descendant of this process from ``/proc`` (own user + system time of each).

    ``getrusage(RUSAGE_CHILDREN)`` misses Spark's Python workers: pyspark's daemon ignores ``SIGCHLD``, so
    its exited workers are reaped by the kernel and their times are discarded. Here each descendant's own
    ``utime + stime`` (``/proc/PID/stat``) is read every ``interval`` seconds, and the last reading of each
    process (by pid and start time) counts: a process's time after its last reading (at most ``interval``
    of it) is missed, and the times of a process are never counted twice.
    """

    TICK = os.sysconf("SC_CLK_TCK")
    PAGE = os.sysconf("SC_PAGE_SIZE")

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.seen: dict[tuple[int, int], float] = {}
        #: CPU a process had already used when the measurement began (a standalone cluster's daemons).
        self.baseline: dict[tuple[int, int], float] = {}
        #: Per role root (``executor:PID``, ``driver-jvm:PID``, ``kg``): the peak RSS (bytes) of its tree.
        self.peak_rss: dict[str, int] = {}
        self._roles: dict[tuple[int, int], str] = {}
        self._names: dict[tuple[int, int], bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> TreeCpu:
        self._sample(os.getpid())
        self.baseline = dict(self.seen)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def total(self) -> float:
        return sum(cpu - self.baseline.get(key, 0.0) for key, cpu in self.seen.items())

    def cpu_by_role(self) -> dict[str, float]:
        """Return the CPU seconds of the processes of each role (``kg``, ``driver-jvm``, ``executor``)."""
        totals: dict[str, float] = {}
        for key, cpu in self.seen.items():
            role = self._roles.get(key, "other")
            totals[role] = totals.get(role, 0.0) + cpu - self.baseline.get(key, 0.0)
        return totals

    def _role(self, key: tuple[int, int], name: bytes) -> str:
        # Kept per process and name: spark-submit's shell script execs the JVM (same pid, new name).
        # "other" is read again: a child seen between its fork and its exec still has its parent's line.
        role = self._roles.get(key)
        if role is None or role == "other" or self._names.get(key) != name:
            self._names[key] = name
            role = "other"
            try:
                with open(f"/proc/{key[0]}/cmdline", "rb") as fh:
                    line = fh.read().decode(errors="replace")
            except OSError:
                line = ""
            for needle, name in ROLES:
                if needle in line:
                    role = name
                    break
            else:
                if "keygroup_cli" in line and "daemon" not in line:
                    role = "kg"
            self._roles[key] = role
        return role

    def _poll(self) -> None:
        me = os.getpid()
        while True:
            self._sample(me)
            if self._stop.wait(self.interval):
                self._sample(me)
                return

    def _sample(self, me: int) -> None:
        stats: dict[int, tuple[int, int, float, int, bytes]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            fields = raw[raw.rindex(b")") + 2 :].split()
            # After the name: state, ppid (fields 3, 4); utime, stime (14, 15); starttime (22); rss (24).
            cpu = (int(fields[11]) + int(fields[12])) / self.TICK
            name = raw[raw.index(b"(") + 1 : raw.rindex(b")")]
            stats[int(entry.name)] = (int(fields[1]), int(fields[19]), cpu, int(fields[21]) * self.PAGE, name)
        children: dict[int, list[int]] = {}
        for pid, (ppid, *_rest) in stats.items():
            children.setdefault(ppid, []).append(pid)
        rss: dict[str, int] = {}
        todo = [(pid, "") for pid in children.get(me, ())]
        while todo:
            pid, owner = todo.pop()
            _ppid, start, cpu, resident, name = stats[pid]
            self.seen[(pid, start)] = cpu
            role = self._role((pid, start), name)
            if role in ("executor", "driver-jvm", "kg", "workers") and not owner.startswith(
                ("executor", "driver")
            ):
                owner = role if role in ("kg", "workers") else f"{role}:{pid}"
            if owner and role != "cluster":
                rss[owner] = rss.get(owner, 0) + resident
            todo.extend((child, owner) for child in children.get(pid, ()))
        drivers = [owner for owner in rss if owner.startswith("driver-jvm")]
        if "workers" in rss and len(drivers) == 1:
            # local[*]: the prestarted daemon's workers are the driver JVM's, though kg started them.
            rss[drivers[0]] += rss.pop("workers")
        for owner, total in rss.items():
            self.peak_rss[owner] = max(self.peak_rss.get(owner, 0), total)


def run_kg(
    engine: str,
    mode: str,
    source: Path,
    dest: Path,
    kg_root: Path = ROOT,
    native: str | None = None,
    *,
    cluster: StandaloneCluster | None = None,
    cluster_exchange: str = "shared",
    events: Path | None = None,
) -> dict[str, Any]:
    """Run one ``kg rescale`` in a fresh process; return its wall, tree CPU, peak RSS, kg's JSON summary
    and, for Spark, what its event log (written under ``events``) says."""
    shutil.rmtree(dest, ignore_errors=True)
    command = [sys.executable, "-m", "keygroup_cli", "rescale", str(source), "--to", "4", *MODES[mode]]
    command += ["--out", str(dest), "--json", "-q"]
    conf: dict[str, str] = {}
    if engine in EXCHANGES:
        command += ["--engine", "spark"]
        conf["spark.kg.exchange"] = EXCHANGES[engine]
    elif cluster is not None:
        command += ["--engine", "spark", "--master", cluster.master_url]
        conf.update(
            {
                "spark.cores.max": str(CLUSTERS[engine]),
                "spark.scheduler.minRegisteredResourcesRatio": "1",
                "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                "spark.kg.exchange": cluster_exchange,
            }
        )
    else:
        command += ["--engine", engine]
    if events is not None and engine != "local":
        shutil.rmtree(events, ignore_errors=True)
        events.mkdir(parents=True)
        conf.update(
            {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": str(events),
                "spark.eventLog.compress": "false",
            }
        )
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    env = {k: v for k, v in os.environ.items() if k not in ("KG_ENGINE", "KG_MASTER", "KG_WORKERS")}
    env["PYTHONPATH"] = str(kg_root)
    if cluster is not None:
        env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    if native is not None:
        env["KG_NATIVE"] = native  # the Spark workers of a local master inherit it
        if cluster is not None:
            # A cluster's executors have the environment of the worker that starts them: pass it on.
            command += ["--conf", f"spark.executorEnv.KG_NATIVE={native}"]
    keep = frozenset(d.process.pid for d in cluster.daemons) if cluster is not None else frozenset()
    _reap_all(keep=keep)
    before = _cpu_children()
    with TreeCpu() as tree:
        start, started_at = time.perf_counter(), time.time()
        # Not from kg's checkout: ``python -m`` puts the working directory before PYTHONPATH.
        proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=dest.parent, check=False)
        wall = time.perf_counter() - start
        _reap_all(keep=keep)
    reaped = _cpu_children() - before
    shutil.rmtree(dest, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout) if proc.stdout.strip() else {}
    # An executor's JVM with its Python workers; with a local master the driver's JVM runs the tasks.
    executors = {k: v for k, v in tree.peak_rss.items() if k.startswith("executor")} or {
        k: v for k, v in tree.peak_rss.items() if k.startswith("driver-jvm")
    }
    result: dict[str, Any] = {
        "wall_s": wall,
        "kg_wall_s": summary.get("wall_seconds"),
        "cpu_s": tree.total,
        "cpu_reaped_s": reaped,
        # The kg process (the driver: open, gate, plan, commit), the driver JVM, executors, Python workers.
        "cpu_by_role_s": {k: round(v, 3) for k, v in tree.cpu_by_role().items()},
        "started_at": started_at,
        "processes": len(tree.seen),
        "engine_reported": summary.get("engine"),
        "peak_rss_mib": {k: round(v / 2**20, 1) for k, v in tree.peak_rss.items()},
        # Per executor (local[*]: the driver JVM, which runs the tasks, with its Python workers); the local
        # engine: the kg process.
        "peak_rss_per_executor_mib": round(
            max(executors.values(), default=tree.peak_rss.get("kg", 0)) / 2**20, 1
        ),
    }
    if events is not None and engine != "local":
        result["events"] = event_stats(events)
    return result


def event_stats(events: Path) -> dict[str, Any]:
    """Read Spark's event log under ``events``: the start, the rescale jobs' stages, the executor cores.

    Returns ``startup_s`` (application start to the first rescale job: executors, a cluster's worker probe),
    ``jobs_s`` (the rescale jobs' summed wall), ``after_s`` (last job's end to the application's end),
    ``stages`` (per rescale stage in submission order: wall, tasks, summed task run time, summed executor
    JVM CPU time, shuffle bytes) and ``cores`` (executor cores). The rescale's jobs are those in kg's job
    group (``kg-…``).
    """
    # Spark 4 writes a directory per application (``eventlog_v2_*/events_1_*``); older ones one file.
    log = next(
        p
        for p in sorted(events.rglob("*"))
        if p.is_file() and p.name.startswith(("events_", "app-", "local-")) and not p.name.endswith(".crc")
    )
    app_start = app_end = 0.0
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    stages: dict[int, dict[str, Any]] = {}
    cores = 0
    with open(log, encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                app_start = event["Timestamp"] / 1000
            elif kind == "SparkListenerApplicationEnd":
                app_end = event["Timestamp"] / 1000
            elif kind == "SparkListenerExecutorAdded":
                cores += event["Executor Info"]["Total Cores"]
            elif kind == "SparkListenerJobStart":
                group = (event.get("Properties") or {}).get("spark.jobGroup.id") or ""
                jobs[event["Job ID"]] = {
                    "start": event["Submission Time"] / 1000,
                    "kg": group.startswith("kg-"),
                }
                for stage_id in event["Stage IDs"]:
                    stage_job[stage_id] = event["Job ID"]
            elif kind == "SparkListenerJobEnd":
                jobs[event["Job ID"]]["end"] = event["Completion Time"] / 1000
            elif kind == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                stage = stages.setdefault(
                    event["Stage ID"],
                    {"tasks": 0, "run_s": 0.0, "jvm_cpu_s": 0.0, "shuffle_write_mb": 0.0},
                )
                stage["tasks"] += 1
                stage["run_s"] += metrics.get("Executor Run Time", 0) / 1000
                stage["jvm_cpu_s"] += metrics.get("Executor CPU Time", 0) / 1e9
                write = metrics.get("Shuffle Write Metrics") or {}
                read = metrics.get("Shuffle Read Metrics") or {}
                stage["shuffle_write_mb"] += write.get("Shuffle Bytes Written", 0) / 1e6
                stage["shuffle_read_mb"] = (
                    stage.get("shuffle_read_mb", 0.0)
                    + (read.get("Remote Bytes Read", 0) + read.get("Local Bytes Read", 0)) / 1e6
                )
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                stage = stages.setdefault(info["Stage ID"], {"tasks": 0, "run_s": 0.0, "jvm_cpu_s": 0.0})
                stage["name"] = info.get("Stage Name", "")
                stage["wall_s"] = (info.get("Completion Time", 0) - info.get("Submission Time", 0)) / 1000
    # The rescale's jobs run in kg's job group; the worker probe (a cluster's) runs outside it.
    rescale = [j for j in sorted(jobs) if jobs[j]["kg"]]
    first = jobs[rescale[0]]["start"] if rescale else app_end
    last = max((jobs[j].get("end", app_end) for j in rescale), default=app_end)
    kept = [stages[s] | {"id": s} for s in sorted(stages) if stage_job.get(s) in rescale]
    return {
        "app_start": app_start,
        "app_end": app_end,
        "startup_s": first - app_start,
        "jobs_s": sum(jobs[j].get("end", app_end) - jobs[j]["start"] for j in rescale),
        "after_s": app_end - last,
        "stages": kept,
        "task_run_s": sum(s["run_s"] for s in kept),
        "task_jvm_cpu_s": sum(s["jvm_cpu_s"] for s in kept),
        "cores": cores,
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
    parser.add_argument(
        "--generator-backend",
        choices=["hashmap", "rocksdb"],
        default="hashmap",
        help="The state backend of the job that writes the input (rocksdb: GB-sized inputs in a small heap).",
    )
    parser.add_argument("--repeat", type=int, default=1, help="Runs of each case (the median counts).")
    parser.add_argument(
        "--kg", type=Path, default=ROOT, help="Where kg is imported from (e.g. a `git archive` of a commit)."
    )
    parser.add_argument(
        "--native", choices=["0", "1"], help="KG_NATIVE for kg and its workers (0: the numpy reference)."
    )
    parser.add_argument(
        "--cluster-exchange",
        default="shared",
        choices=["shared", "shuffle"],
        help="How the cluster engines exchange a re-key's parts (spark.kg.exchange).",
    )
    parser.add_argument(
        "--warmup", action="store_true", help="One untimed run per engine first (numba's cache, page cache)."
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
        path, _generated = pipeline.savepoint_for(keys, args.work, log, args.generator_backend)
        sizes[keys] = (path, size_mb(path))
    runs: list[dict[str, Any]] = []
    smallest = min(sizes)
    for _ in range(args.repeat):
        for engine in args.engines:
            cluster = None
            if engine in CLUSTERS:
                cluster = start_cluster(args.work, engine, log)
                if cluster is None:
                    continue
            try:
                if args.warmup:
                    # Untimed: numba compiles the kernels of a kg tree it has not seen (its cache is keyed
                    # by path), a fresh cluster's workers import kg the first time, the page cache.
                    log(f"warm-up: {engine} {args.modes[0]} {smallest} keys (untimed) ...")
                    run_kg(
                        engine,
                        args.modes[0],
                        sizes[smallest][0],
                        args.work / "out",
                        args.kg,
                        args.native,
                        cluster=cluster,
                        cluster_exchange=args.cluster_exchange,
                    )
                for keys, (path, mb) in sizes.items():
                    for mode in args.modes:
                        log(f"{engine} {mode} {keys} keys ({mb:.0f} MB), load {os.getloadavg()[0]:.1f} ...")
                        r = run_kg(
                            engine,
                            mode,
                            path,
                            args.work / "out",
                            args.kg,
                            args.native,
                            cluster=cluster,
                            cluster_exchange=args.cluster_exchange,
                            events=args.work / "events",
                        )
                        r.update(engine=engine, mode=mode, keys=keys, mb=mb, load=os.getloadavg()[0])
                        log(
                            f"  wall {r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s, "
                            f"peak RSS per executor {r['peak_rss_per_executor_mib']:.0f} MiB"
                        )
                        runs.append(r)
            finally:
                if cluster is not None:
                    cluster.stop()

    doc = {
        "runs": runs,
        "sizes": {str(k): mb for k, (_p, mb) in sizes.items()},
        "modes": args.modes,
        "engines": [e for e in args.engines if any(r["engine"] == e for r in runs)],
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


def start_cluster(work: Path, engine: str, log: Any, attempts: int = 3) -> StandaloneCluster | None:
    """Start ``engine``'s standalone cluster; None (the engine is skipped) if it fails ``attempts`` times.

    On a loaded machine shared with other clusters a start can fail (a port taken between its choice and
    its bind, a pinned worker slow to register): each attempt starts afresh in a directory of its own.
    """
    for attempt in range(1, attempts + 1):
        log(f"starting a standalone cluster of {CLUSTERS[engine]} pinned one-core worker(s) ...")
        directory = work / f"{engine}-{attempt}"
        # A fresh directory: the cluster's logs are appended to, and its master's port is read from them.
        shutil.rmtree(directory, ignore_errors=True)
        try:
            return StandaloneCluster.start(directory, workers=CLUSTERS[engine], pin=True)
        except Exception as exc:  # noqa: BLE001 - reported, then retried or skipped
            log(f"  the cluster did not start (attempt {attempt}): {str(exc).splitlines()[0][:200]}")
    log(f"  {engine} skipped")
    return None


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
    lines += ["", *scale_table(doc)]
    return "\n".join(lines)


def _median_of(runs: list[dict[str, Any]], get: Any) -> float:
    values = [v for v in (get(r) for r in runs) if v is not None]
    return statistics.median(values) if values else float("nan")


def scale_table(doc: dict[str, Any]) -> list[str]:
    """Return the scale figures: peak RSS per executor, job throughput per executor core, 1 -> 2 workers."""
    lines = [
        "per size: peak RSS per executor (MiB; local: the kg process) | Spark job throughput per executor "
        "core (input MB per task-second, event log) | rescale jobs' wall (s) | JVM CPU share of task time"
    ]
    header = ["mode", "engine"]
    for keys in doc["sizes"]:
        header += [f"{int(keys) // 1000}k RSS", "MB/core-s", "jobs s", "JVM CPU"]
    rows = [header]
    for mode in doc["modes"]:
        for engine in doc["engines"]:
            row = [mode, engine]
            for keys, mb in doc["sizes"].items():
                runs = [
                    r for r in doc["runs"] if (r["engine"], r["mode"], r["keys"]) == (engine, mode, int(keys))
                ]
                rss = _median_of(runs, lambda r: r.get("peak_rss_per_executor_mib"))
                task_s = _median_of(runs, lambda r: (r.get("events") or {}).get("task_run_s"))
                jobs_s = _median_of(runs, lambda r: (r.get("events") or {}).get("jobs_s"))
                jvm = _median_of(runs, lambda r: (r.get("events") or {}).get("task_jvm_cpu_s"))
                row += [
                    f"{rss:.0f}",
                    f"{mb / task_s:.1f}" if task_s == task_s and task_s > 0 else "-",
                    f"{jobs_s:.1f}" if jobs_s == jobs_s else "-",
                    f"{jvm / task_s:.0%}" if task_s == task_s and task_s > 0 else "-",
                ]
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for mode in doc["modes"]:
        if not {"cluster-1", "cluster-2"} <= set(doc["engines"]):
            continue
        for keys, mb in doc["sizes"].items():
            one, two = (
                [r for r in doc["runs"] if (r["engine"], r["mode"], r["keys"]) == (e, mode, int(keys))]
                for e in ("cluster-1", "cluster-2")
            )
            job = [_median_of(x, lambda r: (r.get("events") or {}).get("jobs_s")) for x in (one, two)]
            wall = [_median_of(x, lambda r: r["wall_s"]) for x in (one, two)]
            cpu = [_median_of(x, lambda r: r["cpu_s"]) for x in (one, two)]
            lines.append(
                f"{mode} {int(keys) // 1000}k keys ({mb:.0f} MB), 1 -> 2 pinned one-core workers: job "
                f"throughput {job[0] / job[1]:.2f}x (rescale jobs' wall, event log), process wall "
                f"{wall[0] / wall[1]:.2f}x; "
                f"CPU {cpu[1] / cpu[0]:.2f}x of 1 worker's (1.00x: no work added by the second worker)"
            )
    return lines


if __name__ == "__main__":
    main()
