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


def _sql_query(case: Path, name: str) -> dict:
    doc = json.loads((case / "expected-sql-state.json").read_text(encoding="utf-8"))
    return next(q for q in doc["queries"] if q["name"] == name)


@pytest.mark.parametrize("version", ["2.3", "1.20"])
def test_a_sql_jobs_composite_keys_hold_the_jobs_results(kg, version: str) -> None:
    case = FLINK_FIXTURES.parent / version / "sql-heap-canonical-p2"
    query = _sql_query(case, "composite")
    wanted = [k for k in query["keys"] if k["key"][1] is None or len(k["key"][1]) > 7][:3]  # null, long
    wanted.append(next(k for k in query["keys"] if k["key"][1] is not None and len(k["key"][1]) <= 7))
    args = [a for k in wanted for a in ("-k", json.dumps(k["key"]))]
    result = kg("get", case, "-o", query["uid"], *args, "-k", '[7, "no such key", true]', "--json")
    assert result.exit_code == 1, result.stderr  # the last key holds no state
    doc = result.json()
    assert doc["key_type"] == "RowData<INTEGER, VARCHAR, BOOLEAN>"
    *found, missing = doc["keys"]
    assert [k["key"] for k in found] == [k["key"] for k in wanted]
    for got, want in zip(found, wanted, strict=True):
        assert got["states"]["accState"]["entries"] == [
            {"namespace": None, "value": {"kind": "+I", "fields": want["result"]}}
        ]
    assert (missing["key"], missing["found"]) == ([7, "no such key", True], False)
    text = kg("get", case, "-o", query["uid"], "-k", json.dumps(wanted[0]["key"]))
    assert (
        text.exit_code == 0
        and f"(RowData<INTEGER, VARCHAR, BOOLEAN>), key group {found[0]['key_group']}" in text.stdout
    )


def test_a_one_field_sql_key_may_be_given_bare(kg) -> None:
    case = FLINK_FIXTURES / "sql-rocksdb-canonical-p2"
    query = _sql_query(case, "string")
    want = next(k for k in query["keys"] if k["key"] == ["é€😀"])
    result = kg("get", case, "-o", query["uid"], "-k", "é€😀", "-k", '[""]', "--json")
    assert result.exit_code == 0, result.stderr
    bare, empty = result.json()["keys"]
    assert (
        bare["key"] == ["é€😀"]
        and bare["states"]["accState"]["entries"][0]["value"]["fields"] == want["result"]
    )
    assert empty["key"] == [""] and empty["found"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-k", "42"), 'a JSON array of 3 fields, e.g. [42, "abc", true]'),
        (("-k", "[1, 2, 3]"), "is not a string"),
        (("-k", '[1, "a", true]', "-t", "int"), "has SQL keys (RowData<INTEGER, VARCHAR, BOOLEAN>)"),
    ],
)
def test_bad_sql_keys_are_one_line_errors(kg, args, message) -> None:
    case = FLINK_FIXTURES / "sql-heap-canonical-p2"
    result = kg("get", case, "-o", _sql_query(case, "composite")["uid"], *args)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_timer_is_printed_as_utc_time_and_kept_in_milliseconds_in_json(kg) -> None:
    savepoint = FLINK_FIXTURES / "heap-files-p3-maxp128-long"
    text = kg("get", savepoint, "-o", "keyed-state", "-k", "0")
    assert text.exit_code == 0, text.stderr
    # 4102444800100 ms after the epoch: 2100-01-01 00:00:00.100 UTC.
    assert "  _timer_state/event_user-timers       timer at 2100-01-01T00:00:00.100Z\n" in text.stdout
    assert "timer timer" not in text.stdout and "4102444800100" not in text.stdout
    doc = kg("get", savepoint, "-o", "keyed-state", "-k", "0", "--json").json()
    timers = doc["keys"][0]["states"]["_timer_state/event_user-timers"]["entries"]
    assert timers[0]["timestamp"] == 4102444800100


def test_a_timer_outside_the_calendar_keeps_its_milliseconds() -> None:
    from keygroup_cli.cli.get_render import timer_time

    assert timer_time(0) == "1970-01-01T00:00:00.000Z"
    assert timer_time(-1) == "1969-12-31T23:59:59.999Z"
    assert timer_time(2**63 - 1) == f"{2**63 - 1} ms since the epoch"
