"""``kg gc``'s promises, which differ from the other commands' (it deletes, in its input, on purpose).

- ``kill -9`` mid-delete: what is gone is only orphans, never a referenced file or a ``_metadata``; the
  retained checkpoint still passes ``kg verify``, and a second run removes the rest.
- Containment: nothing outside the directory is deleted; links (to files, to folders, a linked
  ``taskowned/``) are neither followed nor deleted; a job directory reached through a link is swept in place.
- A damaged ``_metadata`` (the corrupt-input property): exit 3 with one line, nothing deleted.

These do not fit ``property_harness.COMMANDS``, whose table holds readers and writers of a savepoint that
must leave their input byte-identical. ``KG_RELIABILITY_SEED`` changes the seed.
"""

from __future__ import annotations

import hashlib
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import FIXTURES

SEED = int(os.environ.get("KG_RELIABILITY_SEED", "20261129"))
CASE = FIXTURES / "flink" / "2.3" / "uid-rocksdb-incremental-p3"
JOB = "0000000000006b670000000000007569"
STRAYS = 3000
HANG = 240


def _kg(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "keygroup_cli", *map(str, args)], capture_output=True,
                          text=True, timeout=HANG, env={**os.environ, "NO_COLOR": "1"})  # fmt: skip


def _digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _aged(root: Path) -> None:
    then = time.time() - 7200
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (then, then), follow_symlinks=False)
    os.utime(root, (then, then))


def _job_with_strays(parent: Path) -> tuple[Path, set[str]]:
    job = parent / JOB
    shutil.copytree(CASE / JOB, job)
    strays = set()
    for i in range(STRAYS):
        rel = f"shared/leak-{i // 500}/sst-{i}" if i % 3 else f"taskowned/tm/f-{i}"
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(b"x" * (i % 7))
        strays.add(rel)
    _aged(job)
    return job, strays


def _count(job: Path) -> int:
    return sum(len(files) for _d, _s, files in os.walk(job))


