"""``kg write`` and ``kg compact`` as values: the request, the data made into an edit, and the plan.

A write's data is rows in the shape ``kg export`` writes (``flink.data.tables.state_schema``): ``key``,
``namespace`` (absent for ``VoidNamespace``), ``user_key`` (map states), ``value`` (a list state's
elements as one list; a TTL state's ``{value, ttl_last_access}``) or ``timestamp`` (timers), and optionally
``key_group`` (ignored: recomputed) and ``undecoded`` (an entry's bytes written back unchanged).
``write_edit`` encodes every row with the state's own serializers (``flink.keyed.typed_entries``), places
it in the key group Flink computes for its key (Java ``hashCode`` → murmur → ``% maxParallelism``,
``core.javahash`` and ``core.keygroups``) and returns the ``flink.write.edit.KeyedEdit`` the tasks apply:

- ``upsert``: an entry with the identity of a row (key and namespace; and user key for a map state) is
  replaced by the row; others stay.
- ``delete``: every entry of the state whose key (and namespace, user key where the data has those
  columns) is in the data goes.
- ``replace``: the state becomes exactly the data.

A type kg cannot encode is refused per column, with the reason, before anything is read or written (exit 4).
The plan (``StateEditPlan``) is what ``--dry-run`` prints and the run executes: the operators and files
rewritten, and rows per key group written, deleted and kept.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from keygroup_cli.core.errors import InvalidArgumentError, UnsupportedFormatError
from keygroup_cli.core.javahash import hash_codes
from keygroup_cli.core.keygroups import KeyGroupRange, key_groups_for_hashes
from keygroup_cli.core.schema import KEY_ARROW_TYPES
from keygroup_cli.flink import (
    CompactRule,
    EncodedEntry,
    KeyedEdit,
    StateCodecs,
    arrow_rows,
    encode_arrow_entry,
    is_ttl,
)
from keygroup_cli.storage.locations import is_remote, location

MODES = ("upsert", "delete", "replace")
#: Columns of an export that say where an entry is or what it holds, beyond the key.
_ENTRY_COLUMNS = ("namespace", "user_key", "value", "timestamp", "undecoded")


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """``kg write``: change one keyed state of one operator from data."""

    operator: str
    state: str
    mode: str
    #: Rows in the export's shape (module docstring).
    data: pa.Table
    #: ``--ttl-timestamp``: the last-access time every written TTL entry gets (ms since the epoch); None:
    #: the data's ``ttl_last_access`` where set, else the time of the run.
    ttl_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class CompactRequest:
    """``kg compact``: drop entries by rule, in the operators and states named (None: all)."""

    rule: CompactRule
    operators: tuple[str, ...] | None = None
    states: tuple[str, ...] | None = None
    #: ``--keep-where``/``--drop-where`` text, compiled per operator (its key type) by the route.
    where: str | None = None


@dataclass(frozen=True, slots=True)
class KeyGroupChange:
    """Rows of one state in one key group: before the edit, written by it, deleted by it."""

    operator: str
    state: str
    key_group: int
    before: int
    written: int
    deleted: int

    @property
    def kept(self) -> int:
        """Return the rows that were there and stay."""
        return self.before - self.deleted

    @property
    def after(self) -> int:
        """Return the rows the state holds in the key group after the edit."""
        return self.kept + self.written


@dataclass(frozen=True, slots=True)
class OperatorEdit:
    """One operator's part of the plan: the states edited, the edit, and its keyed files rewritten."""

    operator_id: str
    label: str
    parallelism: int
    max_parallelism: int
    states: tuple[str, ...]
    edit: KeyedEdit
    #: Keyed files (one per subtask) rewritten; the other operators' key groups are copied as bytes.
    files: int
    uid: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class StateEditPlan:
    """Everything a write or a compaction does, decided before anything is staged (what --dry-run prints)."""

    command: str
    source: str
    checkpoint_id: int
    operators: tuple[OperatorEdit, ...]
    mode: str | None = None
    #: Rows per state and key group (only key groups the edit touches), from the tasks' read half.
    changes: tuple[KeyGroupChange, ...] = ()
    #: Serialized bytes of the entries removed, by ``(operator, state)``.
    removed_bytes: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: Rows each edited state held before the edit (every key group), by ``(operator, state)``.
    rows_before: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def totals(self) -> list[dict[str, Any]]:
        """Return rows before, written, deleted, kept and after per operator and state."""
        sums: dict[tuple[str, str], list[int]] = {}
        for op in self.operators:
            for name in op.states:
                sums[(op.label, name)] = [self.rows_before.get((op.label, name), 0), 0, 0]
        for c in self.changes:
            s = sums.setdefault((c.operator, c.state), [self.rows_before.get((c.operator, c.state), 0), 0, 0])
            s[1] += c.written
            s[2] += c.deleted
        return [
            {
                "operator": operator,
                "state": state,
                "before": b,
                "written": w,
                "deleted": d,
                "kept": b - d,
                "after": b - d + w,
                "removed_bytes": self.removed_bytes.get((operator, state), 0),
            }
            for (operator, state), (b, w, d) in sorted(sums.items())
        ]


