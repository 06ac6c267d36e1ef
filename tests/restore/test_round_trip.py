"""Real Flink restores savepoints kg wrote (marker ``flink``): converted, rescaled and maxP-changed.

Each savepoint goes savepoint -> ``kg convert`` -> kg snapshot -> (``kg rescale``) -> ``kg convert
--to-flink`` and is restored by Flink 2.3.0 through RestoreDump; the dump must equal the case's
expected-state.json (same parallelism) or, rescaled, hold every element exactly once with each key on the
subtask Flink's key-group math predicts, and operator state exactly as Flink's own rescale of the
original savepoint hands it out. All restores of this module run in one JVM.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint
from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import key_group_for_hash, operator_index_for_key_group, subtask_ranges
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.snapshot import open_snapshot
from tests.restore.conftest import RestoreRunner
from tests.restore.harness import (
    CASES,
    KEYED_OPERATORS,
    OP_STATE,
    Dump,
    RestoreRequest,
    async_elements,
    canonical,
    dumped_keys,
    expected_keys,
    key_multiset,
    restore_error,
)

pytestmark = pytest.mark.flink

OWN = (
    "heap-inline-p3-maxp10-string",
    "heap-files-p3-maxp128-long",
    "heap-files-p2-maxp256-string",
    "heap-snappy-files-p3-maxp128-long",
    "rocksdb-canonical-snappy-p2-maxp256-string",
)
#: (case, new parallelism, new maxParallelism or None)
RESCALED = (
    ("heap-files-p3-maxp128-long", 4, None),
    ("rocksdb-canonical-snappy-p2-maxp256-string", 3, None),
    ("heap-snappy-files-p3-maxp128-long", 2, None),
    ("heap-inline-p3-maxp10-string", 4, 64),
    ("heap-files-p3-maxp128-long", 4, 1024),
)


def _json(case: str, name: str) -> Any:
    return json.loads((CASES / case / name).read_text(encoding="utf-8"))


def _request(
    case: str, savepoint: Path, parallelism: int | None = None, max_p: int | None = None
) -> RestoreRequest:
    job = _json(case, "flink-report.json")["job"]
    return RestoreRequest(
        savepoint=savepoint,
        parallelism=parallelism or job["parallelism"],
        max_parallelism=max_p or job["maxParallelism"],
        key_type="long" if job["keyType"] == "java.lang.Long" else "string",
        backend=job["stateBackend"],
    )


def _rescaled_snapshot(case: str, kg_dir: Path, out: Path, parallelism: int, max_p: int | None) -> Path:
    """``kg rescale`` every operator running at the job's parallelism (the source stays at 1)."""
    job = _json(case, "flink-report.json")["job"]
    manifest = open_snapshot(kg_dir).manifest
    ops = [o for o in manifest.operators if o.parallelism == job["parallelism"]]
    if max_p is None:
        rescale(kg_dir, out, parallelism, operators=[o.operator_id for o in ops], engine="local")
        return out
    # maxParallelism is per operator state, and Flink checks it for every operator of the job: the
    # operators at the job's parallelism move to the new one, every operator (the source at 1 too) to the
    # new maxParallelism, keyed ones re-hashed.
    rescale(
        kg_dir,
        out,
        parallelism,
        from_parallelism=job["parallelism"],
        new_max_parallelism=max_p,
        engine="local",
    )
    assert {op.max_parallelism for op in open_snapshot(out).manifest.operators} == {max_p}
    return out


@pytest.fixture(scope="module")
def dumps(restore_savepoints: RestoreRunner, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dump]:
    root = tmp_path_factory.mktemp("round-trip")
    requests: dict[str, RestoreRequest] = {}
    for case in OWN:
        savepoint_to_snapshot(CASES / case, root / f"{case}.kg")
        snapshot_to_savepoint(root / f"{case}.kg", root / f"{case}.sp")
        requests[f"own:{case}"] = _request(case, root / f"{case}.sp")
    for case, p, max_p in RESCALED:
        label = f"{case}:{p}:{max_p}"
        kg_dir = _rescaled_snapshot(case, root / f"{case}.kg", root / f"{label}.kg", p, max_p)
        snapshot_to_savepoint(kg_dir, root / f"{label}.sp")
        requests[f"kg:{label}"] = _request(case, root / f"{label}.sp", p, max_p)
        if max_p is None:
            # Flink's own rescale of the original savepoint, for operator state.
            requests[f"flink:{label}"] = _request(case, CASES / case, p)
    labels = list(requests)
    return dict(zip(labels, restore_savepoints([requests[label] for label in labels]), strict=True))


