"""``kg get``: one key's state, typed, against the jobs' own expected values (real Flink 2.3 fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kg_fixture_state import FLINK_FIXTURES, expected


def test_every_state_of_a_string_key_equals_the_jobs_values(kg) -> None:
    case = "rocksdb-canonical-snappy-p2-maxp256-string"
    want = next(k for k in expected(case)["keyedOperators"][0]["keys"] if k["key"].endswith("😀"))
    result = kg("get", FLINK_FIXTURES / case, "--operator", "keyed-state", "--key", want["key"], "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert (doc["command"], doc["key_type"], doc["max_parallelism"]) == ("get", "string", 256)
    (found,) = doc["keys"]
    assert (found["key"], found["key_group"], found["subtask"]) == (
        want["key"],
        want["keyGroup"],
        want["subtask"],
    )
    states = found["states"]
    assert states["sum"]["entries"] == [{"namespace": None, "value": want["sum"]}]
    assert states["ids"]["entries"] == [{"namespace": None, "value": want["ids"]}]
    assert {e["user_key"]: e["value"] for e in states["buckets"]["entries"]} == want["buckets"]
    timers = [
        e["timestamp"] for e in states.get("_timer_state/event_user-timers", {"entries": []})["entries"]
    ]
    assert timers == want["eventTimers"]


def test_typed_values_of_a_native_savepoint_and_a_kryo_note(kg) -> None:
    case = FLINK_FIXTURES / "typed-rocksdb-native-p2"
    want = json.loads((case / "expected-typed-state.json").read_text(encoding="utf-8"))["keys"][7]
    result = kg("get", case, "-o", "typed-state", "-k", str(want["key"]), "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["layout_note"] is not None  # NATIVE: rewritten as key groups first
    states = doc["keys"][0]["states"]
    for name in ("pojo", "tuple", "row", "color", "bytes", "short", "char", "float", "pojos"):
        assert states[name]["entries"][0]["value"] == want["states"][name], name
    assert states["ttl-value"]["entries"][0]["value"]["value"] == want["states"]["ttl-value"]
    notes = {s["name"]: s["notes"] for s in doc["states"]}
    assert notes["kryo"] and "Kryo" in notes["kryo"][0] and notes["pojo"] == []
    text = kg("get", case, "-o", "typed-state", "-k", str(want["key"]))
    assert "note: kryo: Kryo" in text.stdout and '"name-7-0"' in text.stdout


def test_a_key_without_state_exits_1_and_says_so(kg, tmp_path: Path) -> None:
    case = FLINK_FIXTURES / "heap-files-p3-maxp128-long"
    keys = tmp_path / "keys.txt"
    keys.write_text("0\n12345\n")
    result = kg("get", case, "-o", "keyed-state", "--keys-file", keys, "--json")
    assert result.exit_code == 1, result.stderr
    found = {k["key"]: k["found"] for k in result.json()["keys"]}
    assert found == {0: True, 12345: False}
    text = kg("get", case, "-o", "keyed-state", "-k", "12345")
    assert text.exit_code == 1 and "no state" in text.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("-o", "keyed-state", "-k", "x", "-t", "long"), 2, "has string keys"),
        (("-o", "keyed-state", "-t", "long"), 2, "at least one"),
        (("-o", "no-such-op", "-k", "x"), 2, "No operator 'no-such-op'"),
        (("-o", "op-state", "-k", "x"), 4, "holds no keyed state"),
    ],
)
def test_bad_requests_are_one_line_errors(kg, args, code, message) -> None:
    result = kg("get", FLINK_FIXTURES / "heap-inline-p3-maxp10-string", *args)
    assert result.exit_code == code, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
