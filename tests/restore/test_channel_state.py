"""Real Flink 2.3 restores an unaligned checkpoint holding channel state, and ``kg check`` agrees with it.

Issue #20 part 5. ``fixtures/flink/2.3/unaligned-checkpoint-p2`` (``kg.fixtures.ChannelStateJob``) holds
in-flight data: the source's output buffers (result-subpartition state, p 1) and the back-pressured
``cs-slow`` map's input and output buffers (p 2). One JVM (``ChannelStateJob restore``) restores a copy of
it six times and counts every record per key (ValueState ``count``, N/K = 500 each):

- the job as generated (source -rebalance-> cs-slow -keyBy-> cs-count) at p 2, 3 and 1: Flink restores it
  every time and replays the in-flight data exactly once (``StateAssignmentOperation
  .reDistributeInputChannelStates`` / ``reDistributeResultSubpartitionStates`` map the buffers through
  the edges' ``SubtaskStateMapper``: ROUND_ROBIN for rebalance, RANGE for keyBy);
- source -rescale-> cs-slow (pointwise): restored at p 2 (same parallelism: the buffers are handed back
  as they were), refused at p 3 (``SubtaskStateMapper.UNSUPPORTED``);
- source -forward-> cs-slow at p 1, which chains the two: refused at restore (the source's buffers
  would now be inside a chain, ``checkForUnsupportedToplogyChanges``).

``kg check`` with each restore's plan never says clean (under ``--strict``) where Flink refuses, and never
fails (without ``--strict``) where Flink restores: ``_metadata`` records neither partitioners nor chains,
so at a new parallelism it warns (``CHANNEL_STATE_RESCALE``) and quotes both refusals. ``kg rescale`` /
``kg convert`` refusing the same checkpoint, and ``kg inspect``, are ``tests/cli/test_cli_channel_state.py``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import cli
from tests.restore.harness import CASES, JVM_FLAGS, Dump, restore_error, run_java_batch

pytestmark = pytest.mark.flink

CASE = CASES / "unaligned-checkpoint-p2"
MAIN_CLASS = "kg.fixtures.ChannelStateJob"
NUM_RECORDS = 20_000
NUM_KEYS = 40
REPORT: dict[str, Any] = json.loads((CASE / "channel-state-report.json").read_text(encoding="utf-8"))
SOURCE_ID = REPORT["operatorIdByUid"]["cs-source"]
POINTWISE = (
    "java.lang.UnsupportedOperationException: Cannot rescale the given pointwise partitioner.\n"
    "Did you change the partitioner to forward or rescale?\n"
    "It may also help to add an explicit shuffle()."
)
CHAINED = (
    "java.lang.IllegalStateException: Cannot recover from unaligned checkpoint when topology changes, such "
    "that data exchanges with persisted data are now chained.\n"
    f"The following operators contain channel state: [{SOURCE_ID}]"
)


@dataclass(frozen=True)
class Restore:
    """One restore: parallelism of cs-slow, cs-count and cs-sink (the source stays at 1), and the edge
    from the source to cs-slow; ``refusal`` is Flink's message when Flink refuses it, else None."""

    parallelism: int
    edge: str
    refusal: str | None


RESTORES = {
    "same-p2": Restore(2, "rebalance", None),
    "up-p3": Restore(3, "rebalance", None),
    "down-p1": Restore(1, "rebalance", None),
    "rescale-edge-p2": Restore(2, "rescale", None),
    "rescale-edge-p3": Restore(3, "rescale", POINTWISE),
    "forward-chained-p1": Restore(1, "forward", CHAINED),
}


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@dataclass(frozen=True)
class Run:
    checkpoint: Path
    dumps: Mapping[str, Dump]
    unchanged: bool


@pytest.fixture(scope="module")
def run(flink_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Restore a copy of the checkpoint once per entry of RESTORES, in one JVM."""
    root = tmp_path_factory.mktemp("channel-state")
    shutil.copytree(CASE, root / "case")
    (checkpoint,) = (root / "case").glob("*/chk-*")
    before = _tree(root / "case")
    entries = [
        {"savepoint": str(checkpoint), "parallelism": r.parallelism, "edge": r.edge, "timeout_seconds": 120}
        for r in RESTORES.values()
    ]
    command = ["java", *JVM_FLAGS, "-cp", flink_classpath, MAIN_CLASS, "restore"]
    dumps = dict(zip(RESTORES, run_java_batch("ChannelStateJob", command, entries, root), strict=True))
    return Run(checkpoint, dumps, _tree(root / "case") == before)


def _plan(r: Restore) -> list[str]:
    return [arg for uid in ("cs-slow", "cs-count", "cs-sink") for arg in ("-p", f"{uid}={r.parallelism}")]


@pytest.mark.parametrize("name", [n for n, r in RESTORES.items() if r.refusal is None])
def test_flink_restores_the_in_flight_data_exactly_once(run: Run, name: str) -> None:
    dump = run.dumps[name]
    assert restore_error(dump) is None, restore_error(dump)
    keys = dump["keys"]
    assert len(keys) == NUM_KEYS
    assert {k["final"] for k in keys.values()} == {NUM_RECORDS // NUM_KEYS}
    restored = sum(k["restored"] or 0 for k in keys.values())
    # The keyed counts Flink restored plus every record counted after the restore: each record once,
    # those that were in flight (in the channel state) included.
    assert 0 < restored < NUM_RECORDS and restored + dump["counted"] == NUM_RECORDS
    assert {k["subtask"] for k in keys.values()} == set(range(RESTORES[name].parallelism))


def test_every_restore_reads_the_same_keyed_state(run: Run) -> None:
    restored = [
        {key: k["restored"] for key, k in dump["keys"].items()}
        for dump in run.dumps.values()
        if dump.get("keys")
    ]
    assert len(restored) == 4 and all(r == restored[0] for r in restored)


@pytest.mark.parametrize("name", [n for n, r in RESTORES.items() if r.refusal is not None])
def test_flink_refuses_a_changed_exchange(run: Run, name: str) -> None:
    error = restore_error(run.dumps[name])
    assert error is not None
    assert error.startswith("org.apache.flink.runtime.client.JobInitializationException: Could not start the")
    assert RESTORES[name].refusal in error


def test_flink_leaves_the_checkpoint_as_it_was(run: Run) -> None:
    assert run.unchanged


@pytest.mark.parametrize("name", list(RESTORES))
def test_kg_check_agrees_with_flink(run: Run, name: str) -> None:
    r = RESTORES[name]
    flink_restored = restore_error(run.dumps[name]) is None
    runner = CliRunner()
    result = runner.invoke(cli, ["check", str(run.checkpoint), *_plan(r), "--json"])
    strict = runner.invoke(cli, ["check", str(run.checkpoint), *_plan(r), "--strict"])
    findings = json.loads(result.stdout)["findings"]
    codes = {(f["code"], f["subject"]) for f in findings}
    # No error where Flink restores; never clean under --strict where Flink refuses.
    assert result.exit_code == 0, result.stdout
    if not flink_restored:
        assert strict.exit_code == 1
    if r.parallelism == 2:
        assert findings == [] and strict.exit_code == 0 and flink_restored
    else:
        assert codes == {("CHANNEL_STATE_RESCALE", "cs-source"), ("CHANNEL_STATE_RESCALE", "cs-slow")}
        if r.refusal is not None:
            # The warning quotes the refusal Flink gave.
            first_line = r.refusal.split("\n", 1)[0].split(": ", 1)[1]
            assert all(first_line in f["message"] for f in findings)
