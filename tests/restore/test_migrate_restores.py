"""Real Flink 1.20 and 2.3 restore ``kg migrate``'s renamed, assigned and dropped savepoints, all keys intact.

For each version one JVM (``UidJob restore``) restores, in one batch, the UidJob savepoint of that version
(fixtures/flink/<v>/uid-heap-canonical-p3) after kg's migration, and the untouched savepoint, into jobs whose
uids changed:

- ``renamed-none``: ``--rename keyed-long=keyed-long-v2``, restored by a job that sets uid keyed-long-v2 and
  no maxParallelism (Flink adopts the state's); ``unrenamed``: the input itself into that job, which Flink
  refuses;
- ``hashed``: the savepoint as a job without a uid on keyed-long wrote it (that operator's id is Flink's
  hash of the graph, ``HASHED_LONG``; the job without the uid restores it, and says that id is its own);
  ``assigned``: after ``--assign-uid HASHED_LONG=keyed-long``, restored by the job with that uid and with
  maxParallelism set on its keyed operators;
- ``dropped``: ``--drop keyed-string``, restored by a job without keyed-string's chain and without
  ``--allowNonRestoredState``; ``undropped``: the input into that job, refused;
- ``combined``: the RocksDB incremental checkpoint (absolute ``shared/`` handles) hashed as above, then one
  pass of ``--assign-uid``, ``--rename`` and ``--drop string-sink``, restored into RocksDB by a job with both
  new uids and no string-sink.

``kg rescale`` with the same migration options, in the rescale's one pass (the same JVM batch):

- ``rescaled-renamed``: ``--from 3 --to 4 --rename`` (same maxParallelism: key groups copied as bytes),
  restored by the renamed job at parallelism 4 that sets no maxParallelism;
- ``rescaled-combined``: the hashed savepoint, ``--operator HASHED_LONG --to 4 -m 256`` (keys re-hashed)
  with ``--assign-uid``, ``--rename`` and ``--drop string-sink``, restored by a job with both new uids, no
  string-sink and no maxParallelism set (Flink adopts 256 from the state).

``kg check --job-uids`` is run for the job the untouched savepoint is refused by, and must print the
``kg migrate`` command that fixes it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import cli
from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import key_group_for_hash, operator_id_for_uid, operator_index_for_key_group
from keygroup_cli.flink.metadata.locate import find_metadata
from keygroup_cli.flink.metadata.reader import parse_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from tests.restore.harness import (
    UID_CASE,
    UID_JOB_UIDS,
    UID_NUM_KEYS,
    UID_OWN_M,
    UID_OWN_P,
    Dump,
    UidRestoreRequest,
    build_versioned_classpath,
    restore_error,
    run_uid_restores,
    uid_case,
    uid_expected_value,
)

pytestmark = pytest.mark.flink

VERSIONS = ("1.20.3", "2.3.0")
#: The OperatorID Flink 1.20 and 2.3 give keyed-long when the restoring job sets no uid on it (the dump's
#: ``operatorIds`` of the ``hashed`` request must say so).
HASHED_LONG = "ac2917d481fa2956de9c11d0ea7a0737"
LONG, STRING = "keyed-long", "keyed-string"
REFUSED = "Cannot map checkpoint/savepoint state for operator"
#: The restoring jobs of kg rescale's outputs: parallelism per keyed operator, and the maxParallelism the
#: state then has (the jobs set none; Flink adopts it).
RESCALED_P = {STRING: 4, LONG: 4}
COMBINED_P = {STRING: 3, LONG: 4}
COMBINED_M = {STRING: 10, LONG: 256}


@dataclass(frozen=True)
class Migrated:
    """One version's restores: the dump of each request, by name."""

    version: str
    dumps: Mapping[str, Dump]
    check_suggestion: str
    #: ``kg check --job-uids``'s exit code for the job of the named restore.
    checks: Mapping[str, int]


def _kg(*args: object) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, (args, result.stderr)
    return result.stdout