def read_data(path: str) -> pa.Table:
    """Read ``--data``: a Parquet file, or an Arrow IPC file or stream (local or on an object store).

    Raises:
        InvalidArgumentError: It cannot be read as either (``DATA_UNREADABLE``).
    """
    where = location(path) if is_remote(path) else None
    fs, name = (where.fs, where.path) if where is not None else (None, path)
    errors = []
    try:
        # One thread, no dataset scan: Arrow's thread pools cannot start under a low address-space limit.
        if fs is not None:
            with fs.open_input_file(name) as f:
                return pq.ParquetFile(f).read(use_threads=False)
        return pq.ParquetFile(name).read(use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        errors.append(str(exc))
    for opener in (ipc.open_file, ipc.open_stream):
        try:
            if fs is not None:
                with fs.open_input_file(name) as f:
                    return opener(f).read_all()
            with pa.memory_map(name) as f:
                return opener(f).read_all()
        except (OSError, pa.ArrowException) as exc:
            errors.append(str(exc))
    raise InvalidArgumentError(f"{path}: not a Parquet or Arrow file ({errors[0]})", code="DATA_UNREADABLE")


def require_encodable(codecs: StateCodecs, columns: Sequence[str], mode: str) -> None:
    """Refuse, per column, a part of the state kg cannot encode that the write needs (exit 4).

    A delete encodes only the key and the identity columns the data has.

    Raises:
        UnsupportedFormatError: ``TYPE_NOT_ENCODABLE``, naming the column and the reason.
    """
    needed = ["key", *(c for c in ("namespace", "user_key") if c in columns)]
    if mode != "delete":
        needed += ["namespace", "user_key", "value"]
    reasons = codecs.write_reasons()
    for column in dict.fromkeys(needed):
        if column in reasons:
            raise UnsupportedFormatError(
                f"state {codecs.name!r}: column {column!r} cannot be written: {reasons[column]}",
                code="TYPE_NOT_ENCODABLE",
            )


def _require_columns(codecs: StateCodecs, schema: pa.Schema, data: pa.Table, mode: str) -> None:
    """Refuse data whose columns are not the export's (exit 2), naming what is missing or extra."""
    allowed = set(schema.names)
    extra = [c for c in data.column_names if c not in allowed]
    if extra:
        raise InvalidArgumentError(
            f"--data has column(s) {', '.join(extra)} that state {codecs.name!r} does not have "
            f"(its columns: {', '.join(schema.names)})",
            code="DATA_COLUMNS",
        )
    needed = ["key"]
    if mode != "delete":
        needed += [c for c in ("namespace", "user_key") if c in allowed]
        needed.append("timestamp" if codecs.kind == "timer" else "value")
    missing = [c for c in needed if c not in data.column_names]
    if missing:
        raise InvalidArgumentError(
            f"--data lacks column(s) {', '.join(missing)} of state {codecs.name!r} "
            f"(columns for --mode {mode}: {', '.join(needed)})",
            code="DATA_COLUMNS",
        )


def _stamped(codecs: StateCodecs, row: dict[str, Any], stamp: int | None, now_ms: int) -> dict[str, Any]:
    """Return ``row`` with every TTL last-access time set: ``stamp``, else the row's, else ``now_ms``."""
    if not is_ttl(codecs.value) or row.get("value") is None:
        return row

    def one(value: Any) -> Any:
        if not isinstance(value, dict) or "ttl_last_access" not in value:
            return {"value": value, "ttl_last_access": stamp if stamp is not None else now_ms}
        given = value.get("ttl_last_access")
        chosen = stamp if stamp is not None else (given if given is not None else now_ms)
        return {**value, "ttl_last_access": chosen}

    value = row["value"]
    row = dict(row)
    row["value"] = [one(v) for v in value] if codecs.kind == "list" else one(value)
    return row


def write_edit(
    request: WriteRequest,
    codecs: StateCodecs,
    key_codec: Any,
    key_type: str,
    max_parallelism: int,
    export_schema: pa.Schema,
    now_ms: int | None = None,
) -> KeyedEdit:
    """Return the edit ``request`` makes of the state ``codecs`` decodes (module docstring).

    ``key_codec`` is the layout's key codec (``KeyedLayout.codec``); ``export_schema`` the state's export
    schema (``flink.data.tables.state_schema``).

    Raises:
        InvalidArgumentError: A mode kg does not know, columns not the export's, a value that does not fit
            its type, or two rows for one entry.
        UnsupportedFormatError: A column kg cannot encode (``TYPE_NOT_ENCODABLE``, exit 4), or keys kg
            cannot hash (``binary``).
    """
    mode, data = request.mode, request.data
    if mode not in MODES:
        raise InvalidArgumentError(f"--mode {mode!r}: expected one of {', '.join(MODES)}", code="BAD_MODE")
    _require_columns(codecs, export_schema, data, mode)
    require_encodable(codecs, data.column_names, mode)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    keys, namespaces, user_keys, values, stamps = [], [], [], [], []
    for row in arrow_rows(data):
        if mode == "delete":
            key = codecs.key.encode_arrow(row["key"])
            ns = codecs.namespace.encode_arrow(row["namespace"]) if "namespace" in row else None
            uk = None
            if "user_key" in row and codecs.user_key is not None:
                uk = codecs.user_key.encode_arrow(row["user_key"])
            entry = EncodedEntry(key, ns if ns is not None else b"", uk, None, None)
            keys.append(entry.key_cell(key_codec))
            namespaces.append(ns)
            user_keys.append(uk)
            continue
        entry = encode_arrow_entry(codecs, _stamped(codecs, row, request.ttl_timestamp, now))
        keys.append(entry.key_cell(key_codec))
        namespaces.append(entry.namespace)
        user_keys.append(entry.user_key)
        values.append(entry.value)
        stamps.append(entry.timestamp)
    key_array = pa.array(keys, type=KEY_ARROW_TYPES[key_type])
    groups = key_groups_for_hashes(hash_codes(key_array, key_type), max_parallelism)
    n = len(keys)
    identity: dict[str, Any] = {
        "key_group": pa.array(groups, type=pa.int32()),
        "state": pa.array([codecs.name] * n, type=pa.string()),
        "key": key_array,
    }
    if mode == "delete":
        if "timestamp" in data.column_names and codecs.kind == "timer":
            identity["timestamp"] = data.column("timestamp").cast(pa.int64())
        if "namespace" in data.column_names:
            identity["namespace"] = pa.array(namespaces, type=pa.binary())
        if "user_key" in data.column_names:
            identity["user_key"] = pa.array(user_keys, type=pa.binary())
        return KeyedEdit(frozenset({codecs.name}), matches=_sorted(pa.table(identity)))
    identity["namespace"] = pa.array(namespaces, type=pa.binary())
    if codecs.kind == "map":
        identity["user_key"] = pa.array(user_keys, type=pa.binary())
    if codecs.kind == "timer":
        # A timer's identity holds its timestamp: an upsert adds the timers not there yet.
        identity["timestamp"] = pa.array(stamps, type=pa.int64())
    matches = pa.table(identity)
    _require_unique(matches, [c for c in matches.column_names if c != "key_group"], codecs.name)
    inserts = pa.table(
        {
            **identity,
            "user_key": pa.array(user_keys, type=pa.binary()),
            "value": pa.array(values, type=pa.binary()),
            "timestamp": pa.array(stamps, type=pa.int64()),
        }
    )
    if mode == "replace":
        return KeyedEdit(frozenset({codecs.name}), replace=True, inserts=_sorted(inserts))
    return KeyedEdit(frozenset({codecs.name}), matches=_sorted(matches), inserts=_sorted(inserts))


def _require_unique(table: pa.Table, columns: list[str], state: str) -> None:
    """Refuse two rows of the data for one entry (Flink holds one value per entry)."""
    if table.num_rows == 0:
        return
    counted = table.group_by(columns, use_threads=False).aggregate([([], "count_all")])
    dup = counted.filter(pc.greater(counted.column("count_all"), 1))
    if dup.num_rows:
        key = dup.column("key")[0].as_py()
        raise InvalidArgumentError(
            f"--data holds {dup.column('count_all')[0].as_py()} rows for one entry of state {state!r} "
            f"(key {key!r}); an upsert or replace takes one row per entry",
            code="DATA_DUPLICATE_ENTRY",
        )


def _sorted(table: pa.Table) -> pa.Table:
    """Return ``table`` stably sorted by key group."""
    return table.take(pc.sort_indices(table, sort_keys=[("key_group", "ascending")]))


def edit_in_range(edit: KeyedEdit, key_groups: KeyGroupRange) -> KeyedEdit:
    """Return ``edit`` with only the data rows of ``key_groups`` (what one keyed file's task carries)."""

    def part(table: pa.Table | None) -> pa.Table | None:
        if table is None:
            return None
        groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int64)
        lo = int(np.searchsorted(groups, key_groups.start, side="left"))
        hi = int(np.searchsorted(groups, key_groups.end, side="right"))
        return table.slice(lo, hi - lo)

    return KeyedEdit(edit.states, edit.replace, part(edit.matches), part(edit.inserts), edit.rule)


def touched_key_groups(edit: KeyedEdit, max_parallelism: int) -> list[int] | None:
    """Return the key groups an edit can change, ascending; None: any (a replace or a rule)."""
    if edit.replace or edit.rule is not None:
        return None
    groups: set[int] = set()
    for table in (edit.matches, edit.inserts):
        if table is not None:
            groups.update(int(g) for g in pc.unique(table.column("key_group")).to_pylist())
    return sorted(g for g in groups if 0 <= g < max_parallelism)


__all__ = [
    "MODES",
    "CompactRequest",
    "KeyGroupChange",
    "OperatorEdit",
    "StateEditPlan",
    "WriteRequest",
    "edit_in_range",
    "read_data",
    "require_encodable",
    "touched_key_groups",
    "write_edit",
]
