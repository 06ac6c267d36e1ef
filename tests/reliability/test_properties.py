"""Every command keeps kg's promises, at CI size (issue #37, part 2): one test per property and command.

1. Corrupt input (``property_harness.judge_mutant``): a seeded random corpus (bit flips, truncations,
   inserted bytes, int extremes at 4-byte aligned positions, over ``_metadata`` and the state files) and
   a targeted one (the first letter of serializer class names; a NATIVE savepoint's ``CURRENT``, SST
   bytes, SST magic, MANIFEST) through every command in-process; the tally is built once per module and
   each command's test fails with that command's violations.
2. ``kill -9`` of each writer's process group, once the files beside DEST reach a seeded count and once at
   a seeded moment: DEST is then absent or complete and verified, the input unchanged, nothing of the
   group survives, and ``kg clean`` removes every leftover (nothing stays in ``KG_SCRATCH_DIR`` either).
3. Three concurrent writers to one DEST: exactly one commits, the others exit 2 with one line, DEST
   verifies, nothing is left beside it.
4. ENOSPC on a tmpfs smaller than the output (mounted in a private mount namespace, ``unshare -Urm``):
   exit 5 with one line, DEST absent, nothing left on the tmpfs or in the scratch directory.
5. A low address-space limit (``RLIMIT_AS`` 300, 500 and 700 MiB): a documented exit code (0, or 5 with one
   line), never SIGABRT, no traceback, nothing left but a verified DEST.

Containment is ``test_containment.py``'s; the corrupt-input runs also check, with an audit hook, that no
file is opened outside the input, the intact original and DEST's directory (within the work directory
and the fixtures). ``KG_RELIABILITY_SEED`` changes the seed; ``benchmarks/reliability.py`` runs the
full size. Nothing here is skipped or expected to fail: a failure is a broken promise.
"""

from __future__ import annotations

import os
import random
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.reliability import property_harness as h

SEED = int(os.environ.get("KG_RELIABILITY_SEED", "20261129"))
#: The CI corpus: random mutants per fixture, and how many of the NATIVE fixture's serializer names.
CI_RANDOM = {"heap": 12, "native": 6}
CI_NATIVE_CLASSES = 3
KG = [sys.executable, "-m", "keygroup_cli"]
#: Seconds a subprocess may run before the test calls it a hang (never reached by a working kg).
HANG = 240


def ci_corpus(seed: int) -> list[h.Mutant]:
    """Return the CI corpus: every heap class-name mutant, a seeded few of the NATIVE fixture's, each kind
    of NATIVE database damage once, and the seeded random mutants."""
    rng = random.Random(seed)
    out = list(h.targeted_mutants(h.HEAP))
    native = h.targeted_mutants(h.NATIVE)
    classes = [m for m in native if ":class " in m.label]
    out += rng.sample(classes, CI_NATIVE_CLASSES)
    seen: set[str] = set()
    for m in native:
        kind = m.label.split(":", 1)[1].split(" ")[0] + (" emptied" if "emptied" in m.label else "")
        kind += " magic" if "magic" in m.label else ""
        if ":class " not in m.label and kind not in seen:
            seen.add(kind)
            out.append(m)
    for fixture in h.FIXTURE_SET:
        out += h.random_mutants(fixture, CI_RANDOM[fixture.name], seed)
    return out


@pytest.fixture(scope="module")
def corrupt_tally(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> h.Tally:
    tally = h.Tally()
    work = tmp_path_factory.mktemp("properties")
    h.baseline(tally, work)
    for mutant in ci_corpus(SEED):
        h.judge_mutant(tally, mutant, work)
    with pytestconfig.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\ncorrupt inputs (CI, seed {SEED}):\n{tally.table()}")
    return tally


def test_the_corpus_holds_every_kind_of_damage() -> None:
    labels = [m.label for m in ci_corpus(SEED)]
    assert any("VoidNamespaceSerializer" in label for label in labels)
    assert len([lb for lb in labels if lb.startswith("heap:class ")]) >= 6
    for kind in ("CURRENT", "emptied", "SST", "magic number", "MANIFEST"):
        assert any(kind in lb for lb in labels if lb.startswith("native:")), kind
    for kind in ("bit ", "cut at", "inserted", "int "):
        assert any(kind in lb for lb in labels if ":random#" in lb), kind
    assert any(":random#" in lb and ":_metadata:" in lb for lb in labels)
    assert any(":random#" in lb and ":_metadata:" not in lb for lb in labels)


@pytest.mark.parametrize("command", [c.name for c in h.COMMANDS])
def test_corrupt_input_keeps_every_promise(command: str, corrupt_tally: h.Tally) -> None:
    runs = corrupt_tally.counts[command]["runs"]
    assert runs >= 10, runs
    mine = [v.line() for v in corrupt_tally.violations if v.command == command]
    assert not mine, f"{len(mine)} broken promises in {runs} runs:\n" + "\n".join(mine[:60])


def test_the_audit_hook_sees_kgs_reads(tmp_path: Path) -> None:
    """The "reads outside" column is not blind: with nothing allowed, kg verify's reads of its input show."""
    src = tmp_path / "input"
    shutil.copytree(h.HEAP.path, src)
    hook = h.audit()
    hook.arm([tmp_path], [tmp_path / "elsewhere"])
    done = h.run_kg(["-q", "verify", str(src)])
    seen = hook.disarm()
    assert done.code == 0, done.stderr
    assert str(src / "_metadata") in seen and len(set(seen)) > 2, seen


def test_the_corpus_is_mostly_refused(corrupt_tally: h.Tally) -> None:
    """The damage is real: kg verify refuses most of the corpus (a corpus of no-ops would prove nothing)."""
    codes = corrupt_tally.codes["verify"]
    assert codes[3] >= sum(codes.values()) // 2, codes


# -- subprocess helpers ----------------------------------------------------------------------------------


def _env(scratch: Path) -> dict[str, str]:
    scratch.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "KG_SCRATCH_DIR": str(scratch),
            "TMPDIR": str(scratch)}  # fmt: skip


