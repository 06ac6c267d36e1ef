"""``kg migrate`` on an S3-compatible server (moto): server-side copies within the store, uploads from disk.

The output on S3 must be, byte for byte, what the same migration writes on local disk, and a refused
change must write nothing there.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES
from tests.execution.snapshots import tree_digest

SAVEPOINT = FIXTURES / "flink" / "2.3" / "uid-heap-canonical-p3"
MIGRATION_ARGS = ("--rename", "keyed-long=keyed-long-v2", "--drop", "keyed-string")


def test_migrate_s3_to_s3_copies_server_side_and_writes_what_a_local_run_writes(
    kg, s3_server: Any, tmp_path: Path
) -> None:
    bucket = s3_server.bucket("kg-migrate")
    source = s3_server.upload(SAVEPOINT, f"{bucket}/savepoints/sp-1")
    local = kg("migrate", SAVEPOINT, "--out", tmp_path / "local", *MIGRATION_ARGS)
    assert local.exit_code == 0, local.stderr
    for origin, target, mode in (
        (source, f"{bucket}/migrated/from-s3", "copied server-side"),
        (str(SAVEPOINT), f"{bucket}/migrated/from-disk", "uploaded"),
    ):
        start = s3_server.log.stat().st_size
        r = kg("migrate", origin, "--out", target, *MIGRATION_ARGS, "--json")
        assert r.exit_code == 0, r.stderr
        assert r.json()["copy"] == mode
        # The copies are server-side (the output is checked against the local run below); the input's
        # state is read only by the gate's verification before them, by ranged GETs of its own objects
        # (nothing is written from an input kg verify rejects).
        with open(s3_server.log, "rb") as fh:
            fh.seek(start)
            log = re.sub(r"\x1b\[[0-9;]*m", "", fh.read().decode())  # moto colours 206 responses
        gets = set(re.findall(r'"GET /kg-migrate/savepoints/sp-1/([^ ?"]+)', log))
        if mode == "copied server-side":
            assert "_metadata" in gets and gets <= {p.name for p in SAVEPOINT.iterdir()}, gets
        else:
            assert gets == set(), gets  # the input is on disk
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


def test_migrate_to_s3_of_an_input_verify_rejects_writes_nothing(kg, s3_server: Any, tmp_path: Path) -> None:
    """Server-side copies never pass through kg: the gate verifies the whole input before any copy."""
    damaged = tmp_path / "damaged"
    shutil.copytree(SAVEPOINT, damaged)
    # A class Flink does not have (one letter changed): its restore cannot load it.
    void = b"org.apache.flink.runtime.state.VoidNamespaceSerializer"
    for state in damaged.iterdir():
        if state.name != "_metadata":
            state.write_bytes(state.read_bytes().replace(void, void.replace(b".Void", b".Xoid")))
    assert kg("verify", damaged).exit_code == 3
    bucket = s3_server.bucket("kg-migrate-damaged")
    source = s3_server.upload(damaged, f"{bucket}/savepoints/sp-1")
    for origin in (source, str(damaged)):
        target = f"{bucket}/migrated/{'s3' if origin == source else 'disk'}"
        r = kg("migrate", origin, "--out", target, *MIGRATION_ARGS, "--json")
        assert r.exit_code == 3 and r.json()["error"]["code"] == "INPUT_FAILS_VERIFY", r.stdout
        assert s3_server.keys(target) == {}
