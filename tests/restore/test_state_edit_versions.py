"""Every Flink version kg claims restores ``kg write``, ``kg compact`` and ``transform`` outputs: the edit.

One JVM per version (``UidJob restore``, module fixture ``run`` parametrised by version) restores:

- **UidJob edits, 1.15.4 ... 2.3.0:** the version's ``uid-heap-canonical-p3`` (HashMap, a job that sets
  maxParallelism) and ``uid-rocksdb-canonical-p3`` (RocksDB, a job that sets none), each as written and
  after, through the CLI, an upsert (``kg export`` of ``keyed-long``'s ``sum``, three values edited,
  ``kg write --mode upsert``), a delete (``kg write --mode delete`` of two ``keyed-string`` counts, one of
  them a non-ASCII key), a compaction (``kg compact --drop-where`` of a ``keyed-long`` key range, then of
  the ``keyed-string`` keys ``LIKE 'k-11%'``) and a replace (``kg write --mode replace``: ``keyed-string``'s
  ``count`` becomes three keys' new counts, one key non-ASCII), and through the Python API a transform
  (``kg.transform`` of ``keyed-long``'s ``sum``: every value doubled, one key's row dropped). Each key's
  first record reads its restored state through Flink's key-group lookup: every edited key holds the
  written or mapped value, every deleted, dropped or not replaced key reads nothing, every other key is
  the version's own restore of the original (value, key group, subtask).
- **TTL at a time T, 1.20.3 and 2.3.0:** the ``typed-*-canonical-p2`` savepoints (HashMap and RocksDB) hold
  ``ttl-value``, ``ttl-list`` and ``ttl-map`` entries with distinct last-access times. Flink's own TTL filter
  at an instant T is made deterministic by ``kg.versioned.TtlClockBackend``: the job's state backend with a
  ``TtlTimeProvider`` fixed at T. For T = a recorded last access + TTL (entries accessed exactly then are
  expired: Flink's ``last access + TTL <= now``), once with the job's TTL (3650 days, ``--now`` in ms) and
  once with a 1 h TTL (``--now`` as ISO 8601), ``kg compact --expired-ttl TTL --now T`` must physically hold
  exactly what Flink shows at T: its output, restored with the clock at 0 (nothing expires, so every stored
  entry is read), equals the original restored with the clock at T (``NeverReturnExpired``).
- **A patched SQL aggregate, 1.20.3 and 2.3.0:** in SqlJob's savepoints (``sql-heap-canonical-p2``; on 2.3
  also ``sql-rocksdb-canonical-p2``, restored on RocksDB) one key's ``accState`` per query (six queries, keys
  INT, BIGINT, STRING, composite, DISTINCT, DECIMAL/TIMESTAMP/ROW) is exported, changed and written back with
  ``kg write --mode upsert``. Restored with every input row read again, that key's first change retracts the
  patched result (``-U``), its next result is the patched accumulator plus the key's first row, its last the
  patched accumulator plus every row; every other key emits exactly what the original's restore emits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import keygroup_cli as kg
from keygroup_cli.cli import cli
from keygroup_cli.flink import state_table
from tests.restore.harness import (
    UID_JOB_VERSIONS,
    UID_NUM_KEYS,
    UID_OWN_M,
    UID_OWN_P,
    Dump,
    SqlRestoreRequest,
    UidRestoreRequest,
    build_versioned_classpath,
    doubled,
    restore_error,
    run_uid_restores,
    sql_case_queries,
    uid_case,
    uid_expected_value,
)

pytestmark = pytest.mark.flink

#: UidJob savepoints edited per version: the restoring job's maxParallelism per keyed uid and its backend.
UID_SOURCES: dict[str, tuple[str, Mapping[str, int], str | None]] = {
    "heap": ("uid-heap-canonical-p3", UID_OWN_M, None),
    "rocksdb": ("uid-rocksdb-canonical-p3", {}, "rocksdb"),
}
UID_EDITS = ("original", "upsert", "delete", "compact", "replace", "transform")
#: The versions with TypedJob and SqlJob savepoints (fixtures/flink/<v>/typed-*, sql-*).
TTL_VERSIONS = ("1.20.3", "2.3.0")
TYPED_SOURCES = {
    "heap": ("typed-heap-canonical-p2", "hashmap"),
    "rocksdb": ("typed-rocksdb-canonical-p2", "rocksdb"),
}
TYPED_UID = "typed-state"
TTL_STATES = ("ttl-value", "ttl-list", "ttl-map")
JOB_TTL_MS = 3650 * 86_400_000  # TypedJob's StateTtlConfig
SHORT_TTL_MS = 3_600_000
SQL_SOURCES: dict[str, dict[str, tuple[str, str]]] = {
    "1.20.3": {"heap": ("sql-heap-canonical-p2", "hashmap")},
    "2.3.0": {
        "heap": ("sql-heap-canonical-p2", "hashmap"),
        "rocksdb": ("sql-rocksdb-canonical-p2", "rocksdb"),
    },
}
SQL_P = 2


@dataclass(frozen=True)
class TypedRestoreRequest:
    """A TypedJob savepoint restored by ``TypedJob.restore`` in ``UidJob restore``'s batch (``"typed"``).

    ``ttl_now``: the TTL clock (epoch ms, ``TtlClockBackend``); ``ttl_ms``: the restoring job's TTL.
    """

    savepoint: Path
    backend: str
    ttl_now: int
    ttl_ms: int = JOB_TTL_MS
    timeout_seconds: int = 120

    def to_json(self, out: Path) -> dict[str, Any]:
        return {
            "typed": True,
            "savepoint": str(Path(self.savepoint).resolve()),
            "backend": self.backend,
            "ttl_now": self.ttl_now,
            "ttl_ms": self.ttl_ms,
            "timeout_seconds": self.timeout_seconds,
            "out": str(out),
        }


@dataclass(frozen=True)
class SqlBackendRestoreRequest(SqlRestoreRequest):
    """A SqlJob restore on a given state backend (``SqlJob.restore``'s ``backend``)."""

    backend: str = "hashmap"

    def to_json(self, out: Path) -> dict[str, Any]:
        return {**super().to_json(out), "backend": self.backend}


@dataclass
class Run:
    """One version's restores: what kg wrote and what Flink made of it."""

    version: str
    uid: dict[str, dict[str, Any]] = field(default_factory=dict)
    ttl: dict[str, dict[str, Any]] = field(default_factory=dict)
    sql: dict[str, dict[str, Any]] = field(default_factory=dict)


def _kg(*args: str) -> None:
    """Run one kg command in-process; it must succeed."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, f"kg {' '.join(args)} exited {result.exit_code}:\n{result.output}"


def _export(savepoint: Path, operator: str, state: str, out: Path) -> pa.Table:
    _kg("export", str(savepoint), "-o", operator, "-s", state, "--out", str(out))
    return pq.read_table(out)


def _literal(key: str | int) -> str:
    return "'" + key.replace("'", "''") + "'" if isinstance(key, str) else str(key)


# -- UidJob: upsert, delete, compaction, replace, transform -------------------------------------------------


def _with_values(export: pa.Table, values: Mapping[Any, int]) -> pa.Table:
    """The rows of ``export`` (a ``kg export`` table) whose key is in ``values``, each with its new value."""
    keys = pa.array(list(values), export.schema.field("key").type)
    rows = export.filter(pc.is_in(export.column("key"), value_set=keys))
    new = pa.array([values[k] for k in rows.column("key").to_pylist()], pa.int64())
    return rows.set_column(rows.schema.get_field_index("value"), "value", new)


def _uid_edits(source: Path, work: Path) -> dict[str, Any]:
    """Write every edit of ``source`` (``kg write``, ``kg compact``, ``kg.transform``); return them."""
    work.mkdir(parents=True)
    sums = _export(source, "keyed-long", "sum", work / "sum.parquet")
    longs = sorted(sums.column("key").to_pylist())
    upserted = {longs[0]: -1001, longs[UID_NUM_KEYS // 2]: -1002, longs[-1]: -1003}
    pq.write_table(_with_values(sums, upserted), work / "fix.parquet")
    _kg("write", str(source), "-o", "keyed-long", "-s", "sum", "--mode", "upsert",
        "--data", str(work / "fix.parquet"), "--out", str(work / "upsert"))  # fmt: skip
    counts = _export(source, "keyed-string", "count", work / "count.parquet")
    strings = sorted(counts.column("key").to_pylist())
    deleted = [strings[0], next(s for s in strings if not s.isascii())]
    pq.write_table(pa.table({"key": pa.array(deleted, pa.string())}), work / "poisoned.parquet")
    _kg("write", str(source), "-o", "keyed-string", "-s", "count", "--mode", "delete",
        "--data", str(work / "poisoned.parquet"), "--out", str(work / "delete"))  # fmt: skip
    low, high = longs[10], longs[13]
    _kg("compact", str(source), "-o", "keyed-long", "--drop-where", f"key BETWEEN {low} AND {high}",
        "--out", str(work / "compact-long"))  # fmt: skip
    _kg("compact", str(work / "compact-long"), "-o", "keyed-string", "--drop-where", "key LIKE 'k-11%'",
        "--out", str(work / "compact"))  # fmt: skip
    dropped = {
        "keyed-long": {str(k) for k in longs if low <= k <= high},
        "keyed-string": {s for s in strings if s.startswith("k-11")},
    }
    # Replace: keyed-string's count becomes exactly these keys (counts unlike the job's 5).
    non_ascii = [s for s in strings if not s.isascii()][-1]
    replaced = {strings[-1]: 101, strings[UID_NUM_KEYS // 2]: 102, non_ascii: 103}
    pq.write_table(_with_values(counts, replaced), work / "replace.parquet")
    _kg("write", str(source), "-o", "keyed-string", "-s", "count", "--mode", "replace",
        "--data", str(work / "replace.parquet"), "--out", str(work / "replace"))  # fmt: skip
    # Transform, through the public Python API: every sum doubled, one key's row dropped.
    gone = longs[20]

    def double_all_but_one(batch: pa.RecordBatch) -> pa.RecordBatch:
        return doubled(batch).filter(pc.not_equal(batch.column("key"), gone))

    kg.transform(source, work / "transform", "keyed-long", "sum", double_all_but_one)
    return {
        "savepoints": {"original": source, **{e: work / e for e in UID_EDITS[1:]}},
        "upserted": {str(k): v for k, v in upserted.items()},
        "deleted": set(deleted),
        "dropped": dropped,
        "replaced": replaced,
        "transform_dropped": str(gone),
    }


# -- TypedJob: TTL compaction at an instant -----------------------------------------------------------------


def _ttl_entries(savepoint: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every TTL entry kg reads, per state: (key, user key or list position, value, last access)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for state in TTL_STATES:
        rows = []
        for row in state_table(savepoint, TYPED_UID, state).to_pylist():
            if isinstance(row["value"], list):
                rows += [
                    (row["key"], i, e["value"], e["ttl_last_access"]) for i, e in enumerate(row["value"])
                ]
            else:
                sub = row.get("user_key")
                rows.append((row["key"], sub, row["value"]["value"], row["value"]["ttl_last_access"]))
        out[state] = sorted(rows, key=repr)
    return out


def _ttl_cases(source: Path, backend: str, work: Path) -> tuple[dict[str, Any], list[TypedRestoreRequest]]:
    """kg's compactions at two instants, and the restores comparing them with Flink's TTL filter there."""
    entries = _ttl_entries(source)
    # Cut-offs that split every state: at or after each state's first last access, before each one's last.
    first = max(min(e[3] for e in rows) for rows in entries.values())
    last = min(max(e[3] for e in rows) for rows in entries.values())
    cuts = sorted({e[3] for rows in entries.values() for e in rows if first <= e[3] < last})
    assert cuts, f"{source}: no last-access time splits every TTL state"
    cases = {
        # The job's own TTL, cut-off at the latest such last access; --now as epoch ms.
        "job-ttl": (JOB_TTL_MS, cuts[-1], "3650d"),
        # A 1 h TTL (the restoring job's too), cut-off at the earliest; --now as ISO 8601.
        "short-ttl": (SHORT_TTL_MS, cuts[0], "1h"),
    }
    requests = [TypedRestoreRequest(source, backend, 0)]
    info: dict[str, Any] = {"entries": entries, "cases": {}}
    for name, (ttl, cut, ttl_arg) in cases.items():
        now = cut + ttl
        now_arg = (
            str(now)
            if name == "job-ttl"
            else datetime.fromtimestamp(now / 1000, UTC).isoformat(timespec="milliseconds")
        )
        out = work / name
        _kg(
            "compact",
            str(source),
            "-o",
            TYPED_UID,
            "--expired-ttl",
            ttl_arg,
            "--now",
            now_arg,
            "--out",
            str(out),
        )
        info["cases"][name] = {"cut": cut, "now": now, "out": out, "ttl": ttl}
        # Flink's view of the original at `now`; kg's output with nothing expired (clock 0): all it stores.
        requests += [
            TypedRestoreRequest(source, backend, now, ttl),
            TypedRestoreRequest(out, backend, 0, ttl),
        ]
    return info, requests


# -- SqlJob: a patched accumulator --------------------------------------------------------------------------


def _sql_patch(source: Path, work: Path) -> dict[str, Any]:
    """Patch one key's accState in every query of ``source`` (export -> edit -> kg write); return them."""
    work.mkdir(parents=True)
    current = source
    patched: dict[str, list[int]] = {}
    for i, query in enumerate(sql_case_queries(source)):
        uid = query["uid"]
        acc = _export(current, uid, "accState", work / f"{query['name']}.parquet")
        row = acc.slice(i % acc.num_rows, 1)
        value = row.column("value").to_pylist()[0]
        value["f0"], value["f1"] = 1000 + i, 900_000 + i  # COUNT(*) and SUM(v) (distinct: COUNT(DISTINCT))
        patched[query["name"]] = [value["f0"], value["f1"]]
        row = row.set_column(
            row.schema.get_field_index("value"), "value", pa.array([value], row.schema.field("value").type)
        )
        pq.write_table(row, work / f"{query['name']}-fix.parquet")
        out = work / f"after-{query['name']}"
        _kg("write", str(current), "-o", uid, "-s", "accState", "--mode", "upsert",
            "--data", str(work / f"{query['name']}-fix.parquet"), "--out", str(out))  # fmt: skip
        current = out
    return {"original": source, "patched": current, "values": patched}


# -- One JVM per version ------------------------------------------------------------------------------------


_RUNS: dict[str, Run] = {}


@pytest.fixture(scope="module", params=UID_JOB_VERSIONS)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Every edit of one version, restored in one JVM of that version."""
    return _run_version(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=TTL_VERSIONS)
def ttl_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The run of a version with TypedJob savepoints (the same JVM as ``run``'s)."""
    return _run_version(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=list(SQL_SOURCES))
def sql_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The run of a version with SqlJob savepoints (the same JVM as ``run``'s)."""
    return _run_version(request.param, tmp_path_factory)


def _run_version(version: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    if version not in _RUNS:
        _RUNS[version] = _build_run(version, tmp_path_factory)
    return _RUNS[version]


def _build_run(version: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Write every edit for one version and restore them all in one JVM of that version."""
    classpath = build_versioned_classpath(version)
    root = tmp_path_factory.mktemp(f"edits-{version}")
    result = Run(version)
    batch: list[Any] = []
    slots: list[tuple[str, str, str]] = []  # (part, case, restore name) of each batch entry
    for name, (case, max_p, backend) in UID_SOURCES.items():
        edits = _uid_edits(uid_case(version, case), root / f"uid-{name}")
        result.uid[name] = edits
        for edit in UID_EDITS:
            batch.append(
                UidRestoreRequest(edits["savepoints"][edit], dict(UID_OWN_P), dict(max_p), backend=backend)
            )
            slots.append(("uid", name, edit))
    if version in TTL_VERSIONS:
        for name, (case, backend) in TYPED_SOURCES.items():
            info, requests = _ttl_cases(uid_case(version, case), backend, root / f"ttl-{name}")
            result.ttl[name] = info
            batch += requests
            slots += [("ttl", name, "physical")] + [
                ("ttl", name, f"{c}/{kind}") for c in info["cases"] for kind in ("flink", "kg")
            ]
    for name, (case, backend) in SQL_SOURCES.get(version, {}).items():
        source = uid_case(version, case)
        patch = _sql_patch(source, root / f"sql-{name}")
        result.sql[name] = patch
        uids = {q["name"]: q["uid"] for q in sql_case_queries(source)}
        for which in ("original", "patched"):
            batch.append(SqlBackendRestoreRequest(patch[which], uids, SQL_P, backend=backend))
            slots.append(("sql", name, which))
    dumps = run_uid_restores(version, batch, root / "dumps", classpath)
    for (part, name, which), dump in zip(slots, dumps, strict=True):
        assert dump["flinkVersion"] == version
        getattr(result, part)[name].setdefault("dumps", {})[which] = dump
    return result


def _ok(dump: Dump) -> Dump:
    error = restore_error(dump)
    assert error is None, f"Flink refused the restore:\n{error}"
    return dump


# -- UidJob ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", list(UID_SOURCES))
def test_the_original_restores_with_every_key(run: Run, source: str) -> None:
    keyed = _ok(run.uid[source]["dumps"]["original"])["keyed"]
    for op in ("keyed-string", "keyed-long"):
        assert len(keyed[op]) == UID_NUM_KEYS
        assert all(e["restored"] == uid_expected_value(op, k) for k, e in keyed[op].items()), op


def _changed(run: Run, source: str, edit: str) -> dict[str, dict[str, Any]]:
    """Per operator, the keys whose restored entry differs from the original's restore (others equal)."""
    original = _ok(run.uid[source]["dumps"]["original"])["keyed"]
    edited = _ok(run.uid[source]["dumps"][edit])["keyed"]
    assert set(edited) == set(original)
    changed: dict[str, dict[str, Any]] = {}
    for op, keys in original.items():
        assert set(edited[op]) == set(keys), op  # UidJob reads every key again: each one is dumped
        changed[op] = {}
        for key, entry in keys.items():
            got = edited[op][key]
            # Key group and subtask are where Flink looked the key up: the same for every key.
            assert (got["keyGroup"], got["subtask"]) == (entry["keyGroup"], entry["subtask"]), (op, key)
            if got != entry:
                changed[op][key] = got["restored"]
    return changed


@pytest.mark.parametrize("source", list(UID_SOURCES))
def test_an_upsert_restores_the_written_values_and_nothing_else(run: Run, source: str) -> None:
    assert _changed(run, source, "upsert") == {"keyed-long": run.uid[source]["upserted"], "keyed-string": {}}


@pytest.mark.parametrize("source", list(UID_SOURCES))
def test_a_delete_restores_without_the_deleted_keys_and_nothing_else(run: Run, source: str) -> None:
    deleted = run.uid[source]["deleted"]
    assert _changed(run, source, "delete") == {"keyed-long": {}, "keyed-string": dict.fromkeys(deleted)}


@pytest.mark.parametrize("source", list(UID_SOURCES))
def test_a_compaction_restores_without_the_dropped_keys_and_nothing_else(run: Run, source: str) -> None:
    dropped = run.uid[source]["dropped"]
    assert all(len(keys) >= 4 for keys in dropped.values())
    assert _changed(run, source, "compact") == {op: dict.fromkeys(keys) for op, keys in dropped.items()}


@pytest.mark.parametrize("source", list(UID_SOURCES))
def test_a_replace_restores_exactly_the_data_and_nothing_else(run: Run, source: str) -> None:
    replaced = run.uid[source]["replaced"]
    assert len(replaced) == 3 and not all(k.isascii() for k in replaced)
    # Every key of the replaced state reads the data's value, or nothing where the data has no row.
    want = {k: replaced.get(k) for k in _ok(run.uid[source]["dumps"]["original"])["keyed"]["keyed-string"]}
    assert _changed(run, source, "replace") == {"keyed-long": {}, "keyed-string": want}


@pytest.mark.parametrize("source", list(UID_SOURCES))
def test_a_transform_restores_the_mapped_values_and_nothing_else(run: Run, source: str) -> None:
    gone = run.uid[source]["transform_dropped"]
    original = _ok(run.uid[source]["dumps"]["original"])["keyed"]["keyed-long"]
    # fn doubled every sum and dropped one key's row: the state is exactly what fn returned.
    want = {k: None if k == gone else 2 * e["restored"] for k, e in original.items()}
    assert _changed(run, source, "transform") == {"keyed-long": want, "keyed-string": {}}


# -- TTL ---------------------------------------------------------------------------------------------------


def _keys(dump: Dump) -> dict[str, Any]:
    keys: dict[str, Any] = _ok(dump)["keys"]
    assert len(keys) == 12
    return keys


@pytest.mark.parametrize("case", ["job-ttl", "short-ttl"])
@pytest.mark.parametrize("source", list(TYPED_SOURCES))
def test_a_ttl_compaction_at_t_holds_what_flinks_ttl_filter_shows_at_t(
    ttl_run: Run, source: str, case: str
) -> None:
    ttl = ttl_run.ttl[source]
    everything = _keys(ttl["dumps"]["physical"])
    at_t = _keys(ttl["dumps"][f"{case}/flink"])
    compacted = _keys(ttl["dumps"][f"{case}/kg"])
    # The instant splits every TTL state: Flink hides some of its entries at T and still shows others.
    for state in TTL_STATES:
        shown = [e[state] for e in at_t.values()]
        stored = [e[state] for e in everything.values()]
        assert shown != stored, f"nothing of {state} expired at T"
        assert any(v not in (None, [], {}) for v in shown), f"all of {state} expired at T"
    # What kg's compaction stores (read with nothing expired) is exactly Flink's view of the original at T,
    # states without TTL included.
    assert compacted == at_t


@pytest.mark.parametrize("case", ["job-ttl", "short-ttl"])
@pytest.mark.parametrize("source", list(TYPED_SOURCES))
def test_a_ttl_compaction_keeps_the_unexpired_entries_last_access(
    ttl_run: Run, source: str, case: str
) -> None:
    ttl = ttl_run.ttl[source]
    cut = ttl["cases"][case]["cut"]
    kept = _ttl_entries(ttl["cases"][case]["out"])
    # Flink's rule: expired when last access + TTL <= now, i.e. last access <= the cut-off.
    want = {state: [e for e in rows if e[3] > cut] for state, rows in ttl["entries"].items()}
    for state in TTL_STATES:
        # A list element's position shifts when earlier ones expire: lists compare by (key, value, access).
        if state == "ttl-list":
            assert sorted((e[0], e[2], e[3]) for e in kept[state]) == sorted(
                (e[0], e[2], e[3]) for e in want[state]
            )
        else:
            assert kept[state] == want[state], state


# -- SQL ---------------------------------------------------------------------------------------------------


def _by_key(dump: Dump, query: str) -> dict[str, dict[str, Any]]:
    return {json.dumps(k["key"]): k for k in _ok(dump)["queries"][query]["keys"]}


def _minus(a: Sequence[int], b: Sequence[int]) -> list[int]:
    return [x - y for x, y in zip(a, b, strict=True)]


def test_a_patched_sql_aggregate_emits_the_patched_value_on_its_next_update(sql_run: Run) -> None:
    for name, patch in sql_run.sql.items():
        original, patched = patch["dumps"]["original"], patch["dumps"]["patched"]
        for query, value in patch["values"].items():
            before, after = _by_key(original, query), _by_key(patched, query)
            assert set(after) == set(before), (name, query)
            changed = [k for k in before if after[k] != before[k]]
            assert len(changed) == 1, (name, query, changed)
            was, now = before[changed[0]], after[changed[0]]
            # The original restored the key's state too (a -U of its old result, not an +I).
            assert was["restored"] is not None
            # The first change retracts the patched result: Flink read the accumulator kg wrote.
            assert now["restored"] == value, (name, query)
            # The next update is the patched accumulator plus the key's first row (what that row added to
            # the original accumulator); the last, plus every row read again.
            assert _minus(now["next"], now["restored"]) == _minus(was["next"], was["restored"]), (name, query)
            assert _minus(now["last"], now["restored"]) == _minus(was["last"], was["restored"]), (name, query)
            assert now["next"] != was["next"]