def _listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


def _verifies(dest: Path) -> tuple[bool, str]:
    done = h.verify_output(dest)
    return done.code == 0, (done.stderr or done.stdout).strip()[:300]


def _one_line(stderr: str) -> bool:
    return len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def _files_under(path: Path) -> int:
    return sum(len(files) for _d, _s, files in os.walk(path))


_WHOLE: dict[str, tuple[float, int, int]] = {}


def whole_run(writer: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[float, int, int]:
    """Run ``writer`` once, whole (once per module): the seconds it took, and its output's files and
    bytes. The kill points and tmpfs sizes are drawn from these."""
    if writer not in _WHOLE:
        work = tmp_path_factory.mktemp("whole")
        dest = work / "dest"
        started = time.monotonic()
        argv = [*KG, "-q", *h.writer_argv(writer, h.writer_fixture(writer), dest)]
        done = subprocess.run(argv, env=_env(work / "scratch"), capture_output=True, text=True, timeout=HANG)
        assert done.returncode == 0, (writer, done.stderr)
        files = [f for f in dest.rglob("*") if f.is_file()]
        _WHOLE[writer] = (time.monotonic() - started, len(files), sum(f.stat().st_size for f in files))
    return _WHOLE[writer]


# -- 2. kill -9 ------------------------------------------------------------------------------------------


def _kill_when(
    args: list[str], env: dict[str, str], dirs: list[Path], files: int | None, after: float | None
) -> tuple[bool, int]:
    """Run kg in its own process group; SIGKILL the group once ``dirs`` hold ``files`` files or after
    ``after`` seconds. Return whether it was killed (False: it finished first), and its status."""
    proc = subprocess.Popen([*KG, *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    started = time.monotonic()
    killed = False
    while proc.poll() is None:
        if time.monotonic() - started > HANG:
            break
        if (files is not None and sum(_files_under(d) for d in dirs) >= files) or (
            after is not None and time.monotonic() - started >= after
        ):
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.002)  # polling; no assertion depends on when the kill lands
    try:
        proc.wait(HANG)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        raise AssertionError(f"hang: {args}") from None
    # The group: Spark or a JVM would be in it; nothing may survive the kill.
    try:
        os.killpg(proc.pid, 0)
        survivors = True
    except ProcessLookupError:
        survivors = False
    assert not survivors, f"a process of the killed group survives: {args}"
    return killed, proc.returncode


@pytest.mark.parametrize("writer", h.WRITER_NAMES)
def test_kill_9_leaves_the_old_state_or_a_verified_new_one(
    writer: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    fixture = h.writer_fixture(writer)
    before = h.tree_digest(fixture.path)
    seconds, files, _bytes = whole_run(writer, tmp_path_factory)
    rng = random.Random(f"{SEED}:kill:{writer}")
    # Two kills synchronised on the files the writer has produced beside DEST (or in its scratch), one at
    # a seeded moment; a run that finishes before its kill point is checked as a whole run, and another
    # seeded moment is drawn (up to 5 times) so that at least one kill lands.
    points = [
        (rng.randint(1, files), None),
        (rng.randint(1, files), None),
        (None, rng.uniform(0.05, seconds)),
    ]
    killed = 0
    problems = []
    for i in range(8):
        if i >= len(points):
            if killed or i >= len(points) + 5:
                break
            points.append((None, rng.uniform(0.05, seconds)))
        count, after = points[i]
        parent = tmp_path / f"kill-{i}"
        parent.mkdir()
        dest = parent / "dest"
        scratch = tmp_path / f"scratch-{i}"
        env = _env(scratch)
        argv = ["-q", *h.writer_argv(writer, fixture, dest)]
        was_killed, status = _kill_when(argv, env, [parent, scratch], count, after)
        killed += was_killed
        where = f"kill {i} (at {count} files)" if count else f"kill {i} (after {after:.2f} s)"
        if not was_killed and status != 0:
            problems.append(f"{where}: finished first with exit {status}")
        if h.tree_digest(fixture.path) != before:
            problems.append(f"{where}: the input changed")
        if dest.exists():
            ok, why = _verifies(dest)
            if not ok:
                problems.append(f"{where}: DEST exists and fails kg verify: {why}")
        cleaned = h.run_kg(["-q", "clean", str(dest)])
        if cleaned.code != 0:
            problems.append(f"{where}: kg clean exits {cleaned.code}: {cleaned.stderr.strip()[:200]}")
        left = [n for n in _listing(parent) if n != "dest"]
        if left:
            problems.append(f"{where}: left beside DEST after kg clean: {left}")
        if _listing(scratch):
            problems.append(
                f"{where}: left in KG_SCRATCH_DIR, which kg clean does not reach: {_listing(scratch)}"
            )
    assert killed >= 1, "no kill landed before the writer finished"
    assert not problems, "\n".join(problems)


# -- 3. concurrent writers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("writer", h.WRITER_NAMES)
def test_three_concurrent_writers_have_exactly_one_winner(writer: str, tmp_path: Path) -> None:
    fixture = h.writer_fixture(writer)
    parent = tmp_path / "out"
    parent.mkdir()
    dest = parent / "dest"
    env = _env(tmp_path / "scratch")
    procs = [
        subprocess.Popen(
            [*KG, "-q", *h.writer_argv(writer, fixture, dest)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(3)
    ]
    results = [(p.wait(HANG), p.stderr.read()) for p in procs]
    winners = [r for r in results if r[0] == 0]
    assert len(winners) == 1, results
    for code, stderr in results:
        if code != 0:
            assert code == 2 and _one_line(stderr), (code, stderr)
    assert _listing(parent) == ["dest"]
    ok, why = _verifies(dest)
    assert ok, why


# -- 4. ENOSPC ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("writer", h.WRITER_NAMES)
def test_no_space_left_is_exit_5_and_nothing_left(
    writer: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    fixture = h.writer_fixture(writer)
    before = h.tree_digest(fixture.path)
    _seconds, _files, size = whole_run(writer, tmp_path_factory)
    # A tmpfs of half the output (at most 4 MiB, at least 8 KiB): the write fails part-way.
    kib = max(8, min(4096, size // 2048))
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    dest = tiny / "dest"
    listing = tmp_path / "listing"
    scratch = tmp_path / "scratch"
    kg = shlex.join([*KG, "-q", *h.writer_argv(writer, fixture, dest)])
    q = shlex.quote
    script = (f"mount -t tmpfs -o size={kib}k none {q(str(tiny))} || exit 99; {kg}; status=$?; "
              f"ls -A {q(str(tiny))} > {q(str(listing))}; exit $status")  # fmt: skip
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], env=_env(scratch), capture_output=True,
                          text=True, timeout=HANG)  # fmt: skip
    assert done.returncode != 99, f"cannot mount a tmpfs here: {done.stderr}"
    assert done.returncode == 5 and _one_line(done.stderr), (kib, done.returncode, done.stderr[-2000:])
    assert "no space left" in done.stderr.lower(), done.stderr
    assert listing.read_text().split() == [], f"left on the full file system: {listing.read_text().split()}"
    assert _listing(scratch) == [], f"left in the scratch directory: {_listing(scratch)}"
    assert h.tree_digest(fixture.path) == before


# -- 5. low address space ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mib", [300, 500, 700])
@pytest.mark.parametrize("writer", h.WRITER_NAMES)
def test_low_address_space_is_a_documented_exit(writer: str, mib: int, tmp_path: Path) -> None:
    fixture = h.writer_fixture(writer)
    parent = tmp_path / "out"
    parent.mkdir()
    dest = parent / "dest"
    scratch = tmp_path / "scratch"
    limit = mib * 1024 * 1024

    def limit_address_space() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run([*KG, "-q", *h.writer_argv(writer, fixture, dest)], env=_env(scratch),
                          capture_output=True, text=True, timeout=HANG,
                          preexec_fn=limit_address_space)  # fmt: skip
    assert done.returncode not in (-6, 134), f"SIGABRT: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, 5), (done.returncode, done.stderr[-2000:])
    if done.returncode == 0:
        assert _listing(parent) == ["dest"]
        ok, why = _verifies(dest)
        assert ok, why
    else:
        assert _one_line(done.stderr), done.stderr[-2000:]
        assert _listing(parent) == [], _listing(parent)
    assert _listing(scratch) == [], f"left in the scratch directory: {_listing(scratch)}"
