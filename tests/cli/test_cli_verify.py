from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import FIXTURES

SNAPSHOTS = FIXTURES / "snapshots"


def test_verify_valid_fixture(kg) -> None:
    r = kg("verify", SNAPSHOTS / "valid")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("OK: ") and "10 files, 253 rows checked, 0 findings" in r.stdout
    assert r.stderr == ""


def test_verify_corrupt_fixture_json(kg) -> None:
    r = kg("verify", SNAPSHOTS / "corrupt", "--json")
    assert r.exit_code == 3
    assert r.stderr == ""
    doc = r.json()
    assert doc["command"] == "verify" and doc["ok"] is False
    assert [(f["code"], f["subject"]) for f in doc["findings"]] == [
        ("FILE_CHECKSUM_MISMATCH", "counter/keyed-00000.parquet")
    ]


def test_verify_wrong_key_group_fixture_text(kg) -> None:
    r = kg("verify", SNAPSHOTS / "wrong-key-group")
    assert r.exit_code == 3
    assert "ERROR KEY_GROUP_WRONG_FOR_KEY: counter/keyed-00000.parquet: 1 row(s)" in r.stdout
    assert r.stdout.rstrip().splitlines()[-1].startswith("INVALID: ")
    assert r.stderr == ""


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "snap"
    shutil.copytree(SNAPSHOTS / "valid", dest)
    return dest


def test_verify_unknown_format_version(kg, tmp_path: Path) -> None:
    snap = _copy(tmp_path)
    doc = json.loads((snap / "_manifest.json").read_text())
    doc["format_version"] = 99
    (snap / "_manifest.json").write_text(json.dumps(doc))
    r = kg("verify", snap)
    assert r.exit_code == 4 and r.stdout == ""
    assert "unsupported kg snapshot format_version 99" in r.stderr and "_manifest.json" in r.stderr


def test_verify_gapped_ranges_and_escaping_paths(kg, tmp_path: Path) -> None:
    snap = _copy(tmp_path)
    manifest = snap / "_manifest.json"
    doc = json.loads(manifest.read_text())
    doc["operators"][0]["keyed_files"][0]["path"] = "../../etc/passwd"
    manifest.write_text(json.dumps(doc))
    r = kg("verify", snap, "--json")
    assert r.exit_code == 3 and r.json()["error"]["code"] == "PATH_ESCAPES_SNAPSHOT"
    assert "'../../etc/passwd'" in r.stderr and r.stderr.count("\n") == 1
    doc["operators"][0]["keyed_files"][0]["path"] = "counter/keyed-00000.parquet"
    doc["operators"][0]["keyed_files"][1]["key_group_start"] += 1
    doc["operators"][0]["keyed_files"][1]["key_group_rows"].pop(0)
    manifest.write_text(json.dumps(doc))
    r = kg("verify", snap)
    assert r.exit_code == 3 and "KEY_GROUP" not in r.stdout
    assert (
        "covers key groups [9, 15] but subtask 1 of parallelism 2 (maxParallelism 16) owns [8, 15]"
        in r.stderr
    )


def test_verify_not_a_snapshot(kg, tmp_path: Path) -> None:
    r = kg("verify", tmp_path)
    assert r.exit_code == 3 and r.stdout == ""
    assert r.stderr == (
        f"kg: error: {tmp_path}: not a Flink savepoint or checkpoint, nor a kg snapshot (no _metadata file, "
        "no chk-N directory, no _manifest.json; an uncommitted write has none of them)\n"
    )


def test_verify_missing_and_extra_files(kg, tmp_path: Path) -> None:
    snap = _copy(tmp_path)
    (snap / "clicks" / "keyed-00002.parquet").unlink()
    (snap / "clicks" / "keyed-00009.parquet").write_bytes(b"")
    r = kg("verify", snap, "--json")
    assert r.exit_code == 3
    assert {(f["code"], f["subject"]) for f in r.json()["findings"]} == {
        ("FILE_MISSING", "clicks/keyed-00002.parquet"),
        ("FILE_EXTRA", "clicks/keyed-00009.parquet"),
    }
