"""Candidates for stateful operators a new job lacks (keygroup_cli/operator_matching.py), on real metadata."""

from __future__ import annotations

from dataclasses import replace

import pytest

from keygroup_cli.keygroups import operator_id_for_uid
from keygroup_cli.operator_matching import suggest_migration
from keygroup_cli.summary import summarize
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
