"""kg inspect on real Flink savepoints/checkpoints and on kg snapshots."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink"
CASES = sorted(p.parent for p in FLINK.glob("*/*/flink-report.json"))


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_inspect_json_matches_flink_report(kg: Callable[..., Any], case: Path) -> None:
    report = json.loads((case / "flink-report.json").read_text(encoding="utf-8"))["metadata"]
    result = kg("inspect", case, "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    doc = result.json()
    assert doc["command"] == "inspect"
    assert doc["format"] == ("flink-savepoint" if report["properties"]["isSavepoint"] else "flink-checkpoint")
    assert doc["checkpoint_id"] == report["checkpointId"]
    assert doc["metadata_version"] == report["metadataVersion"]
    assert doc["format_type"] == report["properties"]["savepointFormatType"]
    assert len(doc["operators"]) == len(report["operators"])
    for ours, theirs in zip(doc["operators"], report["operators"], strict=True):
        assert ours["operator_id"] == theirs["operatorId"]
        assert ours["uid"] == theirs["operatorUid"]
        assert ours["name"] == theirs["operatorName"]
        assert ours["parallelism"] == theirs["parallelism"]
        assert ours["max_parallelism"] == theirs["maxParallelism"]
        for sub, fsub in zip(ours["subtasks"], theirs["subtasks"], strict=True):
            assert sub["subtask"] == fsub["index"]
            keyed = fsub["managedKeyedState"]
            if keyed:
                assert [sub["key_group_start"], sub["key_group_end"]] == keyed[0]["keyGroupRange"]
                assert sub["keyed_bytes"] == keyed[0]["stateSize"]
            else:
                assert sub["key_group_start"] is None and sub["key_group_end"] is None
            operator_state = fsub["managedOperatorState"]
            assert sub["operator_state_bytes"] == (operator_state[0]["stateSize"] if operator_state else 0)
        if any(s["managedKeyedState"] for s in theirs["subtasks"]):
            assert {s["kind"] for s in ours["states"]} <= {"value", "list", "map", "timer"}
            assert ours["states"]


def test_inspect_text_lists_operators_states_and_subtasks(kg: Callable[..., Any]) -> None:
    case = next(c for c in CASES if c.name == "heap-files-p3-maxp128-long")
    result = kg("inspect", case, "--subtasks")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert "flink-savepoint (Savepoint, CANONICAL)" in result.stdout
    assert "826c38023c4272520855c3219fef4f3f" in result.stdout
    assert "ids: list ListSerializer<LongSerializer>" in result.stdout
    assert "86-127" in result.stdout


def test_inspect_native_savepoint_reads_rocksdb_metadata_file(kg: Callable[..., Any]) -> None:
    case = next(c for c in CASES if "native" in c.name)
    doc = kg("inspect", case, "--json").json()
    keyed = next(op for op in doc["operators"] if op["uid"] == "keyed-state")
    assert keyed["handle_kind"] == "rocksdb-native"
    assert {s["name"] for s in keyed["states"]} >= {"sum", "ids", "buckets"}
    assert all(sub["non_empty_key_groups"] is None for sub in keyed["subtasks"])


def test_inspect_missing_path(kg: Callable[..., Any], tmp_path: Path) -> None:
    result = kg("inspect", tmp_path / "nope", "--json")
    assert result.exit_code == 3
    assert result.json()["error"]["code"] == "SNAPSHOT_NOT_FOUND"
    assert "no such file or directory" in result.stderr


def test_inspect_corrupt_metadata_is_one_line_exit_3(kg: Callable[..., Any], tmp_path: Path) -> None:
    raw = (
        CASES[0] / json.loads((CASES[0] / "flink-report.json").read_text())["metadata"]["metadataFile"]
    ).read_bytes()
    (tmp_path / "_metadata").write_bytes(raw[:200])
    result = kg("inspect", tmp_path)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("kg: error: ")


def test_inspect_unsupported_version_exit_4(kg: Callable[..., Any], tmp_path: Path) -> None:
    (tmp_path / "_metadata").write_bytes(b"\x49\x60\x67\x2d\x00\x00\x00\x07" + b"\x00" * 32)
    result = kg("inspect", tmp_path)
    assert result.exit_code == 4
    assert "Unrecognized checkpoint version number: 7" in result.stderr


def test_inspect_missing_state_file_is_invalid(kg: Callable[..., Any], tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "heap-files-p3-maxp128-long")
    (tmp_path / "_metadata").write_bytes((case / "_metadata").read_bytes())
    result = kg("inspect", tmp_path)
    assert result.exit_code == 3
    assert "state file is missing" in result.stderr


def test_inspect_kg_snapshot(kg: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "snap"
    generated = kg("generate", out, "--operator", "counter", "-p", "2", "-m", "16", "--keys", "500")
    assert generated.exit_code == 0, generated.stderr
    result = kg("inspect", out, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["format"] == "kg-snapshot"
    keyed = [op for op in doc["operators"] if op["has_keyed_state"]]
    assert keyed
    op = keyed[0]
    assert [(s["key_group_start"], s["key_group_end"]) for s in op["subtasks"]] == [(0, 7), (8, 15)]
    assert sum(s["rows"] for s in op["subtasks"]) >= op["rows"]
    histogram = op["key_group_histogram"]
    assert histogram["key_groups"] == 16
    assert histogram["min_rows"] <= histogram["median_rows"] <= histogram["max_rows"]
    assert histogram["hottest"][0]["rows"] == histogram["max_rows"]
    text = kg("inspect", out).stdout
    assert "rows per key group" in text


def test_inspect_and_check_do_not_import_pyspark() -> None:
    case = next(c for c in CASES if c.name == "heap-files-p3-maxp128-long")
    code = (
        "import sys\n"
        "from keygroup_cli.cli import run\n"
        f"assert run(['inspect', {str(case)!r}, '--json']) == 0\n"
        f"run(['check', {str(case)!r}, '-p', '2', '--json'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'pyarrow'))\n"
        "print('IMPORTED', bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "IMPORTED []" in done.stdout
