"""Corrupt input never becomes a wrong output: a seeded corpus of mutants through every kg command.

The CI sample runs one random file per file type and mutation (about two minutes); ``KG_RELIABILITY_FULL=1``
runs every file of a larger corpus with three seeds per random mutation. ``KG_RELIABILITY_SEED`` changes the
seed. Each test prints its counts table; docs/reliability.md holds the full-size figures.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.reliability.corrupt_harness import (
    CI_CORPUS,
    COMMANDS,
    DOCUMENTED,
    FIXTURES,
    FULL_CORPUS,
    LAYOUTS,
    Tally,
    full_run,
    judge,
    judge_targeted,
    run_kg,
    state_files,
    targeted_mutants,
)

SEED = int(os.environ.get("KG_RELIABILITY_SEED", "20261123"))
#: The address-space limit the allocation tests run kg under.
ADDRESS_SPACE = 3 * 1024**3


def test_corrupt_inputs_never_become_wrong_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = full_run()
    tally = Tally()
    judge(tally, COMMANDS, FULL_CORPUS if full else CI_CORPUS, SEED, full, tmp_path)
    with capsys.disabled():
        print(f"\ncorrupt inputs ({'full' if full else 'CI sample'}, seed {SEED}):\n{tally.table()}")
    total = tally.total()
    assert total["runs"] > 0 and total["clean errors"] > 0
    for bad in ("crashes", "hangs", "wrong outputs", "inputs modified", "partial outputs", "leftovers"):
        assert total[bad] == 0, "\n".join(tally.bad[:40])


def test_every_file_type_and_mutation_is_in_the_corpus() -> None:
    types = {t for corpus in CI_CORPUS for t in state_files(corpus)}
    assert types == {
        "_metadata",
        "keyed",
        "operator",
        "keyed-snappy",
        "operator-snappy",
        "manifest",
        "parquet-keyed",
        "parquet-operator",
    }


# -- targeted: enums, offsets and lengths, in every layout --------------------------------------------------


def test_enum_offset_and_length_damage_is_refused_in_every_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = full_run()
    tally = Tally()
    judge_targeted(tally, targeted_mutants(LAYOUTS, SEED, full), tmp_path)
    with capsys.disabled():
        print(f"\ntargeted mutants ({'full' if full else 'CI sample'}, seed {SEED}):\n{tally.table()}")
    for refusing in ("verify", "rescale (same maxP)", "rescale (new maxP)"):
        counts = tally.counts[refusing]
        assert counts["runs"] > 0 and counts["clean errors"] == counts["runs"], "\n".join(tally.bad[:40])
    total = tally.total()
    for bad in ("crashes", "hangs", "wrong outputs", "inputs modified", "partial outputs", "leftovers"):
        assert total[bad] == 0, "\n".join(tally.bad[:40])


def test_every_layout_has_mode_string_and_offset_mutants() -> None:
    mutants = targeted_mutants(LAYOUTS, SEED, full=False)
    for layout in LAYOUTS:
        fields = {m.field for m in mutants if m.layout == layout}
        assert "mode string SPLIT_DISTRIBUTE" in fields, layout.name
        assert {"distribution mode ordinal", "operator element offset"} <= fields, (layout.name, fields)
        assert fields & {"key-group offset", "key-group range start"}, (layout.name, fields)
        assert fields & {"state file size", "inline state length"}, (layout.name, fields)
    every = {m.field for m in mutants}
    assert {"mode string UNION", "mode string BROADCAST", "inline state length"} <= every
    # Mode strings in operator-state files, and inside _metadata where operator state is inline.
    assert {m.relpath == "_metadata" for m in mutants if m.field.startswith("mode string")} == {True, False}


def test_a_flipped_mode_name_is_exit_3_on_spark_too(tmp_path: Path) -> None:
    """The checks run on the driver before any task: the Spark engine refuses as the local one does."""
    mode = next(
        m
        for m in targeted_mutants(LAYOUTS, SEED, full=False)
        if m.field == "mode string SPLIT_DISTRIBUTE" and m.relpath != "_metadata"
    )
    work = tmp_path / "in"
    shutil.copytree(mode.layout.root, work)
    target = work / mode.relpath
    data = bytearray(target.read_bytes())
    data[mode.position] ^= mode.xor
    target.write_bytes(bytes(data))
    dest = tmp_path / "out"
    result = run_kg(
        ["-q", "rescale", str(work / mode.layout.input), "--to", "2", "-m", "256"]
        + ["--out", str(dest), "--engine", "spark"]
    )
    assert result.code == 3, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "distribution mode" in result.stderr
    assert not dest.exists()


# -- no allocation from untrusted sizes ---------------------------------------------------------------


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


#: The child that runs a batch of kg commands in one interpreter, each through kg's error boundary with
#: stdout and stderr captured (corrupt_harness.run_kg, which also turns a hang into a None status).
_BATCH_CHILD = """
import json, sys
from tests.reliability.corrupt_harness import run_kg
done = [run_kg(argv) for argv in json.loads(sys.stdin.read())]
print(json.dumps([[r.code, r.stdout, r.stderr] for r in done]))
"""


def _kg_batch(argvs: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Run kg commands in one fresh interpreter under a 3 GB address-space limit, one result each.

    The limit holds for the whole batch: one command that allocates from an untrusted size fails there
    as it would alone (a fresh interpreter per command took about a second each).
    """
    proc = subprocess.run(
        [sys.executable, "-c", _BATCH_CHILD],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=120 + 60 * len(argvs),
        preexec_fn=_limit_address_space,
        env={**os.environ, "KG_QUIET": "1"},
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.splitlines()[-1])
    assert len(results) == len(argvs)
    return [
        subprocess.CompletedProcess(argv, code if code is not None else -9, out, err)
        for argv, (code, out, err) in zip(argvs, results, strict=True)
    ]


