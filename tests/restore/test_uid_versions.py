"""Real Flink 1.15 to 2.3 (six versions) restore kg's outputs, and ``kg check`` agrees with each verdict.

For every version in ``UID_JOB_VERSIONS``, one JVM of that version (``UidJob restore``, session fixture)
restores five savepoints of the UidJob written by that same version (fixtures/flink/<version>/):

- ``own``: the savepoint itself, as written (p 3; maxP 10 / 128 set on the keyed operators);
- ``rescaled``: ``kg rescale --operator keyed-long --to 4 -m 256``; the new job sets maxParallelism 256 on
  keyed-long, so its chain (keyed-long -> long-drop -> long-sink) runs at 256;
- ``stale-chain``: the same output with the stateless long-drop / long-sink put back at their old
  maxParallelism 128, as kg wrote it before it left stateless operators out;
- ``p11``: the savepoint at keyed-string parallelism 11 (maxParallelism not set: Flink derives it);
- ``max256``: the savepoint with maxParallelism 256 set on keyed-long (its state has 128);
- ``native-p4`` / ``native-rescaled``: kg's rescale of the version's NATIVE HashMap savepoint to p 4 (same
  maxParallelism) and keyed-long to p 4 / maxP 256, with ``native-own-p4``, Flink's own p 4 restore of the
  NATIVE savepoint, as the per-key reference.

Flink's verdict (restored with every key's value in Flink's key group, or refused with its message) is
compared with ``kg check``'s exit code for the same deployment; on V4 metadata (1.17, 1.20) every option
names operators by uid, which those files do not store.

Every layout's every route (p 3 -> 4 with the same maxParallelism, keyed state copied as bytes; keyed-long
alone to maxParallelism 256; the whole job to 256) is restored twice by the same version: by a job that
sets maxParallelism on its keyed operators (``sets``) and by one that sets none (``none``: Flink adopts the
savepoint's, and gives an operator missing from it its default). Each cell also holds ``kg check``'s exit
code for that deployment, which must be Flink's verdict. ``stripped-*`` are kg's outputs with the
operators without state left out, as kg wrote them before: a job that sets none refuses them, and kg check
told the job's operators (``--job-uids``) says so.

The same JVM of 1.20 and 2.3 also restores a SQL job's savepoint (SqlJob, keyed by ``BinaryRowData``)
that kg rescaled to parallelism 3 and maxParallelism 256, in the same SQL job setting no maxParallelism:
every key's restored aggregate must be the one the job had emitted; a job that sets 128 is refused by
Flink and by ``kg check``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import cli
from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint
from keygroup_cli.core.errors import KgError
from keygroup_cli.core.keygroups import operator_id_for_uid
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.io.stream_handles import FileHandle
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle, LocalHandle
from keygroup_cli.flink.metadata.locate import find_metadata, read_flink_metadata
from keygroup_cli.flink.metadata.reader import parse_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from tests.restore.harness import UID_CASE as CASE
from tests.restore.harness import (
    UID_CHAINS,
    UID_JOB_VERSIONS,
    Dump,
    SqlRestoreRequest,
    UidRestoreRequest,
    assert_sql_job_restored,
    assert_uid_job_restored,
    build_versioned_classpath,
    restore_error,
    run_uid_restores,
    sql_case_queries,
    uid_case,
)
from tests.restore.harness import UID_JOB_UIDS as JOB_UIDS
from tests.restore.harness import UID_NEW_M as NEW_M
from tests.restore.harness import UID_NEW_P as NEW_P
from tests.restore.harness import UID_OWN_M as OWN_M
from tests.restore.harness import UID_OWN_P as OWN_P

pytestmark = pytest.mark.flink

NATIVE = "uid-heap-native-p3"
#: The support matrix's layouts: UidJob written by each version with each backend and snapshot kind.
LAYOUTS = {
    "HashMap canonical savepoint": "uid-heap-canonical-p3",
    "HashMap NATIVE savepoint": "uid-heap-native-p3",
    "HashMap retained checkpoint": "uid-heap-checkpoint-p3",
    "RocksDB canonical savepoint": "uid-rocksdb-canonical-p3",
    "RocksDB NATIVE savepoint": "uid-rocksdb-native-p3",
    "RocksDB incremental checkpoint": "uid-rocksdb-incremental-p3",
}
CELLS = ("inspect", "check", "rescale", "maxp", "whole")
WHOLE_M = {"keyed-string": 256, "keyed-long": 256}
#: Each rescale route: kg's arguments, the new job's parallelism and (state's) maxParallelism per keyed uid.
ROUTES: dict[str, tuple[dict[str, Any], Mapping[str, int], Mapping[str, int]]] = {
    "rescale": ({}, {"keyed-string": 4, "keyed-long": 4}, OWN_M),
    "maxp": ({"operators": ["keyed-long"], "new_max_parallelism": 256}, NEW_P, NEW_M),
    "whole": ({"new_max_parallelism": 256}, {"keyed-string": 4, "keyed-long": 4}, WHOLE_M),
}
#: How the restoring job sets maxParallelism: on its keyed operators (chain heads), or nowhere.
CONFIGS = ("sets", "none")
SUPPORT_DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "flink-support.md"
MATRIX_START = "<!-- support-matrix: generated by tests/restore/test_uid_versions.py; do not edit -->"
MATRIX_END = "<!-- support-matrix: end -->"
ALL_P4 = {"keyed-string": 4, "keyed-long": 4}
#: The versions whose SqlJob savepoint (fixtures/flink/<version>/<case>) is rescaled and restored, and how.
SQL_CASES = {"1.20.3": "sql-heap-canonical-p2", "2.3.0": "sql-rocksdb-native-p2"}
SQL_VERSIONS = tuple(SQL_CASES)
SQL_NEW_P = 3
SQL_NEW_M = 256


@dataclass(frozen=True)
class Run:
    """One version's restores: the savepoints given to Flink and what Flink made of each."""

    version: str
    savepoints: Mapping[str, Path]
    dumps: Mapping[str, Dump]
    kg: Mapping[str, str]
    #: ``kg check``'s exit code and non-info finding codes for the deployment of each restore request.
    checks: Mapping[str, tuple[int, list[str]]]
    #: SQL_VERSIONS only: the SqlJob restores (``SQL_REQUESTS``): the savepoint kg wrote, each dump, and
    #: ``kg check``'s verdict on each deployment.
    sql: Mapping[str, tuple[Path, Dump, tuple[int, list[str]]]] = field(default_factory=dict)


