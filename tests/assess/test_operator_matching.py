"""Candidates for stateful operators a new job lacks (keygroup_cli/assess/matching.py), on real metadata."""

from __future__ import annotations

from dataclasses import replace

import pytest

from keygroup_cli.assess.matching import suggest_migration
from keygroup_cli.assess.summary import summarize
from keygroup_cli.core.keygroups import operator_id_for_uid
from tests.conftest import FIXTURES

V6 = FIXTURES / "flink" / "2.3" / "uid-heap-canonical-p3"
V4 = FIXTURES / "flink" / "1.20" / "uid-heap-canonical-p3"
JOB = ("uid-source", "keyed-string", "string-drop", "string-sink", "keyed-long", "long-drop", "long-sink")
LONG, STRING = operator_id_for_uid("keyed-long"), operator_id_for_uid("keyed-string")


def _ops(path):
    return summarize(path, read_states=False).operators


def _job(**renamed: str) -> list[str]:
    return [renamed.get(u.replace("-", "_"), u) for u in JOB]


def test_every_operator_mapped_needs_no_suggestion() -> None:
    assert suggest_migration(_ops(V6), list(JOB), str(V6), uids_recorded=True) is None


def test_a_recorded_uid_is_paired_with_the_most_similar_new_uid() -> None:
    job = _job(keyed_long="keyed-long-v2", keyed_string="keyed-string-v2") + ["brand-new-map"]
    s = suggest_migration(_ops(V6), job, "sp/", uids_recorded=True)
    assert s is not None
    assert {c.uid: c.argument for c in s.candidates} == {
        "keyed-string": "keyed-string=keyed-string-v2",
        "keyed-long": "keyed-long=keyed-long-v2",
    }
    assert s.command == (
        "kg migrate sp/ --out sp-migrated --rename keyed-string=keyed-string-v2"
        " --rename keyed-long=keyed-long-v2"
    )
    assert s.lines() == [
        "keyed-string: candidate 'keyed-string-v2' (uids 89% alike): --rename keyed-string=keyed-string-v2",
        "keyed-long: candidate 'keyed-long-v2' (uids 87% alike): --rename keyed-long=keyed-long-v2",
        f"Restore the mapping: {s.command}",
    ]


def test_v4_operators_are_paired_by_elimination_and_named_by_id() -> None:
    s = suggest_migration(_ops(V4), _job(keyed_long="long-v2"), str(V4), uids_recorded=False)
    assert s is not None
    [c] = s.candidates
    assert (c.operator_id, c.uid, c.option, c.argument) == (LONG, None, "--rename", f"{LONG}=long-v2")
    # Two unmapped and two new uids: an id alone cannot tell them apart.
    s = suggest_migration(_ops(V4), _job(keyed_long="a", keyed_string="b"), str(V4), uids_recorded=False)
    assert s is not None and s.command is None
    assert all(c.new_uid is None and "elimination" in c.reason for c in s.candidates)
    assert all(
        line.endswith(f"--drop {c.operator_id}") for line, c in zip(s.lines(), s.candidates, strict=True)
    )


def test_a_uid_less_v5_operator_gets_assign_uid() -> None:
    hashed = "ac2917d481fa2956de9c11d0ea7a0737"
    ops = [replace(op, operator_id=hashed, uid=None) if op.operator_id == LONG else op for op in _ops(V6)]
    s = suggest_migration(ops, list(JOB), "sp", uids_recorded=True)
    assert s is not None
    assert (
        s.command
        == "kg migrate sp --out sp-migrated --assign-uid ac2917d481fa2956de9c11d0ea7a0737=keyed-long"
    )


@pytest.mark.parametrize("new", ["completely-different"])
def test_dissimilar_uids_are_not_paired_while_others_remain(new: str) -> None:
    job = _job(keyed_long=new, keyed_string="other-thing")
    s = suggest_migration(_ops(V6), job, "sp", uids_recorded=True)
    assert s is not None and s.command is None
    assert {c.reason for c in s.candidates} == {
        "2 unmatched uids, none similar to 'keyed-long'",
        "2 unmatched uids, none similar to 'keyed-string'",
    }
    doc = s.document()
    assert doc["command"] is None and len(doc["candidates"]) == 2


# ---------------------------------------------------------------------------------------------
# --against: candidates by state names and serializers


def _renamed(ops, **uids: str):
    """The operators as a new job version with these uids (keyed_long="x") would write them."""
    out = []
    for op in ops:
        new_uid = uids.get((op.uid or "").replace("-", "_"))
        out.append(
            op if new_uid is None else replace(op, uid=new_uid, operator_id=operator_id_for_uid(new_uid))
        )
    return out


