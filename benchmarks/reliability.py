"""Full-size run of the corrupt-input property of every command (issue #37): docs/reliability.md's figures.

The same command table, corpora and checks as ``tests/reliability/test_properties.py``
(``tests/reliability/property_harness.py``), at full size, on five inputs (the CI's heap and RocksDB
NATIVE savepoints, a typed job's, an SQL job's and an inline-state savepoint): every targeted mutant (the
first letter of every serializer class name, replaced by ``Q`` and by ``?``; the NATIVE savepoint's
CURRENT, SST bytes, SST magic numbers and MANIFEST) and ``--mutants N`` seeded random mutants per input
(bit flips, truncations, inserted bytes, int extremes at 4-byte aligned positions, over ``_metadata`` and
the state files). Every command runs in this process through kg's error boundary.

Prints one row per command: runs, the exit-code histogram, and the count of each broken promise
(tracebacks, exit codes outside the table, errors of more than one line, outputs that fail ``kg verify`` or
do not re-read, the gate broken, inputs modified, leftovers beside DEST, files opened outside the input),
then every violation (``--violations N`` of them; ``--all`` for all) with its mutant, exit code and first
stderr line.

    .venv/bin/python benchmarks/reliability.py --mutants 200
    .venv/bin/python benchmarks/reliability.py --mutants 50 --seed 7 --only heap
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability import property_harness as h  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mutants", type=int, default=200, help="random mutants per input (default 200)")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--only", choices=[f.name for f in h.FULL_FIXTURE_SET], help="one input only")
    parser.add_argument("--no-targeted", action="store_true", help="random mutants only")
    parser.add_argument("--violations", type=int, default=80, help="violations to list (default 80)")
    parser.add_argument("--all", action="store_true", help="list every violation")
    parser.add_argument(
        "--time-limit",
        type=float,
        help="start no mutant after this many seconds: the table then covers a prefix of the corpus, "
        "which runs in a seeded random order",
    )
    args = parser.parse_args()
    os.environ.setdefault("COLUMNS", "120")
    fixtures = tuple(f for f in h.FULL_FIXTURE_SET if args.only in (None, f.name))
    mutants = h.full_corpus(args.seed, args.mutants, fixtures)
    if args.no_targeted:
        mutants = [m for m in mutants if ":random#" in m.label]
    random.Random(args.seed).shuffle(mutants)  # a prefix (--time-limit) samples every input and kind
    tally = h.Tally()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kg-reliability-") as work:
        h.baseline(tally, Path(work), fixtures)
        done = 0
        for i, mutant in enumerate(mutants, 1):
            if args.time_limit is not None and time.monotonic() - started > args.time_limit:
                break
            h.judge_mutant(tally, mutant, Path(work))
            done = i
            if i % 25 == 0:
                print(f"{i}/{len(mutants)} mutants, {len(tally.violations)} violations, "
                      f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
    wall = time.monotonic() - started
    stopped = f" (stopped by --time-limit after {done} of {len(mutants)})" if done < len(mutants) else ""
    mutants = mutants[:done]
    kinds = Counter(m.label.split(":")[1].split("#")[0].split(" ")[0] for m in mutants)
    kinds_text = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    inputs = ", ".join(f.name for f in fixtures)
    print(
        f"# corrupt inputs, full size: seed {args.seed}, {len(mutants)} mutants ({kinds_text}) of {inputs}, "
        f"plus the intact inputs; {wall:.0f} s{stopped}\n"
    )
    print(tally.table())
    shown = tally.violations if args.all else tally.violations[: args.violations]
    print(
        f"\n{len(tally.violations)} violations"
        + (f" (first {len(shown)})" if len(shown) < len(tally.violations) else "")
    )
    for v in shown:
        print("  " + v.line())
    return 1 if tally.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
