"""Savepoint -> kg snapshot -> savepoint, checked against Flink's expected state and Flink's own bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kg_fixture_state import (
    CANONICAL_CASES,
    FLINK_FIXTURES,
    HEAP_LAYOUT_CASES,
    ROCKSDB_NATIVE_CASES,
    expected,
    expected_keyed_state,
    logical_async_elements,
    logical_keyed_state,
    logical_operator_state,
)

from keygroup_cli.convert.from_savepoint import EXTENSION, savepoint_to_snapshot
from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint
from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.manifest import MANIFEST_NAME
from keygroup_cli.snapshot.parquet import read_keyed_file, read_operator_file
from keygroup_cli.snapshot.verify import verify_snapshot


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every canonical case converted once to a kg snapshot."""
    root = tmp_path_factory.mktemp("converted")
    out = {}
    for case in CANONICAL_CASES:
        out[case] = root / f"{case}.kg"
        savepoint_to_snapshot(FLINK_FIXTURES / case, out[case])
    return out


def _kg_state(path: Path) -> dict[str, Any]:
    snap = open_snapshot(path)
    keyed: dict[str, list[dict[str, Any]]] = {}
    ops: dict[str, dict[int, pa.Table]] = {}
    for op in snap.manifest.operators:
        for f in op.keyed_files:
            keyed.setdefault(op.name or "", []).extend(read_keyed_file(snap, f).to_pylist())
        for f in op.operator_files:
            ops.setdefault(op.name or "", {})[f.subtask] = read_operator_file(snap, f)
    return {"keyed": keyed, "operator": ops}


def _check_against_expected(case: str, state: dict[str, Any]) -> None:
    main, counts = expected_keyed_state(case)
    assert logical_keyed_state(state["keyed"]["keyed-state"]) == main
    assert logical_keyed_state(state["keyed"]["count-no-uid"]) == counts
    data = expected(case)
    want = data["operatorState"][0]
    for sub in want["subtasks"]:
        got = logical_operator_state(state["operator"]["op-state"][sub["index"]])
        assert got == {
            "split-ids": sub["split-ids"],
            "union-counts": sub["union-counts"],
            "bcast": want["bcast"],
        }
    for sub in data["asyncInFlight"]["subtasks"]:
        got_async = logical_async_elements(state["operator"]["async-wait"][sub["index"]])
        assert got_async == {(e["value"], e["timestamp"]) for e in sub["elements"]}


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_converted_snapshot_holds_exactly_flinks_state_and_verifies(
    case: str, converted: dict[str, Path]
) -> None:
    _check_against_expected(case, _kg_state(converted[case]))
    report = verify_snapshot(converted[case])
    assert [f.code for f in report.findings] == []
    manifest = open_snapshot(converted[case]).manifest
    job = json.loads((FLINK_FIXTURES / case / "flink-report.json").read_text(encoding="utf-8"))["job"]
    keyed = manifest.operator("keyed-state")
    assert keyed is not None
    assert keyed.key_type == ("long" if job["keyType"] == "java.lang.Long" else "string")
    assert {s.name: s.kind for s in keyed.states} == {
        "sum": "value",
        "ids": "list",
        "buckets": "map",
        "_timer_state/event_user-timers": "timer",
        "_timer_state/processing_user-timers": "timer",
    }
    op_state = manifest.operator("op-state")
    assert op_state is not None
    assert {s.name: s.kind for s in op_state.states} == {
        "split-ids": "operator-split",
        "union-counts": "operator-union",
        "bcast": "operator-broadcast",
    }
    assert manifest.extensions[EXTENSION]["metadata_version"] == 6
    source = manifest.operator("kg-source")
    assert source is not None and source.extensions[EXTENSION]["coordinator_state"] is not None
    # every operator of the savepoint is kept, stateless ones included
    assert len(manifest.operators) == len(read_flink_metadata(FLINK_FIXTURES / case).metadata.operators)


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_round_trip_savepoint_holds_the_same_state(
    case: str, converted: dict[str, Path], tmp_path: Path
) -> None:
    savepoint = tmp_path / "sp"
    snapshot_to_savepoint(converted[case], savepoint)
    again = tmp_path / "again.kg"
    savepoint_to_snapshot(savepoint, again)
    _check_against_expected(case, _kg_state(again))
    original, written = read_flink_metadata(FLINK_FIXTURES / case), read_flink_metadata(savepoint)
    assert written.metadata.version == original.metadata.version
    assert written.metadata.properties_bytes == original.metadata.properties_bytes
    # Every operator is written, those without state too, as Flink writes them: a job that sets no
    # maxParallelism gives a missing one Flink's default, which would decide its chain's key groups.
    assert any(not op.has_state for op in original.metadata.operators)
    for a, b in zip(original.metadata.operators, written.metadata.operators, strict=True):
        assert (a.operator_id, a.name, a.uid, a.parallelism, a.max_parallelism) == (
            b.operator_id,
            b.name,
            b.uid,
            b.parallelism,
            b.max_parallelism,
        )
        assert a.coordinator_state == b.coordinator_state


