from __future__ import annotations

from pathlib import Path

from tests.conftest import FIXTURES

SNAPSHOTS = FIXTURES / "snapshots"


def test_diff_same_logical_state_across_parallelism(kg) -> None:
    r = kg("diff", SNAPSHOTS / "valid", SNAPSHOTS / "mismatched-maxp")
    assert r.exit_code == 0, r.stderr
    assert "counter: parallelism 2 -> 3" in r.stdout and r.stdout.rstrip().endswith("same logical state")
    assert r.stderr == ""


def test_diff_json_document(kg) -> None:
    r = kg("diff", SNAPSHOTS / "valid", SNAPSHOTS / "mismatched-maxp", "--json")
    assert r.exit_code == 0
    doc = r.json()
    assert doc["command"] == "diff" and doc["same"] is True
    counter = doc["operators"][0]
    assert counter["uid"] == "counter" and counter["presence"] == "both"
    assert {s["name"]: s["rows_a"] for s in counter["states"]}["count"] == 20


def test_diff_different_exits_1(kg, tmp_path: Path) -> None:
    kg("generate", tmp_path / "other", "-o", "counter:string:20:2:16", "--seed", "2", "-q")
    r = kg("diff", SNAPSHOTS / "valid", tmp_path / "other", "--json")
    assert r.exit_code == 1
    doc = r.json()
    assert doc["same"] is False
    clicks = next(o for o in doc["operators"] if o["uid"] == "clicks")
    assert clicks["presence"] == "only_in_a"
    count = next(s for s in doc["operators"][0]["states"] if s["name"] == "count")
    assert (count["only_in_a"], count["only_in_b"]) == (20, 20)


def test_diff_text_lists_differing_states(kg, tmp_path: Path) -> None:
    kg("generate", tmp_path / "other", "-o", "counter:string:20:2:16", "--seed", "2", "-q")
    r = kg("diff", SNAPSHOTS / "valid", tmp_path / "other")
    assert r.exit_code == 1
    assert "operator only in a" in r.stdout and "different" in r.stdout
    assert r.stderr == ""


def test_diff_bad_input(kg, tmp_path: Path) -> None:
    r = kg("diff", SNAPSHOTS / "valid", tmp_path / "nope")
    assert r.exit_code == 3 and r.stdout == ""
    assert r.stderr == f"kg: error: no such snapshot: {tmp_path / 'nope'}\n"
