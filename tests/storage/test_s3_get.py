"""``kg get`` on an object store reads one key group's block, not whole state files (moto's request log)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.kg_fixture_state import FLINK_FIXTURES, expected

CASE = "heap-files-p3-maxp128-long"


@pytest.fixture(scope="module")
def uploaded(s3_server: Any) -> str:
    """The canonical case on the S3 server, uploaded once for the module."""
    return str(s3_server.upload(FLINK_FIXTURES / CASE, f"{s3_server.bucket('kg-get')}/sp"))


def test_a_key_is_a_few_ranged_reads(kg: Any, s3_server: Any, uploaded: str) -> None:
    uri = uploaded
    want = expected(CASE)["keyedOperators"][0]["keys"][5]
    start = s3_server.log.stat().st_size
    result = kg("get", uri, "-o", "keyed-state", "-k", str(want["key"]), "--json")
    assert result.exit_code == 0, result.stderr
    states = result.json()["keys"][0]["states"]
    assert states["ids"]["entries"][0]["value"] == want["ids"]
    log = re.sub(r"\x1b\[[0-9;]*m", "", s3_server.log.read_bytes()[start:].decode(errors="replace"))
    gets = re.findall(r'"GET /kg-get/sp/([^ ?"]+) HTTP/1.1" (\d+)', log)
    state_gets = [(key, status) for key, status in gets if key != "_metadata"]
    # The keyed file of the key's subtask: its header, then the key group's block; both ranged (206).
    assert len({key for key, _ in state_gets}) == 1, gets
    assert len(state_gets) <= 3 and all(status == "206" for _, status in state_gets), gets
    assert sum(1 for key, _ in gets if key == "_metadata") <= 1, gets


def test_export_reads_a_savepoint_in_place_and_native_needs_a_local_copy(
    kg: Any, s3_server: Any, uploaded: str, tmp_path: Path
) -> None:
    out = tmp_path / "ids.parquet"
    result = kg("export", uploaded, "-o", "keyed-state", "-s", "ids", "--out", out, "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["states"][0]["rows"] == len(expected(CASE)["keyedOperators"][0]["keys"])
    # The refusal comes from _metadata alone (its handles name the database files).
    native = f"{s3_server.bucket('kg-get')}/native"
    s3_server.put(
        f"{native}/_metadata", (FLINK_FIXTURES / "typed-rocksdb-native-p2" / "_metadata").read_bytes()
    )
    refused = kg("get", native, "-o", "typed-state", "-k", "5", "--json")
    assert refused.exit_code == 4 and "only on local disk" in refused.stderr
    assert refused.json()["error"]["code"] == "LAYOUT_NEEDS_LOCAL_COPY"
