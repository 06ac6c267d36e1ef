"""The restore-and-dump harness itself, checked on savepoints Flink wrote (marker ``flink``).

Before kg-written savepoints are fed to RestoreDump, these tests establish that the harness sees
exactly the state a savepoint holds: every committed fixture case restores in real Flink 2.3.0 at
its own parallelism and dumps its expected-state.json exactly; rescaled restores (done by Flink
itself) keep the same multiset of state with each key on the subtask whose key-group range holds
it; and a changed maxParallelism is refused with Flink's own message. All restores of this module
run in one JVM.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.keygroups import subtask_ranges
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
    subtask_of_key_group,
)

pytestmark = pytest.mark.flink

#: Restored elsewhere: the ForSt checkpoint names its shared/ files by the generator's absolute paths
#: (tests/restore/test_native.py relocates it), and the changelog checkpoint is there to be refused.
NOT_HERE = ("forst-checkpoint-p3-maxp128-long", "changelog-checkpoint-p2-maxp128-string")
ALL_CASES = sorted(
    p.name for p in CASES.iterdir() if (p / "expected-state.json").is_file() and p.name not in NOT_HERE
)


def _json(case: str, name: str) -> Any:
    return json.loads((CASES / case / name).read_text(encoding="utf-8"))


def _request(case: str, parallelism: int | None = None, max_parallelism: int | None = None) -> RestoreRequest:
    job = _json(case, "flink-report.json")["job"]
    (metadata,) = (CASES / case).rglob("_metadata")  # the retained checkpoint sits in <job>/chk-2/
    return RestoreRequest(
        savepoint=metadata.parent,
        parallelism=parallelism if parallelism is not None else job["parallelism"],
        max_parallelism=max_parallelism if max_parallelism is not None else job["maxParallelism"],
        key_type="long" if job["keyType"] == "java.lang.Long" else "string",
        backend=job["stateBackend"],
    )


RESCALES = [
    ("heap-inline-p3-maxp10-string", 4),
    ("heap-inline-p3-maxp10-string", 1),
    ("heap-files-p3-maxp128-long", 2),
    ("rocksdb-canonical-snappy-p2-maxp256-string", 3),
    ("rocksdb-native-p2-maxp128-string", 3),
    ("rocksdb-native-files-p2-maxp128-long", 1),
]
MAXP_CHANGES = [
    ("heap-inline-p3-maxp10-string", 12),
    ("rocksdb-canonical-snappy-p2-maxp256-string", 128),
]

REQUESTS: dict[str, RestoreRequest] = {
    **{f"own:{c}": _request(c) for c in ALL_CASES},
    **{f"rescale:{c}:{p}": _request(c, parallelism=p) for c, p in RESCALES},
    **{f"maxp:{c}:{m}": _request(c, max_parallelism=m) for c, m in MAXP_CHANGES},
}


# Negative control: a copy of this case whose _metadata says "no data" (offset 0) for one key group
# of keyed-state that holds keys. Flink restores it silently; the harness must see the loss.
TAMPERED_CASE = "heap-files-p3-maxp128-long"


def _keyed_handle(case: str, subtask: int) -> dict[str, Any]:
    ops = _json(case, "flink-report.json")["metadata"]["operators"]
    (op,) = (o for o in ops if o["operatorName"] == "keyed-state")
    handle: dict[str, Any] = op["subtasks"][subtask]["managedKeyedState"][0]
    return handle


def _drop_first_key_group(dst: Path) -> int:
    """Copy TAMPERED_CASE to ``dst`` with subtask 0's first non-empty key group marked empty."""
    shutil.copytree(CASES / TAMPERED_CASE, dst)
    handle = _keyed_handle(TAMPERED_CASE, 0)
    offsets = handle["offsets"]
    j = next(i for i, off in enumerate(offsets) if off != 0)
    # KeyGroupRangeOffsets are big-endian longs in _metadata; the whole array is unique there
    before = struct.pack(f">{len(offsets)}q", *offsets)
    after = struct.pack(f">{len(offsets)}q", *(0 if i == j else off for i, off in enumerate(offsets)))
    data = (dst / "_metadata").read_bytes()
    assert data.count(before) == 1
    (dst / "_metadata").write_bytes(data.replace(before, after))
    return int(handle["keyGroupRange"][0]) + j


