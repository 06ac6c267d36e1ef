"""Real Flink 2.3 restores ForSt inputs and kg's NATIVE output (``--format native``), key by key (issue #23).

Inputs: ForSt NATIVE savepoints (String and Long keys), a retained incremental ForSt checkpoint (its SST
files in ``shared/``, named by absolute paths under the directory Flink wrote them to) and a RocksDB NATIVE
savepoint, all at p 3 / maxParallelism 128 with value, list, map and timer state (fixtures/flink/README.md).

- ForSt restores each ForSt fixture as it is: what the job's expected-state.json says (ForSt's own restore).
- A HashMap job restores kg's canonical rescale (p 3 -> 4, maxParallelism 128 -> 256) of a ForSt savepoint.
- A ForSt job restores kg's NATIVE rescale of ForSt inputs (the savepoint and the checkpoint): p 3 -> 4
  with maxParallelism 128 -> 256 (keys re-hashed; key groups copied as bytes at the same maxParallelism:
  tests/restore/test_native_versions.py); a RocksDB job restores kg's NATIVE rescale of the RocksDB input.
- The same NATIVE output is restored by the other backend as well: one output serves both, as Flink's own
  NATIVE savepoints of the two backends do (RocksDB restores the ForSt fixture, ForSt the RocksDB one).
- A job that sets no maxParallelism restores kg's NATIVE output at the savepoint's maxParallelism (256).
- ForSt restores kg's NATIVE rescales (p 3 -> 4; and with maxParallelism 128 -> 256) of a savepoint written
  with the async state API (``fixtures/flink/2.3/async-forst-native-p3``, AsyncJob): its timers are in raw
  keyed state, redistributed by key group (``flink.write.raw_timers``); values and timers as in the original's
  restore, by a job that sets no maxParallelism.
- Each new subtask's database is built by one write task of the engine: on Spark (``local[2]``, the run's
  one session) as on the local engine, re-hashed and at the same maxParallelism (a narrow job). Both give,
  key for key and column family by column family, the databases of the driver route (``to_native`` over
  kg's canonical output of the same rescale), with the same metadata streams and operator-state bytes; and
  ForSt restores the Spark outputs.

Every restore of this module runs in one JVM (marker ``flink``); the Spark outputs need the run's Spark
session (marker ``spark``).
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import rocksdict

from keygroup_cli.execution.engines.local import LocalExecutor
from keygroup_cli.execution.engines.spark import SparkExecutor
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.io.stream_handles import RelativeFileHandle
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle, OperatorStateHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.reader import CheckpointMetadata
from keygroup_cli.flink.write.native import to_native
from tests.restore.conftest import RestoreRunner
from tests.restore.harness import (
    ASYNC_CASE,
    CASES,
    Dump,
    RestoreRequest,
    assert_async_job_restored,
    assert_restored_like_expected,
    async_expected_timers,
    async_request,
    canonical,
    case_json,
    relocated_checkpoint,
)

pytestmark = [pytest.mark.flink, pytest.mark.spark]

FORST_STRING = "forst-native-p3-maxp128-string"
FORST_LONG = "forst-native-p3-maxp128-long"
FORST_CHECKPOINT = "forst-checkpoint-p3-maxp128-long"
ROCKSDB_LONG = "rocksdb-native-p3-maxp128-long"
CHECKPOINT_DIR = Path("0000000000006b670000000000000019") / "chk-2"

#: A kg output: (format, new maxParallelism or None, engine).
Output = tuple[str, int | None, str]
#: name -> (case, kg output or None = the fixture, backend, p, maxP)
RESTORES: dict[str, tuple[str, Output | None, str, int, int]] = {
    "forst-own-string": (FORST_STRING, None, "forst", 3, 128),
    "forst-own-checkpoint": (FORST_CHECKPOINT, None, "forst", 3, 128),
    "rocksdb-restores-forst-savepoint": (FORST_LONG, None, "rocksdb", 3, 128),
    "forst-restores-rocksdb-savepoint": (ROCKSDB_LONG, None, "forst", 3, 128),
    "hashmap-canonical-of-forst": (FORST_STRING, ("canonical", 256, "local"), "hashmap", 4, 256),
    "forst-native-of-forst-m256-spark": (FORST_STRING, ("native", 256, "spark"), "forst", 4, 256),
    "forst-native-of-forst-m128-spark": (FORST_STRING, ("native", None, "spark"), "forst", 4, 128),
    "rocksdb-native-of-forst-m256": (FORST_STRING, ("native", 256, "local"), "rocksdb", 4, 256),
    "forst-native-of-forst-checkpoint-m256": (FORST_CHECKPOINT, ("native", 256, "local"), "forst", 4, 256),
    "rocksdb-native-of-rocksdb-m256": (ROCKSDB_LONG, ("native", 256, "local"), "rocksdb", 4, 256),
    "forst-native-of-rocksdb-m256": (ROCKSDB_LONG, ("native", 256, "local"), "forst", 4, 256),
    "forst-native-no-maxp-job": (FORST_STRING, ("native", 256, "local"), "forst", 4, 0),
}
#: Outputs only compared with the driver route (``test_native_tasks_build_the_driver_routes_databases``).
COMPARED: tuple[tuple[str, Output], ...] = (
    (FORST_STRING, ("native", None, "local")),
    (FORST_STRING, ("canonical", None, "local")),
)


def _input(case: str) -> Path:
    return CASES / case / CHECKPOINT_DIR if case == FORST_CHECKPOINT else CASES / case


Outputs = dict[tuple[str, str, int | None, str], Path]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Outputs:
    out = tmp_path_factory.mktemp("native")
    written: Outputs = {}
    wanted = [(case, kg) for case, kg, *_ in RESTORES.values() if kg is not None] + list(COMPARED)
    for case, kg in wanted:
        if (case, *kg) in written:
            continue
        output_format, max_p, engine = kg
        dest = out / f"{case}-{output_format}-m{max_p}-{engine}"
        executor = SparkExecutor(session=spark) if engine == "spark" else LocalExecutor()
        rescale(
            _input(case), dest, 4, new_max_parallelism=max_p, output_format=output_format, executor=executor
        )
        written[(case, *kg)] = dest
    return written


#: AsyncJob (fixtures/java/src/kg/fixtures/AsyncJob.java: the async state API on ForSt, timers in raw keyed
#: state): name -> (p, maxP) of kg's NATIVE rescale (None: the fixture itself, p 3 / 128), restored by a job
#: that sets none.
ASYNC: dict[str, tuple[int, int] | None] = {
    "async-own": None,
    "async-p4": (4, 128),
    "async-p4-m256": (4, 256),
}


@pytest.fixture(scope="module")
def async_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    source = CASES / ASYNC_CASE
    out = tmp_path_factory.mktemp("async")
    written = {}
    for name, shape in ASYNC.items():
        if shape is None:
            written[name] = source
            continue
        p, max_p = shape
        written[name] = out / name
        # async-p4 gives no format: kg chooses NATIVE itself for async state (the only one Flink restores).
        given = {} if name == "async-p4" else {"output_format": "native"}
        result = rescale(source, out / name, p, from_parallelism=3, new_max_parallelism=max_p, engine="local",
                         **given)  # fmt: skip
        assert result.savepoint_format == "native"
        assert (result.savepoint_format_reason is None) == bool(given), result.savepoint_format_reason
    return written


@pytest.fixture(scope="module")
def restored(
    restore_savepoints: RestoreRunner,
    outputs: Outputs,
    async_outputs: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Dump]:
    requests: list[RestoreRequest | dict[str, Any]] = []
    for case, kg, backend, p, max_p in RESTORES.values():
        key_type = (
            "long" if case_json(case, "flink-report.json")["job"]["keyType"] == "java.lang.Long" else "string"
        )
        source = _input(case) if kg is None else outputs[(case, *kg)]
        if kg is None and case == FORST_CHECKPOINT:  # Flink reads shared/ only at its absolute paths
            source = relocated_checkpoint(source, tmp_path_factory.mktemp("relocated") / "chk-2").parent
        requests.append(RestoreRequest(source, p, max_p, key_type, backend))
    # The AsyncJob restores run in the same JVM and cluster (RestoreDump hands them to AsyncJob).
    requests += [async_request(async_outputs[name], (shape or (3, 128))[0]) for name, shape in ASYNC.items()]
    return dict(zip([*RESTORES, *ASYNC], restore_savepoints(requests), strict=True))


@pytest.mark.parametrize("name", list(RESTORES))
def test_restore_holds_the_jobs_state(name: str, restored: dict[str, Dump]) -> None:
    case, _kg, backend, p, max_p = RESTORES[name]
    dump = restored[name]
    key_type = "long" if "long" in case else "string"
    assert_restored_like_expected(dump, case_json(case, "expected-state.json"), p, max_p or 256, key_type)
    backends = {s["backend"] for s in dump["keyedOperators"]["keyed-state"]["subtasks"]}
    want = {"forst": "ForStSyncKeyedStateBackend", "rocksdb": "RocksDBKeyedStateBackend"}
    assert backends == {want.get(backend, "HeapKeyedStateBackend")}


def test_forst_restores_kgs_rescale_of_an_async_state_savepoint(restored: dict[str, Dump]) -> None:
    # AsyncJob's ForSt NATIVE savepoint (keyBy().enableAsyncState(), a v2 ValueState, 300 event-time and 200
    # processing-time timers in raw keyed state), and kg's NATIVE rescales to p 4 (timer sections copied by
    # key group) and to p 4 with maxParallelism 256 (every timer re-keyed), each restored by a job that sets
    # no maxParallelism: every key reads its count, every timer fires once where Flink places its key.
    expected = async_expected_timers(CASES / ASYNC_CASE)
    for name, shape in ASYNC.items():
        p, max_p = shape or (3, 128)
        assert_async_job_restored(restored[name], p, max_p, expected)
    # Key by key as the original's restore read them: each key's value, each timer with the value it read.
    own = restored["async-own"]
    for name in ("async-p4", "async-p4-m256"):
        dump = restored[name]
        assert {k: e["restored"] for k, e in dump["keyed"].items()} == {
            k: e["restored"] for k, e in own["keyed"].items()
        }
        assert Counter(map(_fired, dump["timers"])) == Counter(map(_fired, own["timers"]))


def _fired(timer: dict[str, Any]) -> str:
    return canonical([timer["key"], timer["domain"], timer["timestamp"], timer["count"]])


def test_native_output_is_one_database_per_subtask(outputs: Outputs) -> None:
    dest = outputs[(FORST_STRING, "native", 256, "local")]
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


@pytest.mark.parametrize("max_p", [256, None], ids=["rehashed", "same-maxp"])
def test_native_tasks_build_the_driver_routes_databases(
    outputs: Outputs, max_p: int | None, tmp_path: Path
) -> None:
    # The driver route: kg's canonical output of the same rescale, each keyed file made a database on the
    # driver (to_native, what kg convert --format native runs).
    driver = tmp_path / "driver"
    shutil.copytree(outputs[(FORST_STRING, "canonical", max_p, "local")], driver)
    expected = _databases(driver, to_native(driver, read_flink_metadata(driver).metadata), tmp_path / "db")
    entries = [len(e) for db in expected.values() if len(db) == 4 for e in db[3].values()]
    assert len(entries) > 2 * 4 and sum(entries) > 1000  # every state of 2 operators x 4 subtasks
    for engine in ("local", "spark"):
        dest = outputs[(FORST_STRING, "native", max_p, engine)]
        assert _databases(dest, read_flink_metadata(dest).metadata, tmp_path / engine) == expected, engine


def _databases(directory: Path, metadata: CheckpointMetadata, work: Path) -> dict[tuple[str, int], Any]:
    """Return per (operator, subtask): key-group range, metadata stream, op state, every column family.

    Each database is opened read-only from links in ``work`` under its files' RocksDB names.
    """
    found: dict[tuple[str, int], Any] = {}
    for op in metadata.operators:
        for sub in op.subtasks:
            keyed, operator = sub.managed_keyed_state, sub.managed_operator_state
            stream = b""
            if isinstance(operator, OperatorStateHandle):
                assert isinstance(operator.delegate, RelativeFileHandle)
                stream = (directory / operator.delegate.relative_path).read_bytes()
            if not isinstance(keyed, IncrementalKeyedHandle):
                found[(op.operator_id, sub.index)] = (keyed, stream)
                continue
            assert isinstance(keyed.metadata, RelativeFileHandle) and keyed.shared == ()
            db = work / f"{op.operator_id}-{sub.index}"
            db.mkdir(parents=True)
            for file in keyed.private:
                assert isinstance(file.handle, RelativeFileHandle)
                (db / file.local_path).symlink_to(directory / file.handle.relative_path)
            found[(op.operator_id, sub.index)] = (
                (keyed.key_group_start, keyed.num_key_groups, op.parallelism, op.max_parallelism),
                (directory / keyed.metadata.relative_path).read_bytes(),
                stream,
                _column_families(db),
            )
    return found


def _column_families(db: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    names = rocksdict.Rdict.list_cf(str(db))
    opened = rocksdict.Rdict(
        str(db),
        options=rocksdict.Options(raw_mode=True),
        column_families={name: rocksdict.Options(raw_mode=True) for name in names},
        access_type=rocksdict.AccessType.read_only(),
    )
    try:
        return {name: list(opened.get_column_family(name).items()) for name in names}
    finally:
        opened.close()
