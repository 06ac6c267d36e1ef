"""Real Flink 1.15 to 2.3 restore savepoints into a CHANGED job, and ``kg check`` agrees with each verdict.

Issue #20 part 5: two decisions kg makes in Flink's place that only a changed job exercises. For every
version in ``UID_JOB_VERSIONS``, one JVM of that version (``UidJob restore``; the request's ``drop`` and
``add_stateless`` change the job) restores, from that version's own ``uid-heap-canonical-p3`` and kg's
rescales of it:

- operators missing from the new job: the job without keyed-string (and its chain), with and without
  allowNonRestoredState; the job without string-sink alone (no state);
- an operator the savepoint lacks, chained with a keyed one, in a job that sets no maxParallelism: a new
  stateless map after keyed-long in kg's ``rescale --operator keyed-long --to 4 -m 256`` output (and in a
  job that sets 256 on keyed-long), and after keyed-string (state at maxP 10, Flink's default at p 3 is 128)
  under two uids;
- ``CHAIN_AMBIGUOUS`` resolved: the source rescaled by kg 1 -> 3 (so it shares (p 3, maxP 128) with
  keyed-long), then ``rescale --operator keyed-long --operator long-drop --operator long-sink --to 4
  -m 256``, restored in a job that sets no maxParallelism and in one that sets 256 on keyed-long.

Flink gives an operator the savepoint lacks an empty ``OperatorState`` at its vertex's current
maxParallelism (``StateAssignmentOperation.assignStates``, which collects a vertex's states in a
``HashMap`` keyed by OperatorID); ``assignAttemptState`` then runs ``checkParallelismPreconditions`` over
that map's values, and a vertex that sets no maxParallelism takes each state's in turn: the LAST one in the
map's iteration order decides the key groups. Whether a new operator breaks a restore therefore depends on
its uid's hash (``_last_in_hash_order``); ``kg check --job-uids`` cannot rely on that and reports
``MAX_PARALLELISM_NOT_ADOPTED`` either way.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import cli
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import key_group_for_hash, operator_id_for_uid, operator_index_for_key_group
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.restore.harness import UID_CASE as CASE
from tests.restore.harness import UID_CHAINS as CHAINS
from tests.restore.harness import UID_JOB_UIDS as JOB_UIDS
from tests.restore.harness import (
    UID_JOB_VERSIONS,
    UID_NUM_KEYS,
    Dump,
    UidRestoreRequest,
    assert_uid_job_restored,
    build_versioned_classpath,
    restore_error,
    run_uid_restores,
    uid_case,
    uid_expected_value,
)
from tests.restore.harness import UID_NEW_M as NEW_M
from tests.restore.harness import UID_NEW_P as NEW_P
from tests.restore.harness import UID_OWN_M as OWN_M
from tests.restore.harness import UID_OWN_P as OWN_P

pytestmark = pytest.mark.flink

#: New stateless operators' uids. After keyed-long's 256 state Flink checks keyed-long's own state last
#: whatever the uid; after keyed-string, ``string-added`` comes before string-sink (state at 10) in the
#: vertex's HashMap and ``string-new`` comes last (its empty state at Flink's default 128).
ADDED_LONG = "long-added"
ADDED_STRING_EARLY = "string-added"
ADDED_STRING_LAST = "string-new"
NOT_IN_PROGRAM = (
    "Cannot map checkpoint/savepoint state for operator {id} to the new program, because the operator is "
    "not available in the new program. If you want to allow to skip this, you can set the "
    "--allowNonRestoredState option on the CLI."
)


@dataclass(frozen=True)
class Run:
    """One version's restores of changed jobs: the requests given to Flink and what Flink made of each."""

    version: str
    root: Path
    requests: Mapping[str, UidRestoreRequest]
    dumps: Mapping[str, Dump]
    #: kg's refusal of ``rescale --operator keyed-long -m 256`` on the source-at-p-3 savepoint.
    ambiguous: InvalidArgumentError


