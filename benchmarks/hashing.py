"""Benchmark: scalar vs vectorised key hashing, and `kg key --keys-file` end to end.

Prints keys/s measured in this one run (no assertions; machines are noisy):
  - 10M long keys and 2M string keys through the vectorised path (hash code + key group + subtask);
  - the scalar path on a sample of the same keys, to show the speed-up;
  - wall time of `python -m keygroup_cli key --keys-file` on 1M string keys (TSV and --json), median of 3.

Targets (2-core machine): >= 20M long keys/s and >= 5M string keys/s vectorised; 1M keys end to end < 2 s.
Run: python benchmarks/hashing.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from keygroup_cli.core import javahash, keygroups


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds / 1e6:8.2f} M keys/s"


def _vectorised(keys: pa.Array | np.ndarray, key_type: str) -> float:
    start = time.perf_counter()
    codes = javahash.hash_codes(keys, key_type)
    groups = keygroups.key_groups_for_hashes(codes, 128)
    keygroups.operator_indexes_for_key_groups(groups, 128, 3)
    return time.perf_counter() - start


def _scalar(values: list, key_type: str) -> float:
    start = time.perf_counter()
    for value in values:
        group = keygroups.key_group_for_hash(javahash.hash_code(value, key_type), 128)
        keygroups.operator_index_for_key_group(128, 3, group)
    return time.perf_counter() - start


def main() -> None:
    rng = np.random.default_rng(7)
    longs = rng.integers(-(2**63), 2**63 - 1, size=10_000_000, dtype=np.int64)
    strings = pa.array([f"user-{i}-{v}" for i, v in enumerate(rng.integers(0, 10**9, size=2_000_000))])
    print("kg hashing benchmark (one run)")
    for label, keys, key_type, sample in (
        ("long  x10M", longs, "long", longs[:200_000].tolist()),
        ("string x2M", strings, "string", strings.slice(0, 100_000).to_pylist()),
    ):
        _vectorised(keys[:1000], key_type)  # warm caches
        vec = min(_vectorised(keys, key_type) for _ in range(3))
        sca = _scalar(sample, key_type)
        print(
            f"{label}: vectorised {_rate(len(keys), vec)} | scalar {_rate(len(sample), sca)} | "
            f"speed-up {(len(keys) / vec) / (len(sample) / sca):7.1f}x"
        )

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keys.txt"
        path.write_text(
            "".join(f"user-{i}-{v}\n" for i, v in enumerate(rng.integers(0, 10**9, size=1_000_000)))
        )
        for extra in ([], ["--json"]):
            walls = []
            for _ in range(3):
                start = time.perf_counter()
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "keygroup_cli",
                        "key",
                        "--keys-file",
                        str(path),
                        "-m",
                        "128",
                        "-p",
                        "3",
                        *extra,
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                walls.append(time.perf_counter() - start)
            mode = "json" if extra else "tsv "
            print(
                f"kg key --keys-file 1M strings ({mode}): "
                f"median wall {statistics.median(walls):.2f} s (target < 2 s)"
            )


if __name__ == "__main__":
    main()
