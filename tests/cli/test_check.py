"""kg check, the pre-deploy gate, on real Flink savepoints and checkpoints and on kg snapshots."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import cli
from keygroup_cli.flink.metadata.locate import read_flink_metadata

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "2.3"
HEAP_P3 = FLINK / "heap-files-p3-maxp128-long"
INLINE_MAXP10 = FLINK / "heap-inline-p3-maxp10-string"
CHECKPOINT = FLINK / "heap-checkpoint-p2-maxp128-string"


def _exit_code(*args: object) -> int:
    """Return the exit code a standalone ``kg`` run ends with (what a CI shell sees)."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code


def test_check_passes_at_a_valid_parallelism(kg: Callable[..., Any]) -> None:
    result = kg("check", HEAP_P3, "--parallelism", "4", "--json")
    assert result.stderr == ""
    doc = result.json()
    assert doc == {
        "schema_version": 3,
        "command": "check",
        "ok": True,
        "input": str(HEAP_P3),
        "input_format": "flink-savepoint",
        "operators": 10,
        "operators_with_state": 5,
        "findings": [],
        "groups": [],
    }
    assert result.exit_code == 0
    assert _exit_code("check", HEAP_P3, "-p", "4") == 0


def test_parallelism_above_max_parallelism_quotes_flink(kg: Callable[..., Any]) -> None:
    result = kg("check", INLINE_MAXP10, "-p", "11", "--json")
    doc = result.json()
    assert doc["ok"] is False
    codes = {(f["code"], f["severity"], f["subject"]) for f in doc["findings"]}
    assert ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "error", "keyed-state") in codes
    # Every operator is judged: Flink checks the stateless ones chained with state too (all share the
    # (parallelism, maxParallelism) of an operator with state here).
    # Each named as every command names an operator: uid, else name, else id.
    assert {f["subject"] for f in doc["findings"]} == {
        op.uid or op.name or op.operator_id for op in read_flink_metadata(INLINE_MAXP10).metadata.operators
    }
    assert "main-sink-\u00fc" in {f["subject"] for f in doc["findings"]}
    message = next(f["message"] for f in doc["findings"] if f["subject"] == "keyed-state")
    assert message == (
        "The state for task 826c38023c4272520855c3219fef4f3f can not be restored. The maximum "
        "parallelism (10) of the restored state is lower than the configured parallelism (11). Please "
        "reduce the parallelism of the task to be lower or equal to the maximum parallelism."
    )
    assert _exit_code("check", INLINE_MAXP10, "-p", "11") == 1


def test_per_operator_parallelism_overrides_the_default(kg: Callable[..., Any]) -> None:
    doc = kg("check", INLINE_MAXP10, "-p", "2", "-p", "keyed-state=11", "--json").json()
    assert [(f["code"], f["subject"]) for f in doc["findings"]] == [
        # The other keyed operator (state at 10, Flink's default at p 2 is 128) in a job that sets none.
        ("MAX_PARALLELISM_ADOPTION_UNVERIFIED", "count-no-uid"),  # no uid: its name
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "keyed-state"),
    ]
    doc = kg("check", INLINE_MAXP10, "-p", "2", "-p", "keyed-state=11", "-m", "10", "--json").json()
    assert [(f["code"], f["subject"]) for f in doc["findings"]] == [
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "keyed-state")
    ]


def test_explicit_max_parallelism_mismatch(kg: Callable[..., Any]) -> None:
    doc = kg("check", HEAP_P3, "-p", "3", "--max-parallelism", "keyed-state=256", "--json").json()
    (finding,) = doc["findings"]
    assert finding["code"] == "MAX_PARALLELISM_MISMATCH"
    assert (
        "Cannot map operator 826c38023c4272520855c3219fef4f3f with max parallelism 128 to new program with "
        "max parallelism 256." in finding["message"]
    )
    assert _exit_code("check", HEAP_P3, "-m", "256") == 1
    assert _exit_code("check", HEAP_P3, "-m", "128") == 0


