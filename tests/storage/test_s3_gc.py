"""``kg gc`` on an object store (moto's S3 server): orphans listed and deleted, referenced objects untouched.

The RocksDB incremental checkpoint ``uid-rocksdb-incremental-p3`` is put on S3 as Flink writes one there:
its ``shared/`` handles are absolute ``s3://`` URIs (half of them with Flink's ``s3p://`` alias) under the
job's prefix. Stray objects are added beside them; kg gc must name exactly those, refuse to delete while the
objects are fresh (no HA store given), delete them with ``--force``, and leave a checkpoint whose every
file ``kg check`` finds with its size.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.errors import KgError
from keygroup_cli.execution.routes.gc import collect_garbage
from keygroup_cli.flink import FileHandle, IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from tests.conftest import FIXTURES

CASE = FIXTURES / "flink" / "2.3" / "uid-rocksdb-incremental-p3"
JOB = "0000000000006b670000000000007569"
BUCKET = "kg-gc"
STRAYS = ("shared/leaked-sst", "taskowned/tm-0/state", "chk-2/aborted", "chk-3/retried", "chk-4/in-flight")


def _on_s3(s3_server: Any, tmp_path: Path, name: str) -> str:
    """Upload a copy of CASE's job to ``s3://kg-gc/<name>/<job>`` with s3:// handles, plus STRAYS."""
    local = tmp_path / name / JOB
    shutil.copytree(CASE / JOB, local)
    prefix = f"{s3_server.bucket(BUCKET)}/{name}"
    snapshot = read_flink_metadata(local / "chk-3")
    count = [0]

    def on_s3(entry):
        if not isinstance(entry.handle, FileHandle):
            return entry
        count[0] += 1
        scheme = "s3p" if count[0] % 2 else "s3"
        uri = f"{scheme}://{BUCKET}/{name}/{JOB}/shared/{entry.handle.path.rsplit('/', 1)[-1]}"
        return dataclasses.replace(entry, handle=FileHandle(uri, entry.handle.size))

    operators = []
    for op in snapshot.metadata.operators:
        subs = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, IncrementalKeyedHandle):
                keyed = dataclasses.replace(
                    keyed, shared=tuple(map(on_s3, keyed.shared)), private=tuple(map(on_s3, keyed.private))
                )
            subs.append(dataclasses.replace(sub, managed_keyed_state=keyed))
        operators.append(dataclasses.replace(op, subtasks=tuple(subs)))
    metadata = dataclasses.replace(snapshot.metadata, operators=tuple(operators))
    (local / "chk-3" / "_metadata").write_bytes(write_metadata(metadata))
    assert count[0] == 24
    for rel in STRAYS:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(b"orphan!")
    return s3_server.upload(local.parent, prefix)


def test_gc_on_s3_lists_and_deletes_only_orphans(kg, s3_server, tmp_path):
    base = _on_s3(s3_server, tmp_path, "lists")
    before = s3_server.keys(base)
    assert kg("check", f"{base}/{JOB}/chk-3").exit_code == 0
    dry = kg("gc", base, "--json")  # the base prefix of one job
    assert dry.exit_code == 0, dry.stderr
    doc = dry.json()
    assert doc["job_id"] == JOB and doc["checkpoint_ids"] == [3] and doc["in_progress_checkpoint_id"] == 4
    assert {o["path"] for o in doc["orphans"]} == set(STRAYS) and doc["referenced"]["files"] == 31
    assert doc["outside_references"] == [] and doc["missing_references"] == []
    job = f"{base}/{JOB}"
    live = kg("gc", job, "--delete", "--older-than", "0", "--json")
    assert live.exit_code == 7 and live.json()["error"]["code"] == "JOB_MAY_BE_LIVE"
    assert s3_server.keys(base) == before
    done = kg("gc", job, "--delete", "--older-than", "0", "--force", "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["deleted"]["files"] == len(STRAYS)
    assert s3_server.keys(base) == {k: v for k, v in before.items() if k.split("/", 1)[1] not in STRAYS}
    # Every file the checkpoint names is there with its size (kg verify reads RocksDB files locally only).
    checked = kg("check", f"{job}/chk-3", "--json")
    assert checked.exit_code == 0, checked.stdout
    assert not [f for f in checked.json()["findings"] if f["code"].startswith("FLINK_STATE_FILE")]


def test_gc_on_s3_refuses_on_an_unreadable_metadata(s3_server, tmp_path):
    base = _on_s3(s3_server, tmp_path, "damaged")
    s3_server.put(f"{base}/{JOB}/chk-5/_metadata", b"\x00\x00\x00\x01garbage")
    before = s3_server.keys(base)
    with pytest.raises(KgError) as refused:
        collect_garbage(f"{base}/{JOB}", delete=True, older_than=0.0, force=True)
    assert refused.value.exit_code in (3, 4)
    assert s3_server.keys(base) == before