def _assert_one_line_error(proc: subprocess.CompletedProcess[str], what: str) -> None:
    assert proc.returncode in DOCUMENTED, (what, proc.returncode, proc.stderr[-2000:])
    if what.startswith("verify") and proc.returncode == 3 and "INVALID" in proc.stdout:
        return  # kg verify reports its findings on stdout
    assert len(proc.stderr.strip().splitlines()) == 1, (what, proc.stderr[-2000:])


def _count_positions(data: bytes, start: int, end: int) -> list[int]:
    """Return positions of big-endian ints in 1..4096 (likely counts and lengths) in ``data[start:end]``."""
    return [
        i for i in range(start, min(end, len(data)) - 3) if 0 < struct.unpack_from(">i", data, i)[0] <= 4096
    ]


@pytest.mark.parametrize("claim", [0x7FFFFFFF, 0x40000000])
def test_a_metadata_claiming_huge_counts_fails_fast(tmp_path: Path, claim: int) -> None:
    source = FIXTURES / "flink/2.3/heap-files-p3-maxp128-string"
    data = (source / "_metadata").read_bytes()
    rng = random.Random(SEED)
    positions = _count_positions(data, 8, len(data))
    sample = positions if full_run() else sorted(rng.sample(positions, 12))
    outcomes: Counter[int] = Counter()
    argvs: list[list[str]] = []
    for pos in sample:
        work = tmp_path / f"m{pos}"
        shutil.copytree(source, work)
        mutated = bytearray(data)
        struct.pack_into(">i", mutated, pos, claim)
        (work / "_metadata").write_bytes(bytes(mutated))
        argvs += [
            ["inspect", str(work)],
            ["verify", str(work)],
            ["rescale", str(work), "--to", "2", "--out", str(tmp_path / f"o{pos}"), "--engine", "local"],
        ]
    for argv, proc in zip(argvs, _kg_batch(argvs), strict=True):
        outcomes[proc.returncode] += 1
        if proc.returncode != 0:
            _assert_one_line_error(proc, f"{argv[0]} with {claim:#x} in {Path(argv[1]).name}")
    assert outcomes[3] > 0


def test_a_manifest_claiming_2_62_rows_fails_fast(tmp_path: Path) -> None:
    work = tmp_path / "snap"
    shutil.copytree(FIXTURES / "snapshots/valid", work)
    manifest = json.loads((work / "_manifest.json").read_text())
    keyed = manifest["operators"][0]["keyed_files"][0]
    keyed["key_group_rows"][0] += 2**62 - keyed["rows"]
    keyed["rows"] = 2**62
    (work / "_manifest.json").write_text(json.dumps(manifest))
    argvs = [
        ["inspect", str(work)],
        ["verify", str(work)],
        ["check", str(work), "-p", "2"],
        ["plan", str(work), "--to", "3"],
        ["rescale", str(work), "--to", "3", "--out", str(tmp_path / "out"), "--engine", "local"],
    ]
    for argv, proc in zip(argvs, _kg_batch(argvs), strict=True):
        if proc.returncode != 0:
            _assert_one_line_error(proc, argv[0])
        assert argv[0] not in ("verify", "rescale") or proc.returncode == 3, (
            argv[0],
            proc.returncode,
            proc.stderr,
        )
    assert not (tmp_path / "out").exists()
