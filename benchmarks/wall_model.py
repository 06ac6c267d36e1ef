"""A wall-time model of a Spark rescale, fitted on what ``benchmarks/engine_cost.py`` measured (issue #39).

Input: the JSON document ``engine_cost.py --json`` writes (runs at two or more sizes, with Spark's event
log figures). The model has four measured parts and two stated bandwidths:

- ``start``: wall from the kg process's start to the first rescale job (JVM, SparkContext, executors, the
  worker probe, and the driver's open / gate / plan that overlap them): the smallest measured;
- per stage, the **CPU cost per GB per core**: the parallel CPU (executors, their Python workers; for
  ``local[*]`` the driver JVM that runs the tasks) per GB past the fixed cost, from the slope between the
  sizes, split between the stages in the proportion of their task run time in the event log:
  stage 1 = read + exchange write, stage 2 = exchange read + write;
- the **driver's serial cost per GB** (the kg process: plan, operator state, commit, checks), which no
  executor shares;
- ``commit``: the application's end to the process's end (the commit and the stop), smallest measured.

A stage on ``E`` executors of ``k`` cores takes ``max(S * cpu / (E * k), S * io / (E * bandwidth))``: its
CPU spread over every core, or its bytes through each executor's link, whichever is slower. Stage 1 reads
the savepoint from the object store and writes the exchange; stage 2 reads the exchange and writes the
output; with the exchange through the object store (issue #39 item 3) every byte moves at ``--store-mbps``
per executor; through Spark's shuffle (``--exchange network``) the exchange moves at ``--network-gbps``.
``--exchange-ratio`` is the exchange's size over the input's. Executors start in parallel (part of
``start``); waves, skew and stragglers are not modelled (tasks are many and even: key groups).

Printed: the fitted figures, predicted against measured wall for the runs of the document (this machine:
local disk, no bandwidth bound), and the prediction for 10 GB, 100 GB and 1 TB on 1, 4, 16 and 64 executors.

Usage: python benchmarks/wall_model.py SAVED.json [--engine cluster-1] [--cores-per-executor 4]
    [--store-mbps 200] [--network-gbps 1.25] [--exchange store|network] [--exchange-ratio 1.0] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

SIZES_GB = (10, 100, 1000)
EXECUTORS = (1, 4, 16, 64)
#: Roles of engine_cost's process tree that are the driver's (serial) CPU: the kg process, and on a
#: cluster the driver's JVM (with a local master that JVM runs the tasks: parallel). The cluster's own
#: daemons are not counted; the rest (executors, Python workers) is parallel.
IGNORED_ROLES = ("cluster",)


def _driver_roles(engine: str) -> tuple[str, ...]:
    return ("kg", "driver-jvm") if engine.startswith("cluster") else ("kg",)


@dataclass(frozen=True)
class Model:
    """The fitted figures (seconds, GB)."""

    engine: str
    start_s: float
    commit_s: float
    #: Core-seconds per GB of input, per stage (read + exchange write; exchange read + write).
    stage_cpu_s_per_gb: tuple[float, float]
    #: Serial driver CPU seconds per GB of input.
    driver_s_per_gb: float
    store_mbps: float
    network_gbps: float
    exchange: str
    exchange_ratio: float

    def stage_io_gb(self, size_gb: float) -> tuple[float, float]:
        """Bytes (GB) through the slower link per stage: what each stage reads and writes."""
        exchanged = size_gb * self.exchange_ratio
        return size_gb + exchanged, exchanged + size_gb

    def predict(self, size_gb: float, executors: int, cores: int, bandwidth: bool = True) -> float:
        """Wall seconds for ``size_gb`` on ``executors`` executors of ``cores`` cores each."""
        wall = self.start_s + self.commit_s + size_gb * self.driver_s_per_gb
        for cpu, io in zip(self.stage_cpu_s_per_gb, self.stage_io_gb(size_gb), strict=True):
            compute = size_gb * cpu / (executors * cores)
            transfer = 0.0
            if bandwidth:
                store = io / (executors * self.store_mbps / 1000)
                if self.exchange == "network":
                    exchanged = size_gb * self.exchange_ratio
                    store = (io - exchanged) / (executors * self.store_mbps / 1000) + exchanged / (
                        executors * self.network_gbps
                    )
                transfer = store
            wall += max(compute, transfer)
        return wall


def _runs(doc: dict[str, Any], engine: str) -> dict[float, list[dict[str, Any]]]:
    by_size: dict[float, list[dict[str, Any]]] = {}
    for run in doc["runs"]:
        if run["engine"] == engine and run["mode"] == "rekey" and run.get("events"):
            by_size.setdefault(run["mb"] / 1000, []).append(run)
    return by_size


def _parallel_cpu(run: dict[str, Any]) -> float:
    roles = run.get("cpu_by_role_s") or {}
    return sum(v for k, v in roles.items() if k not in _driver_roles(run["engine"]) + IGNORED_ROLES)


def _driver_cpu(run: dict[str, Any]) -> float:
    return sum(v for k, v in (run.get("cpu_by_role_s") or {}).items() if k in _driver_roles(run["engine"]))


def _line(points: list[tuple[float, float]]) -> float:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


def _start(run: dict[str, Any]) -> float:
    events = run["events"]
    return events["app_start"] - run["started_at"] + events["startup_s"]


def _commit(run: dict[str, Any]) -> float:
    return run["started_at"] + run["wall_s"] - events_end(run)


def events_end(run: dict[str, Any]) -> float:
    """Epoch seconds of the last rescale job's end."""
    return run["events"]["app_end"] - run["events"]["after_s"]