@pytest.fixture(scope="module")
def dumps(restore_savepoints: RestoreRunner, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dump]:
    """Every restore of this module, run in one JVM up front."""
    tampered = tmp_path_factory.mktemp("tampered") / TAMPERED_CASE
    dropped = _drop_first_key_group(tampered)
    requests = {**REQUESTS, "tampered": dataclasses.replace(_request(TAMPERED_CASE), savepoint=tampered)}
    labels = list(requests)
    out = dict(zip(labels, restore_savepoints([requests[label] for label in labels]), strict=True))
    out["tampered"]["droppedKeyGroup"] = dropped
    return out


def _restored(dumps: dict[str, Dump], label: str) -> Dump:
    dump = dumps[label]
    assert restore_error(dump) is None, f"{label}: Flink refused the restore:\n{restore_error(dump)}"
    return dump


def _by_key(entries: list[dict[str, Any]]) -> list[str]:
    return sorted(canonical(e) for e in entries)


def test_fixture_cases_are_present() -> None:
    assert len(ALL_CASES) == 25  # 27 cases in fixtures/flink/2.3, NOT_HERE left out


@pytest.mark.parametrize("case", ALL_CASES)
def test_restore_at_own_parallelism_dumps_expected_state_exactly(dumps: dict[str, Dump], case: str) -> None:
    dump = _restored(dumps, f"own:{case}")
    expected = _json(case, "expected-state.json")
    job = _json(case, "flink-report.json")["job"]
    backend = {
        "hashmap": "HeapKeyedStateBackend",
        "rocksdb": "RocksDBKeyedStateBackend",
        "forst": "ForStSyncKeyedStateBackend",
    }[job["stateBackend"]]

    for op in KEYED_OPERATORS:
        subtasks = dump["keyedOperators"][op]["subtasks"]
        assert [s["index"] for s in subtasks] == list(range(job["parallelism"]))
        assert [s["keyGroupRange"] for s in subtasks] == expected["keyGroupRanges"]
        assert {s["backend"] for s in subtasks} == {backend}
        # key, Flink's key group, restoring subtask, every value/list/map entry and timer
        assert _by_key(dumped_keys(dump, op)) == _by_key(expected_keys(expected, op))
    assert len(dumped_keys(dump, "keyed-state")) == 200
    assert len(dumped_keys(dump, "count-no-uid")) == 196

    (exp_op,) = expected["operatorState"]
    got_op = dump["operatorState"][OP_STATE]["subtasks"]
    all_union = Counter(canonical(s["union-counts"]) for s in exp_op["subtasks"])
    assert [s["index"] for s in got_op] == [s["index"] for s in exp_op["subtasks"]]
    for got, exp in zip(got_op, exp_op["subtasks"], strict=True):
        assert got["restored"] is True
        assert got["split-ids"] == exp["split-ids"]
        # union state: every subtask gets every old subtask's list (pairs [index, count])
        pairs = got["union-counts"]
        assert Counter(canonical(pairs[i : i + 2]) for i in range(0, len(pairs), 2)) == all_union
        assert got["bcast"] == exp_op["bcast"]
        assert got["registeredStates"] == ["split-ids", "union-counts"]
        assert got["registeredBroadcastStates"] == ["bcast"]

    got_async = dump["asyncInFlight"]["async-wait"]["subtasks"]
    exp_async = expected["asyncInFlight"]["subtasks"]
    assert [s["index"] for s in got_async] == [s["index"] for s in exp_async]
    for got, exp in zip(got_async, exp_async, strict=True):
        assert sorted(map(canonical, got["elements"])) == sorted(map(canonical, exp["elements"]))


@pytest.mark.parametrize("case", ALL_CASES)
def test_restore_job_has_the_savepoint_operator_ids(dumps: dict[str, Dump], case: str) -> None:
    # the operator without uid (count-no-uid) only maps if its generated id is the original's
    dump = _restored(dumps, f"own:{case}")
    report = _json(case, "flink-report.json")["metadata"]["operators"]
    assert {o["operatorName"]: o["operatorId"] for o in report} == dump["operatorIds"]


