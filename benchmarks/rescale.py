"""Benchmark: `kg rescale` (spark and local engines) against a plain pyarrow read+write copy.

For each size (default 1M and 10M keyed rows: distinct long keys, one value state, 24-byte values,
maxParallelism 128, parallelism 3 -> 4) this script

1. writes the input snapshot with kg's own writer (not timed);
2. times, each in a fresh subprocess, in this order:
   - floor: read every keyed file with pyarrow and write it back (snappy), the cheapest possible rewrite;
   - local: ``rescale(..., engine="local")``;
   - spark: ``rescale(..., engine="spark")`` as a user runs it (an embedded ``local[*]`` session started
     in a background thread while the input is verified), and, in another process, the session start
     alone (kg's class-data-sharing archive of Spark's classes is created first if missing, as it would
     be after a machine's first Spark rescale);
3. reports each engine's wall divided by the floor's, and every subprocess's peak RSS (``ru_maxrss``).

All ratios come from the same run on the same machine. Targets: spark <= 3x and local <= 1.5x the floor at
10M rows; local peak RSS bounded by a few row groups / key-group chunks, not by the snapshot size.
Usage: python benchmarks/rescale.py [--rows 1000000 10000000] [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from keygroup_cli import __version__  # noqa: E402
from keygroup_cli.core import javahash, keygroups
from keygroup_cli.snapshot.model import Manifest, Operator, StateDescriptor  # noqa: E402
from keygroup_cli.snapshot.writer import snapshot_writer  # noqa: E402

MAX_P, OLD_P, NEW_P, VALUE_BYTES = 128, 3, 4, 24


def make_snapshot(dest: Path, rows: int, seed: int = 7) -> None:
    """Write a kg snapshot of ``rows`` keyed rows (distinct long keys, one value state) at parallelism 3."""
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(-(2**63), 2**63 - 1, size=rows + rows // 100, dtype=np.int64))[:rows]
    rng.shuffle(keys)
    groups = keygroups.key_groups_for_hashes(javahash.hash_codes(keys, "long"), MAX_P)
    order = np.argsort(groups, kind="stable")
    keys, groups = keys[order], groups[order]
    values = rng.integers(0, 256, size=rows * VALUE_BYTES, dtype=np.uint8).tobytes()
    value_array = pa.Array.from_buffers(
        pa.binary(),
        rows,
        [
            None,
            pa.py_buffer(np.arange(0, (rows + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32)),
            pa.py_buffer(values),
        ],
    )
    table = pa.table(
        {
            "key_group": pa.array(groups, type=pa.int32()),
            "state": pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), ["count"]),
            "key": pa.array(keys),
            "namespace": pa.array([b"\x00"] * 1, type=pa.binary()).take(
                pa.array(np.zeros(rows, dtype=np.int32))
            ),
            "value": value_array,
        }
    )
    ranges = keygroups.subtask_ranges(MAX_P, OLD_P)
    bounds = np.searchsorted(groups, [r.start for r in ranges] + [MAX_P], side="left")
    uid = "bench"
    operator_id = keygroups.operator_id_for_uid(uid)
    with snapshot_writer(dest) as writer:
        directory = writer.operator_dir(uid, operator_id)
        files = [
            writer.write_keyed(
                directory,
                i,
                table.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i])),
                key_type="long",
                key_groups=rng_,
                state_names=["count"],
            )
            for i, rng_ in enumerate(ranges)
        ]
        op = Operator(
            uid, operator_id, uid, OLD_P, MAX_P, "long", (StateDescriptor("count", "value"),), tuple(files)
        )
        writer.commit(Manifest(1, f"kg {__version__}", "2026-01-01T00:00:00Z", {"kind": "generated"}, (op,)))


# -- The measured bodies, each run in its own process (`python benchmarks/rescale.py --child ...`) ----------


def child_floor(source: Path, dest: Path) -> dict[str, float]:
    import pyarrow.parquet as pq

    start = time.perf_counter()
    dest.mkdir()
    for path in sorted(source.rglob("keyed-*.parquet")):
        pq.write_table(pq.read_table(path), dest / path.name, compression="snappy")
    return {"wall": time.perf_counter() - start}


def child_local(source: Path, dest: Path) -> dict[str, float]:
    from keygroup_cli.execution.routes.rescale import rescale

    start = time.perf_counter()
    rescale(source, dest, NEW_P, engine="local")
    return {"wall": time.perf_counter() - start}


def child_spark(source: Path, dest: Path) -> dict[str, float]:
    # What a user runs: the session starts in a background thread while the input is verified.
    from keygroup_cli.execution.routes.rescale import rescale

    start = time.perf_counter()
    rescale(source, dest, NEW_P, engine="spark")
    return {"wall": time.perf_counter() - start}


def child_spark_start(_source: Path, _dest: Path) -> dict[str, Any]:
    from keygroup_cli.execution.engines.spark import class_data_sharing_option, spark_session

    sharing = class_data_sharing_option()
    start = time.perf_counter()
    spark_session()
    return {"wall": time.perf_counter() - start, "class_data_sharing": sharing.split("=")[0].lstrip("-X:")}


CHILDREN = {
    "floor": child_floor,
    "local": child_local,
    "spark": child_spark,
    "spark_start": child_spark_start,
}


def warm_class_data_sharing(work: Path) -> str:
    """Make sure kg's archive of Spark's classes exists, as on any machine that ran kg's Spark engine once.

    The first session writes it at exit; it is published after 30 s (see ``class_data_sharing_option``).
    """
    state = run_child("spark_start", work, work)["class_data_sharing"]
    if state == "ArchiveClassesAtExit":
        time.sleep(35)
        state = run_child("spark_start", work, work)["class_data_sharing"]
    return str(state)


def peak_rss_mib() -> float:
    """Return this process's peak RSS in MiB.

    ``VmHWM`` from /proc, which starts afresh at exec; ``ru_maxrss`` would include the (large) parent's
    peak, since Linux keeps it across fork and exec. Falls back to ``ru_maxrss`` elsewhere.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(kind: str, source: Path, dest: Path) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; return its timings and peak RSS (MiB)."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(source), str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--keep", type=Path, help="Work in this directory and keep it.")
    parser.add_argument("--json", action="store_true", help="Print the figures as one JSON document.")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "SOURCE", "DEST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, source, dest = args.child
        result = CHILDREN[kind](Path(source), Path(dest))
        result["peak_rss_mib"] = peak_rss_mib()
        print(json.dumps(result))
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="kg-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    figures = []
    try:
        sharing = warm_class_data_sharing(work)
        for rows in args.rows:
            source = work / f"in-{rows}"
            if not source.exists():
                make_snapshot(source, rows)
            size = sum(p.stat().st_size for p in source.rglob("*.parquet"))
            runs = {}
            for kind in ("floor", "local", "spark", "spark_start"):
                dest = work / f"out-{kind}-{rows}"
                shutil.rmtree(dest, ignore_errors=True)
                runs[kind] = run_child(kind, source, dest)
                shutil.rmtree(dest, ignore_errors=True)
            floor = runs["floor"]["wall"]
            spark_work = runs["spark"]["wall"] - runs["spark_start"]["wall"]
            figure = {
                "rows": rows,
                "input_mib": round(size / 2**20, 1),
                "floor_s": round(floor, 2),
                "local_s": round(runs["local"]["wall"], 2),
                "spark_s": round(runs["spark"]["wall"], 2),
                "spark_session_start_s": round(runs["spark_start"]["wall"], 2),
                "spark_class_data_sharing": sharing,
                "local_ratio": round(runs["local"]["wall"] / floor, 2),
                "spark_ratio": round(runs["spark"]["wall"] / floor, 2),
                "spark_ratio_excluding_start": round(spark_work / floor, 2),
                "floor_peak_rss_mib": round(runs["floor"]["peak_rss_mib"]),
                "local_peak_rss_mib": round(runs["local"]["peak_rss_mib"]),
                "spark_driver_peak_rss_mib": round(runs["spark"]["peak_rss_mib"]),
            }
            figures.append(figure)
            if not args.json:
                print(json.dumps(figure), flush=True)
        if args.json:
            print(json.dumps({"cpus": os.cpu_count(), "figures": figures}, indent=2))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