def _hashed(source: Path, dest: Path) -> Path:
    """Copy ``source`` with keyed-long as a job without its uid wrote it: id HASHED_LONG, no uid recorded."""
    shutil.copytree(source, dest)
    meta_path = find_metadata(dest)
    meta = parse_metadata(meta_path.read_bytes())
    ops = tuple(
        replace(op, operator_id=HASHED_LONG, uid=None) if op.operator_id == operator_id_for_uid(LONG) else op
        for op in meta.operators
    )
    meta_path.write_bytes(write_metadata(replace(meta, operators=ops)))
    return dest


def _build(version: str, work: Path) -> Migrated:
    original = uid_case(version, UID_CASE)
    incremental = uid_case(version, "uid-rocksdb-incremental-p3")
    hashed = _hashed(original, work / "hashed")
    hashed_incremental = _hashed(incremental, work / "hashed-incremental")
    renamed, assigned, dropped, combined = (work / n for n in ("renamed", "assigned", "dropped", "combined"))
    _kg("migrate", original, "--out", renamed, "--rename", f"{LONG}={LONG}-v2")
    _kg("migrate", hashed, "--out", assigned, "--assign-uid", f"{HASHED_LONG}={LONG}")
    _kg("migrate", original, "--out", dropped, "--drop", STRING)
    _kg(
        "migrate", hashed_incremental, "--out", combined, "--assign-uid", f"{HASHED_LONG}={LONG}-v2",
        "--rename", f"{STRING}={STRING}-v2", "--drop", "string-sink",
    )  # fmt: skip
    rescaled_renamed, rescaled_combined = work / "rescaled-renamed", work / "rescaled-combined"
    _kg("rescale", original, "--from", 3, "--to", 4, "--out", rescaled_renamed, "--engine", "local",
        "--rename", f"{LONG}={LONG}-v2")  # fmt: skip
    _kg(
        "rescale", hashed, "--operator", HASHED_LONG, "--to", 4, "-m", 256, "--out", rescaled_combined,
        "--engine", "local", "--assign-uid", f"{HASHED_LONG}={LONG}-v2", "--rename", f"{STRING}={STRING}-v2",
        "--drop", "string-sink",
    )  # fmt: skip
    renamed_uids = {LONG: f"{LONG}-v2"}
    both_uids = {LONG: f"{LONG}-v2", STRING: f"{STRING}-v2"}
    requests = {
        "renamed-none": UidRestoreRequest(renamed, UID_OWN_P, {}, uids=renamed_uids),
        "unrenamed": UidRestoreRequest(original, UID_OWN_P, {}, uids=renamed_uids),
        "hashed": UidRestoreRequest(hashed, UID_OWN_P, {}, no_uid=[LONG]),
        "assigned": UidRestoreRequest(assigned, UID_OWN_P, UID_OWN_M),
        "dropped": UidRestoreRequest(dropped, UID_OWN_P, {}, drop=[STRING]),
        "undropped": UidRestoreRequest(original, UID_OWN_P, {}, drop=[STRING]),
        "combined": UidRestoreRequest(
            combined, UID_OWN_P, {}, backend="rocksdb", uids=both_uids, drop=["string-sink"]
        ),
        "rescaled-renamed": UidRestoreRequest(rescaled_renamed, RESCALED_P, {}, uids=renamed_uids),
        "rescaled-combined": UidRestoreRequest(
            rescaled_combined, COMBINED_P, {}, uids=both_uids, drop=["string-sink"]
        ),
    }
    classpath = build_versioned_classpath(version)
    dumps = run_uid_restores(version, list(requests.values()), work / "restores", classpath)
    job_uids = work / "job-uids.txt"
    job_uids.write_text("\n".join(renamed_uids.get(u, u) for u in UID_JOB_UIDS) + "\n")
    before = CliRunner().invoke(cli, ["check", str(original), "--job-uids", str(job_uids)])
    after = CliRunner().invoke(cli, ["check", str(renamed), "--job-uids", str(job_uids)])
    checks = {"unrenamed": before.exit_code, "renamed-none": after.exit_code}
    return Migrated(version, dict(zip(requests, dumps, strict=True)), before.stdout, checks)