def _restored(dumps: dict[str, Dump], label: str) -> Dump:
    dump = dumps[label]
    assert restore_error(dump) is None, f"{label}: Flink refused the restore:\n{restore_error(dump)}"
    return dump


def _union_pairs(values: list[int]) -> Counter[str]:
    return Counter(canonical(values[i : i + 2]) for i in range(0, len(values), 2))


@pytest.mark.parametrize("case", OWN)
def test_flink_restores_kg_written_savepoint_exactly(dumps: dict[str, Dump], case: str) -> None:
    dump = _restored(dumps, f"own:{case}")
    expected = _json(case, "expected-state.json")
    job = _json(case, "flink-report.json")["job"]
    for op in KEYED_OPERATORS:
        subtasks = dump["keyedOperators"][op]["subtasks"]
        assert [s["keyGroupRange"] for s in subtasks] == expected["keyGroupRanges"]
        assert sorted(map(canonical, dumped_keys(dump, op))) == sorted(
            map(canonical, expected_keys(expected, op))
        )
    assert len(dumped_keys(dump, "keyed-state")) == 200
    (exp_op,) = expected["operatorState"]
    got_op = dump["operatorState"][OP_STATE]["subtasks"]
    all_union = Counter(canonical(s["union-counts"]) for s in exp_op["subtasks"])
    assert len(got_op) == job["parallelism"]
    for got, exp in zip(got_op, exp_op["subtasks"], strict=True):
        assert got["split-ids"] == exp["split-ids"]
        assert _union_pairs(got["union-counts"]) == all_union
        assert got["bcast"] == exp_op["bcast"]
    got_async = dump["asyncInFlight"]["async-wait"]["subtasks"]
    for got, exp in zip(got_async, expected["asyncInFlight"]["subtasks"], strict=True):
        assert sorted(map(canonical, got["elements"])) == sorted(map(canonical, exp["elements"]))


@pytest.mark.parametrize(("case", "parallelism", "max_p"), RESCALED)
def test_flink_restores_kg_rescaled_savepoint(
    dumps: dict[str, Dump], case: str, parallelism: int, max_p: int | None
) -> None:
    label = f"{case}:{parallelism}:{max_p}"
    dump = _restored(dumps, f"kg:{label}")
    expected = _json(case, "expected-state.json")
    key_type = "long" if _json(case, "flink-report.json")["job"]["keyType"] == "java.lang.Long" else "string"
    new_max = max_p or expected["input"]["maxParallelism"]
    ranges = [[r.start, r.end] for r in subtask_ranges(new_max, parallelism)]
    for op in KEYED_OPERATORS:
        subtasks = dump["keyedOperators"][op]["subtasks"]
        assert [s["keyGroupRange"] for s in subtasks] == ranges
        got, exp = dumped_keys(dump, op), expected_keys(expected, op)
        assert key_multiset(got) == key_multiset(exp)
        for entry in got:
            # Flink's key group for the key at the new maxParallelism, and the subtask owning it
            group = key_group_for_hash(hash_code(entry["key"], key_type), new_max)
            assert entry["keyGroup"] == group
            assert entry["subtask"] == operator_index_for_key_group(new_max, parallelism, group)
    (exp_op,) = expected["operatorState"]
    got_op = dump["operatorState"][OP_STATE]["subtasks"]
    assert len(got_op) == parallelism
    all_split = Counter(i for s in exp_op["subtasks"] for i in s["split-ids"])
    assert Counter(i for s in got_op for i in s["split-ids"]) == all_split
    all_union = Counter(canonical(s["union-counts"]) for s in exp_op["subtasks"])
    for got in got_op:
        assert _union_pairs(got["union-counts"]) == all_union  # each element once, on every subtask
        assert got["bcast"] == exp_op["bcast"]
    exp_async = Counter(canonical(e) for s in expected["asyncInFlight"]["subtasks"] for e in s["elements"])
    assert async_elements(dump) == exp_async
    if max_p is None:
        # kg's split redistribution is Flink's own: the same elements on the same subtasks. (Within a
        # subtask Flink orders partitions by a HashMap over file handles, so order is not compared.)
        flink = _restored(dumps, f"flink:{label}")
        assert [sorted(s["split-ids"]) for s in got_op] == [
            sorted(s["split-ids"]) for s in flink["operatorState"][OP_STATE]["subtasks"]
        ]
        for ours, theirs in zip(
            dump["asyncInFlight"]["async-wait"]["subtasks"],
            flink["asyncInFlight"]["async-wait"]["subtasks"],
            strict=True,
        ):
            assert sorted(map(canonical, ours["elements"])) == sorted(map(canonical, theirs["elements"]))
