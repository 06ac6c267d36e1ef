"""``kg write --data s3://...``: the data read from an S3-compatible store (moto's server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from keygroup_cli.flink import state_table
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-string"


def test_data_on_an_object_store_writes_as_the_same_local_file(kg, s3_server: Any, tmp_path: Path) -> None:
    data = pa.table({"key": pa.array(["key-8", "key-42"]), "value": pa.array([0, 1], pa.int64())})
    local = tmp_path / "fix.parquet"
    pq.write_table(data, local)
    bucket = s3_server.bucket("kg-write-data")
    s3_server.put(f"{bucket}/edits/fix.parquet", local.read_bytes())
    args = ("write", SAVEPOINT, "-o", "keyed-state", "-s", "sum", "--mode", "upsert", "--data")
    from_store = kg(*args, f"{bucket}/edits/fix.parquet", "--out", tmp_path / "remote")
    assert from_store.exit_code == 0, from_store.stderr
    assert kg(*args, local, "--out", tmp_path / "local").exit_code == 0
    tables = [state_table(tmp_path / d, "keyed-state", "sum").to_pylist() for d in ("remote", "local")]
    assert sorted(map(repr, tables[0])) == sorted(map(repr, tables[1]))
    values = {r["key"]: r["value"] for r in tables[0]}
    assert values["key-8"] == 0 and values["key-42"] == 1
    missing = kg(*args, f"{bucket}/edits/none.parquet", "--out", tmp_path / "none")
    assert missing.exit_code == 2 and "Traceback" not in missing.stderr and not (tmp_path / "none").exists()


def test_write_and_compact_to_an_object_store(kg, s3_server: Any, tmp_path: Path) -> None:
    """An object-store DEST gets the bytes a local DEST gets, ``_metadata`` last; a taken DEST is refused."""
    data = pa.table({"key": pa.array(["key-8"]), "value": pa.array([0], pa.int64())})
    pq.write_table(data, tmp_path / "fix.parquet")
    bucket = s3_server.bucket("kg-write-out")
    args = (
        "write",
        SAVEPOINT,
        "-o",
        "keyed-state",
        "-s",
        "sum",
        "--mode",
        "upsert",
        "--data",
        tmp_path / "fix.parquet",
    )
    remote = f"{bucket}/sp-fixed"
    done = kg(*args, "--out", remote, "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["output"] == remote
    assert kg(*args, "--out", tmp_path / "local").exit_code == 0
    downloaded = s3_server.download(remote, tmp_path / "downloaded")
    local_files = {
        p.relative_to(tmp_path / "local").as_posix() for p in (tmp_path / "local").rglob("*") if p.is_file()
    }
    got = {p.relative_to(downloaded).as_posix() for p in downloaded.rglob("*") if p.is_file()}
    assert len(got) == len(local_files) and "_metadata" in got
    assert kg("verify", remote).exit_code == 0
    values = {r["key"]: r["value"] for r in state_table(downloaded, "keyed-state", "sum").to_pylist()}
    assert values["key-8"] == 0
    taken = kg(*args, "--out", remote, "--json")
    assert taken.exit_code == 2 and taken.json()["error"]["code"] == "DESTINATION_EXISTS"
    compacted = kg("compact", SAVEPOINT, "--drop-where", "key LIKE 'key-1%'", "--out", f"{bucket}/trimmed")
    assert compacted.exit_code == 0, compacted.stderr
    assert "_metadata" in s3_server.keys(f"{bucket}/trimmed")
    dry = kg("compact", SAVEPOINT, "--drop-where", "key LIKE 'key-1%'", "--out", f"{bucket}/dry", "--dry-run")
    assert dry.exit_code == 0 and s3_server.keys(f"{bucket}/dry") == {}
