"""``kg convert``: savepoint -> kg snapshot -> savepoint through the CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kg_fixture_state import FLINK_FIXTURES

from tests.conftest import KgResult

Kg = Callable[..., KgResult]


def test_convert_and_back_with_json(kg: Kg, tmp_path: Path) -> None:
    source = FLINK_FIXTURES / "heap-files-p3-maxp128-long"
    result = kg("convert", source, "--out", tmp_path / "s.kg", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    doc = result.json()
    assert doc["command"] == "convert" and doc["direction"] == "to-kg"
    assert (doc["operators"], doc["keyed_files"], doc["keyed_rows"]) == (10, 6, 2030)
    assert (doc["operator_state_files"], doc["operator_state_rows"]) == (7, 206)
    verify = kg("verify", tmp_path / "s.kg")
    assert verify.exit_code == 0, verify.stdout + verify.stderr
    back = kg("convert", tmp_path / "s.kg", "--to-flink", "--out", tmp_path / "sp", "--json")
    assert back.exit_code == 0, back.stderr
    assert back.json()["direction"] == "to-flink" and back.json()["compression"] is False
    assert (tmp_path / "sp" / "_metadata").is_file()


def test_text_output(kg: Kg, tmp_path: Path) -> None:
    result = kg("convert", FLINK_FIXTURES / "heap-inline-p3-maxp10-string", "--out", tmp_path / "s.kg")
    assert result.exit_code == 0
    assert "wrote kg snapshot" in result.stdout and "2,030 keyed rows" in result.stdout


def test_a_native_savepoint_converts_and_back_to_a_canonical_one(kg: Kg, tmp_path: Path) -> None:
    # NATIVE RocksDB files are read with the [rocksdb] extra (tests/restore proves the state against
    # Flink's own restore); here: the CLI path, a snapshot kg verifies, and a canonical savepoint back.
    source = FLINK_FIXTURES / "rocksdb-native-p2-maxp128-string"
    result = kg("convert", source, "--out", tmp_path / "x", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["keyed_rows"] > 0
    assert kg("verify", tmp_path / "x").exit_code == 0
    back = kg("convert", tmp_path / "x", "--to-flink", "--out", tmp_path / "sp")
    assert back.exit_code == 0, back.stderr
    assert kg("check", tmp_path / "sp", "-p", "2", "-m", "128").exit_code == 0


def test_direction_mistakes_are_usage_errors(kg: Kg, tmp_path: Path) -> None:
    source = FLINK_FIXTURES / "heap-files-p3-maxp128-long"
    wrong = kg("convert", source, "--to-flink", "--out", tmp_path / "x")
    assert wrong.exit_code == 2 and "already a Flink savepoint" in wrong.stderr
    assert kg("convert", source, "--out", tmp_path / "s.kg", "-q").exit_code == 0
    missing_flag = kg("convert", tmp_path / "s.kg", "--out", tmp_path / "y")
    assert missing_flag.exit_code == 2 and "add --to-flink" in missing_flag.stderr
    compression = kg("convert", source, "--no-compression", "--out", tmp_path / "z")
    assert compression.exit_code == 2 and "only applies with --to-flink" in compression.stderr
    exists = kg("convert", source, "--out", tmp_path / "s.kg")
    assert exists.exit_code == 2 and "destination exists" in exists.stderr


def test_to_flink_native_holds_the_savepoints_state(kg, tmp_path):
    # ForSt NATIVE -> kg snapshot -> NATIVE savepoint (RocksDB databases): kg reads it back as the same state.
    original = FLINK_FIXTURES / "forst-native-p3-maxp128-long"
    assert kg("convert", original, "--out", tmp_path / "state.kg", "-q").exit_code == 0
    native = tmp_path / "native"
    done = kg("convert", tmp_path / "state.kg", "--to-flink", "--format", "native", "--out", native, "-q")
    assert done.exit_code == 0, done.stderr
    assert "(Savepoint, NATIVE)" in kg("inspect", native).stdout
    diff = kg("diff", native, original)
    assert diff.exit_code == 0 and "same logical state" in diff.stdout
    refused = kg("convert", original, "--format", "native", "--out", tmp_path / "x")
    assert refused.exit_code == 2 and "--format only applies with --to-flink" in refused.stderr


def test_a_sql_jobs_map_state_under_key_rows_converts_and_back(kg: Kg, tmp_path: Path) -> None:
    # COUNT(DISTINCT) keeps a MapState under the BinaryRowData key: its length prefix delimits the key.
    import json

    source = FLINK_FIXTURES / "sql-heap-canonical-p2"
    query = json.loads((source / "expected-sql-state.json").read_text(encoding="utf-8"))["queries"][4]
    assert query["name"] == "distinct"
    result = kg("convert", source, "--out", tmp_path / "s.kg", "--json")
    assert result.exit_code == 0, result.stderr
    assert kg("verify", tmp_path / "s.kg").exit_code == 0
    back = kg("convert", tmp_path / "s.kg", "--to-flink", "--out", tmp_path / "sp")
    assert back.exit_code == 0, back.stderr
    keys = [a for k in query["keys"] for a in ("-k", json.dumps(k["key"]))]
    got = kg("get", tmp_path / "sp", "-o", query["uid"], *keys, "--json")
    assert got.exit_code == 0, got.stderr
    for found, want in zip(got.json()["keys"], query["keys"], strict=True):
        assert found["states"]["accState"]["entries"][0]["value"]["fields"][:2] == want["result"]
        assert len(found["states"]["distinctAcc_0"]["entries"]) == want["result"][1]
