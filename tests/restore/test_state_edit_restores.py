"""Real Flink 2.3 restores the outputs of ``kg write``, ``kg compact`` and ``transform``: exactly the edits.

Two jobs, each restored in one JVM:

- **KgTestJob, maxParallelism set** (``RestoreRequest``): the HashMap savepoint
  ``heap-files-p3-maxp128-string`` restored on HashMap and the RocksDB savepoint
  ``rocksdb-canonical-p3-maxp10-long`` on RocksDB, each as it is and after an upsert (``sum`` of three keys
  and a new key), a delete (``ids`` of two keys), a replace (``buckets`` becomes two keys' maps), a
  compaction (two keys dropped by ``--drop-where``, event timers before the median dropped) and a
  transform (every ``sum`` doubled). Flink's dump of each edited savepoint must equal its dump of the
  original with exactly those changes: every other key's values, timers, key group and subtask identical.
- **UidJob, no maxParallelism set** (``UidRestoreRequest`` with none): ``uid-heap-canonical-p3`` on HashMap
  and ``uid-rocksdb-canonical-p3`` on RocksDB after an upsert of three ``keyed-long`` sums and a delete of
  two ``keyed-string`` counts, and ``uid-heap-canonical-p3`` after an upsert with ``keyed-long``'s
  maxParallelism rescaled 128 -> 256 in the same pass (the job adopts 256). Each key's first record reads
  its restored state through Flink's own key-group lookup, so a value in a wrong key group reads as missing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import key_group_for_hash
from keygroup_cli.execution.routes.state_edit import compact_state, transform, write_state
from keygroup_cli.flink import state_table
from tests.kg_fixture_state import FLINK_FIXTURES
from tests.restore.harness import (
    UID_NUM_KEYS,
    UID_OWN_P,
    Dump,
    RestoreRequest,
    UidRestoreRequest,
    build_versioned_classpath,
    doubled,
    dumped_keys,
    restore_error,
    run_uid_restores,
    uid_case,
    uid_expected_value,
)

pytestmark = pytest.mark.flink

SOURCES = {
    "heap": (FLINK_FIXTURES / "heap-files-p3-maxp128-string", 128, "string", "hashmap"),
    "rocksdb": (FLINK_FIXTURES / "rocksdb-canonical-p3-maxp10-long", 10, "long", "rocksdb"),
}
EDITS = ("original", "upsert", "delete", "replace", "compact", "transform")
OP = "keyed-state"


def _edits(source: Path, work: Path) -> dict[str, Any]:
    """Write each edit of ``source`` under ``work``; return the savepoints and what each changed."""
    sums = state_table(source, OP, "sum")
    keys = sorted(sums.column("key").to_pylist())
    new_key = "kg-new" if isinstance(keys[0], str) else 987_654_321_987
    key_type = sums.schema.field("key").type
    upserted = {keys[0]: -1, keys[1]: -2, keys[2]: -3, new_key: 1}
    write_state(
        source,
        work / "upsert",
        OP,
        "sum",
        "upsert",
        pa.table(
            {
                "key": pa.array(list(upserted), key_type),
                "value": pa.array(list(upserted.values()), pa.int64()),
            }
        ),
    )
    deleted = keys[3:5]
    write_state(source, work / "delete", OP, "ids", "delete", pa.table({"key": pa.array(deleted, key_type)}))
    buckets = state_table(source, OP, "buckets")
    kept_buckets = buckets.filter(pc.is_in(buckets.column("key"), value_set=pa.array(keys[5:7], key_type)))
    write_state(source, work / "replace", OP, "buckets", "replace", kept_buckets)
    timers = sorted(state_table(source, OP, "_timer_state/event_user-timers").column("timestamp").to_pylist())
    cut = timers[len(timers) // 2]
    dropped = keys[7:9]
    literal = ", ".join(f"'{k}'" if isinstance(k, str) else str(k) for k in dropped)
    compact_state(source, work / "compact", operators=[OP], where=f"key IN ({literal})", timers_before=cut)
    transform(source, work / "transform", OP, "sum", doubled)
    return {
        "original": source,
        **{name: work / name for name in EDITS[1:]},
        "upserted": upserted,
        "deleted": deleted,
        "buckets": sorted(keys[5:7]),
        "dropped": dropped,
        "cut": cut,
    }


@pytest.fixture(scope="module")
def restored(restore_savepoints, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Write every edit of both sources, restore them all in one JVM; return dumps and what was edited."""
    cases: dict[str, Any] = {}
    requests = []
    for name, (source, max_p, key_type, backend) in SOURCES.items():
        edits = _edits(source, tmp_path_factory.mktemp(f"edits-{name}"))
        cases[name] = edits
        requests += [RestoreRequest(edits[e], 3, max_p, key_type, backend) for e in EDITS]
    dumps = restore_savepoints(requests)
    for i, name in enumerate(SOURCES):
        cases[name]["dumps"] = dict(zip(EDITS, dumps[i * len(EDITS) : (i + 1) * len(EDITS)], strict=True))
    return cases


