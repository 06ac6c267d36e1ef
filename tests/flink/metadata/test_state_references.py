"""``flink.state_references``: every file a ``_metadata`` names; a handle kg does not know is refused."""

from __future__ import annotations

import dataclasses

import pytest

from keygroup_cli.core.errors import UnsupportedFormatError
from keygroup_cli.flink import OperatorStateHandle, state_references
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.conftest import FIXTURES

HEAP = FIXTURES / "flink" / "2.3" / "heap-checkpoint-p2-maxp128-string" / "0000000000006b670000000000000005"
UNALIGNED = FIXTURES / "flink" / "2.3" / "unaligned-checkpoint-p2" / "0000000000006b670000000000006373"


def test_every_state_file_beside_the_metadata_is_named():
    for job, chk in ((HEAP, "chk-2"), (UNALIGNED, "chk-2")):
        metadata = read_flink_metadata(job / chk).metadata
        named = {reference.rsplit("/", 1)[-1] for reference, _relative in state_references(metadata)}
        files = {p.name for p in (job / chk).iterdir() if p.name != "_metadata"}
        assert named == files, chk


def test_a_handle_kg_does_not_know_is_refused():
    metadata = read_flink_metadata(HEAP / "chk-2").metadata
    op = next(o for o in metadata.operators if any(s.managed_operator_state for s in o.subtasks))
    sub = next(s for s in op.subtasks if s.managed_operator_state)
    strange = dataclasses.replace(sub.managed_operator_state, delegate=object())
    assert isinstance(strange, OperatorStateHandle)
    subs = tuple(
        dataclasses.replace(s, managed_operator_state=strange) if s is sub else s for s in op.subtasks
    )
    ops = tuple(dataclasses.replace(o, subtasks=subs) if o is op else o for o in metadata.operators)
    with pytest.raises(UnsupportedFormatError) as refused:
        list(state_references(dataclasses.replace(metadata, operators=ops)))
    assert refused.value.code == "UNSUPPORTED_HANDLE" and "object" in refused.value.message
