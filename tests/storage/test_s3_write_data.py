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