def _by_key(dump: Dump) -> dict[str, dict[str, Any]]:
    error = restore_error(dump)
    assert error is None, f"Flink refused the restore:\n{error}"
    return {str(e["key"]): e for e in dumped_keys(dump, OP)}


def _same_except(original: Mapping[str, Any], edited: Mapping[str, Any], changed: set[str]) -> None:
    """Every key outside ``changed`` restored identically: values, timers, key group, subtask."""
    assert {k: v for k, v in edited.items() if k not in changed} == {
        k: v for k, v in original.items() if k not in changed
    }


@pytest.mark.parametrize("name", list(SOURCES))
def test_upsert_restores_the_new_values(restored: dict[str, Any], name: str) -> None:
    case = restored[name]
    original, edited = _by_key(case["dumps"]["original"]), _by_key(case["dumps"]["upsert"])
    upserted = {str(k): v for k, v in case["upserted"].items()}
    _same_except(original, edited, set(upserted))
    for key, value in upserted.items():
        assert edited[key]["values"]["sum"] == value
        if key in original:
            want = copy.deepcopy(original[key])
            want["values"]["sum"] = value
            assert edited[key] == want
        else:
            assert edited[key]["values"] == {"sum": value} and edited[key]["eventTimers"] == []


@pytest.mark.parametrize("name", list(SOURCES))
def test_delete_restores_without_the_deleted_entries(restored: dict[str, Any], name: str) -> None:
    case = restored[name]
    original, edited = _by_key(case["dumps"]["original"]), _by_key(case["dumps"]["delete"])
    deleted = {str(k) for k in case["deleted"]}
    _same_except(original, edited, deleted)
    for key in deleted:
        want = copy.deepcopy(original[key])
        del want["values"]["ids"]
        assert edited[key] == want


@pytest.mark.parametrize("name", list(SOURCES))
def test_replace_restores_exactly_the_data(restored: dict[str, Any], name: str) -> None:
    case = restored[name]
    original, edited = _by_key(case["dumps"]["original"]), _by_key(case["dumps"]["replace"])
    assert set(edited) == set(original)
    kept = {str(k) for k in case["buckets"]}
    for key, entry in edited.items():
        want = copy.deepcopy(original[key])
        if key not in kept:
            want["values"].pop("buckets", None)
        assert entry == want, key


@pytest.mark.parametrize("name", list(SOURCES))
def test_compaction_restores_without_the_dropped_keys_and_early_timers(
    restored: dict[str, Any], name: str
) -> None:
    case = restored[name]
    original, edited = _by_key(case["dumps"]["original"]), _by_key(case["dumps"]["compact"])
    dropped = {str(k) for k in case["dropped"]}
    assert set(edited) == {k for k in original if k not in dropped} - {
        k for k, e in original.items() if not e["values"] and all(t < case["cut"] for t in e["eventTimers"])
    }
    for key, entry in edited.items():
        want = copy.deepcopy(original[key])
        want["eventTimers"] = [t for t in want["eventTimers"] if t >= case["cut"]]
        assert entry == want, key


