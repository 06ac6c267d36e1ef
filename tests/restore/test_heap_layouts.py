"""Real Flink 2.3 restores kg's rescale of a retained HashMap checkpoint and of RocksDB NATIVE savepoints.

The heap checkpoint (``heap-checkpoint-p2-maxp128-string``: ``chk-2``, ``KeyGroupsStateHandle`` in the
``HeapSnapshotStrategy`` layout, null map values included) is rescaled by kg into canonical savepoints:
2→3 at the same maxParallelism (key groups copied as bytes), 2→3 with maxParallelism 128→256 and 2→1 with
128→64 (every key re-hashed). Flink 2.3 restores each at the new p/maxP, on the HashMap and on the RocksDB
backend, and must hold exactly the case's expected-state.json: every key's values, list order, map entries
(null values too) and timers once, each key on the subtask Flink's key-group math gives it. Flink's own
restore of the original checkpoint at the new parallelism is compared key by key with the restore of kg's
same-maxParallelism output. The two RocksDB NATIVE savepoints (database files, list state still in merge
operands, null map values) are rescaled 2→3 and 2→3 with maxParallelism 128→256 and restored the same way.
All restores of this module run in one JVM (marker ``flink``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.metadata.locate import find_metadata, read_flink_metadata
from tests.restore.conftest import RestoreRunner
from tests.restore.harness import (
    CASES,
    Dump,
    RestoreRequest,
    assert_restored_like_expected,
    case_json,
    case_key_type,
    comparable_dump,
)

pytestmark = pytest.mark.flink

CASE = "heap-checkpoint-p2-maxp128-string"
#: (new parallelism, new maxParallelism or None = keep 128)
RESCALES = ((3, None), (3, 256), (1, 64))
BACKENDS = ("hashmap", "rocksdb")
ROCKSDB_NATIVE = ("rocksdb-native-p2-maxp128-string", "rocksdb-native-files-p2-maxp128-long")


@pytest.fixture(scope="module")
def restored(restore_savepoints: RestoreRunner, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dump]:
    out = tmp_path_factory.mktemp("heap-layouts")
    requests: list[RestoreRequest] = []
    names: list[str] = []
    for p, max_p in RESCALES:
        dest = out / f"p{p}-m{max_p}"
        rescale(CASES / CASE, dest, p, from_parallelism=2, new_max_parallelism=max_p, engine="local")
        for backend in BACKENDS:
            requests.append(RestoreRequest(dest, p, max_p or 128, "string", backend))
            names.append(f"kg-{backend}-p{p}-m{max_p}")
    for case in ROCKSDB_NATIVE:
        key_type = case_key_type(case)
        for p, max_p in ((3, None), (3, 256)):
            dest = out / f"{case}-p{p}-m{max_p}"
            rescale(CASES / case, dest, p, new_max_parallelism=max_p, engine="local")
            for backend in BACKENDS:
                requests.append(RestoreRequest(dest, p, max_p or 128, key_type, backend))
                names.append(f"{case}-{backend}-p{p}-m{max_p}")
    own = Path(str(find_metadata(CASES / CASE)))  # Flink wants the chk-N/_metadata file itself
    requests.append(RestoreRequest(own, 3, 128, "string", "hashmap"))
    names.append("flink-own-p3")
    return dict(zip(names, restore_savepoints(requests), strict=True))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("p", "max_p"), RESCALES)
def test_rescaled_heap_checkpoint_restores_every_key(
    restored: dict[str, Dump], backend: str, p: int, max_p: int | None
) -> None:
    expected = case_json(CASE, "expected-state.json")
    assert_restored_like_expected(
        restored[f"kg-{backend}-p{p}-m{max_p}"], expected, p, max_p or 128, "string"
    )


def test_same_as_flinks_own_rescale_of_the_checkpoint(restored: dict[str, Dump]) -> None:
    assert comparable_dump(restored["kg-hashmap-p3-mNone"]) == comparable_dump(restored["flink-own-p3"])


def test_output_is_a_canonical_savepoint(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    rescale(CASES / CASE, dest, 3, engine="local")
    written = read_flink_metadata(dest)
    assert written.metadata.properties is not None
    assert written.metadata.properties.format_type == "CANONICAL"
    tags = {
        sub.managed_keyed_state.tag
        for op in written.metadata.operators
        for sub in op.subtasks
        if isinstance(sub.managed_keyed_state, KeyGroupsHandle)
    }
    assert tags == {7}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_p", [None, 256])
@pytest.mark.parametrize("case", ROCKSDB_NATIVE)
def test_rescaled_rocksdb_native_savepoint_restores_every_key(
    restored: dict[str, Dump], case: str, max_p: int | None, backend: str
) -> None:
    expected = case_json(case, "expected-state.json")
    dump = restored[f"{case}-{backend}-p3-m{max_p}"]
    assert_restored_like_expected(dump, expected, 3, max_p or 128, case_key_type(case))