def fit(doc: dict[str, Any], engine: str, **stated: Any) -> Model:
    """Fit the model on ``engine``'s runs of ``doc`` (two sizes at least)."""
    by_size = _runs(doc, engine)
    if len(by_size) < 2:
        raise SystemExit(f"{engine}: runs at two sizes with an event log are needed, found {sorted(by_size)}")
    parallel = _line([(gb, statistics.median(map(_parallel_cpu, runs))) for gb, runs in by_size.items()])
    driver = _line([(gb, statistics.median(map(_driver_cpu, runs))) for gb, runs in by_size.items()])
    largest = by_size[max(by_size)]
    shares = [0.0, 0.0]
    for run in largest:
        stages = run["events"]["stages"]
        for index, stage in enumerate(stages[:2]):
            shares[index] += stage["run_s"]
        for stage in stages[2:]:  # any later stage is counted with the write stage
            shares[1] += stage["run_s"]
    total = sum(shares) or 1.0
    every = [r for runs in by_size.values() for r in runs]
    return Model(
        engine=engine,
        start_s=min(map(_start, every)),
        commit_s=min(map(_commit, every)),
        stage_cpu_s_per_gb=(parallel * shares[0] / total, parallel * shares[1] / total),
        driver_s_per_gb=max(driver, 0.0),
        **stated,
    )


#: Executors and cores per executor of engine_cost's engines on this machine.
MEASURED_SHAPE = {
    "spark": (1, 2),
    "spark-shared": (1, 2),
    "spark-shuffle": (1, 2),
    "cluster-1": (1, 1),
    "cluster-2": (2, 1),
}


def check(doc: dict[str, Any], model: Model) -> list[dict[str, Any]]:
    """Predicted against measured wall for every Spark run of ``doc`` (no bandwidth bound: local disk)."""
    rows = []
    for engine, (executors, cores) in MEASURED_SHAPE.items():
        for gb, runs in sorted(_runs(doc, engine).items()):
            measured = statistics.median(r["wall_s"] for r in runs)
            predicted = model.predict(gb, executors, cores, bandwidth=False)
            rows.append(
                {
                    "engine": engine,
                    "gb": gb,
                    "executors": executors,
                    "cores": cores,
                    "measured_s": measured,
                    "predicted_s": predicted,
                    "load": statistics.median(r["load"] for r in runs),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("saved", type=Path, help="engine_cost.py --json output")
    parser.add_argument("--engine", default="cluster-1", help="whose runs the model is fitted on")
    parser.add_argument("--cores-per-executor", type=int, default=4)
    parser.add_argument("--store-mbps", type=float, default=200.0, help="object store MB/s per executor")
    parser.add_argument("--network-gbps", type=float, default=1.25, help="network GB/s per executor")
    parser.add_argument("--exchange", choices=["store", "network"], default="store")
    parser.add_argument("--exchange-ratio", type=float, default=1.0)
    parser.add_argument(
        "--start-s",
        type=float,
        help="start to predict with (default: the smallest measured here; a loaded machine inflates it)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = json.loads(args.saved.read_text())
    model = fit(
        doc,
        args.engine,
        store_mbps=args.store_mbps,
        network_gbps=args.network_gbps,
        exchange=args.exchange,
        exchange_ratio=args.exchange_ratio,
    )
    checked = check(doc, model)
    if args.start_s is not None:
        model = replace(model, start_s=args.start_s)
    k = args.cores_per_executor
    table = {gb: {e: model.predict(gb, e, k) for e in EXECUTORS} for gb in SIZES_GB}
    if args.json:
        print(json.dumps({"model": asdict(model), "check": checked, "predicted": table}, indent=2))
        return
    cpu1, cpu2 = model.stage_cpu_s_per_gb
    print(
        f"fitted on {args.engine} (KG_NATIVE={doc.get('native') or 'unset'}): "
        f"start {model.start_s:.1f} s, commit {model.commit_s:.1f} s, stage 1 (read + exchange write) "
        f"{cpu1:.1f} core-s/GB, stage 2 (exchange read + write) {cpu2:.1f} core-s/GB, driver "
        f"{model.driver_s_per_gb:.1f} s/GB (serial)"
    )
    print()
    print("| run on this machine | GB | executors x cores | measured wall s | predicted s | load |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in checked:
        print(
            f"| {row['engine']} | {row['gb']:.2f} | {row['executors']} x {row['cores']} | "
            f"{row['measured_s']:.1f} | {row['predicted_s']:.1f} | {row['load']:.1f} |"
        )
    print()
    exchange = (
        f"exchange through the object store ({args.exchange_ratio:g}x the input)"
        if args.exchange == "store"
        else f"exchange through the network ({args.exchange_ratio:g}x the input)"
    )
    print(
        f"predicted wall (executors of {k} cores, {args.store_mbps:g} MB/s object store and "
        f"{args.network_gbps:g} GB/s network per executor, {exchange}):"
    )
    print()
    print("| input | " + " | ".join(f"{e} executor{'s' * (e > 1)}" for e in EXECUTORS) + " |")
    print("|---|" + "---:|" * len(EXECUTORS))
    for gb, row in table.items():
        label = f"{gb // 1000} TB" if gb >= 1000 else f"{gb} GB"
        print(f"| {label} | " + " | ".join(_duration(row[e]) for e in EXECUTORS) + " |")


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


if __name__ == "__main__":
    main()