def test_job_uids_missing_operator(kg: Callable[..., Any], tmp_path: Path) -> None:
    uids = tmp_path / "uids.txt"
    # count-no-uid has no uid: listing its generated id keeps it; op-state and async-wait are gone.
    uids.write_text("# new job\nkeyed-state\nkg-source\n9887c2fb29a6e66df7039a0be00a90dd\n", encoding="utf-8")
    doc = kg("check", CHECKPOINT, "-p", "2", "--job-uids", uids, "--json").json()
    missing = sorted(f["subject"] for f in doc["findings"] if f["code"] == "OPERATOR_NOT_IN_JOB")
    assert missing == ["async-wait", "op-state"]
    assert all(f["severity"] == "error" for f in doc["findings"])
    assert "Cannot map checkpoint/savepoint state for operator 5bcd88bb93ab9e5694f5fb26d5804aba" in str(doc)
    assert _exit_code("check", CHECKPOINT, "--job-uids", uids) == 1
    relaxed = kg("check", CHECKPOINT, "--job-uids", uids, "--allow-non-restored-state", "--json").json()
    assert {f["severity"] for f in relaxed["findings"]} == {"warning"}
    assert relaxed["ok"] is True
    assert _exit_code("check", CHECKPOINT, "--job-uids", uids, "--allow-non-restored-state") == 0
    assert _exit_code("check", CHECKPOINT, "--job-uids", uids, "--allow-non-restored-state", "--strict") == 1


def test_uneven_key_groups_and_default_trap_are_warnings(kg: Callable[..., Any]) -> None:
    result = kg("check", HEAP_P3, "-p", "100")
    assert "UNEVEN_KEY_GROUPS" in result.stdout
    assert "DEFAULT_MAX_PARALLELISM_TRAP" in result.stdout
    # Two keyed operators: uneven spread, the default trap, and (a job that sets no maxParallelism,
    # Flink's default at p 100 is 256) the adoption warning, each: one cause each, printed once for both
    # (--json keeps one finding per operator).
    assert "OK: 10 operators, 5 with state checked at parallelism 100; 0 errors, 3 warnings" in result.stdout
    assert result.stdout.count("MAX_PARALLELISM_ADOPTION_UNVERIFIED") == 1
    assert "2 operators: count-no-uid, keyed-state" in result.stdout
    assert len(kg("check", HEAP_P3, "-p", "100", "--json").json()["findings"]) == 6
    assert _exit_code("check", HEAP_P3, "-p", "100") == 0
    assert _exit_code("check", HEAP_P3, "-p", "100", "--strict") == 1


@pytest.mark.parametrize(
    ("value", "message"), [("0", "not within bounds: 0"), ("x=y", "expected N or UID=N")]
)
def test_bad_parallelism_is_a_usage_error(kg: Callable[..., Any], value: str, message: str) -> None:
    result = kg("check", HEAP_P3, "-p", value)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_check_invalid_savepoint(kg: Callable[..., Any], tmp_path: Path) -> None:
    (tmp_path / "_metadata").write_bytes(b"not a savepoint at all")
    result = kg("check", tmp_path, "-p", "2", "--json")
    assert result.exit_code == 3
    assert result.json()["error"]["code"] == "FLINK_BAD_MAGIC"


