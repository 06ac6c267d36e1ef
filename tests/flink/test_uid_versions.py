"""Real Flink 1.17, 1.20, 2.0 and 2.3 restore kg's outputs, and ``kg check`` agrees with each verdict.

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
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import cli
from keygroup_cli.execution.rescale import rescale
from keygroup_cli.flink import read_flink_metadata
from keygroup_cli.flink.metadata import parse_metadata
from keygroup_cli.flink.metadata_writer import write_metadata
from keygroup_cli.keygroups import operator_id_for_uid
from tests.flink.harness import (
    UID_JOB_VERSIONS,
    Dump,
    UidRestoreRequest,
    assert_uid_job_restored,
    build_versioned_classpath,
    restore_error,
    run_uid_restores,
    uid_case,
)

pytestmark = pytest.mark.flink

CASE = "uid-heap-canonical-p3"
OWN_P = {"keyed-string": 3, "keyed-long": 3}
OWN_M = {"keyed-string": 10, "keyed-long": 128}
NEW_P = {"keyed-string": 3, "keyed-long": 4}
NEW_M = {"keyed-string": 10, "keyed-long": 256}
NATIVE = "uid-heap-native-p3"
ALL_P4 = {"keyed-string": 4, "keyed-long": 4}


@dataclass(frozen=True)
class Run:
    """One version's restores: the savepoints given to Flink and what Flink made of each."""

    version: str
    savepoints: Mapping[str, Path]
    dumps: Mapping[str, Dump]


def _stale_chain(rescaled: Path, original: Path, dest: Path) -> Path:
    """Copy ``rescaled`` and put the original's stateless long-drop / long-sink back into its _metadata."""
    import shutil

    shutil.copytree(rescaled, dest)
    written = parse_metadata((dest / "_metadata").read_bytes())
    stale = [
        op
        for op in read_flink_metadata(original).metadata.operators
        if op.operator_id in {operator_id_for_uid("long-drop"), operator_id_for_uid("long-sink")}
    ]
    assert len(stale) == 2 and not any(op.has_state for op in stale)
    assert {op.max_parallelism for op in stale} == {128}
    (dest / "_metadata").write_bytes(write_metadata(replace(written, operators=(*written.operators, *stale))))
    return dest


@pytest.fixture(scope="session", params=UID_JOB_VERSIONS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Write kg's outputs for one Flink version and restore all five in one JVM of that version."""
    version: str = request.param
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
    dumps = run_uid_restores(version, list(requests.values()), root / "dumps", classpath)
    for dump in dumps:
        assert dump["flinkVersion"] == version
    return Run(version, savepoints, dict(zip(requests, dumps, strict=True)))


def _check(path: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    result = CliRunner().invoke(cli, ["--json", "check", str(path), *args])
    document = json.loads(result.stdout)
    return result.exit_code, [f for f in document["findings"] if f["severity"] != "info"]


def test_flink_restores_its_own_savepoint_with_every_key(run: Run) -> None:
    assert_uid_job_restored(run.dumps["own"], OWN_P, OWN_M)
    assert _check(run.savepoints["own"], "--parallelism", "3") == (0, [])


def test_a_per_operator_max_parallelism_rescale_restores_in_the_same_version(run: Run) -> None:
    # keyed-long's chain now runs at maxParallelism 256 and every key is found in its new key group.
    assert_uid_job_restored(run.dumps["rescaled"], NEW_P, NEW_M)
    written = read_flink_metadata(run.savepoints["rescaled"]).metadata
    assert all(op.has_state for op in written.operators)
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
        "keyed-long=256",
        "--max-parallelism",
        "long-drop=256",
        "--max-parallelism",
        "long-sink=256",
    )
    assert code == 1
    assert sorted((f["code"], f["operator"]) for f in findings) == [
        ("MAX_PARALLELISM_MISMATCH", "long-drop"),
        ("MAX_PARALLELISM_MISMATCH", "long-sink"),
    ]


def test_parallelism_above_a_max_parallelism_is_refused_by_flink_and_by_kg(run: Run) -> None:
    error = restore_error(run.dumps["p11"])
    assert error is not None
    assert (
        "The maximum parallelism (10) of the restored state is lower than the configured parallelism (11)"
        in error
    )
    code, findings = _check(run.savepoints["p11"], "--parallelism", "4", "--parallelism", "keyed-string=11")
    assert code == 1
    assert [(f["code"], f["operator"]) for f in findings] == [
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "keyed-string")
    ]
    # Its chained stateless sink at 11 means the chain at 11: refused too.
    code, findings = _check(run.savepoints["p11"], "--parallelism", "string-sink=11")
    assert code == 1
    assert [(f["code"], f["operator"]) for f in findings] == [
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "string-sink")
    ]


def test_an_explicit_new_max_parallelism_is_refused_by_flink_and_by_kg(run: Run) -> None:
    error = restore_error(run.dumps["max256"])
    assert error is not None and "Max parallelism mismatch" in error
    assert "with max parallelism 128 to new program with max parallelism 256" in error
    code, findings = _check(run.savepoints["max256"], "--max-parallelism", "keyed-long=256")
    assert code == 1
    assert [(f["code"], f["operator"]) for f in findings] == [("MAX_PARALLELISM_MISMATCH", "keyed-long")]


def test_a_native_hashmap_savepoint_rescaled_by_kg_restores_like_flinks_own_rescale(run: Run) -> None:
    # The version's NATIVE HashMap savepoint (HeapSnapshotStrategy layout), rescaled by kg 3 -> 4 into a
    # canonical savepoint, restores with the same key, value, key group and subtask as Flink's own p4
    # restore of the NATIVE savepoint; and with keyed-long at maxParallelism 256 every key is found too.
    assert_uid_job_restored(run.dumps["native-own-p4"], ALL_P4, OWN_M)
    assert_uid_job_restored(run.dumps["native-p4"], ALL_P4, OWN_M)
    assert run.dumps["native-p4"]["keyed"] == run.dumps["native-own-p4"]["keyed"]
    assert_uid_job_restored(run.dumps["native-rescaled"], NEW_P, NEW_M)
    written = read_flink_metadata(run.savepoints["native-p4"]).metadata
    assert written.properties is not None and written.properties.format_type == "CANONICAL"