@pytest.mark.parametrize(("case", "parallelism"), RESCALES)
def test_flink_rescaled_restore_keeps_every_element_once(
    dumps: dict[str, Dump], case: str, parallelism: int
) -> None:
    dump = _restored(dumps, f"rescale:{case}:{parallelism}")
    expected = _json(case, "expected-state.json")
    max_p = expected["input"]["maxParallelism"]
    want_ranges = [[r.start, r.end] for r in subtask_ranges(max_p, parallelism)]

    for op in KEYED_OPERATORS:
        subtasks = dump["keyedOperators"][op]["subtasks"]
        assert [s["index"] for s in subtasks] == list(range(parallelism))
        assert [s["keyGroupRange"] for s in subtasks] == want_ranges
        got, exp = dumped_keys(dump, op), expected_keys(expected, op)
        assert key_multiset(got) == key_multiset(exp)
        exp_group = {canonical(e["key"]): e["keyGroup"] for e in exp}
        for entry in got:
            assert entry["keyGroup"] == exp_group[canonical(entry["key"])]
            assert entry["subtask"] == subtask_of_key_group(dump, op, entry["keyGroup"])

    (exp_op,) = expected["operatorState"]
    got_op = dump["operatorState"][OP_STATE]["subtasks"]
    assert [s["index"] for s in got_op] == list(range(parallelism))
    assert Counter(i for s in got_op for i in s["split-ids"]) == Counter(
        i for s in exp_op["subtasks"] for i in s["split-ids"]
    )
    all_union = Counter(canonical(s["union-counts"]) for s in exp_op["subtasks"])
    for got in got_op:
        pairs = got["union-counts"]
        assert Counter(canonical(pairs[i : i + 2]) for i in range(0, len(pairs), 2)) == all_union
        assert got["bcast"] == exp_op["bcast"]

    exp_async = Counter(canonical(e) for s in expected["asyncInFlight"]["subtasks"] for e in s["elements"])
    assert async_elements(dump) == exp_async
    assert len(dump["asyncInFlight"]["async-wait"]["subtasks"]) == parallelism


@pytest.mark.parametrize(("case", "max_parallelism"), MAXP_CHANGES)
def test_changed_max_parallelism_is_refused_by_flink(
    dumps: dict[str, Dump], case: str, max_parallelism: int
) -> None:
    error = restore_error(dumps[f"maxp:{case}:{max_parallelism}"])
    old = _json(case, "flink-report.json")["job"]["maxParallelism"]
    assert error is not None
    assert "Max parallelism mismatch between checkpoint/savepoint state and new program" in error
    assert f"with max parallelism {old} to new program with max parallelism {max_parallelism}." in error


def test_dumps_are_canonical_json(dumps: dict[str, Dump]) -> None:
    dump = _restored(dumps, "own:heap-inline-p3-maxp10-string")
    assert dump["dumpFormat"] == 1
    assert dump["flinkVersion"] == "2.3.0"
    assert set(dump) == {
        "asyncInFlight", "dumpFormat", "error", "flinkVersion", "keyedOperators",
        "operatorIds", "operatorState", "request",
    }  # fmt: skip
    keys = [e["key"] for e in dumped_keys(dump, "keyed-state")]
    assert keys == sorted(keys)


def test_harness_sees_a_key_group_that_a_savepoint_lost(dumps: dict[str, Dump]) -> None:
    dump = _restored(dumps, "tampered")  # Flink itself does not notice
    dropped = dump["droppedKeyGroup"]
    expected = _json(TAMPERED_CASE, "expected-state.json")
    exp = expected_keys(expected, "keyed-state")
    lost = key_multiset(exp) - key_multiset(dumped_keys(dump, "keyed-state"))
    assert lost == key_multiset(e for e in exp if e["keyGroup"] == dropped)
    assert len(lost) > 0
    assert key_multiset(dumped_keys(dump, "keyed-state")) - key_multiset(exp) == Counter()
    # other operators' state in the same savepoint is intact
    exp_count = expected_keys(expected, "count-no-uid")
    assert key_multiset(dumped_keys(dump, "count-no-uid")) == key_multiset(exp_count)


def test_savepoints_are_left_untouched(dumps: dict[str, Dump]) -> None:
    # NO_CLAIM restores must not add, remove or rewrite any fixture file
    for case in ALL_CASES:
        files = _json(case, "flink-report.json")["files"]
        on_disk = {
            str(p.relative_to(CASES / case)): p.stat().st_size
            for p in (CASES / case).rglob("*")
            if p.is_file() and p.name not in ("flink-report.json", "expected-state.json")
        }
        # (the report also lists the checkpoint's empty shared/ and taskowned/ dirs, not in git)
        assert on_disk == {k: v for k, v in files.items() if not k.endswith("/")}
