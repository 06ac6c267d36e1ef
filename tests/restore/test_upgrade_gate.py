"""Real Flink 2.3 restores Flink 1.20 state as ``kg check --target-flink 2.3`` says it will.

The UpgradeJob savepoints (fixtures/flink/1.20/upgrade-*, written by Flink 1.20.3 with the HashMap and the
RocksDB backend) hold one keyed operator per kind of state: Kryo values, Kryo map values, Kryo list
elements, a POJO with a ``List<String>`` field, a plain POJO, a ``Tuple2<String, Long>`` and a ``Long``, and
Kryo operator list state (``op-kryo``), and a ``Long`` under a Kryo key (``kryo-key``).
One JVM per Flink version restores them (``UpgradeJob restore``) and dumps every key's state as its first
record after the restore reads it:

- Flink 1.20.3 restores the whole job with every state equal to what the job wrote (``written-state.json``),
  so the dump is faithful;
- Flink 2.3.0, restoring each operator alone (the source and that operator, the rest of the savepoint left
  behind: a whole-job restore fails on the first refused state and hides the others), refuses every state
  kg's gate flags, or restores it with values that differ from what was written; every state the gate
  passes restores equal.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.assess.summary import summarize
from keygroup_cli.assess.upgrade import check_upgrade, parse_target
from keygroup_cli.core.findings import Severity
from keygroup_cli.core.keygroups import operator_id_for_uid
from tests.restore.harness import ADD_OPENS, JVM_FLAGS, ROOT, Dump, build_versioned_classpath, run_java_batch

pytestmark = pytest.mark.flink

CASES = ("upgrade-heap-canonical-p2", "upgrade-rocksdb-canonical-p2")
FIXTURES = ROOT / "fixtures" / "flink" / "1.20"
MAIN = "kg.versioned.UpgradeJob"


def _written(case: str) -> dict[str, dict[str, Any]]:
    states: dict[str, dict[str, Any]] = json.loads((FIXTURES / case / "written-state.json").read_text())[
        "states"
    ]
    return states


UIDS = tuple(sorted(_written(CASES[0])))


def _restore_all(version: str, workdir: Path) -> dict[tuple[str, str], Dump]:
    """Restore every case with Flink ``version`` in one JVM; return the dumps by (case, uid).

    1.x restores each case's whole job at once (key ``(case, "*")``); 2.x each operator alone.
    """
    classpath = build_versioned_classpath(version)
    whole = version.startswith("1.")
    pairs = [(case, uid) for case in CASES for uid in (("*",) if whole else UIDS)]
    entries = [
        {"savepoint": str(FIXTURES / case), "uids": list(UIDS) if uid == "*" else [uid]}
        for case, uid in pairs
    ]
    command = ["java", *ADD_OPENS, *JVM_FLAGS, "-cp", classpath, MAIN, "restore"]
    dumps = run_java_batch(f"UpgradeJob ({version})", command, entries, workdir)
    return dict(zip(pairs, dumps, strict=True))


@pytest.fixture(scope="module")
def restored(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[tuple[str, str], Dump]]:
    cache: dict[str, dict[tuple[str, str], Dump]] = {}

    def get(version: str) -> dict[tuple[str, str], Dump]:
        if version not in cache:
            cache[version] = _restore_all(version, tmp_path_factory.mktemp(f"upgrade-{version}"))
        return cache[version]

    return get


def _flagged(case: str) -> dict[str, list[str]]:
    """Return kg's gate verdict on a case: uid -> the codes of its error findings (empty: passed)."""
    summary = summarize(FIXTURES / case, read_states=True)
    assert summary.metadata_version is not None
    findings = check_upgrade(
        summary.operators, metadata_version=summary.metadata_version, target=parse_target("2.3")
    )
    verdict: dict[str, list[str]] = {uid: [] for uid in UIDS}
    for uid in UIDS:
        op_id = operator_id_for_uid(uid)
        for f in findings:
            if f.severity is Severity.ERROR and f.subject in (f"{op_id} / {uid}", f"{op_id} / (key)"):
                verdict[uid].append(f.code)
    return verdict


@pytest.mark.parametrize("case", CASES)
def test_flink_1_20_restores_every_state_as_written(
    case: str, restored: Callable[[str], dict[tuple[str, str], Dump]]
) -> None:
    dump = restored("1.20.3")[(case, "*")]
    assert dump["flinkVersion"] == "1.20.3"
    assert dump["error"] is None, dump["error"]
    assert dump["values"] == _written(case)


@pytest.mark.parametrize("case", CASES)
def test_flink_2_3_fails_exactly_the_states_the_gate_flags(
    case: str, restored: Callable[[str], dict[tuple[str, str], Dump]]
) -> None:
    dumps = restored("2.3.0")
    written = _written(case)
    verdict = _flagged(case)
    outcome = {}
    for uid in UIDS:
        dump = dumps[(case, uid)]
        assert dump["flinkVersion"] == "2.3.0"
        if dump["error"] is not None:
            outcome[uid] = "refused"
        else:
            outcome[uid] = "equal" if dump["values"] == {uid: written[uid]} else "differs"
    for uid in UIDS:
        if verdict[uid]:
            assert outcome[uid] in ("refused", "differs"), (uid, verdict[uid], outcome[uid])
        else:
            assert outcome[uid] == "equal", (uid, outcome[uid], dumps[(case, uid)].get("error"))
    # Both kinds the gate must catch occur here: a restore Flink refuses, and a silent corruption.
    assert {outcome[u] for u in UIDS if verdict[u]} == {"refused", "differs"}
    assert any(not verdict[u] for u in UIDS)
