"""The restore checks, on hand-built operator summaries (format-neutral)."""

from __future__ import annotations

from dataclasses import replace

from keygroup_cli.assess.restore import RestorePlan, check_restore
from keygroup_cli.assess.summary import OperatorSummary
from keygroup_cli.core.findings import FINDING_CODES, Finding, Severity, exit_code_for
from keygroup_cli.core.keygroups import operator_id_for_uid, subtask_ranges


def _op(
    uid: str | None, max_p: int = 128, p: int = 2, *, state: bool = True, keyed: bool = True
) -> OperatorSummary:
    return OperatorSummary(
        uid=uid,
        operator_id=operator_id_for_uid(uid) if uid else "0" * 32,
        name=uid,
        parallelism=p,
        max_parallelism=max_p,
        has_state=state,
        has_keyed_state=keyed and state,
        states=None,
        subtasks=(),
    )


def _codes(findings: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.code, f.severity.value, f.subject) for f in findings]


def test_codes_are_sorted_unique_and_documented() -> None:
    assert list(FINDING_CODES) == sorted(FINDING_CODES)
    for code in (
        "PARALLELISM_EXCEEDS_MAX_PARALLELISM",
        "MAX_PARALLELISM_MISMATCH",
        "OPERATOR_NOT_IN_JOB",
        "UNEVEN_KEY_GROUPS",
        "DEFAULT_MAX_PARALLELISM_TRAP",
        "OPTION_OPERATOR_NOT_IN_SNAPSHOT",
    ):
        assert code in FINDING_CODES


def test_only_operators_with_state_are_judged() -> None:
    findings = check_restore([_op("sink", max_p=10, state=False)], RestorePlan(parallelism=50), snapshot="sp")
    assert findings == []


def test_parallelism_bound_is_inclusive() -> None:
    ops = [_op("a", max_p=10)]
    assert check_restore(ops, RestorePlan(parallelism=10, max_parallelism=10), snapshot="sp") == []
    # A job that sets no maxParallelism (no -m): Flink's default at p 10 is 128, not 10.
    assert _codes(check_restore(ops, RestorePlan(parallelism=10), snapshot="sp")) == [
        ("MAX_PARALLELISM_ADOPTION_UNVERIFIED", "warning", "a")
    ]
    assert _codes(check_restore(ops, RestorePlan(parallelism=11), snapshot="sp")) == [
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "error", "a")
    ]


def test_non_keyed_operators_are_bounded_too() -> None:
    # Flink's checkParallelismPreconditions fires for operator-only state such as sources.
    ops = [_op("source", max_p=4, keyed=False)]
    assert _codes(check_restore(ops, RestorePlan(parallelism=5), snapshot="sp"))[0][0] == (
        "PARALLELISM_EXCEEDS_MAX_PARALLELISM"
    )


def test_unchanged_parallelism_when_not_given() -> None:
    assert check_restore([_op("a", max_p=10, p=3)], RestorePlan(max_parallelism=10), snapshot="sp") == []


def test_a_job_that_sets_no_max_parallelism_adopts_the_state_only_with_its_whole_chain() -> None:
    # State at maxP 256 restored at p 4 (Flink's default 128): Flink adopts 256 only if every operator of
    # the task is in the savepoint. Without the new job's operators kg cannot tell, and says so.
    ops = [_op("keyed", max_p=256, p=3), _op("sink", max_p=256, p=3, state=False)]
    plan = RestorePlan(parallelism=4)
    (warning,) = check_restore(ops, plan, snapshot="sp")
    assert (warning.code, warning.severity, warning.subject) == (
        "MAX_PARALLELISM_ADOPTION_UNVERIFIED",
        Severity.WARNING,
        "keyed",
    )
    assert "--job-uids" in warning.message and "set maxParallelism 256 in the job" in warning.message
    # Told the new job's operators: all in the savepoint, nothing to say; one it lacks, an error.
    assert check_restore(ops, replace(plan, job_uids=["keyed", "sink"]), snapshot="sp") == []
    findings = check_restore(ops, replace(plan, job_uids=["keyed", "sink", "new-map"]), snapshot="sp")
    assert _codes(findings) == [("MAX_PARALLELISM_NOT_ADOPTED", "error", "keyed")]
    assert "new-map" in findings[0].message and "default 128 at parallelism 4" in findings[0].message
    # Flink's default for the new parallelism is the state's: nothing can differ.
    assert check_restore([_op("keyed", max_p=256, p=3)], RestorePlan(parallelism=100), snapshot="sp") == []
    # An explicit maxParallelism (the job sets one) is judged by MAX_PARALLELISM_MISMATCH instead.
    assert (
        check_restore(ops, replace(plan, max_parallelism=256, job_uids=["keyed", "sink", "x"]), snapshot="sp")
        == []
    )