@pytest.mark.parametrize("name", list(SOURCES))
def test_transform_restores_the_mapped_state(restored: dict[str, Any], name: str) -> None:
    case = restored[name]
    original, edited = _by_key(case["dumps"]["original"]), _by_key(case["dumps"]["transform"])
    assert set(edited) == set(original)
    for key, entry in edited.items():
        want = copy.deepcopy(original[key])
        if "sum" in want["values"]:
            want["values"]["sum"] *= 2
        assert entry == want, key


# -- UidJob: a job that sets no maxParallelism -------------------------------------------------------------

UID_SOURCES = {"heap": ("uid-heap-canonical-p3", None), "rocksdb": ("uid-rocksdb-canonical-p3", "rocksdb")}


@pytest.fixture(scope="module")
def uid_restored(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Dump, dict[str, int], list[str]]]:
    """Upsert and delete in both UidJob savepoints, restore them into jobs without maxParallelism."""
    work = tmp_path_factory.mktemp("uid-edits")
    requests, edits = [], {}
    for name, (case, backend) in UID_SOURCES.items():
        source = uid_case("2.3.0", case)
        longs = sorted(state_table(source, "keyed-long", "sum").column("key").to_pylist())
        strings = sorted(state_table(source, "keyed-string", "count").column("key").to_pylist())
        upserted = {longs[0]: 11, longs[1]: 22, longs[2]: 33}
        step = work / f"{name}-upsert"
        write_state(
            source,
            step,
            "keyed-long",
            "sum",
            "upsert",
            pa.table(
                {
                    "key": pa.array(list(upserted), pa.int64()),
                    "value": pa.array(list(upserted.values()), pa.int64()),
                }
            ),
        )
        out = work / f"{name}-both"
        write_state(step, out, "keyed-string", "count", "delete", pa.table({"key": strings[:2]}))
        requests.append(UidRestoreRequest(out, dict(UID_OWN_P), {}, backend=backend))
        edits[name] = ({str(k): v for k, v in upserted.items()}, strings[:2])
    # The write with a maxParallelism rescale in the same pass (keyed-long 128 -> 256), on HashMap.
    source = uid_case("2.3.0", "uid-heap-canonical-p3")
    first = sorted(state_table(source, "keyed-long", "sum").column("key").to_pylist())[5]
    upserted = {first: 55}
    data = pa.table({"key": pa.array([first], pa.int64()), "value": pa.array([55], pa.int64())})
    write_state(source, work / "rescaled", "keyed-long", "sum", "upsert", data, new_max_parallelism=256)
    requests.append(UidRestoreRequest(work / "rescaled", dict(UID_OWN_P), {}))
    edits["rescaled"] = ({str(first): 55}, [])
    dumps = run_uid_restores("2.3.0", requests, work / "restores", build_versioned_classpath("2.3.0"))
    return {name: (dump, *edits[name]) for name, dump in zip([*UID_SOURCES, "rescaled"], dumps, strict=True)}


@pytest.mark.parametrize("name", [*UID_SOURCES, "rescaled"])
def test_a_job_without_max_parallelism_reads_the_written_state(
    uid_restored: dict[str, Any], name: str
) -> None:
    dump, upserted, deleted = uid_restored[name]
    error = restore_error(dump)
    assert error is None, f"Flink refused the restore:\n{error}"
    for op in ("keyed-long", "keyed-string"):
        keys = dump["keyed"][op]
        assert len(keys) == UID_NUM_KEYS
        for key, entry in keys.items():
            if name == "rescaled" and op == "keyed-long":
                # Flink adopts the state's new maxParallelism: every key read where kg placed it.
                assert entry["keyGroup"] == key_group_for_hash(hash_code(int(key), "long"), 256), key
            if op == "keyed-long" and key in upserted:
                assert entry["restored"] == upserted[key], key
            elif op == "keyed-string" and key in deleted:
                assert entry["restored"] is None, key
            else:
                assert entry["restored"] == uid_expected_value(op, key), (op, key)