def _requests(version: str, root: Path) -> tuple[dict[str, UidRestoreRequest], InvalidArgumentError]:
    original = uid_case(version, CASE)
    rescaled = root / "rescaled"
    rescale(original, rescaled, 4, operators=["keyed-long"], new_max_parallelism=256, engine="local")
    # CHAIN_AMBIGUOUS, as tests/assess/test_uid_job.py builds it: the source at (p 3, maxP 128) like
    # keyed-long, so long-drop / long-sink (no state, p 3, maxP 128) may be chained with either.
    source3 = root / "source-p3"
    rescale(original, source3, 3, operators=["uid-source"], engine="local")
    with pytest.raises(InvalidArgumentError) as refused:
        rescale(
            source3, root / "refused", 4, operators=["keyed-long"], new_max_parallelism=256, engine="local"
        )
    assert not (root / "refused").exists()
    resolved = root / "resolved"
    rescale(
        source3,
        resolved,
        4,
        operators=["keyed-long", "long-drop", "long-sink"],
        new_max_parallelism=256,
        engine="local",
    )
    requests = {
        "drop-string": UidRestoreRequest(original, OWN_P, {}, drop=["keyed-string"]),
        "drop-string/allow": UidRestoreRequest(
            original, OWN_P, {}, allow_non_restored_state=True, drop=["keyed-string"]
        ),
        "drop-sink": UidRestoreRequest(original, OWN_P, {}, drop=["string-sink"]),
        "added-long/none": UidRestoreRequest(rescaled, NEW_P, {}, add_stateless={"keyed-long": ADDED_LONG}),
        "added-long/sets": UidRestoreRequest(
            rescaled, NEW_P, NEW_M, add_stateless={"keyed-long": ADDED_LONG}
        ),
        "added-string-early/none": UidRestoreRequest(
            original, OWN_P, {}, add_stateless={"keyed-string": ADDED_STRING_EARLY}
        ),
        "added-string-last/none": UidRestoreRequest(
            original, OWN_P, {}, add_stateless={"keyed-string": ADDED_STRING_LAST}, timeout_seconds=30
        ),
        "resolved/none": UidRestoreRequest(resolved, NEW_P, {}),
        "resolved/sets": UidRestoreRequest(resolved, NEW_P, NEW_M),
    }
    return requests, refused.value


