"""kg check's state-file gate on an object store: one listing per prefix, no state file read.

A savepoint on S3 (moto's server) with a state object deleted or cut short fails ``kg check`` (exit 1,
the same findings as for the local copy), and a cut ``_metadata`` is exit 3; the check lists the
savepoint's prefix once and GETs nothing but ``_metadata``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES

CASE = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
KEYED_FILE = "02baa70e-fc39-4f01-bb62-04defc78557b"


def _requests(log: Path, start: int) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", log.read_bytes()[start:].decode(errors="replace"))


def _upload(s3_server: Any, tmp_path: Path, name: str) -> tuple[Path, str]:
    local = Path(shutil.copytree(CASE, tmp_path / name))
    (local / "expected-state.json").unlink()
    (local / "flink-report.json").unlink()
    return local, f"{s3_server.bucket('kg-check-files')}/{name}"


def _codes(doc: dict[str, Any]) -> list[str]:
    return [f["code"] for f in doc["findings"] if f["code"].startswith("FLINK_")]


def test_an_intact_savepoint_is_one_listing_and_no_state_read(
    kg: Any, s3_server: Any, tmp_path: Path
) -> None:
    local, uri = _upload(s3_server, tmp_path, "intact")
    s3_server.upload(local, uri)
    start = s3_server.log.stat().st_size
    result = kg("check", uri, "-p", "4", "--json")
    assert result.exit_code == 0, result.stderr
    assert _codes(result.json()) == []
    requests = _requests(s3_server.log, start)
    gets = re.findall(r'"GET /kg-check-files/intact/([^ ?"]+)', requests)
    assert set(gets) <= {"_metadata"}, gets
    # find_metadata's one-key probes aside, the state files cost one listing of the savepoint's prefix.
    listings = re.findall(r'"GET /kg-check-files\?(list-type=2[^"]*prefix=intact/[^"]*) HTTP', requests)
    assert [q for q in listings if "max-keys=1&" not in q and "delimiter" not in q] == [
        "list-type=2&max-keys=1000&prefix=intact/"
    ], requests[-3000:]


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_damaged_state_object_fails_the_check(kg: Any, s3_server: Any, tmp_path: Path, how: str) -> None:
    local, uri = _upload(s3_server, tmp_path, f"damaged-{how}")
    if how == "deleted":
        (local / KEYED_FILE).unlink()
        code = "FLINK_STATE_FILE_MISSING"
    else:
        (local / KEYED_FILE).write_bytes((local / KEYED_FILE).read_bytes()[:-3])
        code = "FLINK_STATE_FILE_SIZE"
    s3_server.upload(local, uri)
    remote = kg("check", uri, "-p", "4", "--json")
    assert remote.exit_code == 3, remote.stderr
    assert _codes(remote.json()) == [code]
    (finding,) = [f for f in remote.json()["findings"] if f["code"] == code]
    assert finding["subject"] == "keyed-state subtask 2"
    assert finding["message"].startswith(f"{uri}/{KEYED_FILE}: ")
    assert _codes(kg("check", local, "-p", "4", "--json").json()) == [code]


def test_a_cut_metadata_on_s3_is_invalid(kg: Any, s3_server: Any, tmp_path: Path) -> None:
    local, uri = _upload(s3_server, tmp_path, "cut")
    (local / "_metadata").write_bytes((local / "_metadata").read_bytes()[:-7])
    s3_server.upload(local, uri)
    result = kg("check", uri, "-p", "4", "--json")
    assert result.exit_code == 3
    assert result.json()["error"]["code"] == "FLINK_METADATA_TRUNCATED"
