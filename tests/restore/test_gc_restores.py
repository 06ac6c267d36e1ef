"""``kg gc`` on a real Flink 2.3 job's checkpoints: only orphans go, every retained checkpoint restores.

``kg.versioned.RetainedCheckpoints`` (fixtures/java/versioned) runs UidJob on RocksDB with incremental
checkpoints, four triggered once every record is processed, three retained, and leaves them where Flink
wrote them (Flink reads ``shared/`` files at the absolute paths in ``_metadata``, so the directory is not
moved). Then orphans are made as production leaks them:

- the oldest retained checkpoint's ``_metadata`` is dropped: its ``chk-N`` files and the ``shared/`` SST
  files only it named are orphaned (the other two checkpoints' SSTs must stay);
- an uploaded SST no ``_metadata`` names (a copy of a real one under a new name), a nested file under
  ``shared/``, a ``taskowned/`` file, a stray in a completed checkpoint, an aborted older ``chk-N``;
- the newest ``chk-N`` without ``_metadata`` (may be in progress: kept without ``--force``);
- a link in ``shared/`` to a file outside (never followed, never deleted).

Every file is aged two hours (the job stopped then), ``kg gc --delete --older-than 0`` runs, and the files
removed must be exactly the orphans. The oracle is independent of kg's reader: a ``shared/`` or ``chk-N``
file is referenced by a checkpoint iff its name is in that checkpoint's ``_metadata`` bytes. Then real
Flink restores both remaining retained checkpoints (RocksDB) with every key's expected value.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.restore.harness import (
    JVM_FLAGS,
    UID_OWN_M,
    UID_OWN_P,
    UidRestoreRequest,
    assert_uid_job_restored,
    build_versioned_classpath,
    run_uid_restores,
)

pytestmark = pytest.mark.flink

JOB = "0000000000006b670000000000006763"  # RetainedCheckpoints.JOB_ID


def _kg(*args: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "keygroup_cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=300)  # fmt: skip


def _files(job: Path) -> dict[str, str]:
    return {
        p.relative_to(job).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(job.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path.as_posix()


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    classpath = build_versioned_classpath("2.3.0")
    work = tmp_path_factory.mktemp("gc-job")
    proc = subprocess.run(
        ["java", *JVM_FLAGS, "-cp", classpath, "kg.versioned.RetainedCheckpoints", str(work), "4", "3"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    job = work / "checkpoints" / JOB
    chks = sorted(int(p.name[4:]) for p in job.glob("chk-*"))
    assert len(chks) == 3, chks  # RETAINED
    dropped, kept = chks[0], chks[1:]
    metadata = {n: (job / f"chk-{n}" / "_metadata").read_bytes() for n in chks}
    (job / f"chk-{dropped}" / "_metadata").unlink()

    sst = sorted((job / "shared").iterdir())[0]
    strays = {
        f"shared/{uuid.uuid4()}": sst.read_bytes(),
        "shared/merged/segment-0": b"segment" * 100,
        "taskowned/tm-0/op-state": b"state" * 10,
        f"chk-{kept[-1]}/stray-upload": b"retried upload",
        f"chk-{dropped - 1}/aborted-state": b"aborted",
    }
    for rel, data in strays.items():
        _write(job / rel, data)
    in_progress = f"chk-{chks[-1] + 1}/in-flight"
    _write(job / in_progress, b"being written")
    precious = work / "outside-precious"
    precious.write_bytes(b"never deleted")
    (job / "shared" / "link-out").symlink_to(precious)

    then = time.time() - 7200
    for dirpath, dirnames, filenames in os.walk(job):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (then, then), follow_symlinks=False)
    os.utime(job, (then, then))

    before = _files(job)

    def named_by_kept(rel: str) -> bool:
        top, _, rest = rel.partition("/")
        if top == "shared":
            return any(rest.encode() in metadata[n] for n in kept)
        return top in {f"chk-{n}" for n in kept} and (
            rest == "_metadata" or rest.encode() in metadata[int(top[4:])]
        )

    expected_gone = {rel for rel in before if not named_by_kept(rel) and rel != in_progress}
    only_dropped = {
        rel for rel in before
        if rel.startswith("shared/") and rel.split("/", 1)[1].encode() in metadata[dropped]
        and not named_by_kept(rel)
    }  # fmt: skip
    done = _kg("gc", job, "--delete", "--older-than", "0", "--json")
    assert done.returncode == 0, done.stderr
    return {
        "job": job,
        "classpath": classpath,
        "kept": kept,
        "dropped": dropped,
        "before": before,
        "after": _files(job),
        "expected_gone": expected_gone,
        "only_dropped": only_dropped,
        "strays": set(strays),
        "in_progress": in_progress,
        "precious": precious,
        "doc": json.loads(done.stdout),
        "workdir": tmp_path_factory.mktemp("gc-restore"),
    }


def test_only_orphans_are_deleted(collected: dict[str, Any]) -> None:
    before, after, job = collected["before"], collected["after"], collected["job"]
    gone = set(before) - set(after)
    assert gone == collected["expected_gone"]
    assert collected["strays"] <= gone
    assert not any(rel.startswith(f"chk-{collected['dropped']}/") for rel in after)
    assert {rel: before[rel] for rel in after} == after  # what stays is byte for byte what was there
    assert collected["in_progress"] in after and (job / "shared" / "link-out").is_symlink()
    assert collected["precious"].read_bytes() == b"never deleted"
    for n in collected["kept"]:
        assert f"chk-{n}/_metadata" in after
    doc = collected["doc"]
    assert doc["deleted"]["files"] == len(gone) and doc["in_progress_checkpoint_id"] == int(
        collected["in_progress"].split("/")[0][4:]
    )
    assert f"chk-{collected['dropped']}" in doc["deleted"]["directories"]
    assert (
        not (job / "shared" / "merged").exists()
        and (job / "shared").is_dir()
        and (job / "taskowned").is_dir()
    )
    stay = sum(1 for r in after if r.startswith("shared/"))
    print(f"\nkg gc removed {len(gone)} files; {len(collected['only_dropped'])} shared SSTs only the dropped "
          f"checkpoint named; {stay} shared files stay")  # fmt: skip


def test_every_retained_checkpoint_still_restores(collected: dict[str, Any]) -> None:
    job, kept = collected["job"], collected["kept"]
    requests = [UidRestoreRequest(job / f"chk-{n}", UID_OWN_P, UID_OWN_M, backend="rocksdb") for n in kept]
    dumps = run_uid_restores("2.3.0", requests, collected["workdir"], collected["classpath"])
    for dump in dumps:
        assert_uid_job_restored(dump, UID_OWN_P, UID_OWN_M)
    for n in kept:
        assert _kg("verify", job / f"chk-{n}").returncode == 0


def test_force_then_takes_the_in_progress_checkpoint_and_nothing_is_left(collected: dict[str, Any]) -> None:
    job = collected["job"]
    forced = _kg("gc", job, "--delete", "--older-than", "0", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["deleted"]["files"] == 1
    assert not (job / collected["in_progress"]).parent.exists()
    left = json.loads(_kg("gc", job, "--json").stdout)
    assert left["orphans"] == [] and [s["path"] for s in left["skipped"]] == ["shared/link-out"]