@pytest.fixture(scope="module", params=UID_JOB_VERSIONS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Write kg's outputs for one Flink version and restore every changed job in one JVM of that version."""
    version = request.param
    classpath = build_versioned_classpath(version)
    root = tmp_path_factory.mktemp(f"job-changes-{version}")
    requests, ambiguous = _requests(version, root)
    dumps = run_uid_restores(version, list(requests.values()), root / "dumps", classpath)
    for dump in dumps:
        assert dump["flinkVersion"] == version
    yield Run(version, root, requests, dict(zip(requests, dumps, strict=True)), ambiguous)
    shutil.rmtree(root, ignore_errors=True)


def _job_uids(request: UidRestoreRequest) -> list[str]:
    """The restoring job's operators: UidJob's, less what ``drop`` leaves out, plus ``add_stateless``."""
    dropped = set(request.drop)
    for keyed in request.drop:
        dropped.update(CHAINS.get(keyed, ()))
    added = list((request.add_stateless or {}).values())
    return [uid for uid in JOB_UIDS if uid not in dropped] + added


_UID_OF = {
    operator_id_for_uid(uid): uid for uid in (*JOB_UIDS, ADDED_LONG, ADDED_STRING_EARLY, ADDED_STRING_LAST)
}


def _check(run: Run, name: str, *extra: str) -> tuple[int, list[tuple[str, str, str]], list[dict[str, Any]]]:
    """``kg check``'s verdict on the deployment request ``name`` restores into.

    The new job's parallelism (the source at 1, as UidJob runs it), and either the maxParallelism it sets
    (``-m`` on every operator of each keyed chain, the new one included: UidJob sets it on the chain head)
    or, for a job that sets none, its operators (``--job-uids``). Returns the exit code, the non-info
    findings as (code, severity, uid) and the findings themselves.
    """
    request = run.requests[name]
    keyed = [uid for uid in CHAINS if uid not in request.drop]
    args = [
        "--parallelism=uid-source=1",
        *[f"--parallelism={uid}={request.parallelism[uid]}" for uid in keyed],
    ]
    added = request.add_stateless or {}
    for uid, m in request.max_parallelism.items():
        members = (uid, *([added[uid]] if uid in added else []), *CHAINS[uid])
        args += [f"--max-parallelism={member}={m}" for member in members]
    if not request.max_parallelism:
        uids_file = run.root / f"job-uids-{name.replace('/', '-')}.txt"
        uids_file.write_text("\n".join(_job_uids(request)) + "\n", encoding="utf-8")
        args += ["--job-uids", str(uids_file)]
    result = CliRunner().invoke(cli, ["--json", "check", str(request.savepoint), *args, *extra])
    document = json.loads(result.stdout)
    findings = [f for f in document["findings"] if f["severity"] != "info"]
    shown = sorted((f["code"], f["severity"], _UID_OF.get(f["subject"], f["subject"])) for f in findings)
    return result.exit_code, shown, findings


def _assert_keyed_restored(dump: Dump, operator: str, parallelism: int, max_parallelism: int) -> None:
    """Every key of one keyed operator restored once with its value, in Flink's and kg's key group."""
    keys = dump["keyed"][operator]
    assert len(keys) == UID_NUM_KEYS
    key_type = "string" if operator == "keyed-string" else "long"
    for key, entry in keys.items():
        assert entry["restored"] == uid_expected_value(operator, key), (operator, key)
        group = key_group_for_hash(
            hash_code(key if key_type == "string" else int(key), key_type), max_parallelism
        )
        assert entry["keyGroup"] == group, (operator, key)
        assert entry["subtask"] == operator_index_for_key_group(max_parallelism, parallelism, group)


def _vertex_of(dump: Dump, uid: str) -> dict[str, Any]:
    """The restoring job's vertex holding ``uid`` (its operators in Flink's ``getOperatorIDs`` order)."""
    vertices: list[dict[str, Any]] = dump["jobVertices"]
    (vertex,) = [v for v in vertices if any(op["uid"] == uid for op in v["operators"])]
    return vertex


def _last_in_hash_order(operator_ids: Sequence[str]) -> str:
    """The OperatorID a ``HashMap`` of a vertex's states (``assignStates``) yields last.

    ``new HashMap<>(n)`` filled with ``n`` entries in ``getOperatorIDs`` order; iteration goes by bucket
    (``AbstractID.hashCode`` spread by ``h ^ h >>> 16``, masked by the table size) and, within a bucket,
    by insertion. ``assignAttemptState`` checks the states in that order, so this operator's state decides
    the maxParallelism of a vertex that sets none.
    """
    capacity = 1
    while capacity < len(operator_ids):
        capacity *= 2
    for size in range(1, len(operator_ids) + 1):
        if size > capacity * 3 // 4:
            capacity *= 2

    def bucket(hex_id: str) -> int:
        raw = bytes.fromhex(hex_id)
        lower, upper = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")
        h = (lower ^ (lower >> 32) ^ upper ^ (upper >> 32)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(operator_ids, key=bucket)[-1]


def _last_checked(dump: Dump, uid: str) -> str:
    vertex = _vertex_of(dump, uid)
    return _UID_OF[_last_in_hash_order([op["operatorId"] for op in vertex["operators"]])]


def test_a_job_without_keyed_string_is_refused_unless_non_restored_state_is_allowed_and_kg_check_agrees(
    run: Run,
) -> None:
    keyed_string = operator_id_for_uid("keyed-string")
    error = restore_error(run.dumps["drop-string"])
    assert error is not None
    assert "Failed to rollback to checkpoint/savepoint" in error
    assert NOT_IN_PROGRAM.format(id=keyed_string) in error
    code, shown, findings = _check(run, "drop-string")
    assert (code, shown) == (1, [("OPERATOR_NOT_IN_JOB", "error", "keyed-string")])
    assert NOT_IN_PROGRAM.format(id=keyed_string) in findings[0]["message"]
    # With allowNonRestoredState Flink skips keyed-string's state (string-drop / string-sink hold none)
    # and restores keyed-long's every key; kg check warns.
    dump = run.dumps["drop-string/allow"]
    assert restore_error(dump) is None
    assert set(dump["keyed"]) == {"keyed-long"}
    _assert_keyed_restored(dump, "keyed-long", 3, 128)
    assert [op["uid"] for op in _vertex_of(dump, "keyed-long")["operators"]] == [
        "long-sink",
        "long-drop",
        "keyed-long",
    ]
    code, shown, _ = _check(run, "drop-string/allow", "--allow-non-restored-state")
    assert (code, shown) == (0, [("OPERATOR_NOT_IN_JOB", "warning", "keyed-string")])


def test_a_job_without_a_stateless_operator_restores_and_kg_check_agrees(run: Run) -> None:
    # string-sink holds no state: Flink skips it ("Skipping empty savepoint state") without
    # allowNonRestoredState, and kg check, told the job's operators, finds nothing.
    dump = run.dumps["drop-sink"]
    assert_uid_job_restored(dump, OWN_P, OWN_M)
    assert [op["uid"] for op in _vertex_of(dump, "keyed-string")["operators"]] == [
        "string-drop",
        "keyed-string",
    ]
    assert _check(run, "drop-sink")[:2] == (0, [])


def test_a_new_operator_chained_with_keyed_long_after_kgs_max_parallelism_change(run: Run) -> None:
    # kg's --operator keyed-long --to 4 -m 256 output (state 256; Flink's default at p 4 is 128), restored
    # in a job that sets no maxParallelism and has a new stateless map chained after keyed-long.
    dump = run.dumps["added-long/none"]
    vertex = _vertex_of(dump, ADDED_LONG)
    assert [op["uid"] for op in vertex["operators"]] == ["long-sink", "long-drop", ADDED_LONG, "keyed-long"]
    assert (vertex["parallelism"], vertex["maxParallelism"]) == (4, -1)  # the job sets none
    # Flink gives the new map an empty state at 128, but checks keyed-long's own state (256) last in this
    # vertex, whatever the new uid (keyed-long's id is in the HashMap's last bucket and inserted last):
    # the vertex ends at 256 and every key is restored in its 256 key group.
    assert _last_checked(dump, ADDED_LONG) == "keyed-long"
    assert_uid_job_restored(dump, NEW_P, NEW_M)
    # kg check cannot see chains or that order: every operator with keyed state whose maxParallelism is not
    # Flink's default may share a task with the new one. An error, where this Flink got away with it.
    code, shown, _ = _check(run, "added-long/none")
    assert (code, shown) == (
        1,
        [
            ("MAX_PARALLELISM_NOT_ADOPTED", "error", "keyed-long"),
            ("MAX_PARALLELISM_NOT_ADOPTED", "error", "keyed-string"),
        ],
    )
    # The job that sets 256 on keyed-long (10 on keyed-string) restores every key; kg check, told the
    # chains' maxParallelism, agrees.
    dump = run.dumps["added-long/sets"]
    assert _vertex_of(dump, ADDED_LONG)["maxParallelism"] == 256
    assert_uid_job_restored(dump, NEW_P, NEW_M)
    assert _check(run, "added-long/sets")[:2] == (0, [])


def test_whether_flink_adopts_the_state_max_parallelism_past_a_new_operator_depends_on_its_uids_hash(
    run: Run,
) -> None:
    # keyed-string's state is at maxParallelism 10, Flink's default at p 3 is 128, the job sets none.
    # string-added's empty state (128) is checked before string-sink's (10): the vertex ends at 10.
    early = run.dumps["added-string-early/none"]
    assert _last_checked(early, ADDED_STRING_EARLY) == "string-sink"
    assert_uid_job_restored(early, OWN_P, OWN_M)
    # string-new's is checked last: the vertex ends at 128 and the keyed state at 10 is refused.
    last = run.dumps["added-string-last/none"]
    assert _last_checked(last, ADDED_STRING_LAST) == ADDED_STRING_LAST
    error = restore_error(last)
    assert error is not None
    assert (
        "Could not restore keyed state backend for KeyedProcessOperator_"
        + operator_id_for_uid("keyed-string")
        in error
    )
    assert "The key group must belong to the backend" in error
    # kg check reports both as not adopted: one uid's hash from a refusal is no guarantee.
    for name in ("added-string-early/none", "added-string-last/none"):
        code, shown, _ = _check(run, name)
        assert (code, shown) == (1, [("MAX_PARALLELISM_NOT_ADOPTED", "error", "keyed-string")]), name


def test_the_chain_ambiguous_resolution_restores_in_a_job_that_sets_none_and_in_one_that_sets_it(
    run: Run,
) -> None:
    assert run.ambiguous.code == "CHAIN_AMBIGUOUS"
    written = read_flink_metadata(run.requests["resolved/none"].savepoint).metadata
    shapes = {_UID_OF[op.operator_id]: (op.parallelism, op.max_parallelism) for op in written.operators}
    assert shapes == {
        "uid-source": (3, 128),
        "keyed-string": (3, 10),
        "string-drop": (3, 10),
        "string-sink": (3, 10),
        "keyed-long": (4, 256),
        "long-drop": (4, 256),
        "long-sink": (4, 256),
    }
    # The job runs its source at p 1: Flink redistributes the source's operator state from 3 subtasks to
    # one, and every record is read again (every key of both keyed operators arrives with its state).
    for name in ("resolved/none", "resolved/sets"):
        dump = run.dumps[name]
        assert _vertex_of(dump, "uid-source")["parallelism"] == 1
        assert_uid_job_restored(dump, NEW_P, NEW_M)
        assert _check(run, name)[:2] == (0, []), name
