"""An unaligned checkpoint holding channel state, written by real Flink 2.3: what kg does with it, no JVM.

The fixture (``fixtures/flink/2.3/unaligned-checkpoint-p2``, ``kg.fixtures.ChannelStateJob``) is a retained
checkpoint taken under back pressure: the source's output buffers (result-subpartition state) and the
back-pressured ``cs-slow`` map's input and output buffers are in it, as V6 merged channel handles.
``channel-state-report.json`` is what Flink's own loader read from its ``_metadata``.

- ``kg rescale`` and ``kg convert`` refuse it (``FLINK_CHANNEL_STATE``, exit 4) from ``_metadata`` alone,
  before the heap checkpoint's canonical rewrite: one line naming the input, DEST absent, input unchanged.
- ``kg inspect`` shows the in-flight data per operator; ``kg check`` warns ``CHANNEL_STATE_RESCALE`` when
  the plan changes a parallelism and says nothing at the old one. What real Flink does with the same
  checkpoint (restores it at any parallelism of the unchanged job; refuses it when the exchange is made
  pointwise or chained) is ``tests/restore/test_channel_state.py``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kg_fixture_state import FLINK_FIXTURES

from keygroup_cli.assess.restore import RestorePlan, check_channel_state
from keygroup_cli.assess.summary import summarize
from keygroup_cli.core.findings import FINDING_CODES, Severity
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.conftest import KgResult

Kg = Callable[..., KgResult]

CASE = FLINK_FIXTURES / "unaligned-checkpoint-p2"
CHECKPOINT = next(CASE.glob("*/chk-*"))
REPORT: dict[str, Any] = json.loads((CASE / "channel-state-report.json").read_text(encoding="utf-8"))
#: Flink's handle classes and the kind byte V6 writes for each (``MetadataV6Serializer``).
KINDS = {
    "InputChannelStateHandle": 1,
    "ResultSubpartitionStateHandle": 2,
    "MergedInputChannelStateHandle": 3,
    "MergedResultSubpartitionStateHandle": 4,
}
WITH_CHANNEL_STATE = ("cs-source", "cs-slow")


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _flink_bytes(uid: str, field: str) -> int:
    (op,) = (o for o in REPORT["metadata"]["operators"] if o["uid"] == uid)
    return sum(h["stateSize"] for sub in op["subtasks"] for h in sub[field])


def test_the_fixture_holds_input_and_output_channel_state() -> None:
    ops = {o["uid"]: o for o in REPORT["metadata"]["operators"]}
    assert REPORT["flinkVersion"] == "2.3.0" and REPORT["metadata"]["checkpointType"] == "Checkpoint"
    assert _flink_bytes("cs-source", "resultSubpartitionState") > 0
    assert _flink_bytes("cs-slow", "inputChannelState") > 0
    assert all(
        not s["inputChannelState"] and not s["resultSubpartitionState"] for s in ops["cs-count"]["subtasks"]
    )
    # Small on purpose (4 KiB network buffers): the whole case stays in the tens of KB.
    assert sum(p.stat().st_size for p in CASE.rglob("*") if p.is_file()) < 80_000


def test_kg_reads_the_channel_handles_flinks_loader_reads() -> None:
    metadata = read_flink_metadata(CHECKPOINT).metadata
    ours = {
        (op.operator_id, sub.index, field): [(h.kind, h.subtask_index, h.size) for h in handles]
        for op in metadata.operators
        for sub in op.subtasks
        for field, handles in (
            ("inputChannelState", sub.input_channel_state),
            ("resultSubpartitionState", sub.result_subpartition_state),
        )
    }
    flinks = {
        (op["operatorId"], sub["subtask"], field): [
            (KINDS[h["class"]], h["subtaskIndex"], h["stateSize"]) for h in sub[field]
        ]
        for op in REPORT["metadata"]["operators"]
        for sub in op["subtasks"]
        for field in ("inputChannelState", "resultSubpartitionState")
    }
    assert ours == flinks


@pytest.mark.parametrize(
    "args",
    [
        ("rescale", "-p", "3", "--engine", "local"),
        ("rescale", "-p", "2", "--engine", "local"),
        ("convert",),
    ],
    ids=["rescale-to-3", "rescale-to-2", "convert"],
)
def test_rescale_and_convert_refuse_it_before_writing(kg: Kg, tmp_path: Path, args: tuple[str, ...]) -> None:
    before = _tree(CASE)
    dest = tmp_path / "out"
    result = kg(args[0], CHECKPOINT, "--out", dest, *args[1:])
    assert result.exit_code == 4, result.stderr
    assert result.stdout == ""
    # One line, naming the input's _metadata (not a scratch copy of it) and the first operator holding it.
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("kg: error: ")
    assert str(CHECKPOINT / "_metadata") in result.stderr
    assert "'cs-source' holds in-flight data of an unaligned checkpoint (channel state)" in result.stderr
    assert "restore it with Flink and take a savepoint" in result.stderr
    assert not dest.exists() and list(tmp_path.iterdir()) == []
    as_json = kg(args[0], CHECKPOINT, "--out", dest, *args[1:], "--json")
    assert as_json.exit_code == 4
    assert as_json.json()["error"]["code"] == "FLINK_CHANNEL_STATE"
    assert not dest.exists() and list(tmp_path.iterdir()) == []
    assert _tree(CASE) == before


def test_inspect_shows_the_in_flight_data(kg: Kg) -> None:
    text = kg("inspect", CASE)
    assert text.exit_code == 0, text.stderr
    assert "cs-slow (channel state)" in text.stdout
    assert text.stdout.count("in-flight data (unaligned checkpoint)") == 2
    doc = kg("inspect", CASE, "--json")
    ops = {o["uid"]: o for o in doc.json()["operators"]}
    for uid in ("cs-source", "cs-slow", "cs-count", "cs-sink"):
        assert ops[uid]["input_channel_bytes"] == _flink_bytes(uid, "inputChannelState"), uid
        assert ops[uid]["result_subpartition_bytes"] == _flink_bytes(uid, "resultSubpartitionState"), uid
    # cs-slow has no state but its buffers, in one channel-state file; the source's is in its own file.
    assert ops["cs-slow"]["has_state"] and ops["cs-slow"]["files"] == 1
    assert ops["cs-source"]["files"] == 2
    assert not ops["cs-sink"]["has_state"]


@pytest.mark.parametrize(
    "args",
    [(), ("-p", "cs-slow=2", "-p", "cs-count=2", "-p", "cs-sink=2"), ("-p", "cs-source=1")],
    ids=["as-recorded", "same-parallelism", "source-unchanged"],
)
def test_check_at_the_old_parallelism_is_clean(kg: Kg, args: tuple[str, ...]) -> None:
    result = kg("check", CASE, *args, "--strict", "--json")
    assert result.exit_code == 0, result.stdout
    assert result.json()["findings"] == []


@pytest.mark.parametrize(
    ("args", "moves"),
    [
        (
            ("-p", "cs-slow=3", "-p", "cs-count=3", "-p", "cs-sink=3"),
            ("cs-slow 2 -> 3", "cs-count 2 -> 3", "cs-sink 2 -> 3"),
        ),
        (("-p", "cs-count=1"), ("cs-count 2 -> 1",)),
        (("-p", "3"), ("cs-source 1 -> 3", "cs-sink 2 -> 3", "cs-slow 2 -> 3", "cs-count 2 -> 3")),
    ],
    ids=["slow-and-count-to-3", "a-neighbour-to-1", "everything-to-3"],
)
def test_check_warns_at_a_new_parallelism(kg: Kg, args: tuple[str, ...], moves: tuple[str, ...]) -> None:
    result = kg("check", CASE, *args, "--json")
    assert result.exit_code == 0, result.stdout  # Flink restores the unchanged job: a warning, not an error
    findings = result.json()["findings"]
    assert sorted((f["code"], f["severity"], f["subject"]) for f in findings) == [
        ("CHANNEL_STATE_RESCALE", "warning", uid) for uid in sorted(WITH_CHANNEL_STATE)
    ]
    for f in findings:
        listed = f["message"].split("the plan changes parallelism (", 1)[1].split(")", 1)[0]
        assert sorted(listed.split(", ")) == sorted(moves)
        assert "Cannot rescale the given pointwise partitioner." in f["message"]
        assert "data exchanges with persisted data are now chained." in f["message"]
    (slow,) = (f for f in findings if f["subject"] == "cs-slow")
    assert (
        f"input channels {_flink_bytes('cs-slow', 'inputChannelState')} bytes, result subpartitions "
        f"{_flink_bytes('cs-slow', 'resultSubpartitionState')} bytes" in slow["message"]
    )
    assert kg("check", CASE, *args, "--strict").exit_code == 1


def test_check_channel_state_needs_channel_state() -> None:
    assert "CHANNEL_STATE_RESCALE" in FINDING_CODES
    operators = summarize(CASE).operators
    plan = RestorePlan(parallelism=3)
    assert [f.severity for f in check_channel_state(operators, plan)] == [Severity.WARNING] * 2
    assert check_channel_state(operators, RestorePlan()) == []
    # A savepoint never holds channel state (savepoints are aligned): nothing, whatever the plan.
    savepoint = summarize(FLINK_FIXTURES / "heap-files-p3-maxp128-long").operators
    assert check_channel_state(savepoint, plan) == []
