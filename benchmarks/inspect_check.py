"""Benchmark: process wall time of ``kg inspect`` and ``kg check`` on a large synthetic savepoint.

Synthesises a CANONICAL savepoint with 10 keyed operators x 128 subtasks (1280 state files, each with a
real Flink 2.3 keyed-state header copied from a committed fixture, followed by filler key-group data),
written with kg's own ``_metadata`` writer, then times ``python -m keygroup_cli inspect|check`` in fresh
processes (several runs, median) and reports whether pyspark was imported. Target: < 0.5 s each.

Usage: python benchmarks/inspect_check.py [--runs 7] [--keep DIR]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from keygroup_cli.core.keygroups import operator_id_for_uid, subtask_ranges  # noqa: E402
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, RelativeFileHandle  # noqa: E402
from keygroup_cli.flink.metadata import handles as h  # noqa: E402
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, OperatorState, SubtaskState, parse_metadata  # noqa: E402
from keygroup_cli.flink.metadata.writer import write_metadata  # noqa: E402

OPERATORS = 10
PARALLELISM = 128
MAX_PARALLELISM = 1024
BYTES_PER_KEY_GROUP = 512


def _real_header() -> bytes:
    case = ROOT / "fixtures" / "flink" / "2.3" / "heap-files-p3-maxp128-long"
    md = parse_metadata((case / "_metadata").read_bytes())
    op = next(o for o in md.operators if o.uid == "keyed-state")
    keyed = op.subtasks[0].managed_keyed_state
    assert isinstance(keyed, KeyGroupsHandle) and isinstance(keyed.delegate, RelativeFileHandle)
    first = min(o for o in keyed.offsets if o)
    return (case / keyed.delegate.relative_path).read_bytes()[:first]


def synthesise(directory: Path) -> None:
    """Write the savepoint: one state file per (operator, subtask) and the _metadata naming them."""
    header = _real_header()
    operators = []
    for o in range(OPERATORS):
        uid = f"bench-op-{o}"
        subtasks = []
        for i, kg_range in enumerate(subtask_ranges(MAX_PARALLELISM, PARALLELISM)):
            name = f"{o:02d}-{i:03d}-keyed"
            offsets = tuple(len(header) + k * BYTES_PER_KEY_GROUP for k in range(kg_range.size))
            size = len(header) + kg_range.size * BYTES_PER_KEY_GROUP
            with open(directory / name, "wb") as fh:
                fh.write(header)
                fh.write(b"\x00" * (size - len(header)))
            keyed = KeyGroupsHandle(
                h.SAVEPOINT_KEY_GROUPS_HANDLE, kg_range.start, offsets, RelativeFileHandle(name, size)
            )
            subtasks.append(SubtaskState(i, managed_keyed_state=keyed))
        operators.append(
            OperatorState(
                operator_id=operator_id_for_uid(uid),
                parallelism=PARALLELISM,
                max_parallelism=MAX_PARALLELISM,
                name=uid,
                uid=uid,
                subtasks=tuple(subtasks),
            )
        )
    metadata = CheckpointMetadata(version=6, checkpoint_id=42, master_states=(), operators=tuple(operators))
    raw = write_metadata(metadata)
    assert write_metadata(parse_metadata(raw)) == raw, "writer/reader round trip"
    (directory / "_metadata").write_bytes(raw)


def _time(args: list[str], runs: int) -> tuple[float, list[float], str]:
    walls = []
    stdout = ""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "keygroup_cli", *args], capture_output=True, text=True, env=env
        )
        walls.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"kg {' '.join(args)} failed: {done.stderr}")
        stdout = done.stdout
    return statistics.median(walls), walls, stdout


def _pyspark_imported(directory: Path) -> bool:
    code = (
        "import sys\nfrom keygroup_cli.cli import run\n"
        f"run(['inspect', {str(directory)!r}, '--json'])\n"
        f"run(['check', {str(directory)!r}, '-p', '64', '--json'])\n"
        "sys.stderr.write(str(any(m.startswith('pyspark') for m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return done.stderr.strip().endswith("True")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="Write the savepoint here and keep it.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp) / "savepoint"
        directory.mkdir(parents=True, exist_ok=True)
        synthesise(directory)
        files = sum(1 for _ in directory.iterdir())
        size = sum(p.stat().st_size for p in directory.iterdir())
        print(
            f"savepoint: {OPERATORS} operators x {PARALLELISM} subtasks, maxP {MAX_PARALLELISM}, "
            f"{files} files, {size / 2**20:.1f} MiB, _metadata {(directory / '_metadata').stat().st_size} B"
        )
        base, _, _ = _time(["--version"], args.runs)
        print(f"python -m keygroup_cli --version (interpreter + click floor): median {base:.3f} s")
        results = {}
        for label, cmd in (
            ("inspect", ["inspect", str(directory)]),
            ("inspect --json", ["inspect", str(directory), "--json"]),
            ("check -p 64", ["check", str(directory), "-p", "64"]),
            ("check -p 64 --json", ["check", str(directory), "-p", "64", "--json"]),
        ):
            median, walls, stdout = _time(cmd, args.runs)
            results[label] = median
            verdict = "OK" if median < 0.5 else "OVER TARGET"
            print(
                f"kg {label:20s} median {median:.3f} s  (min {min(walls):.3f}, max {max(walls):.3f}, "
                f"{args.runs} runs)  {verdict}"
            )
            if label == "inspect --json":
                doc = json.loads(stdout)
                assert len(doc["operators"]) == OPERATORS
                assert all(len(op["states"]) == 5 for op in doc["operators"])
        print(f"pyspark imported: {_pyspark_imported(directory)}")


if __name__ == "__main__":
    main()
