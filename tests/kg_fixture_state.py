"""Decode the logical state of the KgTestJob fixtures (fixtures/flink/2.3) for expected-state.json checks.

Values are decoded here with the job's own types (Long values, List<Long>, Map<String, Long>, Long operator
elements, StreamRecord<Long> in flight) — kg itself keeps them opaque.
"""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from keygroup_cli.flink.types.serializers import read_string

ROOT = Path(__file__).resolve().parent.parent
FLINK_FIXTURES = ROOT / "fixtures" / "flink" / "2.3"

#: The canonical savepoint cases kg converts.
CANONICAL_CASES = (
    "heap-inline-p3-maxp10-string",
    "heap-files-p3-maxp128-long",
    "heap-files-p2-maxp256-string",
    "heap-snappy-files-p3-maxp128-long",
    "rocksdb-canonical-snappy-p2-maxp256-string",
)
#: RocksDB NATIVE savepoints: kg reads their database files (list state through aimrocks' merge operator).
ROCKSDB_NATIVE_CASES = (
    "rocksdb-native-p2-maxp128-string",
    "rocksdb-native-files-p2-maxp128-long",
)
#: Cases in the HashMap backend's own layout, which kg rewrites as canonical key groups first.
HEAP_LAYOUT_CASES = ("heap-checkpoint-p2-maxp128-string",)


def expected(case: str) -> dict[str, Any]:
    """Return a case's expected-state.json."""
    with open(FLINK_FIXTURES / case / "expected-state.json", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _long(raw: bytes) -> int:
    return int(struct.unpack(">q", raw)[0])


def _long_list(raw: bytes) -> list[int]:
    # ListDelimitedSerializer: elements separated by one ',' byte.
    return [_long(raw[i : i + 8]) for i in range(0, len(raw), 9)]


def _string(raw: bytes) -> str | None:
    return read_string(raw, 0)[0]


def logical_keyed_state(rows: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """Return key → the job's logical state (sum/ids/buckets/timers/n) plus the rows' key groups."""
    out: dict[Any, dict[str, Any]] = defaultdict(lambda: {"keyGroups": set()})
    for row in rows:
        entry = out[row["key"]]
        entry["keyGroups"].add(row["key_group"])
        assert row["namespace"] == b"\x00", row
        state = row["state"]
        if state in ("sum", "n"):
            entry[state] = _long(row["value"])
        elif state == "ids":
            entry["ids"] = _long_list(row["value"])
        elif state == "buckets":
            value = row["value"]
            entry.setdefault("buckets", {})[_string(row["user_key"])] = (
                None if value is None else _long(value)
            )
        elif state.startswith("_timer_state/"):
            name = "eventTimers" if "/event_" in state else "processingTimers"
            assert row["value"] is None and row["user_key"] is None
            entry.setdefault(name, []).append(row["timestamp"])
        else:
            raise AssertionError(f"unexpected state {state}")
    for entry in out.values():
        for name in ("eventTimers", "processingTimers"):
            entry[name] = sorted(entry.get(name, []))
    return dict(out)


def expected_keyed_state(case: str) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any]]]:
    """Return (keyed-state operator, count-no-uid operator) expected logical state, shaped like the above."""
    data = expected(case)
    main: dict[Any, dict[str, Any]] = {}
    for k in data["keyedOperators"][0]["keys"]:
        main[k["key"]] = {
            "keyGroups": {k["keyGroup"]},
            "sum": k["sum"],
            "ids": k["ids"],
            "buckets": k["buckets"],
            "eventTimers": k["eventTimers"],
            "processingTimers": k["processingTimers"],
        }
    counts = {
        k["key"]: {"keyGroups": {k["keyGroup"]}, "n": k["n"], "eventTimers": [], "processingTimers": []}
        for k in data["keyedOperators"][1]["keys"]
    }
    return main, counts


def logical_operator_state(table: pa.Table) -> dict[str, Any]:
    """Return one op-state subtask's split-ids, union-counts and bcast from its kg operator rows."""
    out: dict[str, Any] = {"split-ids": [], "union-counts": [], "bcast": {}}
    for row in sorted(table.to_pylist(), key=lambda r: (r["state"], r["position"])):
        if row["state"] == "bcast":
            out["bcast"][_string(row["entry_key"])] = _long(row["value"])
        else:
            out[row["state"]].append(_long(row["value"]))
    return out


def logical_async_elements(table: pa.Table) -> set[tuple[int, int]]:
    """Return the in-flight (value, timestamp) set of one async-wait subtask (StreamElementSerializer)."""
    out = set()
    for raw in table.column("value").to_pylist():
        assert raw[0] == 0 and len(raw) == 17, raw  # TAG_REC_WITH_TIMESTAMP, long timestamp, Long value
        out.add((_long(raw[9:17]), _long(raw[1:9])))
    return out
