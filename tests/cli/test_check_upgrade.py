"""``kg check --target-flink``: the 1.x -> 2.x upgrade gate through the CLI (exit codes, text, --json).

The verdicts themselves are pinned to real Flink 2.3 by tests/restore/test_upgrade_gate.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import KgResult

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink"
UPGRADE = FLINK / "1.20" / "upgrade-heap-canonical-p2"
Kg = Callable[..., KgResult]


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*")}


def test_json_lists_each_state_flink_2_cannot_restore_and_exits_1(kg: Kg) -> None:
    before = _digest(UPGRADE)
    result = kg("--json", "check", UPGRADE, "--target-flink", "2.2")
    assert result.exit_code == 1, result.stderr
    assert result.stderr == ""
    doc = result.json()
    assert doc["command"] == "check" and doc["ok"] is False
    upgrade = [f for f in doc["findings"] if f["code"].startswith("UPGRADE_")]
    assert sorted((f["subject"].split(" / ")[1], f["code"]) for f in upgrade) == [
        ("(key)", "UPGRADE_KRYO_STATE"),
        ("kryo-list", "UPGRADE_KRYO_STATE"),
        ("kryo-map", "UPGRADE_KRYO_STATE"),
        ("kryo-value", "UPGRADE_KRYO_STATE"),
        ("op-kryo", "UPGRADE_KRYO_STATE"),
        ("pojo-list", "UPGRADE_POJO_COLLECTION_FIELD"),
    ]
    assert all(f["severity"] == "error" and "Flink 2.2" in f["message"] for f in upgrade)
    assert _digest(UPGRADE) == before


def test_text_output_names_code_state_and_fix(kg: Kg) -> None:
    result = kg("check", UPGRADE, "--target-flink", "2")
    assert result.exit_code == 1
    assert "UPGRADE_POJO_COLLECTION_FIELD" in result.stdout
    assert "pojo-list" in result.stdout
    assert "upgrade-to-flink-2.md" in result.stdout
    # Six findings (--json); kryo-value and op-kryo share one message, printed once for both.
    assert "FAILED" in result.stdout and "5 errors" in result.stdout
    assert "2 operators: " in result.stdout


@pytest.mark.parametrize("target", ["1.20", "1"])
def test_a_1_x_target_flags_nothing_and_says_so(kg: Kg, target: str) -> None:
    result = kg("--json", "check", UPGRADE, "--target-flink", target)
    assert result.exit_code == 0
    codes = [(f["code"], f["severity"]) for f in result.json()["findings"]]
    assert codes == [("UPGRADE_SAME_MAJOR", "info")]


def test_without_target_the_check_reads_no_state_header_and_passes(kg: Kg) -> None:
    result = kg("--json", "check", UPGRADE)
    assert result.exit_code == 0
    assert not [f for f in result.json()["findings"] if f["code"].startswith("UPGRADE_")]


def test_basic_state_of_1_20_passes_the_gate(kg: Kg) -> None:
    result = kg("--json", "check", FLINK / "1.20" / "uid-rocksdb-incremental-p3", "--target-flink", "2.3")
    assert result.exit_code == 0, result.stdout
    assert not [f for f in result.json()["findings"] if f["code"].startswith("UPGRADE_")]


@pytest.mark.parametrize("target", ["3", "2.x", "latest"])
def test_a_bad_target_is_a_usage_error_in_one_line(kg: Kg, target: str) -> None:
    result = kg("check", UPGRADE, "--target-flink", target)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"--target-flink {target}" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_kg_snapshot_is_a_usage_error_in_one_line(kg: Kg) -> None:
    result = kg("--json", "check", FLINK.parent / "snapshots" / "valid", "--target-flink", "2.2")
    assert result.exit_code == 2
    assert result.json()["error"]["code"] == "INVALID_OPTION"
    assert "kg snapshot" in result.json()["error"]["message"]
