"""``kg gc``: dry run, --delete's refusals and exit codes, the HA leader check, JSON; real Flink checkpoints.

Copies of ``uid-rocksdb-incremental-p3`` (RocksDB incremental, ``shared/``) and of
``heap-checkpoint-p2-maxp128-string`` (whose HA ConfigMap export is in fixtures/ha/2.3/kubernetes) in a temp
directory; the fixtures are never modified.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from keygroup_cli.core.errors import ExitCode
from tests.conftest import FIXTURES, ROOT

CASE = FIXTURES / "flink" / "2.3" / "uid-rocksdb-incremental-p3"
JOB = "0000000000006b670000000000007569"
HEAP = FIXTURES / "flink" / "2.3" / "heap-checkpoint-p2-maxp128-string"
HEAP_JOB = "0000000000006b670000000000000005"
K8S = FIXTURES / "ha" / "2.3" / "kubernetes"


def _aged(job: Path, seconds: float = 7200) -> Path:
    then = time.time() - seconds
    for dirpath, dirnames, filenames in os.walk(job):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (then, then), follow_symlinks=False)
    os.utime(job, (then, then))
    return job


def _with_orphans(tmp_path: Path) -> Path:
    job = tmp_path / "checkpoints" / JOB
    shutil.copytree(CASE / JOB, job)
    for rel in ("shared/stray-1", "taskowned/tm/stray-2", "chk-2/aborted", "chk-4/in-progress"):
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(b"orphan")
    return _aged(job)


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_dry_run_lists_orphans_with_sizes_and_deletes_nothing(kg, tmp_path):
    job = _with_orphans(tmp_path)
    before = _digest(job)
    done = kg("gc", tmp_path / "checkpoints", "--table", "plain")
    assert done.exit_code == 0, done.stderr
    for rel in ("shared/stray-1", "taskowned/tm/stray-2", "chk-2/aborted", "chk-4/in-progress"):
        assert rel in done.stdout
    assert "would delete" in done.stdout and "may be in progress" in done.stdout
    assert "referenced: 31 files" in done.stdout and "would delete: 3 files, 18 B" in done.stdout
    doc = kg("gc", job, "--json").json()
    assert doc["command"] == "gc" and doc["dry_run"] is True and doc["job_id"] == JOB
    assert doc["checkpoint_ids"] == [3] and doc["in_progress_checkpoint_id"] == 4 and doc["input"] == str(job)
    assert {o["path"]: o["status"] for o in doc["orphans"]} == {
        "shared/stray-1": "would_delete",
        "taskowned/tm/stray-2": "would_delete",
        "chk-2/aborted": "would_delete",
        "chk-4/in-progress": "held",
    }
    assert doc["orphaned_bytes"] == 24 and doc["deletable_bytes"] == 18 and doc["referenced"]["files"] == 31
    assert _digest(job) == before


def test_delete_removes_only_orphans_then_the_folders_they_emptied(kg, tmp_path):
    job = _with_orphans(tmp_path)
    before = _digest(job)
    done = kg("gc", job, "--delete", "--older-than", "0", "--json")
    assert done.exit_code == 0, done.stderr
    doc = done.json()
    assert doc["deleted"] == {"files": 3, "bytes": 18, "directories": ["chk-2", "taskowned/tm"]}
    gone = {"shared/stray-1", "taskowned/tm/stray-2", "chk-2/aborted"}
    assert _digest(job) == {k: v for k, v in before.items() if k not in gone}
    assert not (job / "chk-2").exists() and (job / "taskowned").is_dir() and (job / "chk-4").is_dir()
    assert kg("verify", job / "chk-3").exit_code == 0
    forced = kg("gc", job, "--delete", "--older-than", "0", "--force", "--json").json()
    assert forced["deleted"]["files"] == 1 and not (job / "chk-4").exists()
    assert kg("gc", job, "--json").json()["orphans"] == []


def test_refusals_and_their_exit_codes(kg, tmp_path):
    job = _with_orphans(tmp_path)
    before = _digest(job)
    usage = kg("gc", job, "--delete")
    assert usage.exit_code == ExitCode.USAGE and "--older-than" in usage.stderr
    bad = kg("gc", job, "--older-than", "soon", "--json")
    assert bad.exit_code == ExitCode.USAGE and bad.json()["error"]["code"] == "INVALID_DURATION"
    one = kg("gc", job / "chk-3", "--json")
    assert one.exit_code == 2 and one.json()["error"]["code"] == "GC_NOT_A_JOB_DIRECTORY"
    nothing = kg("gc", tmp_path / "nothing")
    assert nothing.exit_code == 3 and len(nothing.stderr.strip().splitlines()) == 1
    # A fresh write: a job may still run there, and no HA store says otherwise.
    (job / "shared" / "just-written").write_bytes(b"sst")
    live = kg("gc", job, "--delete", "--older-than", "1d", "--json")
    assert live.exit_code == ExitCode.LEADER_LIVE == 7
    assert live.json()["error"]["code"] == "JOB_MAY_BE_LIVE" and "--ha" in live.stderr
    (job / "shared" / "just-written").unlink()
    # A damaged _metadata: nothing is decided, nothing deleted (exit 3); an unknown version: exit 4.
    shutil.copytree(job / "chk-3", job / "chk-5")
    data = (job / "chk-5" / "_metadata").read_bytes()
    (job / "chk-5" / "_metadata").write_bytes(data[:100])
    cut = kg("gc", job, "--delete", "--older-than", "0", "--force")
    assert cut.exit_code == ExitCode.SNAPSHOT_INVALID and "Traceback" not in cut.stderr
    (job / "chk-5" / "_metadata").write_bytes(data[:4] + (99).to_bytes(4, "big") + data[8:])
    assert kg("gc", job, "--delete", "--older-than", "0", "--force").exit_code == ExitCode.UNSUPPORTED
    shutil.rmtree(job / "chk-5")
    assert _digest(job) == before


def test_older_than_keeps_young_orphans(kg, tmp_path):
    job = _with_orphans(tmp_path)
    young = job / "shared" / "stray-1"
    os.utime(young, None)  # modified now
    _aged(job / "chk-3")
    os.utime(job, (time.time() - 7200,) * 2)
    os.utime(job / "shared", (time.time() - 7200,) * 2)
    done = kg("gc", job, "--delete", "--older-than", "1h", "--force", "--json")
    assert done.exit_code == 0, done.stderr
    statuses = {o["path"]: o["status"] for o in done.json()["orphans"]}
    assert statuses["shared/stray-1"] == "held" and young.exists()
    assert statuses["chk-2/aborted"] == "deleted"


def _cluster_map(renewed: datetime) -> dict:
    lease = {
        "holderIdentity": "kg-ha-jobmanager-7f9c",
        "leaseDuration": 15.0,
        "acquireTime": "2026-01-01T00:00:00.000000Z",
        "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "leaderTransitions": 0,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kg-ha-cluster-config-map",
            "annotations": {"control-plane.alpha.kubernetes.io/leader": json.dumps(lease)},
        },
        "data": {
            f"org.apache.flink.k8s.leader.job-{HEAP_JOB}": "5d9c1c9a-2a8f-4d0e-9d3b-1f0c3c1d2e4f,"
            "pekko.tcp://flink@10.0.0.7:6123/user/rpc/jobmanager_2"
        },
    }


def test_the_ha_leader_check_decides_when_given(kg, tmp_path, monkeypatch):
    """--ha: a live lease refuses (exit 7) even on an old directory; an expired one allows a fresh one."""
    monkeypatch.chdir(ROOT)  # the committed export names its storage files relative to the checkout
    job = tmp_path / HEAP_JOB
    shutil.copytree(HEAP / HEAP_JOB, job)
    (job / "shared").mkdir(exist_ok=True)
    (job / "shared" / "leaked").write_bytes(b"x" * 10)
    configmap = yaml.safe_load((K8S / "configmap.yaml").read_text())

    def export(renewed: datetime) -> Path:
        path = tmp_path / f"ha-{renewed.timestamp():.0f}.yaml"
        doc = {"apiVersion": "v1", "kind": "List", "items": [configmap, _cluster_map(renewed)]}
        path.write_text(yaml.safe_dump(doc))
        return path

    _aged(job)
    live = kg(
        "gc", job, "--delete", "--older-than", "0", "--ha", export(datetime.now(timezone.utc)), "--json"
    )
    assert live.exit_code == ExitCode.LEADER_LIVE and live.json()["error"]["code"] == "HA_LEADER_LIVE"
    assert "jobmanager_2" in live.stderr and (job / "shared" / "leaked").exists()
    (job / "shared" / "leaked").write_bytes(b"y" * 10)  # fresh: only the HA store can tell
    stale = export(datetime.now(timezone.utc) - timedelta(minutes=5))
    dry = kg("gc", job, "--ha", stale, "--json").json()
    assert dry["liveness"]["method"] == "ha" and dry["liveness"]["live"] is False
    done = kg("gc", job, "--delete", "--older-than", "0", "--ha", stale, "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["deleted"]["files"] == 1 and not (job / "shared" / "leaked").exists()
    assert kg("verify", job / "chk-2").exit_code == 0
    # A directory not named by its job id: kg cannot tell which job of the store writes there.
    renamed = job.rename(tmp_path / "my-job")
    unknown = kg("gc", renamed, "--delete", "--older-than", "0", "--ha", stale, "--json")
    assert unknown.exit_code == ExitCode.USAGE and unknown.json()["error"]["code"] == "GC_JOB_UNKNOWN"


def test_help_has_examples_and_exit_codes(kg):
    text = kg("gc", "--help").stdout
    assert "Examples:" in text and "--older-than" in text and "7 a job may still write" in text


def test_the_document_says_what_became_of_each_orphan(tmp_path):
    from keygroup_cli.cli.gc_render import gc_document
    from keygroup_cli.execution.routes.gc import GcResult, collect_garbage
    from keygroup_cli.storage.sweep import Removal

    job = _with_orphans(tmp_path)
    planned = collect_garbage(str(job))
    stray = next(o for o in planned.plan.orphans if o.path == "shared/stray-1")
    aborted = next(o for o in planned.plan.orphans if o.path == "chk-2/aborted")
    # As a --delete run reports a file rewritten between its listing and its deletion, and one deleted.
    result = GcResult(planned.plan, None, Removal((aborted.stored(),), (stray.stored(),), ("chk-2",)))
    doc = gc_document(result, typed="ckpt", delete=True, older_than=0.0)
    assert {o["path"]: o["status"] for o in doc["orphans"]} == {
        "shared/stray-1": "changed",
        "chk-2/aborted": "deleted",
        "taskowned/tm/stray-2": "kept",
        "chk-4/in-progress": "held",
    }
    assert doc["deleted"] == {"files": 1, "bytes": 6, "directories": ["chk-2"]} and doc["dry_run"] is False
