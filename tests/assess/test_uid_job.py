"""uids, chained stateless operators and NATIVE heap savepoints on UidJob savepoints of Flink 1.17 … 2.3.

The fixtures (fixtures/flink/<version>/uid-*, written by real Flink; see fixtures/flink/README.md) carry
``uid-job-report.json``: Flink's own loader on the ``_metadata`` and the job graph's chains, so kg's view is
compared with Flink's. No JVM here; tests/restore/test_uid_versions.py restores kg's outputs in each version.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.assess.restore import RestorePlan, check_restore
from keygroup_cli.assess.summary import summarize
from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.core.errors import InvalidArgumentError, MissingDependencyError, UnsupportedFormatError
from keygroup_cli.core.findings import Severity
from keygroup_cli.core.keygroups import operator_id_for_uid
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.planning.plan import plan_rescale
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.parquet import read_keyed_file

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink"
VERSIONS = ("1.15", "1.16", "1.17", "1.20", "2.0", "2.3")
CANONICAL = "uid-heap-canonical-p3"
NATIVE = "uid-heap-native-p3"
STATELESS = ("string-drop", "string-sink", "long-drop", "long-sink")
METADATA_VERSION = {"1.15": 3, "1.16": 4, "1.17": 4, "1.20": 4, "2.0": 5, "2.3": 6}


def _report(version: str, case: str = CANONICAL) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FLINK / version / case / "uid-job-report.json").read_text("utf-8"))
    return data


def _check(version: str, plan: RestorePlan, path: Path | None = None) -> list[tuple[str, str, str]]:
    summary = summarize(path or FLINK / version / CANONICAL, read_states=False)
    findings = check_restore(summary.operators, plan, snapshot=str(summary.path))
    return sorted((f.code, f.severity.value, f.subject) for f in findings if f.severity is not Severity.INFO)


@pytest.mark.parametrize("case", [CANONICAL, NATIVE])
@pytest.mark.parametrize("version", VERSIONS)
def test_kg_reads_what_flinks_loader_reads(version: str, case: str) -> None:
    report = _report(version, case)
    metadata = read_flink_metadata(FLINK / version / case).metadata
    assert metadata.version == report["metadata"]["metadataVersion"] == METADATA_VERSION[version]
    flink_ops = {o["operatorId"]: o for o in report["metadata"]["operators"]}
    assert {op.operator_id for op in metadata.operators} == set(flink_ops)
    for op in metadata.operators:
        flink = flink_ops[op.operator_id]
        assert (op.parallelism, op.max_parallelism) == (flink["parallelism"], flink["maxParallelism"])
        assert op.has_state == (flink["stateSize"] > 0 or flink["coordinatorState"])
        # V3/V4 record no uid; V5+ record the uid the id was derived from.
        assert op.uid == (None if metadata.version < 5 else _uid_of(report, op.operator_id))
    # Flink's StreamGraphHasherV2 on the job graph: every uid's id is kg's murmur3 of it.
    for uid, operator_id in report["operatorIdByUid"].items():
        assert operator_id_for_uid(uid) == operator_id


def _uid_of(report: dict[str, Any], operator_id: str) -> str:
    return next(uid for uid, i in report["operatorIdByUid"].items() if i == operator_id)


@pytest.mark.parametrize("version", VERSIONS)
def test_chained_operators_record_their_vertex_parallelism_and_max_parallelism(version: str) -> None:
    # The fact the stateless-operator rules rest on: Flink records each vertex's (p, maxP) for every
    # operator of its chain, stateless ones included.
    report = _report(version)
    by_id = {o["operatorId"]: o for o in report["metadata"]["operators"]}
    chains = [v for v in report["jobVertices"] if len(v["operators"]) == 3]
    assert len(chains) == 2
    for vertex in chains:
        shapes = {
            (by_id[o["operatorId"]]["parallelism"], by_id[o["operatorId"]]["maxParallelism"])
            for o in vertex["operators"]
        }
        assert shapes == {(vertex["parallelism"], vertex["maxParallelism"])}
        assert sum(by_id[o["operatorId"]]["stateSize"] > 0 for o in vertex["operators"]) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_per_operator_options_find_operators_by_uid_hash(version: str) -> None:
    # Flink refuses both (tests/restore/test_uid_versions.py); on V4 kg used to say "its option is ignored".
    assert _check(version, RestorePlan(parallelism=4, parallelism_for={"keyed-string": 11})) == [
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "error", "keyed-string"),
        # string-drop / string-sink share keyed-string's chain and stay at 3: not above 10.
    ]
    # UidJob sets maxParallelism 10 on keyed-string (a job that sets none: see the adoption tests).
    assert _check(version, RestorePlan(max_parallelism_for={"keyed-long": 256, "keyed-string": 10})) == [
        ("MAX_PARALLELISM_MISMATCH", "error", "keyed-long")
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_stateless_operators_are_judged_as_flink_judges_them(version: str) -> None:
    # Flink checks the maxParallelism of every operator in _metadata, stateless ones too.
    sets = {"keyed-string": 10}  # UidJob's own setting
    assert _check(version, RestorePlan(max_parallelism_for={"long-drop": 256, "long-sink": 256, **sets})) == [
        ("MAX_PARALLELISM_MISMATCH", "error", "long-drop"),
        ("MAX_PARALLELISM_MISMATCH", "error", "long-sink"),
    ]
    # A stateless operator chained with state (same recorded p and maxP) is held to the state's maxP.
    assert _check(version, RestorePlan(parallelism_for={"string-sink": 11}, max_parallelism_for=sets)) == [
        ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "error", "string-sink")
    ]


def test_a_stateless_operator_in_a_vertex_without_state_is_not_held_to_a_max_parallelism() -> None:
    # Flink runs checkParallelismPreconditions only for vertices with state; a stateless operator whose
    # (p, maxP) no stateful operator shares cannot be chained with state.
    summary = summarize(FLINK / "1.17" / CANONICAL, read_states=False)
    ops = [op for op in summary.operators if op.has_state or op.label == "1905a51ba7fb880f2374cdb5df6e6f5e"]
    lonely = [op for op in ops if not op.has_state]
    assert len(lonely) == 1
    moved = [replace(op, parallelism=2) if not op.has_state else op for op in ops]
    plan = RestorePlan(parallelism_for={"long-sink": 200}, max_parallelism_for={"keyed-string": 10})
    assert [f.code for f in check_restore(moved, plan, snapshot="sp")] == []
    assert [f.code for f in check_restore(ops, plan, snapshot="sp")] == [
        "PARALLELISM_EXCEEDS_MAX_PARALLELISM"
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_rescale_of_one_operator_to_a_new_max_parallelism_names_it_by_uid(
    version: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = rescale(
        FLINK / version / CANONICAL, out, 4, operators=["keyed-long"], new_max_parallelism=256, engine="local"
    )
    # keyed-long's chain mates (no state, the same recorded p 3 and maxP 128 and no other operator with
    # state there) follow it: Flink holds a vertex's operator states to one maxParallelism.
    assert sorted(
        (p.operator_id, p.new_parallelism, p.new_max_parallelism) for p in result.plan.rescaled
    ) == sorted((operator_id_for_uid(uid), 4, 256) for uid in ("keyed-long", "long-drop", "long-sink"))
    written = read_flink_metadata(out).metadata
    shapes = {op.operator_id: (op.parallelism, op.max_parallelism) for op in written.operators}
    # Every operator is written, as Flink writes them: a job that sets no maxParallelism would give a
    # missing one Flink's default, and the last state of a vertex decides its key groups.
    assert shapes == {
        operator_id_for_uid("uid-source"): (1, 128),
        operator_id_for_uid("keyed-string"): (3, 10),
        operator_id_for_uid("string-drop"): (3, 10),
        operator_id_for_uid("string-sink"): (3, 10),
        operator_id_for_uid("keyed-long"): (4, 256),
        operator_id_for_uid("long-drop"): (4, 256),
        operator_id_for_uid("long-sink"): (4, 256),
    }
    # The gate agrees with Flink (which restores it either way, tests/restore): the new chain at 256 passes,
    # and told the new job's operators (all in the savepoint) so does a job that sets none.
    plan = RestorePlan(
        parallelism_for={"keyed-long": 4},
        max_parallelism_for={"keyed-long": 256, "long-drop": 256, "long-sink": 256, "keyed-string": 10},
    )
    assert _check(version, plan, out) == []
    uids = ("uid-source", "keyed-string", "keyed-long", *STATELESS)
    assert _check(version, RestorePlan(parallelism_for={"keyed-long": 4}, job_uids=uids), out) == []


@pytest.mark.parametrize("version", ("1.17", "2.3"))
def test_plan_of_a_converted_v4_or_v6_snapshot_names_operators_by_uid(version: str, tmp_path: Path) -> None:
    savepoint_to_snapshot(FLINK / version / CANONICAL, tmp_path / "kg")
    plan = plan_rescale(open_snapshot(tmp_path / "kg"), 4, ["keyed-long"], 256)
    assert sorted(p.operator_id for p in plan.rescaled) == sorted(
        operator_id_for_uid(uid) for uid in ("keyed-long", "long-drop", "long-sink")
    )
    with pytest.raises(InvalidArgumentError, match="no operator 'keyed-lng'"):
        plan_rescale(open_snapshot(tmp_path / "kg"), 4, ["keyed-lng"], 256)


def test_a_stateless_operator_that_may_share_a_task_with_a_changed_and_a_kept_one_is_refused(
    tmp_path: Path,
) -> None:
    # The source rescaled by kg from p 1 to 3 (a real savepoint): it then shares (p 3, maxP 128) with
    # keyed-long, so long-drop and long-sink (no state, p 3, maxP 128) may be chained with either.
    rescale(FLINK / "2.3" / CANONICAL, tmp_path / "sp", 3, operators=["uid-source"], engine="local")
    with pytest.raises(InvalidArgumentError, match="may share a task with") as refused:
        rescale(tmp_path / "sp", tmp_path / "out", 4, operators=["keyed-long"], new_max_parallelism=256)
    assert refused.value.code == "CHAIN_AMBIGUOUS"
    assert not (tmp_path / "out").exists()
    # Naming the operators without state that are chained with keyed-long settles it; the others stay.
    rescale(
        tmp_path / "sp",
        tmp_path / "out",
        4,
        operators=["keyed-long", "long-drop", "long-sink"],
        new_max_parallelism=256,
        engine="local",
    )
    shapes = {op.uid: op.max_parallelism for op in read_flink_metadata(tmp_path / "out").metadata.operators}
    assert shapes == {
        "uid-source": 128,
        "keyed-string": 10,
        "string-drop": 10,
        "string-sink": 10,
        "keyed-long": 256,
        "long-drop": 256,
        "long-sink": 256,
    }
    # Changing every operator needs no answer: the same maxParallelism for all.
    rescale(tmp_path / "sp", tmp_path / "all", 4, new_max_parallelism=256, engine="local")
    assert {op.max_parallelism for op in read_flink_metadata(tmp_path / "all").metadata.operators} == {256}


def test_a_kg_snapshots_stateless_operators_are_judged_like_a_savepoints(tmp_path: Path) -> None:
    # kg writes every operator of a kg snapshot into the savepoint it makes of it, so the gate judges
    # them all, as for a savepoint.
    savepoint_to_snapshot(FLINK / "1.17" / CANONICAL, tmp_path / "kg")
    summary = summarize(tmp_path / "kg", read_states=False)
    plan = RestorePlan(max_parallelism_for={"long-drop": 256, "keyed-string": 10})
    assert [f.code for f in check_restore(summary.operators, plan, snapshot="kg")] == [
        "MAX_PARALLELISM_MISMATCH"
    ]


def _keyed_rows(path: Path) -> set[tuple[Any, ...]]:
    snap = open_snapshot(path)
    return {
        (op.uid, row["state"], row["key"], row["key_group"], row["namespace"], row["value"])
        for op in snap.manifest.operators
        for f in op.keyed_files
        for row in read_keyed_file(snap, f).to_pylist()
    }


#: Every UidJob layout other than the heap canonical savepoint, with the origin kg records for it.
OTHER_LAYOUTS = {
    NATIVE: ("flink-savepoint", "NATIVE"),
    "uid-heap-checkpoint-p3": ("flink-checkpoint", None),
    "uid-rocksdb-canonical-p3": ("flink-savepoint", "CANONICAL"),
    "uid-rocksdb-native-p3": ("flink-savepoint", "NATIVE"),
    "uid-rocksdb-incremental-p3": ("flink-checkpoint", None),
}


@pytest.mark.parametrize("case", sorted(OTHER_LAYOUTS))
@pytest.mark.parametrize("version", VERSIONS)
def test_every_layout_holds_what_the_canonical_savepoint_holds(
    version: str, case: str, tmp_path: Path
) -> None:
    # HashMap NATIVE / checkpoint (HeapSnapshotStrategy's layout) and RocksDB NATIVE / incremental (the
    # database files, read with rocksdict; the incremental one reuses shared/ SST files) are rewritten as
    # canonical key groups: every key's value and key group equal the canonical savepoint's (240 keys).
    savepoint_to_snapshot(FLINK / version / case, tmp_path / "other")
    savepoint_to_snapshot(FLINK / version / CANONICAL, tmp_path / "canonical")
    other = _keyed_rows(tmp_path / "other")
    assert len(other) == 240
    assert other == _keyed_rows(tmp_path / "canonical")
    origin = open_snapshot(tmp_path / "other").manifest.origin
    kind, savepoint_format = OTHER_LAYOUTS[case]
    # V3 (Flink 1.15) records no properties: kind from the directory name, format unknown.
    assert (origin["kind"], origin["savepoint_format"]) == (
        kind,
        savepoint_format if METADATA_VERSION[version] >= 4 else None,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_hashmap_native_savepoint_rescales_into_a_canonical_one(version: str, tmp_path: Path) -> None:
    rescale(
        FLINK / version / NATIVE,
        tmp_path / "out",
        4,
        operators=["keyed-long"],
        new_max_parallelism=256,
        engine="local",
    )
    written = read_flink_metadata(tmp_path / "out").metadata
    assert written.version == METADATA_VERSION[version]
    if written.version >= 4:
        assert written.properties is not None and written.properties.format_type == "CANONICAL"
    savepoint_to_snapshot(tmp_path / "out", tmp_path / "kg")
    rows = _keyed_rows(tmp_path / "kg")
    assert len(rows) == 240
    long_groups = {r[3] for r in rows if r[1] == "sum"}
    assert max(long_groups) >= 128  # re-hashed into maxParallelism 256


def test_rocksdb_list_state_in_merge_operands_without_aimrocks_is_refused_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KgTestJob's ListState is appended with RocksDB merge(); rocksdict cannot register Flink's merge
    # operator, so RocksDB refuses to read those keys: without aimrocks kg says so instead of dropping them.
    monkeypatch.setitem(sys.modules, "aimrocks", None)
    with pytest.raises(UnsupportedFormatError) as info:
        rescale(FLINK / "2.3" / "rocksdb-native-p2-maxp128-string", tmp_path / "out", 4, engine="local")
    assert info.value.code == "ROCKSDB_MERGE_OPERANDS"
    assert "state 'ids'" in info.value.message and "merge_operator" in info.value.message
    assert "pip install -e '.[rocksdb-merge]'" in info.value.message
    assert list(tmp_path.iterdir()) == []


def test_a_missing_rocksdb_binding_is_exit_6_naming_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "rocksdict", None)
    with pytest.raises(MissingDependencyError) as info:
        rescale(FLINK / "2.3" / "uid-rocksdb-native-p3", tmp_path / "out", 4, engine="local")
    assert info.value.exit_code == 6
    assert "pip install -e '.[rocksdb]'" in info.value.message and "install.md#extras" in info.value.message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_inspect_names_operators_by_uid_where_metadata_records_none(version: str) -> None:
    from click.testing import CliRunner

    from keygroup_cli.cli import cli

    path = str(FLINK / version / CANONICAL)
    result = CliRunner().invoke(
        cli, ["--json", "inspect", path, "--operator", "keyed-long", "--operator", "long-sink"]
    )
    assert result.exit_code == 0, result.stderr
    shown = [(op["uid"], op["operator_id"]) for op in json.loads(result.stdout)["operators"]]
    assert sorted(shown) == [
        ("keyed-long", operator_id_for_uid("keyed-long")),
        ("long-sink", operator_id_for_uid("long-sink")),
    ]
    missing = CliRunner().invoke(cli, ["inspect", path, "--operator", "keyed-lng"])
    assert isinstance(missing.exception, InvalidArgumentError)
    assert (missing.exception.code, int(missing.exception.exit_code)) == ("OPERATOR_NOT_FOUND", 2)