def test_kill_9_mid_delete_removes_only_orphans(tmp_path: Path) -> None:
    rng = random.Random(f"{SEED}:gc-kill")
    killed = 0
    for attempt in range(6):
        job, strays = _job_with_strays(tmp_path / f"run-{attempt}")
        before = _digest(job)
        total = _count(job)
        stop_at = total - rng.randint(1, STRAYS - 1)
        proc = subprocess.Popen([sys.executable, "-m", "keygroup_cli", "gc", str(job), "--delete",
                                 "--older-than", "0"], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        started = time.monotonic()
        while proc.poll() is None and time.monotonic() - started < HANG:
            if _count(job) <= stop_at:
                os.killpg(proc.pid, signal.SIGKILL)
                killed += 1
                break
            time.sleep(0.001)  # polling; nothing asserted depends on when the kill lands
        proc.wait(HANG)
        after = _digest(job)
        gone = set(before) - set(after)
        assert gone <= strays, sorted(gone - strays)[:5]
        assert {k: before[k] for k in after} == after
        assert _kg("verify", job / "chk-3").returncode == 0
        again = _kg("gc", job, "--delete", "--older-than", "0", "--json")
        assert again.returncode == 0, again.stderr
        assert set(before) - set(_digest(job)) == strays
        if killed:
            break
    assert killed >= 1, "no kill landed before kg gc finished"


def test_nothing_outside_is_deleted_and_links_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    for name in ("a", "deep/b", "deep/c"):
        (outside / name).write_bytes(b"keep me")
    real = tmp_path / "real"
    job, strays = _job_with_strays(real)
    (job / "shared" / "to-file").symlink_to(outside / "a")
    (job / "shared" / "to-dir").symlink_to(outside / "deep", target_is_directory=True)
    shutil.rmtree(job / "taskowned")
    (job / "taskowned").symlink_to(outside, target_is_directory=True)
    strays = {s for s in strays if not s.startswith("taskowned/")}
    linked = tmp_path / "linked-job"
    linked.symlink_to(job, target_is_directory=True)
    _aged(job)
    outside_before = _digest(outside)
    before = _digest(job)
    done = _kg("gc", linked, "--delete", "--older-than", "0", "--force", "--json")
    assert done.returncode == 0, done.stderr
    assert _digest(outside) == outside_before and sorted(p.name for p in outside.rglob("*")) == [
        "a", "b", "c", "deep"
    ]  # fmt: skip
    assert set(before) - set(_digest(job)) == strays
    for link in ("shared/to-file", "shared/to-dir", "taskowned"):
        assert (job / link).is_symlink(), link
    assert linked.is_symlink()


def test_a_damaged_metadata_deletes_nothing(tmp_path: Path) -> None:
    job, _strays = _job_with_strays(tmp_path)
    data = (job / "chk-3" / "_metadata").read_bytes()
    rng = random.Random(f"{SEED}:gc-corrupt")
    for cut in sorted(rng.sample(range(8, len(data)), 5)):
        (job / "chk-3" / "_metadata").write_bytes(data[:cut])
        before = _digest(job)
        done = _kg("gc", job, "--delete", "--older-than", "0", "--force")
        assert done.returncode == 3, (cut, done.returncode, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
        assert _digest(job) == before


def test_a_refused_deletion_is_exit_5_with_one_line(tmp_path: Path) -> None:
    """A read-only shared/ (bind-mounted in a private mount namespace, ``unshare -Urm``): exit 5, one line."""
    job, strays = _job_with_strays(tmp_path)
    before = _digest(job)
    shared = shlex.quote(str(job / "shared"))
    kg = shlex.join([sys.executable, "-m", "keygroup_cli", "gc", str(job), "--delete", "--older-than", "0"])
    script = f"mount --bind {shared} {shared} && mount -o remount,bind,ro {shared} || exit 99; {kg}"
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True,
                          timeout=HANG, env={**os.environ, "KG_PROGRESS": "off"})  # fmt: skip
    assert done.returncode != 99, f"cannot mount read-only here: {done.stderr}"
    assert done.returncode == 5, (done.returncode, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "DELETE" not in done.stderr
    assert "cannot delete" in done.stderr and "Read-only file system" in done.stderr
    gone = set(before) - set(_digest(job))
    assert gone <= strays and not any(g.startswith("shared/") for g in gone)


def test_concurrent_deletions_remove_only_orphans(tmp_path: Path) -> None:
    """Three ``kg gc --delete`` at once on one directory: each exits 0 or 5 with one line; only orphans go."""
    job, strays = _job_with_strays(tmp_path)
    before = _digest(job)
    args = [sys.executable, "-m", "keygroup_cli", "gc", str(job), "--delete", "--older-than", "0"]
    procs = [
        subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "KG_PROGRESS": "off"},
        )  # fmt: skip
        for _ in range(3)
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=HANG)
        assert proc.returncode in (0, 5), (proc.returncode, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    after = _digest(job)
    assert set(before) - set(after) <= strays
    assert {k: before[k] for k in after} == after
    assert _kg("verify", job / "chk-3").returncode == 0
    again = _kg("gc", job, "--delete", "--older-than", "0")
    assert again.returncode == 0, again.stderr
    assert set(before) - set(_digest(job)) == strays


def test_low_memory_is_a_clean_refusal_or_a_complete_run(tmp_path: Path) -> None:
    """Under a 300 MiB address-space limit kg gc finishes or stops with one line; nothing referenced goes."""
    job, strays = _job_with_strays(tmp_path)
    before = _digest(job)
    limit = 300 * 1024 * 1024
    code = (
        "import resource, runpy, sys; "
        f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
        "sys.argv = ['kg', *sys.argv[1:]]; runpy.run_module('keygroup_cli', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code, "gc", str(job), "--delete", "--older-than", "0"],
                          capture_output=True, text=True, timeout=HANG,
                          env={**os.environ, "KG_PROGRESS": "off"})  # fmt: skip
    assert done.returncode in (0, 5), (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 1, done.stderr
    gone = set(before) - set(_digest(job))
    assert gone <= strays
    if done.returncode == 0:
        assert gone == strays
