"""The real-Flink rescale matrix of kg-written savepoints (issue #5, "Proof"; marker ``flink``).

Sources: Flink 2.3.0 canonical savepoints of KgTestJob (fixtures/flink/2.3) for every combination of
{HashMap, RocksDB} x {String, Long keys} x p {3, 4} x maxParallelism {10, 128}. Each holds value, list
and map state, event and processing timers, split / union / broadcast operator state and async-I/O
elements in flight.

1. Round trip: savepoint -> kg snapshot -> savepoint, restored by Flink at the same parallelism, dumps
   exactly the case's expected-state.json (the 14 sources ``test_round_trip.py`` does not already do).
2. Rescale: kg rescales each source 3 -> 4, 3 -> 7 or 4 -> 1, keeping maxParallelism and changing it
   (10 -> 64, 128 -> 1024); Flink restores each result with the new parallelism and maxParallelism, and the
   dump holds every element of the original exactly once, each key on the subtask of its key group at
   the new maxParallelism (``harness.assert_restored_like_expected``).
   kg rescales the savepoint directly (``rescale(SAVEPOINT, DEST, Q, from_parallelism=P,
   new_max_parallelism=M)``, i.e. ``kg rescale SAVEPOINT --from P --to Q --max-parallelism M``).
3. Equivalence: where maxParallelism is kept, Flink also restores the ORIGINAL savepoint at the new
   parallelism (Flink's own rescale at restore); both dumps must be identical
   (``harness.comparable_dump`` says which orders are normalised, and why).
4. Twice: a savepoint rescaled 3 -> 4 -> 2 (as two savepoint rescales, and as two rescales of one kg
   snapshot, whose union state is then marked replicated) still holds each union element once per subtask.
5. Spark: matrix cases rescaled with the Spark engine give dumps identical to the local engine's.

All restores of this module run in one JVM (about 90 restores).
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.model import Operator
from tests.restore.conftest import RestoreRunner
from tests.restore.harness import (
    CASES,
    KEYED_OPERATORS,
    OP_STATE,
    Dump,
    RestoreRequest,
    assert_restored_like_expected,
    assert_timers_fired,
    canonical,
    case_json,
    case_key_type,
    case_request,
    comparable_dump,
    dumped_keys,
    expected_keys,
    restore_error,
    union_pairs,
)

pytestmark = pytest.mark.flink

#: (backend, key type, parallelism, maxParallelism) -> the Flink-written source savepoint.
SOURCES = {
    ("hashmap", "string", 3, 10): "heap-inline-p3-maxp10-string",
    ("hashmap", "long", 3, 10): "heap-files-p3-maxp10-long",
    ("hashmap", "string", 3, 128): "heap-files-p3-maxp128-string",
    ("hashmap", "long", 3, 128): "heap-files-p3-maxp128-long",
    ("hashmap", "string", 4, 10): "heap-inline-p4-maxp10-string",
    ("hashmap", "long", 4, 10): "heap-files-p4-maxp10-long",
    ("hashmap", "string", 4, 128): "heap-files-p4-maxp128-string",
    ("hashmap", "long", 4, 128): "heap-snappy-files-p4-maxp128-long",
    ("rocksdb", "string", 3, 10): "rocksdb-canonical-p3-maxp10-string",
    ("rocksdb", "long", 3, 10): "rocksdb-canonical-p3-maxp10-long",
    ("rocksdb", "string", 3, 128): "rocksdb-canonical-p3-maxp128-string",
    ("rocksdb", "long", 3, 128): "rocksdb-canonical-snappy-p3-maxp128-long",
    ("rocksdb", "string", 4, 10): "rocksdb-canonical-p4-maxp10-string",
    ("rocksdb", "long", 4, 10): "rocksdb-canonical-snappy-p4-maxp10-long",
    ("rocksdb", "string", 4, 128): "rocksdb-canonical-p4-maxp128-string",
    ("rocksdb", "long", 4, 128): "rocksdb-canonical-p4-maxp128-long",
}
#: New parallelisms per source parallelism, and the changed maxParallelism per source maxParallelism.
TARGETS = {3: (4, 7), 4: (1,)}
NEW_MAX = {10: 64, 128: 1024}
#: Round-tripped by test_round_trip.py already.
ROUND_TRIPPED_ELSEWHERE = {"heap-inline-p3-maxp10-string", "heap-files-p3-maxp128-long"}


@dataclass(frozen=True)
class Rescale:
    """One kg rescale of a source case: to ``parallelism``, and to ``max_parallelism`` if given."""

    case: str
    parallelism: int
    max_parallelism: int | None = None

    @property
    def label(self) -> str:
        old = case_json(self.case, "flink-report.json")["job"]
        new_max = f"/maxP{old['maxParallelism']}->{self.max_parallelism}" if self.max_parallelism else ""
        return f"{self.case}:{old['parallelism']}->{self.parallelism}{new_max}"

    @property
    def source_parallelism(self) -> int:
        return int(case_json(self.case, "flink-report.json")["job"]["parallelism"])

    @property
    def new_max(self) -> int:
        """The maxParallelism the result is restored with."""
        old = int(case_json(self.case, "flink-report.json")["job"]["maxParallelism"])
        return self.max_parallelism or old


MATRIX = [
    Rescale(case, q, m)
    for (_backend, _key, p, max_p), case in SOURCES.items()
    for q in TARGETS[p]
    for m in (None, NEW_MAX[max_p])
]
SAME_MAX = [r for r in MATRIX if r.max_parallelism is None]
ROUND_TRIP = [case for case in SOURCES.values() if case not in ROUND_TRIPPED_ELSEWHERE]
#: Rescaled twice, 3 -> 4 -> 2 at the same maxParallelism, compared with Flink's own 3 -> 2.
TWICE = "rocksdb-canonical-snappy-p3-maxp128-long"
#: Matrix cases also run with the Spark engine: one that keeps maxParallelism, one that re-hashes.
SPARK = [
    Rescale("rocksdb-canonical-p3-maxp10-string", 4),
    Rescale("heap-files-p3-maxp128-string", 7, 1024),
]


def _kg_rescale(r: Rescale, dest: Path, engine: str = "local", spark: Any = None) -> Path:
    """Run ``kg rescale SAVEPOINT --from P --to Q [--max-parallelism M] --out DEST`` through the API.

    The non-parallel source keeps parallelism 1 and takes the new maxParallelism, which Flink checks
    for every operator with state.
    """
    result = rescale(
        CASES / r.case,
        dest,
        r.parallelism,
        from_parallelism=r.source_parallelism,
        new_max_parallelism=r.max_parallelism,
        engine=engine,
        spark=spark,
    )
    assert result.output == dest and result.savepoint is not None
    return dest


def _twice_in_one_snapshot(source: Path, dest: Path) -> Path:
    """3 -> 4 -> 2 as two rescales of one kg snapshot: the second reads union state marked replicated."""
    scratch = dest.with_name(dest.name + ".scratch")
    savepoint_to_snapshot(source, scratch / "in.kg")
    ops = [o.operator_id for o in _operators_at(scratch / "in.kg", 3)]
    rescale(scratch / "in.kg", scratch / "p4.kg", 4, operators=ops, engine="local")
    rescale(scratch / "p4.kg", scratch / "p2.kg", 2, operators=ops, engine="local")
    snapshot_to_savepoint(scratch / "p2.kg", dest)
    shutil.rmtree(scratch)
    return dest


def _operators_at(snapshot: Path, parallelism: int) -> list[Operator]:
    return [o for o in open_snapshot(snapshot).manifest.operators if o.parallelism == parallelism]


@pytest.fixture(scope="module")
def dumps(
    restore_savepoints: RestoreRunner, tmp_path_factory: pytest.TempPathFactory, spark: Any
) -> dict[str, Dump]:
    """Write every kg savepoint of the module, then restore them all (and the originals) in one JVM."""
    root = tmp_path_factory.mktemp("rescale-matrix")
    requests: dict[str, RestoreRequest] = {}
    for case in ROUND_TRIP:
        savepoint_to_snapshot(CASES / case, root / f"{case}.kg")
        snapshot_to_savepoint(root / f"{case}.kg", root / f"{case}.sp")
        requests[f"round-trip:{case}"] = case_request(case, root / f"{case}.sp")
    for i, r in enumerate(MATRIX):
        out = _kg_rescale(r, root / f"matrix-{i}.sp")
        requests[f"kg:{r.label}"] = case_request(r.case, out, r.parallelism, r.new_max)
    for r in SAME_MAX:
        requests[f"flink:{r.label}"] = case_request(r.case, None, r.parallelism)
    for i, r in enumerate(SPARK):
        out = _kg_rescale(r, root / f"spark-{i}.sp", engine="spark", spark=spark)
        requests[f"spark:{r.label}"] = case_request(r.case, out, r.parallelism, r.new_max)
    rescale(CASES / TWICE, root / "twice-p4.sp", 4, from_parallelism=3, engine="local")
    rescale(root / "twice-p4.sp", root / "twice-p2.sp", 2, from_parallelism=4, engine="local")
    requests["twice:savepoints"] = case_request(TWICE, root / "twice-p2.sp", 2)
    requests["twice:snapshot"] = case_request(
        TWICE, _twice_in_one_snapshot(CASES / TWICE, root / "twice-kg.sp"), 2
    )
    requests["twice:flink"] = case_request(TWICE, None, 2)
    labels = list(requests)
    return dict(zip(labels, restore_savepoints([requests[label] for label in labels]), strict=True))


def _restored(dumps: dict[str, Dump], label: str) -> Dump:
    dump = dumps[label]
    assert restore_error(dump) is None, f"{label}: Flink refused the restore:\n{restore_error(dump)}"
    return dump


def test_matrix_covers_every_source_and_rescale() -> None:
    assert len(SOURCES) == 16 and len(set(SOURCES.values())) == 16
    for (backend, key, p, max_p), case in SOURCES.items():
        job = case_json(case, "flink-report.json")["job"]
        assert (job["stateBackend"], case_key_type(case), job["parallelism"], job["maxParallelism"]) == (
            backend, key, p, max_p,
        )  # fmt: skip
        assert job["format"] == "CANONICAL"
    assert len(MATRIX) == 48 and len(SAME_MAX) == 24
    assert {(r.source_parallelism, r.parallelism) for r in MATRIX} == {(3, 4), (3, 7), (4, 1)}


@pytest.mark.parametrize("case", ROUND_TRIP)
def test_round_trip_restores_exactly(dumps: dict[str, Dump], case: str) -> None:
    dump = _restored(dumps, f"round-trip:{case}")
    expected = case_json(case, "expected-state.json")
    for op in KEYED_OPERATORS:
        subtasks = dump["keyedOperators"][op]["subtasks"]
        assert [s["keyGroupRange"] for s in subtasks] == expected["keyGroupRanges"]
        # key, Flink's key group, restoring subtask, every value / list element / map entry / timer
        assert sorted(map(canonical, dumped_keys(dump, op))) == sorted(
            map(canonical, expected_keys(expected, op))
        )
    assert_timers_fired(dump)
    (exp_op,) = expected["operatorState"]
    got_op = dump["operatorState"][OP_STATE]["subtasks"]
    all_union = Counter(canonical(s["union-counts"]) for s in exp_op["subtasks"])
    assert len(got_op) == len(exp_op["subtasks"])
    for got, exp in zip(got_op, exp_op["subtasks"], strict=True):
        assert got["split-ids"] == exp["split-ids"]
        assert union_pairs(got["union-counts"]) == all_union
        assert got["bcast"] == exp_op["bcast"]
    got_async = dump["asyncInFlight"]["async-wait"]["subtasks"]
    for got, exp in zip(got_async, expected["asyncInFlight"]["subtasks"], strict=True):
        assert sorted(map(canonical, got["elements"])) == sorted(map(canonical, exp["elements"]))


@pytest.mark.parametrize("r", MATRIX, ids=lambda r: r.label)
def test_kg_rescaled_savepoint_restores_every_element_once(dumps: dict[str, Dump], r: Rescale) -> None:
    dump = _restored(dumps, f"kg:{r.label}")
    expected = case_json(r.case, "expected-state.json")
    assert_restored_like_expected(dump, expected, r.parallelism, r.new_max, case_key_type(r.case))


@pytest.mark.parametrize("r", SAME_MAX, ids=lambda r: r.label)
def test_kg_rescale_equals_flink_rescale_at_restore(dumps: dict[str, Dump], r: Rescale) -> None:
    flink = _restored(dumps, f"flink:{r.label}")
    expected = case_json(r.case, "expected-state.json")
    assert_restored_like_expected(flink, expected, r.parallelism, r.new_max, case_key_type(r.case))
    assert comparable_dump(_restored(dumps, f"kg:{r.label}")) == comparable_dump(flink)


@pytest.mark.parametrize("how", ["savepoints", "snapshot"])
def test_rescaled_twice_keeps_union_state_once(dumps: dict[str, Dump], how: str) -> None:
    dump = _restored(dumps, f"twice:{how}")
    expected = case_json(TWICE, "expected-state.json")
    assert_restored_like_expected(dump, expected, 2, 128, case_key_type(TWICE))
    for sub in dump["operatorState"][OP_STATE]["subtasks"]:
        assert len(sub["union-counts"]) == 2 * 3  # one [index, count] pair per ORIGINAL subtask
    assert comparable_dump(dump) == comparable_dump(_restored(dumps, "twice:flink"))


@pytest.mark.spark
@pytest.mark.parametrize("r", SPARK, ids=lambda r: r.label)
def test_spark_engine_savepoint_restores_like_local(dumps: dict[str, Dump], r: Rescale) -> None:
    dump = _restored(dumps, f"spark:{r.label}")
    expected = case_json(r.case, "expected-state.json")
    assert_restored_like_expected(dump, expected, r.parallelism, r.new_max, case_key_type(r.case))
    assert comparable_dump(dump) == comparable_dump(_restored(dumps, f"kg:{r.label}"))
    if r.max_parallelism is None:
        assert comparable_dump(dump) == comparable_dump(_restored(dumps, f"flink:{r.label}"))