def test_check_kg_snapshot(kg: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "snap"
    assert kg("generate", out, "--operator", "counter", "-p", "2", "-m", "16", "--keys", "100").exit_code == 0
    doc = kg("check", out, "-p", "17", "--json").json()
    assert doc["input_format"] == "kg-snapshot"
    assert [f["code"] for f in doc["findings"]] == ["PARALLELISM_EXCEEDS_MAX_PARALLELISM"]
    assert _exit_code("check", out, "-p", "16") == 0


def test_one_cause_is_one_finding_in_text_with_rescales_fix(kg: Callable[..., Any]) -> None:
    # -p 200 above maxParallelism 128: Flink refuses every operator of the job with one sentence each.
    doc = kg("check", HEAP_P3, "-p", "200", "--json").json()
    assert len(doc["findings"]) == 10 and {f["code"] for f in doc["findings"]} == {
        "PARALLELISM_EXCEEDS_MAX_PARALLELISM"
    }
    text = kg("check", HEAP_P3, "-p", "200")
    assert text.exit_code == 1
    assert text.stdout.count("PARALLELISM_EXCEEDS_MAX_PARALLELISM") == 1
    assert "10 operators: op-state, opstate-discard: Writer, sink-counter and 7 more" in text.stdout
    flat = " ".join(text.stdout.split())
    # The fix kg rescale names for the same bound (its refusal of --to 200 says "pass -m 256").
    assert f"fix: kg rescale {HEAP_P3} --to 200 -m 256 --out NEW/" in flat and "deploy at -p 128" in flat
    rescale = kg("rescale", HEAP_P3, "--to", "200", "--out", "never", "--dry-run")
    assert rescale.exit_code == 2 and "pass -m 256" in rescale.stderr
    assert "FAILED: 10 operators, 5 with state checked at parallelism 200; 1 error, 0 warnings" in flat


def test_the_verdict_names_the_parallelism_it_modelled(kg: Callable[..., Any]) -> None:
    flat = " ".join(kg("check", HEAP_P3).stdout.split())
    # Without -p: each operator at its current parallelism (3, and 1 for the source).
    assert flat == (
        "OK: 10 operators, 5 with state checked at their current parallelism (3 and 1; -p N checks another); "
        "0 errors, 0 warnings"
    )
    flat = " ".join(kg("check", HEAP_P3, "-p", "4", "-p", "keyed-state=8").stdout.split())
    assert "checked at parallelism 4 (keyed-state=8);" in flat


def test_json_groups_a_problem_shared_by_many_operators_as_the_text_does(kg: Callable[..., Any]) -> None:
    # -p 200: ten findings, one per operator, in "findings" (schema 3 unchanged); "groups" holds the one
    # problem the text prints, with every operator it applies to, the sentence without each one's id, and
    # the fix the text prints.
    doc = kg("check", HEAP_P3, "-p", "200", "--json").json()
    assert len(doc["findings"]) == 10 and len(doc["groups"]) == 1
    group = doc["groups"][0]
    assert set(group) == {"code", "severity", "subjects", "message", "fix"}
    assert (group["code"], group["severity"]) == ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "error")
    assert group["subjects"] == [f["subject"] for f in doc["findings"]]
    assert group["message"].startswith("The state for task <operator id> can not be restored.")
    for f in doc["findings"]:
        assert re.sub("[0-9a-f]{32}", "<operator id>", f["message"]) == group["message"]
    assert group["fix"].startswith(f"kg rescale {HEAP_P3} --to 200 -m 256 --out NEW/")
    text = " ".join(kg("check", HEAP_P3, "-p", "200").stdout.split())
    assert f"fix: {group['fix']}" in text
    # Two problems of all ten operators: two groups of ten, as the text prints two entries.
    both = kg("check", HEAP_P3, "-p", "200", "-m", "256", "--json").json()
    assert len(both["findings"]) == 20
    assert [(g["code"], len(g["subjects"])) for g in both["groups"]] == [
        ("MAX_PARALLELISM_MISMATCH", 10),
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", 10),
    ]
    # One operator's problem is a group of one that keeps its own message, its id in it.
    one = kg("check", HEAP_P3, "-p", "3", "-p", "keyed-state=200", "--json").json()
    (finding,) = one["findings"]
    assert one["groups"] == [
        {
            "code": finding["code"],
            "severity": finding["severity"],
            "subjects": ["keyed-state"],
            "message": finding["message"],
            "fix": one["groups"][0]["fix"],
        }
    ]
    assert re.search("[0-9a-f]{32}", one["groups"][0]["message"])
    assert kg("check", HEAP_P3, "--json").json()["groups"] == []