@pytest.mark.parametrize(
    ("case", "handles"), [("heap-files-p3-maxp128-long", 13), ("heap-files-p2-maxp256-string", 9)]
)
def test_round_trip_reproduces_every_state_file_byte_for_byte(
    case: str, handles: int, converted: dict[str, Path], tmp_path: Path
) -> None:
    savepoint = tmp_path / "sp"
    snapshot_to_savepoint(converted[case], savepoint)
    original, written = read_flink_metadata(FLINK_FIXTURES / case), read_flink_metadata(savepoint)
    compared = 0
    for a, b in zip(original.metadata.operators, written.metadata.operators, strict=True):
        for sa, sb in zip(a.subtasks, b.subtasks, strict=True):
            for ha, hb in (
                (sa.managed_keyed_state, sb.managed_keyed_state),
                (sa.managed_operator_state, sb.managed_operator_state),
            ):
                assert (ha is None) == (hb is None)
                if ha is None or hb is None:
                    continue
                src = local_path(ha.delegate, original.directory)  # type: ignore[union-attr]
                out = local_path(hb.delegate, written.directory)  # type: ignore[union-attr]
                assert src is not None and out is not None
                assert out.read_bytes() == src.read_bytes()
                assert getattr(ha, "offsets", None) == getattr(hb, "offsets", None)
                compared += 1
    assert compared == handles  # 3 keyed-state + 3 count-no-uid + 3 op-state + 3 async + 1 source at p 3


def test_compression_can_be_turned_off(converted: dict[str, Path], tmp_path: Path) -> None:
    case = "rocksdb-canonical-snappy-p2-maxp256-string"
    result = snapshot_to_savepoint(converted[case], tmp_path / "plain", compression=False)
    assert result.compressed is False
    written = read_flink_metadata(tmp_path / "plain")
    keyed = next(op for op in written.metadata.operators if op.name == "keyed-state")
    path = local_path(keyed.subtasks[0].managed_keyed_state.delegate, written.directory)  # type: ignore[union-attr]
    assert path is not None and path.read_bytes()[4] == 0
    savepoint_to_snapshot(tmp_path / "plain", tmp_path / "again.kg")
    _check_against_expected(case, _kg_state(tmp_path / "again.kg"))


@pytest.mark.parametrize("case", HEAP_LAYOUT_CASES)
def test_a_heap_checkpoint_converts_to_exactly_its_expected_state(case: str, tmp_path: Path) -> None:
    # HeapSnapshotStrategy's layout (no lengths, every key group, null map values) decoded via heap_layout.
    result = savepoint_to_snapshot(FLINK_FIXTURES / case, tmp_path / "kg")
    _check_against_expected(case, _kg_state(tmp_path / "kg"))
    assert open_snapshot(tmp_path / "kg").manifest.origin["kind"] == "flink-checkpoint"
    assert result.source.endswith("chk-2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kg"]  # the canonical view is gone


@pytest.mark.parametrize("case", ROCKSDB_NATIVE_CASES)
def test_a_rocksdb_native_savepoint_converts_to_exactly_its_expected_state(case: str, tmp_path: Path) -> None:
    # The database files (inline ByteStream handles or Relative files) read with rocksdict, and the
    # list state RocksDB still holds as merge operands through aimrocks with Flink's merge operator.
    savepoint_to_snapshot(FLINK_FIXTURES / case, tmp_path / "kg")
    _check_against_expected(case, _kg_state(tmp_path / "kg"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kg"]


def test_corrupt_state_file_leaves_no_destination(tmp_path: Path) -> None:
    case = "heap-files-p3-maxp128-long"
    copy = tmp_path / case
    shutil.copytree(FLINK_FIXTURES / case, copy)
    snap = read_flink_metadata(copy)
    keyed = next(op for op in snap.metadata.operators if op.name == "keyed-state")
    path = local_path(keyed.subtasks[1].managed_keyed_state.delegate, snap.directory)  # type: ignore[union-attr]
    assert path is not None
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(InvalidInputError):
        savepoint_to_snapshot(copy, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [case]


def test_snapshot_without_flink_extension_is_refused(converted: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "plain.kg"
    shutil.copytree(converted["heap-files-p3-maxp128-long"], copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text(encoding="utf-8"))
    manifest.pop(EXTENSION)
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(UnsupportedFormatError, match="not converted from a Flink savepoint"):
        snapshot_to_savepoint(copy, tmp_path / "sp")
    assert not (tmp_path / "sp").exists()


def test_existing_destination_is_refused(converted: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "sp").mkdir()
    with pytest.raises(InvalidArgumentError, match="destination exists"):
        snapshot_to_savepoint(converted["heap-files-p3-maxp128-long"], tmp_path / "sp")


def test_rescaled_union_state_is_written_once(converted: dict[str, Path], tmp_path: Path) -> None:
    from keygroup_cli.execution.routes.rescale import rescale
    from keygroup_cli.flink.metadata.handles import OperatorStateHandle

    # Rescaled twice (3 -> 2 -> 4): the replicated marker keeps the second rescale from multiplying it.
    rescale(
        converted["heap-files-p3-maxp128-long"], tmp_path / "r2.kg", 2, operators=["op-state"], engine="local"
    )
    rescale(tmp_path / "r2.kg", tmp_path / "r.kg", 4, operators=["op-state"], engine="local")
    snap = open_snapshot(tmp_path / "r.kg")
    op = snap.manifest.operator("op-state")
    assert op is not None
    # kg rescale hands every new subtask all 6 union elements ...
    per_subtask = [
        sum(1 for s in read_operator_file(snap, f).column("state").to_pylist() if s == "union-counts")
        for f in op.operator_files
    ]
    assert per_subtask == [6, 6, 6, 6]
    # ... while the savepoint stores them once: Flink concatenates every subtask's partition on restore.
    snapshot_to_savepoint(tmp_path / "r.kg", tmp_path / "sp")
    written = read_flink_metadata(tmp_path / "sp")
    (state,) = (o for o in written.metadata.operators if o.uid == "op-state")
    counts = []
    for sub in state.subtasks:
        handle = sub.managed_operator_state
        assert isinstance(handle, OperatorStateHandle)
        counts.append(sum(len(e.offsets) for e in handle.states if e.name == "union-counts"))
    assert counts == [6, 0, 0, 0]
