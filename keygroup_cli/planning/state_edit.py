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
from keygroup_cli.core.keygroups import key_groups_for_hashes
from keygroup_cli.core.schema import KEY_ARROW_TYPES
from keygroup_cli.flink import (
    CompactRule,
    EncodedEntry,
    KeyedEdit,
    StateCodecs,
    arrow_rows,
    edit_in_range,
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
    vector = None if mode == "delete" else _column_entries(codecs, data, key_type, request.ttl_timestamp, now)
    if vector is not None:
        keys, values = vector
        namespaces = pa.array([b"\x00"] * len(keys), pa.binary())
        user_keys = pa.nulls(len(keys), pa.binary())
        stamps = pa.nulls(len(keys), pa.int64())
    for row in arrow_rows(data) if vector is None else ():
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


#: Value serializers ``_column_entries`` encodes column-wise: Flink's big-endian Long and Integer.
_FIXED_VALUES = {"Long": ">i8", "Integer": ">i4"}


def _column_entries(
    codecs: StateCodecs, data: pa.Table, key_type: str, stamp: int | None, now_ms: int
) -> tuple[pa.Array, pa.Array] | None:
    """Return the keys and encoded values of a value state's rows, column-wise; None: encode row by row.

    Taken: a value state in ``VoidNamespace``, Int, Long or String keys, values of Long, Integer or short
    ASCII String (``StringValue``: length + 1 in one byte, then the chars), optionally under TTL (the
    last-access long first: ``stamp``, else the row's, else ``now_ms``), no nulls. Anything else, and any
    row the first rows' row-by-row encoding does not confirm, goes row by row (``encode_arrow_entry``).
    """
    value_codec = codecs.value
    if (
        codecs.kind != "value"
        or value_codec is None
        or codecs.namespace is None
        or codecs.namespace.type_name != "VoidNamespace"
        or key_type not in ("int", "long", "string")
        or not set(data.column_names) <= {"key", "value", "key_group", "undecoded"}
        or "value" not in data.column_names
        or data.num_rows == 0
    ):
        return None
    if "undecoded" in data.column_names and data.column("undecoded").null_count != data.num_rows:
        return None
    ttl = is_ttl(value_codec)
    inner = getattr(value_codec, "value", None) if ttl else value_codec
    if inner is None or inner.type_name not in (*_FIXED_VALUES, "String"):
        return None
    column = data.column("value").combine_chunks()
    key_column = data.column("key").combine_chunks()
    if column.null_count or key_column.null_count:
        return None
    try:
        keys = key_column.cast(KEY_ARROW_TYPES[key_type])
        if ttl:
            if not pa.types.is_struct(column.type) or {f.name for f in column.type} != {
                "value",
                "ttl_last_access",
            }:
                return None
            given = column.field("ttl_last_access").cast(pa.int64())
            inner_values = column.field("value")
            if inner_values.null_count:
                return None
            if stamp is not None:
                last = np.full(len(column), stamp, dtype=np.int64)
            else:
                last = np.asarray(given.fill_null(now_ms).to_numpy(zero_copy_only=False), dtype=np.int64)
        else:
            inner_values, last = column, None
        encoded = _encoded_values(inner.type_name, inner_values, last)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
        return None
    if encoded is None:
        return None
    # The first rows encoded row by row must be these bytes (the column-wise path is the same encoder).
    for i, row in enumerate(arrow_rows(data.slice(0, 3))):
        entry = encode_arrow_entry(codecs, _stamped(codecs, row, stamp, now_ms))
        if entry.value != encoded[i].as_py() or entry.namespace != b"\x00":
            return None
    return keys, encoded


def _encoded_values(type_name: str, values: pa.Array, last: np.ndarray | None) -> pa.Array | None:
    """Return ``values`` serialized (after each ``last`` long where given), as one binary array."""
    n = len(values)
    head = 8 if last is not None else 0
    if type_name in _FIXED_VALUES:
        dtype = _FIXED_VALUES[type_name]
        width = np.dtype(dtype).itemsize
        numbers = values.cast(pa.int64() if width == 8 else pa.int32())  # refuses what does not fit
        cells = np.empty((n, head + width), dtype=np.uint8)
        if last is not None:
            cells[:, :8] = last.astype(">i8").view(np.uint8).reshape(n, 8)
        raw = np.asarray(numbers.to_numpy(zero_copy_only=False)).astype(dtype)
        cells[:, head:] = raw.view(np.uint8).reshape(n, width)
        offsets = np.arange(0, (n + 1) * cells.shape[1], cells.shape[1], dtype=np.int64)
        return pa.Array.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(cells.tobytes())]
        ).cast(pa.binary())
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return None
    strings = values.cast(pa.large_string())
    if not bool(pc.all(pc.string_is_ascii(strings)).as_py()):
        return None
    lengths = np.asarray(pc.binary_length(strings).to_numpy(zero_copy_only=False), dtype=np.int64)
    if len(lengths) and int(lengths.max()) >= 127:
        return None  # StringValue's length + 1 takes more than one byte
    sizes = head + 1 + lengths
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    starts = offsets[:-1]
    if last is not None:
        out[starts[:, None] + np.arange(8)] = last.astype(">i8").view(np.uint8).reshape(n, 8)
    out[starts + head] = (lengths + 1).astype(np.uint8)
    total = int(lengths.sum())
    if total:
        buffers = strings.buffers()
        chars = np.frombuffer(buffers[2], dtype=np.uint8)
        source = np.frombuffer(buffers[1], dtype=np.int64)[strings.offset : strings.offset + n + 1]
        before = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        at = np.arange(total, dtype=np.int64) + np.repeat(source[:-1] - before, lengths)
        out[at + np.repeat(starts + head + 1 - source[:-1], lengths)] = chars[at]
    return pa.Array.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(out.tobytes())]
    ).cast(pa.binary())


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
