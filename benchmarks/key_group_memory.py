"""Benchmark: a read task's memory against the size of a key group (issue #11, driver and task memory).

At a fixed maxParallelism a key group grows with the state (a 100 GB savepoint at maxParallelism 128 has
blocks of about 800 MB). Since key-group blocks larger than ``keyed_decode.WINDOW_BYTES`` are decoded in
windows of whole entries, a rescale's peak RSS should not follow the key group. This script

1. takes a savepoint (``--savepoint DIR``, e.g. the 10M-key ``BenchSavepointGen`` savepoint of
   benchmarks/pipeline.py) and, for every ``--max-parallelism`` given (default 128 and 8), a copy rescaled
   by kg to that maxParallelism at parallelism 3 (cached under ``--work DIR``; not timed): the same
   entries in fewer, larger key groups;
2. times, each in a fresh interpreter, ``rescale(COPY, DEST, 4, new_max_parallelism=1024,
   engine="local")`` twice: as kg runs (windows) and with every block read whole (``window_bytes``
   patched to 2**62 in the child);
3. prints wall, peak RSS (``VmHWM`` of the child) and the largest key-group block of each copy, and the
   ratio of the peaks: windows / whole blocks. No assertion on timings; figures go to
   docs/performance.md.

Usage: nice -n 5 python benchmarks/key_group_memory.py --savepoint DIR [--work DIR]
    [--max-parallelism 128 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import savepoint_rescale as sr  # noqa: E402

NEW_P, NEW_MAX_P = 4, 1024


def child_main(args: list[str]) -> None:
    """``--child MODE SOURCE DEST``: one local rescale, with windows (``windows``) or whole blocks."""
    mode, source, dest = args
    from keygroup_cli.execution.routes.rescale import rescale
    from keygroup_cli.flink.keyed import decode as keyed_decode

    if mode == "whole":
        defaults = keyed_decode.decode_keyed_file.__kwdefaults__
        assert defaults is not None
        defaults["window_bytes"] = 1 << 62
    start = time.perf_counter()
    rescale(source, dest, NEW_P, new_max_parallelism=NEW_MAX_P, engine="local")
    wall = time.perf_counter() - start
    print(json.dumps({"wall_s": wall, "peak_rss_mib": sr.peak_rss_mib()}))


def largest_block(savepoint: Path) -> int:
    """Return the largest key-group block of a savepoint in bytes (from ``_metadata``)."""
    from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, key_group_extents
    from keygroup_cli.flink.metadata.locate import read_flink_metadata

    largest = 0
    for op in read_flink_metadata(savepoint).metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if isinstance(handle, KeyGroupsHandle):
                size = handle.delegate.size  # type: ignore[union-attr]
                largest = max([largest] + [end - start for _, start, end in key_group_extents(handle, size)])
    return largest


def copy_at(source: Path, work: Path, max_parallelism: int) -> Path:
    """Return ``source`` rescaled by kg to ``max_parallelism`` (parallelism 3), cached in ``work``."""
    from keygroup_cli.execution.routes.rescale import rescale
    from keygroup_cli.flink.metadata.locate import read_flink_metadata

    current = {op.max_parallelism for op in read_flink_metadata(source).metadata.operators}
    if current == {max_parallelism}:
        return source
    copy = work / f"{source.name}-maxp{max_parallelism}"
    if not copy.exists():
        rescale(source, copy, 3, new_max_parallelism=max_parallelism, engine="local")
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--savepoint", type=Path, help="a canonical Flink savepoint (required)")
    parser.add_argument("--work", type=Path, help="where the copies are cached (default: a temporary one)")
    parser.add_argument("--max-parallelism", type=int, nargs="+", default=[128, 8])
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child_main(options.child)
        return
    if options.savepoint is None:
        parser.error("--savepoint is required")
    work = options.work or Path(tempfile.mkdtemp(prefix="kg-bench-kgmem-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for max_p in options.max_parallelism:
            copy = copy_at(options.savepoint.resolve(), work, max_p)
            row: dict[str, Any] = {"max_parallelism": max_p, "largest_block_bytes": largest_block(copy)}
            for mode in ("whole", "windows"):
                dest = work / f"out-{max_p}-{mode}"
                shutil.rmtree(dest, ignore_errors=True)
                row[mode] = sr.run_child(mode, str(copy), str(dest), script=__file__)
                shutil.rmtree(dest, ignore_errors=True)
            row["peak_ratio"] = row["windows"]["peak_rss_mib"] / row["whole"]["peak_rss_mib"]
            rows.append(row)
    finally:
        if options.work is None:
            shutil.rmtree(work, ignore_errors=True)
    if options.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"local rescale 3 -> {NEW_P}, maxParallelism -> {NEW_MAX_P}, of {options.savepoint.name} (one run)")
    for r in rows:
        w, h = r["windows"], r["whole"]
        print(
            f"  maxP {r['max_parallelism']:4d}, largest key group {r['largest_block_bytes'] / 1e6:7.1f} MB: "
            f"windows {w['wall_s']:5.1f} s {w['peak_rss_mib']:5.0f} MiB | "
            f"whole blocks {h['wall_s']:5.1f} s {h['peak_rss_mib']:5.0f} MiB | "
            f"peak ratio {r['peak_ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
