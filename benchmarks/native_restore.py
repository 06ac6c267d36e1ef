"""Benchmark: Flink's restore of kg's canonical output against kg's NATIVE output (issue #23).

One run on one machine:

1. writes a canonical savepoint with Flink itself (``kg.fixtures.BenchSavepointGen``: 2,000,000 String keys,
   HashMap backend, p 3, maxParallelism 128; see benchmarks/savepoint_rescale.py), or reuses ``--savepoint``;
2. kg rescales it 3 -> 4 twice, in a fresh interpreter each (local engine): ``--format canonical`` and
   ``--format native`` (timed: wall);
3. times Flink 2.3 restoring each output at p 4 (``kg.fixtures.BenchRestoreTimer``, in-process MiniCluster):
   the canonical one on RocksDB (every entry re-inserted) and the NATIVE one on RocksDB and on ForSt (files
   ingested). Each restore fails unless every key comes back.

Ratios are NATIVE restore / canonical restore from the same run. No assertion on timings: the figures go to
docs/performance.md.

Usage: flock /tmp/kg-bench.lock python benchmarks/native_restore.py [--keys 2000000] [--savepoint DIR]
    [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from savepoint_rescale import classpath, java  # noqa: E402


def kg_rescale(source: Path, dest: Path, output_format: str) -> float:
    """Run ``kg rescale SOURCE --to 4 --format F`` in a fresh interpreter; return its wall seconds."""
    cmd = [sys.executable, "-m", "keygroup_cli", "rescale", str(source), "--to", "4", "--out", str(dest),
           "--engine", "local", "--format", output_format, "-q"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def restore(cp: str, savepoint: Path, backend: str, keys: int) -> dict[str, Any]:
    summary, wall, peak = java(
        cp,
        "BenchRestoreTimer",
        str(savepoint),
        "--parallelism",
        "4",
        "--backend",
        backend,
        "--keys",
        str(keys),
    )
    return {
        "wall_s": wall,
        "restore_s": summary["submitToRestoredMs"] / 1000,
        "slowest_subtask_s": summary["maxSubtaskRestoreMs"] / 1000,
        "peak_rss_mib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument(
        "--savepoint", type=Path, help="Reuse this BenchSavepointGen savepoint (p=3, maxP=128)."
    )
    parser.add_argument("--keep", type=Path, help="Work in this directory and keep it.")
    parser.add_argument("--json", action="store_true", help="Print the figures as one JSON document.")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="kg-native-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        cp = classpath()
        source = args.savepoint or work / "savepoint-p3"
        if not source.exists():
            java(cp, "BenchSavepointGen", str(source), "--keys", str(args.keys))
        figures: dict[str, Any] = {"keys": args.keys, "kg": {}, "flink": {}}
        for fmt in ("canonical", "native"):
            dest = work / f"kg-{fmt}-p4"
            shutil.rmtree(dest, ignore_errors=True)
            figures["kg"][fmt] = {"wall_s": kg_rescale(source, dest, fmt)}
            figures["kg"][fmt]["bytes"] = sum(p.stat().st_size for p in dest.iterdir())
        for fmt, backend in (("canonical", "rocksdb"), ("native", "rocksdb"), ("native", "forst")):
            figures["flink"][f"{fmt}-{backend}"] = restore(cp, work / f"kg-{fmt}-p4", backend, args.keys)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    base = figures["flink"]["canonical-rocksdb"]["restore_s"]
    print(f"{args.keys:,} keys; kg rescale 3 -> 4 (local engine), then Flink 2.3 restores the output at p 4")
    print(
        "| output | kg wall | output size | restored by | Flink restore (submit -> all open) | / canonical |"
    )
    print("|---|---|---|---|---|---|")
    for name, flink in figures["flink"].items():
        fmt, backend = name.split("-")
        kg = figures["kg"][fmt]
        print(f"| {fmt} | {kg['wall_s']:.1f} s | {kg['bytes'] / 2**20:.0f} MiB | {backend} | "
              f"{flink['restore_s']:.1f} s | {flink['restore_s'] / base:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