def _with_states(path):
    return summarize(path, read_states=True).operators


def _suggest(old, new, job_uids=None, recorded=True):
    uids = job_uids if job_uids is not None else [o.uid or o.operator_id for o in new]
    return suggest_migration(old, uids, "sp/", uids_recorded=recorded, job_operators=new)


def test_against_pairs_each_operator_with_the_one_whose_state_equals_whatever_its_uid() -> None:
    old = _with_states(V6)
    new = _renamed(old, keyed_long="unlike-anything", keyed_string="zz")
    s = _suggest(old, new)
    assert s is not None
    assert {c.uid: (c.argument, c.state_matches) for c in s.candidates} == {
        "keyed-string": ("keyed-string=zz", (operator_id_for_uid("zz"),)),
        "keyed-long": ("keyed-long=unlike-anything", (operator_id_for_uid("unlike-anything"),)),
    }
    assert s.candidates[1].reason == "state names and serializers equal (sum: LongSerializer, 2 timer states)"
    assert [(f.code, f.severity.value, f.subject) for f in s.findings()] == [
        ("OPERATOR_STATE_CANDIDATE", "info", "keyed-string"),
        ("OPERATOR_STATE_CANDIDATE", "info", "keyed-long"),
    ]
    assert (
        s.command
        == "kg migrate sp/ --out sp-migrated --rename keyed-string=zz --rename keyed-long=unlike-anything"
    )


def test_against_never_pairs_a_similar_uid_whose_state_differs() -> None:
    old = _with_states(V6)
    # keyed-long-v2 is 87 % alike by name, but holds keyed-string's state: no candidate by name then.
    new = [op for op in old if op.uid != "keyed-long"]
    (string,) = (op for op in old if op.uid == "keyed-string")
    new = [replace(string, uid="keyed-long-v2", operator_id=operator_id_for_uid("keyed-long-v2"))] + [
        op for op in new if op.uid != "keyed-string"
    ]
    s = _suggest(old, new)
    assert s is not None
    by_uid = {c.uid: c for c in s.candidates}
    assert by_uid["keyed-long"].new_uid is None and by_uid["keyed-long"].state_matches == ()
    assert "no operator of the new job that the savepoint lacks has its state" in by_uid["keyed-long"].reason
    assert by_uid["keyed-string"].argument == "keyed-string=keyed-long-v2"


def test_against_reports_ambiguity_and_never_guesses() -> None:
    old = _with_states(V6)
    (long_op,) = (op for op in old if op.uid == "keyed-long")
    twins = [replace(long_op, uid=u, operator_id=operator_id_for_uid(u)) for u in ("sum-a", "sum-b")]
    new = [op for op in old if op.uid != "keyed-long"] + twins
    s = _suggest(old, new)
    assert s is not None and s.command is None
    (c,) = s.candidates
    assert c.new_uid is None and c.option is None
    assert c.state_matches == tuple(operator_id_for_uid(u) for u in ("sum-a", "sum-b"))
    assert "ambiguous" in c.reason and "'sum-a', 'sum-b'" in c.reason
    assert [(f.code, f.severity.value) for f in s.findings()] == [("OPERATOR_STATE_AMBIGUOUS", "warning")]
    assert s.lines() == [f"keyed-long: {c.reason}"]
    # One new operator claimed by two old ones with equal state is ambiguous for both.
    (twin,) = twins[:1]
    old_twins = [replace(long_op, uid=u, operator_id=operator_id_for_uid(u)) for u in ("old-a", "old-b")]
    s2 = _suggest([*old, *old_twins], [op for op in old if op.uid != "keyed-long"] + [twin])
    assert s2 is not None and s2.command is None
    assert {f.code for f in s2.findings()} == {"OPERATOR_STATE_AMBIGUOUS"} and len(s2.findings()) == 3


def test_against_v4_names_the_new_operator_by_a_listed_uid_only() -> None:
    old = _with_states(V4)
    new = [
        replace(op, operator_id=operator_id_for_uid("long-new")) if op.operator_id == LONG else op
        for op in old
    ]
    ids = [op.operator_id for op in new]
    s = _suggest(old, new, job_uids=ids, recorded=False)
    assert s is not None and s.command is None
    (c,) = s.candidates
    assert c.state_matches == (operator_id_for_uid("long-new"),) and "set .uid() on it" in c.reason
    named = _suggest(old, new, job_uids=_job(keyed_long="long-new"), recorded=False)
    assert named is not None
    assert named.command == f"kg migrate sp/ --out sp-migrated --rename {LONG}=long-new"