def test_max_parallelism_mismatch_only_for_explicit_values() -> None:
    ops = [_op("a", max_p=256), _op("b", max_p=128)]
    findings = check_restore(ops, RestorePlan(parallelism=4, max_parallelism_for={"a": 128}), snapshot="sp")
    assert _codes(findings) == [("MAX_PARALLELISM_MISMATCH", "error", "a")]
    assert "Cannot map operator " + ops[0].operator_id + " with max parallelism 256" in findings[0].message


def test_operator_matched_by_uid_hash_or_raw_id() -> None:
    unnamed = OperatorSummary(None, "ab" * 16, "x", 2, 128, True, True, None, ())
    ops = [_op("kept"), unnamed, _op("gone")]
    findings = check_restore(ops, RestorePlan(job_uids=["kept", "AB" * 16]), snapshot="sp/_metadata")
    assert _codes(findings) == [("OPERATOR_NOT_IN_JOB", "error", "gone")]
    assert findings[0].message.startswith(
        "Failed to rollback to checkpoint/savepoint sp/_metadata. Cannot map"
    )
    relaxed = check_restore(ops, RestorePlan(job_uids=["kept"], allow_non_restored_state=True), snapshot="sp")
    assert {f.severity for f in relaxed} == {Severity.WARNING}


def test_uneven_key_groups_uses_flinks_range_sizes() -> None:
    for p in (3, 48, 64, 100, 127):
        sizes = [r.size for r in subtask_ranges(128, p)]
        expected_skew = max(sizes) / (128 / p)
        findings = check_restore([_op("a")], RestorePlan(parallelism=p, max_parallelism=128), snapshot="sp")
        uneven = [f for f in findings if f.code == "UNEVEN_KEY_GROUPS"]
        assert bool(uneven) == (expected_skew >= 1.25), p
        if uneven:
            assert f"owns {max(sizes)} key groups" in uneven[0].message


def test_default_max_parallelism_trap() -> None:
    trap = [f.code for f in check_restore([_op("a")], RestorePlan(parallelism=64), snapshot="sp")]
    assert "DEFAULT_MAX_PARALLELISM_TRAP" in trap
    assert "DEFAULT_MAX_PARALLELISM_TRAP" not in [
        f.code for f in check_restore([_op("a")], RestorePlan(parallelism=63), snapshot="sp")
    ]
    # An explicit maxParallelism of 128 is a decision, not the default.
    assert "DEFAULT_MAX_PARALLELISM_TRAP" not in [
        f.code
        for f in check_restore([_op("a")], RestorePlan(parallelism=64, max_parallelism=128), snapshot="sp")
    ]


def test_option_for_unknown_operator_is_info() -> None:
    findings = check_restore([_op("a")], RestorePlan(parallelism_for={"nope": 2}), snapshot="sp")
    assert _codes(findings) == [("OPTION_OPERATOR_NOT_IN_SNAPSHOT", "info", "nope")]
    assert exit_code_for(findings, strict=True) == 0


def test_every_code_is_documented() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "findings.md").read_text(
        encoding="utf-8"
    )
    missing = [code for code in FINDING_CODES if f"`{code}`" not in page]
    assert missing == []
