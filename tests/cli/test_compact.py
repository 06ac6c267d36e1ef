"""``kg compact``: rules, the report per operator and state, and refusals (real Flink 2.3 savepoints)."""

from __future__ import annotations

from pathlib import Path

from keygroup_cli.flink import state_table
from tests.kg_fixture_state import FLINK_FIXTURES

HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"


def test_drop_where_reports_removed_entries_and_bytes(kg, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = kg(
        "compact", HEAP, "--out", out, "-o", "keyed-state", "--drop-where", "key LIKE 'key-1%'", "--json"
    )
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    op = doc["operators"][0]
    states = {s["name"]: s for s in op["states"]}
    assert states["sum"]["deleted_rows"] == 111 and states["sum"]["rows_after"] == 89
    assert all(s["removed_bytes"] > 0 for s in states.values() if s["deleted_rows"])
    assert (
        op["uid"] == "keyed-state"
        and op["saved_bytes"] == op["keyed_file_bytes_before"] - op["keyed_file_bytes_after"] > 0
    )
    keys = set(state_table(out, "keyed-state", "sum").column("key").to_pylist())
    assert len(keys) == 89 and not any(k.startswith("key-1") for k in keys)


def test_text_report_and_dry_run(kg, tmp_path: Path) -> None:
    result = kg("compact", HEAP, "--out", tmp_path / "out", "--timers-before", "4102444800100", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "dry run: nothing written" in result.stdout and "_timer_state/event_user" in result.stdout
    assert not (tmp_path / "out").exists()


def test_refusals(kg, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert kg("compact", HEAP, "--out", out).exit_code == 2
    both = kg("compact", HEAP, "--out", out, "--drop-where", "key = 'a'", "--keep-where", "key = 'b'")
    assert both.exit_code == 2
    bad = kg("compact", HEAP, "--out", out, "--drop-where", "key = ", "--json")
    assert bad.exit_code == 2 and bad.json()["error"]["code"] == "WHERE_INVALID"
    unknown = kg("compact", HEAP, "--out", out, "--drop-where", "value = 1")
    assert unknown.exit_code == 2 and "unknown column" in unknown.stderr
    assert kg("compact", HEAP, "--out", out, "--expired-ttl", "soon").exit_code == 2
    assert kg("compact", HEAP, "--out", out, "--now", "0", "--timers-before", "0").exit_code == 2
    assert not out.exists()


def test_help_has_examples(kg) -> None:
    result = kg("compact", "--help")
    assert result.exit_code == 0 and "Examples:" in result.stdout and "--expired-ttl" in result.stdout
