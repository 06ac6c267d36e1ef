"""Real Flink 2.3 restores ForSt inputs and kg's NATIVE output (``--format native``), key by key (issue #23).

Inputs: ForSt NATIVE savepoints (String and Long keys), a retained incremental ForSt checkpoint (its SST
files in ``shared/``, named by absolute paths under the directory Flink wrote them to) and a RocksDB NATIVE
savepoint, all at p 3 / maxParallelism 128 with value, list, map and timer state (fixtures/flink/README.md).

- ForSt restores each ForSt fixture as it is: what the job's expected-state.json says (ForSt's own restore).
- A HashMap job restores kg's canonical rescale (p 3 -> 4, maxParallelism 128 -> 256) of a ForSt savepoint.
- A ForSt job restores kg's NATIVE rescale of ForSt inputs (the savepoint and the checkpoint): p 3 -> 4
  with maxParallelism 128 -> 256 (keys re-hashed; key groups copied as bytes at the same maxParallelism:
  tests/flink/test_native_versions.py); a RocksDB job restores kg's NATIVE rescale of the RocksDB input.
- The same NATIVE output is restored by the other backend as well: one output serves both, as Flink's own
  NATIVE savepoints of the two backends do (RocksDB restores the ForSt fixture, ForSt the RocksDB one).
- A job that sets no maxParallelism restores kg's NATIVE output at the savepoint's maxParallelism (256).

Every restore of this module runs in one JVM (marker ``flink``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.execution.rescale import rescale
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.flink.conftest import RestoreRunner
from tests.flink.harness import (
    CASES,
    Dump,
    RestoreRequest,
    assert_restored_like_expected,
    case_json,
    relocated_checkpoint,
)

pytestmark = pytest.mark.flink

FORST_STRING = "forst-native-p3-maxp128-string"
FORST_LONG = "forst-native-p3-maxp128-long"
FORST_CHECKPOINT = "forst-checkpoint-p3-maxp128-long"
ROCKSDB_LONG = "rocksdb-native-p3-maxp128-long"
CHECKPOINT_DIR = Path("0000000000006b670000000000000019") / "chk-2"

#: name -> (case, kg output: (format, new maxParallelism or None) or None = the fixture, backend, p, maxP)
RESTORES: dict[str, tuple[str, tuple[str, int | None] | None, str, int, int]] = {
    "forst-own-string": (FORST_STRING, None, "forst", 3, 128),
    "forst-own-checkpoint": (FORST_CHECKPOINT, None, "forst", 3, 128),
    "rocksdb-restores-forst-savepoint": (FORST_LONG, None, "rocksdb", 3, 128),
    "forst-restores-rocksdb-savepoint": (ROCKSDB_LONG, None, "forst", 3, 128),
    "hashmap-canonical-of-forst": (FORST_STRING, ("canonical", 256), "hashmap", 4, 256),
    "forst-native-of-forst-m256": (FORST_STRING, ("native", 256), "forst", 4, 256),
    "rocksdb-native-of-forst-m256": (FORST_STRING, ("native", 256), "rocksdb", 4, 256),
    "forst-native-of-forst-checkpoint-m256": (FORST_CHECKPOINT, ("native", 256), "forst", 4, 256),
    "rocksdb-native-of-rocksdb-m256": (ROCKSDB_LONG, ("native", 256), "rocksdb", 4, 256),
    "forst-native-of-rocksdb-m256": (ROCKSDB_LONG, ("native", 256), "forst", 4, 256),
    "forst-native-no-maxp-job": (FORST_STRING, ("native", 256), "forst", 4, 0),
}


def _input(case: str) -> Path:
    return CASES / case / CHECKPOINT_DIR if case == FORST_CHECKPOINT else CASES / case


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, int | None], Path]:
    out = tmp_path_factory.mktemp("native")
    written: dict[tuple[str, str, int | None], Path] = {}
    for case, kg, *_ in RESTORES.values():
        if kg is None or (case, *kg) in written:
            continue
        dest = out / f"{case}-{kg[0]}-m{kg[1]}"
        rescale(_input(case), dest, 4, new_max_parallelism=kg[1], output_format=kg[0], engine="local")
        written[(case, *kg)] = dest
    return written


@pytest.fixture(scope="module")
def restored(
    restore_savepoints: RestoreRunner,
    outputs: dict[tuple[str, str, int | None], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Dump]:
    requests = []
    for case, kg, backend, p, max_p in RESTORES.values():
        key_type = (
            "long" if case_json(case, "flink-report.json")["job"]["keyType"] == "java.lang.Long" else "string"
        )
        source = _input(case) if kg is None else outputs[(case, *kg)]
        if kg is None and case == FORST_CHECKPOINT:  # Flink reads shared/ only at its absolute paths
            source = relocated_checkpoint(source, tmp_path_factory.mktemp("relocated") / "chk-2").parent
        requests.append(RestoreRequest(source, p, max_p, key_type, backend))
    return dict(zip(RESTORES, restore_savepoints(requests), strict=True))


@pytest.mark.parametrize("name", list(RESTORES))
def test_restore_holds_the_jobs_state(name: str, restored: dict[str, Dump]) -> None:
    case, _kg, backend, p, max_p = RESTORES[name]
    dump = restored[name]
    key_type = "long" if "long" in case else "string"
    assert_restored_like_expected(dump, case_json(case, "expected-state.json"), p, max_p or 256, key_type)
    backends = {s["backend"] for s in dump["keyedOperators"]["keyed-state"]["subtasks"]}
    want = {"forst": "ForStSyncKeyedStateBackend", "rocksdb": "RocksDBKeyedStateBackend"}
    assert backends == {want.get(backend, "HeapKeyedStateBackend")}


def test_native_output_is_one_database_per_subtask(outputs: dict[tuple[str, str, int | None], Path]) -> None:
    dest = outputs[(FORST_STRING, "native", 256)]
    snapshot = read_flink_metadata(dest)
    assert snapshot.metadata.properties is not None
    assert snapshot.metadata.properties.format_type == "NATIVE"
    keyed = [
        (op, s.managed_keyed_state)
        for op in snapshot.metadata.operators
        for s in op.subtasks
        if s.managed_keyed_state is not None
    ]
    assert len(keyed) == 2 * 4  # keyed-state and count-no-uid, 4 subtasks each
    keyed = [(op, h) for op, h in keyed if isinstance(h, IncrementalKeyedHandle)]
    assert len(keyed) == 2 * 4
    for op, handle in keyed:
        assert isinstance(handle, IncrementalKeyedHandle)
        assert op.max_parallelism == 256 and handle.shared == ()
        names = sorted(f.local_path for f in handle.private)
        assert "CURRENT" in names and any(n.endswith(".sst") for n in names)
        assert any(n.startswith("MANIFEST-") for n in names) and any(n.startswith("OPTIONS-") for n in names)
    # Only the files the handles name (and _metadata) are left: no canonical keyed file, no scratch.
    named = {getattr(f.handle, "relative_path", None) for _op, h in keyed for f in h.private}
    named |= {getattr(h.metadata, "relative_path", None) for _op, h in keyed}
    on_disk = {p.name for p in dest.iterdir()} - {"_metadata"}
    assert named <= on_disk  # every database file is beside _metadata
    assert not [n for n in on_disk if n.startswith(".")]  # no scratch left