def _stale_chain(rescaled: Path, original: Path, dest: Path) -> Path:
    """Copy ``rescaled`` with the original's stateless long-drop / long-sink (maxP 128) in its _metadata."""
    shutil.copytree(rescaled, dest)
    written = parse_metadata((dest / "_metadata").read_bytes())
    ids = {operator_id_for_uid("long-drop"), operator_id_for_uid("long-sink")}
    stale = [op for op in read_flink_metadata(original).metadata.operators if op.operator_id in ids]
    assert len(stale) == 2 and not any(op.has_state for op in stale)
    assert {op.max_parallelism for op in stale} == {128}
    kept = tuple(op for op in written.operators if op.operator_id not in ids)
    (dest / "_metadata").write_bytes(write_metadata(replace(written, operators=(*kept, *stale))))
    return dest


@pytest.fixture(scope="session", params=UID_JOB_VERSIONS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Write kg's outputs for one Flink version and restore them all in one JVM of that version."""
    return _run_version(request.param, tmp_path_factory)


_RUNS: dict[str, Run] = {}


def _run_version(version: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    if version not in _RUNS:
        _RUNS[version] = _build_run(version, tmp_path_factory)
    return _RUNS[version]


def _kg_attempt(outcomes: dict[str, str], name: str, action: Callable[[], object]) -> bool:
    """Run one kg step; record ``ok`` or the error code it refused with."""
    try:
        action()
    except KgError as exc:
        outcomes[name] = exc.code
        return False
    outcomes[name] = "ok"
    return True


def _build_run(version: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    classpath = build_versioned_classpath(version)
    root = tmp_path_factory.mktemp(f"uid-{version}")
    original = uid_case(version, CASE)
    rescaled = root / "rescaled"
    rescale(original, rescaled, 4, operators=["keyed-long"], new_max_parallelism=256, engine="local")
    native = uid_case(version, NATIVE)
    native_rescaled = root / "native-rescaled"
    rescale(native, native_rescaled, 4, operators=["keyed-long"], new_max_parallelism=256, engine="local")
    native_p4 = root / "native-p4"
    rescale(native, native_p4, 4, engine="local")
    savepoints = {
        "own": original,
        "rescaled": rescaled,
        "stale-chain": _stale_chain(rescaled, original, root / "stale-chain"),
        "p11": original,
        "max256": original,
        "native-rescaled": native_rescaled,
        "native-p4": native_p4,
        "native-own-p4": native,
    }
    requests = {
        "own": UidRestoreRequest(original, OWN_P, OWN_M),
        "rescaled": UidRestoreRequest(rescaled, NEW_P, NEW_M),
        "stale-chain": UidRestoreRequest(savepoints["stale-chain"], NEW_P, NEW_M),
        "p11": UidRestoreRequest(original, {"keyed-string": 11, "keyed-long": 4}, {}),
        "max256": UidRestoreRequest(original, OWN_P, {"keyed-string": 10, "keyed-long": 256}),
        "native-rescaled": UidRestoreRequest(native_rescaled, NEW_P, NEW_M),
        "native-p4": UidRestoreRequest(native_p4, ALL_P4, OWN_M),
        "native-own-p4": UidRestoreRequest(native, ALL_P4, OWN_M),
    }
    # Every layout of the support matrix: kg's inspect and check, a rescale of every operator to p 4
    # (same maxParallelism) and one of keyed-long to p 4 / maxP 256, each restored by this version.
    kg: dict[str, str] = {}
    checked: dict[str, Path] = {}
    for layout, case in LAYOUTS.items():
        source = uid_case(version, case)
        kg[f"{layout}/inspect"] = _cli_code(["inspect", str(source)])
        kg[f"{layout}/check"] = _cli_code(["check", str(source), "--parallelism", "4"])
        for cell, (kwargs, p, m) in ROUTES.items():
            dest = root / f"{layout}-{cell}"
            if _kg_attempt(
                kg,
                f"{layout}/{cell}",
                lambda s=source, d=dest, k=kwargs: rescale(s, d, 4, engine="local", **k),
            ):
                for config in CONFIGS:
                    savepoints[f"{layout}/{cell}/{config}"] = dest
                    requests[f"{layout}/{cell}/{config}"] = UidRestoreRequest(
                        dest, p, m if config == "sets" else {}
                    )
        # The version's own restore of the original at p 4 is the per-key reference for kg's rescale.
        own = Path(str(find_metadata(source)))  # a chk-N must be named by its _metadata
        if layout == "RocksDB incremental checkpoint":
            own = _relocated(own, root / f"{layout}-relocated")
        backend = "rocksdb" if "rocksdb" in case else None
        requests[f"{layout}/own-p4"] = UidRestoreRequest(own, ALL_P4, OWN_M, backend=backend)
        requests[f"{layout}/own-p4/none"] = UidRestoreRequest(own, ALL_P4, {}, backend=backend)
        # kg check judges the checkpoint itself, not the copy relocated for Flink's reference restore.
        checked[f"{layout}/own-p4"] = checked[f"{layout}/own-p4/none"] = source
    # The kg-snapshot route: the savepoint as a kg snapshot, keyed-long rescaled there, written back.
    savepoint_to_snapshot(original, root / "snapshot.kg")
    # The local engine: what Flink restores is the route's output; Spark writes the same bytes
    # (tests/execution/engines/test_engines_agree.py), and starting it here cost each version's batch ~16 s.
    rescale(
        root / "snapshot.kg",
        root / "snapshot-m256.kg",
        4,
        operators=["keyed-long"],
        new_max_parallelism=256,
        engine="local",
    )
    snapshot_to_savepoint(root / "snapshot-m256.kg", root / "from-snapshot")
    for config in CONFIGS:
        savepoints[f"from-snapshot/{config}"] = root / "from-snapshot"
        requests[f"from-snapshot/{config}"] = UidRestoreRequest(
            root / "from-snapshot", NEW_P, NEW_M if config == "sets" else {}
        )
    # kg's outputs as kg wrote them before (operators without state left out): a job that sets no
    # maxParallelism refuses them (keyed-string's state at 10, keyed-long's at 256, Flink's default 128).
    for cell in ("rescale", "maxp"):
        fixed = savepoints[f"HashMap canonical savepoint/{cell}/sets"]
        stripped = _stripped(fixed, root / f"stripped-{cell}")
        _kwargs, p, m = ROUTES[cell]
        for config in CONFIGS:
            savepoints[f"stripped-{cell}/{config}"] = stripped
            requests[f"stripped-{cell}/{config}"] = UidRestoreRequest(
                stripped, p, m if config == "sets" else {}
            )
    sql_requests = _sql_requests(version, root) if version in SQL_CASES else {}
    batch = [*requests.values(), *sql_requests.values()]
    dumps = run_uid_restores(version, batch, root / "dumps", classpath)
    for dump in dumps:
        assert dump["flinkVersion"] == version
    sql_dumps = dict(zip(sql_requests, dumps[len(requests) :], strict=True))
    dumps = dumps[: len(requests)]
    uids_file = root / "job-uids.txt"
    uids_file.write_text("\n".join(JOB_UIDS) + "\n", encoding="utf-8")
    checks = {
        name: _gate(replace(request, savepoint=checked.get(name, request.savepoint)), uids_file)
        for name, request in requests.items()
    }
    sql = {
        name: (r.savepoint, sql_dumps[name], _sql_gate(r, sql_dumps[name], root / f"{name}-uids.txt"))
        for name, r in sql_requests.items()
    }
    return Run(version, savepoints, dict(zip(requests, dumps, strict=True)), kg, checks, sql)


def _sql_requests(version: str, root: Path) -> dict[str, SqlRestoreRequest]:
    """kg's rescale of the version's SqlJob savepoint (its queries at p 3, maxP 256), and its restores.

    ``rescaled``: the same SQL job at p 3 that sets no maxParallelism; on 2.3 also ``sets-128``: one that
    sets 128 (one version is enough for the refusal, and each SQL restore plans the whole job again).
    """
    case = uid_case(version, SQL_CASES[version])
    out = root / "sql-rescaled"
    # --from 2: the queries (p 2) move to p 3; the source stays at 1.
    rescale(case, out, SQL_NEW_P, from_parallelism=2, new_max_parallelism=SQL_NEW_M, engine="local")
    uids = {q["name"]: q["uid"] for q in sql_case_queries(case)}
    requests = {"rescaled": SqlRestoreRequest(out, uids, SQL_NEW_P)}
    if version == "2.3.0":
        requests["sets-128"] = SqlRestoreRequest(out, uids, SQL_NEW_P, max_parallelism=128)
    return requests


def _sql_gate(request: SqlRestoreRequest, dump: Dump, uids_file: Path) -> tuple[int, list[str]]:
    """``kg check``'s verdict on a SqlJob deployment: its parallelism, and its maxParallelism or its uids."""
    args = ["--parallelism", str(request.parallelism)]
    if request.max_parallelism is not None:
        args += ["--max-parallelism", str(request.max_parallelism)]
    else:
        uids_file.write_text("\n".join(dump["uids"]) + "\n", encoding="utf-8")
        args += ["--job-uids", str(uids_file)]
    code, findings = _check(request.savepoint, *args)
    return code, sorted({f["code"] for f in findings})


def _stripped(savepoint: Path, dest: Path) -> Path:
    """Copy a kg output without its operators that hold no state (what kg wrote from aebf112 to 8b6f6d6)."""
    shutil.copytree(savepoint, dest)
    written = parse_metadata((dest / "_metadata").read_bytes())
    kept = tuple(op for op in written.operators if op.has_state)
    assert 0 < len(kept) < len(written.operators)
    (dest / "_metadata").write_bytes(write_metadata(replace(written, operators=kept)))
    return dest


def _gate(request: UidRestoreRequest, uids_file: Path) -> tuple[int, list[str]]:
    """``kg check``'s verdict on the deployment ``request`` restores into: exit code and finding codes.

    The new job's parallelism per keyed operator, and either its explicit maxParallelism for every
    operator of each keyed chain (kg cannot see chains; UidJob sets it on the chain head, so the whole
    chain runs at it) or, for a job that sets none, its operators (``--job-uids``, ``uids_file``).
    """
    savepoint = request.savepoint
    args = [f"--parallelism={uid}={p}" for uid, p in request.parallelism.items()]
    for uid, m in request.max_parallelism.items():
        args += [f"--max-parallelism={member}={m}" for member in (uid, *UID_CHAINS[uid])]
    if not request.max_parallelism:
        args += ["--job-uids", str(uids_file)]
    result = CliRunner().invoke(cli, ["--json", "check", str(savepoint), *args])
    document = json.loads(result.stdout)
    return result.exit_code, sorted(f["code"] for f in document["findings"] if f["severity"] != "info")


def _relocated(metadata: Path, dest: Path) -> Path:
    """Copy a checkpoint whose shared files' absolute paths are gone, pointing them at the fixture's copies.

    Flink reads an incremental checkpoint's ``shared/`` files only at the absolute paths in ``_metadata``
    (kg also looks beside it); the generator's temp directory no longer exists, so for Flink's own
    reference restore the handles are rewritten (kg's metadata writer) to the files in the fixture.
    """
    snapshot = read_flink_metadata(metadata)
    shutil.copytree(snapshot.directory, dest)

    def moved(entry: LocalHandle) -> LocalHandle:
        if not isinstance(entry.handle, FileHandle):
            return entry
        found = local_path(entry.handle, snapshot.directory)
        return replace(entry, handle=FileHandle(Path(str(found)).resolve().as_uri(), entry.handle.size))

    operators = []
    for op in snapshot.metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, IncrementalKeyedHandle):
                keyed = replace(
                    keyed,
                    shared=tuple(moved(e) for e in keyed.shared),
                    private=tuple(moved(e) for e in keyed.private),
                )
            subtasks.append(replace(sub, managed_keyed_state=keyed))
        operators.append(replace(op, subtasks=tuple(subtasks)))
    (dest / "_metadata").write_bytes(write_metadata(replace(snapshot.metadata, operators=tuple(operators))))
    return dest / "_metadata"


def _cli_code(args: list[str]) -> str:
    result = CliRunner().invoke(cli, ["--json", *args])
    if result.exit_code == 0:
        return "ok"
    return str(json.loads(result.stdout).get("error", {}).get("code", f"exit {result.exit_code}"))


def _check(path: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    result = CliRunner().invoke(cli, ["--json", "check", str(path), *args])
    document = json.loads(result.stdout)
    return result.exit_code, [f for f in document["findings"] if f["severity"] != "info"]


def test_flink_restores_its_own_savepoint_with_every_key(run: Run) -> None:
    assert_uid_job_restored(run.dumps["own"], OWN_P, OWN_M)
    sets = ("-m", "keyed-string=10", "-m", "keyed-long=128")  # the job sets them (OWN_M)
    assert _check(run.savepoints["own"], "--parallelism", "3", *sets) == (0, [])


def test_a_per_operator_max_parallelism_rescale_restores_in_the_same_version(run: Run) -> None:
    # keyed-long's chain now runs at maxParallelism 256 and every key is found in its new key group.
    assert_uid_job_restored(run.dumps["rescaled"], NEW_P, NEW_M)
    written = read_flink_metadata(run.savepoints["rescaled"]).metadata
    # Every operator is written, keyed-long's chain mates (no state) at its new maxParallelism.
    shapes = {op.operator_id: (op.parallelism, op.max_parallelism) for op in written.operators}
    assert shapes == {
        operator_id_for_uid(uid): (
            (4, 256) if "long" in uid else (1, 128) if uid == "uid-source" else (3, 10)
        )
        for uid in JOB_UIDS
    }
    # The gate agrees, told the whole new chain's maxParallelism.
    code, findings = _check(
        run.savepoints["rescaled"],
        "--parallelism",
        "keyed-long=4",
        "--max-parallelism",
        "keyed-long=256",
        "--max-parallelism",
        "long-drop=256",
        "--max-parallelism",
        "long-sink=256",
        "--max-parallelism",
        "keyed-string=10",
    )
    assert (code, findings) == (0, [])


def test_a_stateless_operator_left_at_the_old_max_parallelism_is_refused_by_flink_and_by_kg(run: Run) -> None:
    error = restore_error(run.dumps["stale-chain"])
    assert error is not None and "Max parallelism mismatch" in error
    stale = {operator_id_for_uid("long-drop"), operator_id_for_uid("long-sink")}
    assert any(
        f"Cannot map operator {i} with max parallelism 128 to new program with max parallelism 256" in error
        for i in stale
    )
    code, findings = _check(
        run.savepoints["stale-chain"],
        "--max-parallelism",
        "keyed-string=10",
        "--max-parallelism",
        "keyed-long=256",
        "--max-parallelism",
        "long-drop=256",
        "--max-parallelism",
        "long-sink=256",
    )
    assert code == 1
    assert sorted((f["code"], f["subject"]) for f in findings) == [
        ("MAX_PARALLELISM_MISMATCH", "long-drop"),
        ("MAX_PARALLELISM_MISMATCH", "long-sink"),
    ]


@pytest.mark.parametrize("cell", ["rescale", "maxp"])
def test_an_output_without_its_stateless_operators_is_refused_by_a_job_that_sets_none_and_by_kg(
    run: Run, cell: str
) -> None:
    # What kg wrote from aebf112 to 8b6f6d6: Flink gives the missing chain mates its default 128 and
    # restores keyed-string's chain (state at 10) and, after maxp, keyed-long's (256) with wrong key groups.
    _kwargs, p, m = ROUTES[cell]
    error = restore_error(run.dumps[f"stripped-{cell}/none"])
    assert error is not None
    assert any(
        text in error
        for text in ("is not in KeyGroupRange", "The key group must belong to the backend", "Key group")
    ), error[:400]
    code, findings = run.checks[f"stripped-{cell}/none"]
    assert code == 1 and "MAX_PARALLELISM_NOT_ADOPTED" in findings
    # A job that sets every chain's maxParallelism gives the missing operators that value: it restores,
    # and kg check agrees.
    assert_uid_job_restored(run.dumps[f"stripped-{cell}/sets"], p, m)
    assert run.checks[f"stripped-{cell}/sets"] == (0, [])
    # Without the new job's operators kg cannot see the missing chain mates: it warns, never a bare OK.
    code, findings = _check(
        run.savepoints[f"stripped-{cell}/none"], *[f"--parallelism={u}={n}" for u, n in p.items()]
    )
    assert code == 0
    assert {f["code"] for f in findings} == {"MAX_PARALLELISM_ADOPTION_UNVERIFIED"}


def test_parallelism_above_a_max_parallelism_is_refused_by_flink_and_by_kg(run: Run) -> None:
    error = restore_error(run.dumps["p11"])
    assert error is not None
    assert (
        "The maximum parallelism (10) of the restored state is lower than the configured parallelism (11)"
        in error
    )
    code, findings = _check(run.savepoints["p11"], "--parallelism", "4", "--parallelism", "keyed-string=11")
    assert code == 1
    assert [(f["code"], f["subject"]) for f in findings] == [
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "keyed-string")
    ]
    # Its chained stateless sink at 11 means the chain at 11: refused too. (keyed-string itself stays at 3
    # here, where a job that sets no maxParallelism adopts its 10 only with its whole chain: a warning.)
    code, findings = _check(run.savepoints["p11"], "--parallelism", "string-sink=11")
    assert code == 1
    # An operator no option names is shown by its id where the metadata records no uid (V3/V4).
    uid_of = {operator_id_for_uid(uid): uid for uid in JOB_UIDS}
    assert [(f["code"], uid_of.get(f["subject"], f["subject"])) for f in findings] == [
        ("MAX_PARALLELISM_ADOPTION_UNVERIFIED", "keyed-string"),
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "string-sink"),
    ]


def test_an_explicit_new_max_parallelism_is_refused_by_flink_and_by_kg(run: Run) -> None:
    error = restore_error(run.dumps["max256"])
    assert error is not None and "Max parallelism mismatch" in error
    assert "with max parallelism 128 to new program with max parallelism 256" in error
    code, findings = _check(
        run.savepoints["max256"],
        "--max-parallelism",
        "keyed-long=256",
        "--max-parallelism",
        "keyed-string=10",
    )
    assert code == 1
    assert [(f["code"], f["subject"]) for f in findings] == [("MAX_PARALLELISM_MISMATCH", "keyed-long")]


def test_a_native_hashmap_savepoint_rescaled_by_kg_restores_like_flinks_own_rescale(run: Run) -> None:
    # The version's NATIVE HashMap savepoint (HeapSnapshotStrategy layout), rescaled by kg 3 -> 4 into a
    # canonical savepoint, restores with the same key, value, key group and subtask as Flink's own p4
    # restore of the NATIVE savepoint; and with keyed-long at maxParallelism 256 every key is found too.
    assert_uid_job_restored(run.dumps["native-own-p4"], ALL_P4, OWN_M)
    assert_uid_job_restored(run.dumps["native-p4"], ALL_P4, OWN_M)
    assert run.dumps["native-p4"]["keyed"] == run.dumps["native-own-p4"]["keyed"]
    assert_uid_job_restored(run.dumps["native-rescaled"], NEW_P, NEW_M)
    written = read_flink_metadata(run.savepoints["native-p4"]).metadata
    if written.version >= 4:  # V3 (1.15) has no properties trailer
        assert written.properties is not None and written.properties.format_type == "CANONICAL"


def _cell(run: Run, layout: str, cell: str) -> str:
    """One matrix cell: ``yes`` when kg did it and (rescales) Flink restored every key; else why not."""
    outcome = run.kg[f"{layout}/{cell}"]
    if outcome != "ok":
        return f"no ({outcome})"
    if cell in ("inspect", "check"):
        return "yes"
    _kwargs, p, m = ROUTES[cell]
    for config in CONFIGS:
        name = f"{layout}/{cell}/{config}"
        try:
            assert_uid_job_restored(run.dumps[name], p, m)
            if cell == "rescale":
                # Key by key (value, key group, subtask) what Flink's own p 4 restore of the original holds.
                own = run.dumps[f"{layout}/own-p4"]
                assert_uid_job_restored(own, p, m)
                assert run.dumps[name]["keyed"] == own["keyed"], "differs from Flink's own restore"
        except AssertionError as exc:
            return f"no (Flink {run.version}, job {config}: {str(exc).splitlines()[0][:60]})"
        # kg check's verdict on the same deployment is Flink's: it restores.
        if run.checks[name] != (0, []):
            return f"no (kg check, job {config}: {run.checks[name]})"
    return "yes"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_is_inspected_checked_and_rescaled_into_what_flink_restores(
    run: Run, layout: str
) -> None:
    assert {cell: _cell(run, layout, cell) for cell in CELLS} == dict.fromkeys(CELLS, "yes")


@pytest.mark.parametrize("config", CONFIGS)
def test_a_savepoint_written_from_a_rescaled_kg_snapshot_restores_whichever_way_the_job_sets_max_parallelism(
    run: Run, config: str
) -> None:
    # savepoint -> kg snapshot -> keyed-long to p 4 / maxP 256 -> savepoint: every operator written back,
    # keyed-long's stateless chain mates at 256 with it.
    assert_uid_job_restored(run.dumps[f"from-snapshot/{config}"], NEW_P, NEW_M)
    assert run.checks[f"from-snapshot/{config}"] == (0, [])
    written = read_flink_metadata(run.savepoints[f"from-snapshot/{config}"]).metadata
    assert {op.operator_id: op.max_parallelism for op in written.operators} == {
        operator_id_for_uid(uid): 256 if "long" in uid else 10 if "string" in uid else 128 for uid in JOB_UIDS
    }


@pytest.mark.parametrize("layout", LAYOUTS)
def test_flinks_own_savepoint_restores_in_a_job_that_sets_none_and_kg_check_agrees(
    run: Run, layout: str
) -> None:
    # Flink lists every operator of the job, so a job that sets no maxParallelism adopts the state's
    # (keyed-string's 10, not its default 128 at p 4) for every chain: the same keys as a job that sets it.
    assert_uid_job_restored(run.dumps[f"{layout}/own-p4/none"], ALL_P4, OWN_M)
    assert run.dumps[f"{layout}/own-p4/none"]["keyed"] == run.dumps[f"{layout}/own-p4"]["keyed"]
    # kg check, told the new job's operators, says so; told the chains' maxParallelism, too.
    assert run.checks[f"{layout}/own-p4/none"] == (0, [])
    assert run.checks[f"{layout}/own-p4"] == (0, [])


def render_support_matrix(runs: Mapping[str, Run]) -> str:
    """The support matrix, from the restores above: version x layout x inspect/check/rescale/maxP change."""
    lines = [
        MATRIX_START,
        "",
        "| Flink | layout | inspect | check | rescale (p 3→4) | keyed-long maxP 128→256 "
        "| whole job maxP →256 |",
        "|---|---|---|---|---|---|---|",
    ]
    for version in UID_JOB_VERSIONS:
        for layout in LAYOUTS:
            cells = " | ".join(_cell(runs[version], layout, c) for c in CELLS)
            lines.append(f"| {version} | {layout} | {cells} |")
    lines += ["", MATRIX_END]
    return "\n".join(lines)


def test_support_matrix_in_the_docs_is_these_results(tmp_path_factory: pytest.TempPathFactory) -> None:
    # docs/reference/flink-support.md carries the matrix these restores produce; regenerate it with
    # KG_UPDATE_SUPPORT_MATRIX=1 python -m pytest tests/restore/test_uid_versions.py
    runs = {v: _run_version(v, tmp_path_factory) for v in UID_JOB_VERSIONS}
    matrix = render_support_matrix(runs)
    doc = SUPPORT_DOC.read_text(encoding="utf-8")
    start, end = doc.index(MATRIX_START), doc.index(MATRIX_END) + len(MATRIX_END)
    if os.environ.get("KG_UPDATE_SUPPORT_MATRIX") == "1":
        SUPPORT_DOC.write_text(doc[:start] + matrix + doc[end:], encoding="utf-8")
        doc = SUPPORT_DOC.read_text(encoding="utf-8")
    assert doc[start : doc.index(MATRIX_END) + len(MATRIX_END)] == matrix


@pytest.fixture(scope="session", params=SQL_VERSIONS)
def sql_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The run of a version whose JVM batch also restores a SqlJob savepoint kg rescaled."""
    return _run_version(request.param, tmp_path_factory)


def test_a_sql_jobs_row_keys_rescaled_to_a_new_max_parallelism_restore_with_their_state(sql_run: Run) -> None:
    savepoint, dump, gate = sql_run.sql["rescaled"]
    case = uid_case(sql_run.version, SQL_CASES[sql_run.version])
    # Every key of every query was found by Flink under the key group it hashes the key row to (256).
    assert_sql_job_restored(dump, case, SQL_NEW_M)
    written = read_flink_metadata(savepoint).metadata
    aggregates = {operator_id_for_uid(q["uid"]) for q in sql_case_queries(case)}
    written_m = {
        op.operator_id: op.max_parallelism for op in written.operators if op.operator_id in aggregates
    }
    assert written_m == dict.fromkeys(aggregates, SQL_NEW_M)
    # The job set no maxParallelism and kg check, told its operators, says OK.
    assert gate == (0, [])


def test_a_sql_job_that_sets_the_old_max_parallelism_is_refused_by_flink_and_by_kg(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    _savepoint, dump, gate = _run_version("2.3.0", tmp_path_factory).sql["sets-128"]
    assert "Max parallelism mismatch" in (restore_error(dump) or "")
    assert gate[0] == 1 and "MAX_PARALLELISM_MISMATCH" in gate[1]