_RUNS: dict[str, Migrated] = {}


@pytest.fixture(scope="session", params=VERSIONS)
def migrated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Migrated:
    """Write kg's migrated savepoints for one Flink version and restore them all in one JVM."""
    if request.param not in _RUNS:
        _RUNS[request.param] = _build(request.param, tmp_path_factory.mktemp(f"migrate-{request.param}"))
    return _RUNS[request.param]


def _assert_restored(
    dump: Dump,
    operators: Sequence[str] = (STRING, LONG),
    parallelism: Mapping[str, int] = UID_OWN_P,
    max_parallelism: Mapping[str, int] = UID_OWN_M,
) -> None:
    """Every key of ``operators`` restored once with its value, in Flink's key group for the state's maxP."""
    error = restore_error(dump)
    assert error is None, f"Flink refused the restore:\n{error}"
    assert sorted(dump["keyed"]) == sorted(operators)
    for op in operators:
        keys = dump["keyed"][op]
        assert len(keys) == UID_NUM_KEYS, op
        key_type = "string" if op == STRING else "long"
        for key, entry in keys.items():
            assert entry["restored"] == uid_expected_value(op, key), (op, key)
            value: str | int = key if key_type == "string" else int(key)
            group = key_group_for_hash(hash_code(value, key_type), max_parallelism[op])
            assert entry["keyGroup"] == group, (op, key)
            assert entry["subtask"] == operator_index_for_key_group(
                max_parallelism[op], parallelism[op], group
            )


def _assert_refused(dump: Dump, operator_id: str) -> None:
    error = restore_error(dump)
    assert error is not None and REFUSED in error and operator_id in error, error


@pytest.mark.parametrize("name", ["renamed-none", "assigned", "combined"])
def test_migrated_savepoint_restores_every_key(migrated: Migrated, name: str) -> None:
    _assert_restored(migrated.dumps[name])


def test_rescaled_with_surgery_in_one_pass_restores_every_key(migrated: Migrated) -> None:
    """kg rescale --rename (same maxParallelism), and --assign-uid --rename --drop with a new one."""
    for name in ("rescaled-renamed", "rescaled-combined"):
        assert migrated.dumps[name]["request"]["allow_non_restored_state"] is False
    _assert_restored(migrated.dumps["rescaled-renamed"], parallelism=RESCALED_P)
    _assert_restored(migrated.dumps["rescaled-combined"], parallelism=COMBINED_P, max_parallelism=COMBINED_M)


def test_dropped_operator_restores_without_allow_non_restored_state(migrated: Migrated) -> None:
    dump = migrated.dumps["dropped"]
    assert dump["request"]["allow_non_restored_state"] is False
    _assert_restored(dump, (LONG,))


def test_without_surgery_flink_refuses(migrated: Migrated) -> None:
    _assert_refused(migrated.dumps["unrenamed"], operator_id_for_uid(LONG))
    _assert_refused(migrated.dumps["undropped"], operator_id_for_uid(STRING))


def test_hashed_savepoint_is_what_a_job_without_uid_restores(migrated: Migrated) -> None:
    dump = migrated.dumps["hashed"]
    assert dump["operatorIds"][LONG] == HASHED_LONG
    _assert_restored(dump)


def test_check_prints_the_migrate_command_that_restores_the_mapping(migrated: Migrated) -> None:
    original = uid_case(migrated.version, UID_CASE)
    # 1.20 writes _metadata V4, which records ids only: the operator is named by its id.
    old = LONG if migrated.version.startswith("2.") else operator_id_for_uid(LONG)
    command = f"kg migrate {original} --out {original}-migrated --rename {old}={LONG}-v2"
    assert f"Restore the mapping: {command}\n" in migrated.check_suggestion
    # kg check agrees with Flink before and after: refused, then restored.
    assert migrated.checks == {"unrenamed": 1, "renamed-none": 0}
    assert restore_error(migrated.dumps["renamed-none"]) is None
