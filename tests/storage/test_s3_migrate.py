"""``kg migrate`` on an S3-compatible server (moto): server-side copies within the store, uploads from disk.

The output on S3 must be, byte for byte, what the same migration writes on local disk, and a refused
change must write nothing there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES
from tests.execution.snapshots import tree_digest

SAVEPOINT = FIXTURES / "flink" / "2.3" / "uid-heap-canonical-p3"
SURGERY = ("--rename", "keyed-long=keyed-long-v2", "--drop", "keyed-string")


def test_migrate_s3_to_s3_copies_server_side_and_writes_what_a_local_run_writes(
    kg, s3_server: Any, tmp_path: Path
) -> None:
    bucket = s3_server.bucket("kg-migrate")
    source = s3_server.upload(SAVEPOINT, f"{bucket}/savepoints/sp-1")
    local = kg("migrate", SAVEPOINT, "--out", tmp_path / "local", *SURGERY)
    assert local.exit_code == 0, local.stderr
    for origin, target, mode in (
        (source, f"{bucket}/migrated/from-s3", "copied server-side"),
        (str(SAVEPOINT), f"{bucket}/migrated/from-disk", "uploaded"),
    ):
        start = s3_server.log.stat().st_size
        r = kg("migrate", origin, "--out", target, *SURGERY, "--json")
        assert r.exit_code == 0, r.stderr
        assert r.json()["copy"] == mode
        # No byte of an input state file passes through kg: the input's _metadata is its only GET.
        with open(s3_server.log, "rb") as fh:
            fh.seek(start)
            gets = re.findall(r'"GET /kg-migrate/savepoints/sp-1/([^ ?"]+)', fh.read().decode())
        assert set(gets) <= {"_metadata"}, gets
        keys = s3_server.keys(target)
        assert "_metadata" in keys and ".kg-writer" not in keys
        copy = s3_server.download(target, tmp_path / target.rsplit("/", 1)[1])
        assert tree_digest(copy) == tree_digest(tmp_path / "local")


def test_migrate_to_s3_refused_change_writes_nothing(kg, s3_server: Any) -> None:
    bucket = s3_server.bucket("kg-migrate-refused")
    target = f"{bucket}/migrated/refused"
    r = kg("migrate", SAVEPOINT, "--out", target, "--rename", "keyed-long=keyed-string", "--json")
    assert r.exit_code == 2 and r.json()["error"]["code"] == "OPERATOR_ID_TAKEN"
    assert s3_server.keys(target) == {}
