"""Typed Arrow tables of keyed state: one table per state, typed columns, batch by batch.

``state_batches(savepoint, operator)`` reads every keyed file of an operator, subtask by subtask and block by
block (``decode_keyed_file``: memory follows a batch, not the state), and yields each batch's rows of each
state converted to that state's typed schema (``state_schema``):

| column | holds |
|---|---|
| ``key_group`` | the entry's key group (int32) |
| ``key`` | the key, typed by the key serializer |
| ``namespace`` | the namespace (absent for ``VoidNamespace``, i.e. keyed state outside windows) |
| ``user_key`` | a map state's user key |
| ``value`` | a value state's value, a list state's elements (one list), a map entry's value |
| ``timestamp`` | a timer's timestamp |
| ``undecoded`` | the raw bytes of an entry that did not decode (a POJO subclass, say); null otherwise |

A part kg cannot decode at all (Kryo, Avro, an unknown serializer) is a ``binary`` column of the raw bytes.
``state_table(path, operator, state)`` returns one state as a ``pyarrow.Table``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.flink.data.lookup import (
    checked_batches,
    find_operator,
    require_verified,
    state_codecs,
    typed_entry,
)
from keygroup_cli.flink.savepoint import Savepoint, open_savepoint
from keygroup_cli.flink.types.values import (
    LIST_DELIMITER,
    Codec,
    NotDecodable,
    StateCodecs,
    fixed_width,
    prefixed_kind,
)
from keygroup_cli.storage.locations import Location

#: What reads an operator's typed batches: ``state_batches`` here, or an engine's
#: (``execution.engines.spark``).
BatchReader = Callable[
    [Savepoint, str, "frozenset[str] | None", "OnProgress | None"], Iterator[tuple[str, pa.RecordBatch]]
]


@dataclass(frozen=True, slots=True)
class TypedState:
    """One state's typed schema, and why parts of it stay bytes."""

    name: str
    kind: str
    schema: pa.Schema
    notes: tuple[str, ...]


def _column_type(codec: Codec) -> pa.DataType:
    """Return a part's column type: its typed one, or ``binary`` where it stays bytes (``reason``).

    A composite with an opaque part (a Tuple with a Kryo field, a list of unknown elements) is opaque as a
    whole: its rows hold its raw bytes, so its column must be ``binary`` too, not the composite's type.
    """
    return pa.binary() if codec.reason else codec.arrow_type()


def state_schema(codecs: StateCodecs) -> pa.Schema:
    """Return the typed schema of one state's table (see the module docstring)."""
    fields = [pa.field("key_group", pa.int32(), nullable=False), pa.field("key", _column_type(codecs.key))]
    namespace = codecs.namespace.arrow_type()
    if not pa.types.is_null(namespace):
        # An opaque namespace is null in its column (``_part``); its type stays whatever it names.
        fields.append(pa.field("namespace", _column_type(codecs.namespace)))
    if codecs.kind == "timer":
        fields.append(pa.field("timestamp", pa.int64()))
    else:
        assert codecs.value is not None
        if codecs.kind == "map":
            assert codecs.user_key is not None
            fields.append(pa.field("user_key", _column_type(codecs.user_key)))
        value = _column_type(codecs.value)
        # A list of opaque elements is one binary value: its elements cannot be cut apart.
        listed = codecs.kind == "list" and not codecs.value.reason
        fields.append(pa.field("value", pa.list_(value) if listed else value))
    fields.append(pa.field("undecoded", pa.binary()))
    return pa.schema(fields)


def _typed_batch(codecs: StateCodecs, schema: pa.Schema, rows: list[dict[str, Any]]) -> pa.RecordBatch:
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    value_codec = codecs.value
    for row in rows:
        entry = typed_entry(codecs, row)
        columns["key_group"].append(row["key_group"])
        key = row["key"]
        if isinstance(key, bytes) and not codecs.key.reason:
            try:
                key = codecs.key.to_arrow(codecs.key.decode(key))
            except NotDecodable as exc:
                # A key its own serializer cannot read: Flink's heap backend could not restore it either.
                raise InvalidInputError(
                    f"state {codecs.name!r}: a key in key group {row['key_group']} does not decode ({exc})",
                    code="FLINK_KEY_UNDECODABLE",
                ) from None
        columns["key"].append(key)
        if "namespace" in columns:
            columns["namespace"].append(_part(codecs.namespace, row["namespace"]))
        if codecs.kind == "timer":
            columns["timestamp"].append(entry.timestamp)
            columns["undecoded"].append(None)
            continue
        assert value_codec is not None
        if "user_key" in columns:
            assert codecs.user_key is not None
            opaque_key = bool(codecs.user_key.reason)
            columns["user_key"].append(
                row["user_key"] if opaque_key else _part(codecs.user_key, row["user_key"])
            )
        opaque = bool(value_codec.reason)
        if entry.note and not opaque:
            columns["value"].append(None)
            columns["undecoded"].append(row["value"])
            continue
        if opaque:
            # Its raw bytes: a composite with an opaque part may still decode where that part is null.
            columns["value"].append(row["value"])
        elif entry.value is None:
            columns["value"].append(None)
        elif codecs.kind == "list":
            columns["value"].append([value_codec.to_arrow(v) for v in entry.value])
        else:
            columns["value"].append(value_codec.to_arrow(entry.value))
        columns["undecoded"].append(None)
    try:
        return pa.RecordBatch.from_pydict(columns, schema=schema)
    except UnicodeEncodeError:
        _keep_unpaired_surrogates_as_bytes(codecs, schema, columns, rows)
        return pa.RecordBatch.from_pydict(columns, schema=schema)


def _keep_unpaired_surrogates_as_bytes(
    codecs: StateCodecs, schema: pa.Schema, columns: dict[str, list[Any]], rows: list[dict[str, Any]]
) -> None:
    """Move each value holding a Java string Arrow cannot hold to ``undecoded``, as its bytes; refuse a key.

    A Java ``String`` or ``char`` may hold an unpaired UTF-16 surrogate, which UTF-8, and so an Arrow
    string, cannot encode. The value keeps its exact bytes in ``undecoded`` (``kg write`` writes them back
    unchanged); a key, namespace or map key has no such column.

    Raises:
        UnsupportedFormatError: A key, namespace or map key holds one (``STRING_NOT_UNICODE``).
    """

    def fits(value: Any, name: str) -> bool:
        try:
            pa.array([value], type=schema.field(name).type)
        except UnicodeEncodeError:
            return False
        return True

    for i, row in enumerate(rows):
        for part in ("key", "namespace", "user_key"):
            if part in columns and not fits(columns[part][i], part):
                raise UnsupportedFormatError(
                    f"state {codecs.name!r}: a {part.replace('_', ' ')} in key group {row['key_group']} is a "
                    "Java string with an unpaired UTF-16 surrogate, which an Arrow or Parquet string cannot "
                    "hold",
                    code="STRING_NOT_UNICODE",
                )
        if "value" in columns and not fits(columns["value"][i], "value"):
            columns["value"][i] = None
            columns["undecoded"][i] = row["value"]


def _split_by_state(batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Yield each state's rows of ``batch`` (in file order within a state)."""
    names = batch.column("state").cast(pa.string())
    for name in pc.unique(names).to_pylist():
        yield name, batch.filter(pc.equal(names, name))


def _column_batch(codecs: StateCodecs, schema: pa.Schema, rows: pa.RecordBatch) -> pa.RecordBatch | None:
    """Decode a value or list state of fixed-size primitives column-wise; None where the row path must.

    Taken when the namespace is ``VoidNamespace`` (no column), the key is already typed, and every value is
    present and exactly one value (``n`` elements joined by ``,`` for a list) long.
    """
    if codecs.kind not in ("value", "list") or "namespace" in schema.names or codecs.value is None:
        return None
    values = rows.column("value")
    if pa.types.is_binary(rows.schema.field("key").type) or values.null_count:
        return None
    prefixed = prefixed_kind(codecs.value) if codecs.kind == "value" else None
    if prefixed is not None:
        decoded_values = _prefixed_column(values, prefixed)
        if decoded_values is None:
            return None
        return _with_key(rows, schema, decoded_values)
    fixed = fixed_width(codecs.value)
    if fixed is None:
        return None
    dtype, arrow_type = fixed
    size = np.dtype(dtype).itemsize
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + len(values) + 1
    ]
    lengths = np.diff(offsets).astype(np.int64)
    data = values.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    if codecs.kind == "value":
        if not bool((lengths == size).all()):
            return None
        starts = offsets[:-1].astype(np.int64)
        counts = np.ones(len(lengths), dtype=np.int64)
    else:
        # ListDelimitedSerializer: n elements and n - 1 ',' bytes.
        if not bool(((lengths + 1) % (size + 1) == 0).all()):
            return None
        counts = (lengths + 1) // (size + 1)
        first = np.repeat(offsets[:-1].astype(np.int64), counts)
        within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        starts = first + within * (size + 1)
        delimiters = starts[within > 0] - 1
        if len(delimiters) and not bool((raw[delimiters] == LIST_DELIMITER).all()):
            return None
    cut = (
        raw[starts[:, None] + np.arange(size, dtype=np.int64)]
        if len(starts)
        else np.zeros((0, size), np.uint8)
    )
    decoded = pa.array(
        np.ascontiguousarray(cut).view(dtype).ravel().astype(np.dtype(dtype).newbyteorder("=")),
        type=arrow_type,
    )
    if codecs.kind == "list":
        list_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        decoded = pa.ListArray.from_arrays(pa.array(list_offsets), decoded)
    return _with_key(rows, schema, decoded)


def _with_key(rows: pa.RecordBatch, schema: pa.Schema, value: pa.Array) -> pa.RecordBatch:
    columns = [rows.column("key_group"), rows.column("key").cast(schema.field("key").type), value]
    columns.append(pa.nulls(len(rows), pa.binary()))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _prefixed_column(values: pa.Array, kind: str) -> pa.Array | None:
    """Cut ``byte[]`` values (int length, bytes) or short ASCII ``StringValue`` strings column-wise.

    None where a value's prefix does not say exactly its own length (a long or non-ASCII string, say).
    """
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + len(values) + 1
    ]
    lengths = np.diff(offsets).astype(np.int64)
    data = values.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    starts = offsets[:-1].astype(np.int64)
    if kind == "bytes":
        if not bool((lengths >= 4).all()):
            return None
        prefix = _fixed_bytes(raw, starts, 4).view(">i4").ravel().astype(np.int64)
        if not bool((prefix == lengths - 4).all()):
            return None
        return _cut(data, starts + 4, starts + lengths)
    # StringValue: chars + 1 as a varint (one byte below 0x80), then one byte per ASCII char.
    if not bool(((lengths >= 1) & (lengths <= 127)).all()) or not len(lengths):
        return None if len(lengths) else pa.array([], type=pa.string())
    if not bool((raw[starts] == lengths).all()):
        return None
    sliced = _cut(data, starts + 1, starts + lengths)
    chars = sliced.buffers()[2]
    if chars is not None and bool((np.frombuffer(chars, dtype=np.uint8) >= 0x80).any()):
        return None
    return sliced.cast(pa.string())


def _cut(data: pa.Buffer | None, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Return the ordered, disjoint byte ranges ``[starts[i], ends[i])`` of ``data`` as one compact array.

    They are every other element of a binary array laid over ``data`` (offsets 0, s0, e0, s1, e1, ...);
    ``take`` copies the odd ones out.
    """
    count = len(starts)
    if data is None or not count:
        return pa.array([b""] * count, type=pa.binary())
    bounds = np.empty(2 * count + 1, dtype=np.int32)
    bounds[0] = 0
    bounds[1::2] = starts
    bounds[2::2] = ends
    laid = pa.Array.from_buffers(pa.binary(), 2 * count, [None, pa.py_buffer(bounds), data])
    return laid.take(pa.array(np.arange(1, 2 * count, 2, dtype=np.int64)))


def _fixed_bytes(raw: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    if not len(starts):
        return np.zeros((0, width), dtype=np.uint8)
    return np.ascontiguousarray(raw[starts[:, None] + np.arange(width, dtype=np.int64)])


def _part(codec: Codec, raw: bytes | None) -> Any:
    """Decode a namespace or user key on its own (null where it does not decode: the row keeps its bytes)."""
    if raw is None:
        return None
    try:
        return codec.to_arrow(codec.decode(raw))
    except NotDecodable:
        return None


def typed_states(savepoint: Savepoint, operator: str) -> tuple[TypedState, ...]:
    """Return the typed schema of every state of ``operator`` (from its first keyed file's header)."""
    op = find_operator(savepoint, operator)
    streams = savepoint.keyed_streams.get(op.operator_id)
    if not streams:
        raise UnsupportedFormatError(f"operator {op.label!r} holds no keyed state", code="NO_KEYED_STATE")
    codecs: dict[str, StateCodecs] = {}
    for stream in streams:  # a subtask's header lists the states it registered: take every file's
        for name, c in state_codecs(stream).items():
            codecs.setdefault(name, c)
    return tuple(TypedState(name, c.kind, state_schema(c), c.notes) for name, c in sorted(codecs.items()))


def state_batches(
    savepoint: Savepoint,
    operator: str,
    states: frozenset[str] | None = None,
    on_progress: OnProgress | None = None,
    files: Sequence[int] | None = None,
    label: str | None = None,
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Yield ``(state, typed batch)`` for every keyed file of ``operator``, file by file, block by block.

    ``savepoint`` must be canonical (a rewritten view for NATIVE and checkpoint layouts; ``open_canonical``).
    ``files``: only these keyed files (indexes below ``keyed_file_count``), as one engine task reads them.
    Every block is checked as ``kg verify`` checks it as it is read (``keyed_values.checked_batches``);
    ``label`` names the input in that error.

    Raises:
        InvalidArgumentError: No such operator, or a state in ``states`` it does not have.
        InvalidInputError: A block ``kg verify`` rejects (``INPUT_FAILS_VERIFY``).
        UnsupportedFormatError: The operator holds no keyed state, or a state kg cannot decode.
    """
    op = find_operator(savepoint, operator)
    streams = savepoint.keyed_streams.get(op.operator_id) or ()
    if not streams:
        raise UnsupportedFormatError(f"operator {op.label!r} holds no keyed state", code="NO_KEYED_STATE")
    known = {s.name for stream in streams for s in stream.header.states or ()}
    missing = sorted((states or frozenset()) - known)
    if missing:
        raise InvalidArgumentError(
            f"operator {op.label!r} has no state {missing[0]!r} (states: {', '.join(sorted(known))})",
            code="STATE_NOT_FOUND",
        )
    wanted = pa.array(sorted(states or ()), type=pa.string())
    chosen = streams if files is None else [streams[i] for i in files]
    for done, stream in enumerate(chosen):
        codecs = state_codecs(stream)
        schemas = {name: state_schema(c) for name, c in codecs.items()}
        # Every block checked as kg verify checks it, in this pass (``checked_batches``).
        for batch in checked_batches(savepoint, stream, op, label=label):
            if states is not None:
                # Only the wanted states' rows become Python objects.
                names = batch.column("state").cast(pa.string())
                batch = batch.filter(pc.is_in(names, value_set=wanted))
            for name, rows in _split_by_state(batch):
                yield name, typed_batch(codecs[name], schemas[name], rows)
        if on_progress is not None:
            on_progress("export", done + 1, len(chosen))


def typed_batch(codecs: StateCodecs, schema: pa.Schema, rows: pa.RecordBatch) -> pa.RecordBatch:
    """Return one state's decoded rows (kg's keyed schema) as its typed batch, as ``state_batches`` yields it.

    ``schema`` is ``state_schema(codecs)``. Column-wise where the state allows, else row by row.

    Raises:
        InvalidInputError: A key its serializer does not decode (``FLINK_KEY_UNDECODABLE``).
        UnsupportedFormatError: A key, namespace or map key Arrow cannot hold (``STRING_NOT_UNICODE``).
    """
    fast = _column_batch(codecs, schema, rows)
    return fast if fast is not None else _typed_batch(codecs, schema, rows.to_pylist())


def keyed_file_count(savepoint: Savepoint, operator: str) -> int:
    """Return how many keyed files ``operator`` has (``state_batches``' ``files`` index them)."""
    return len(savepoint.keyed_streams.get(find_operator(savepoint, operator).operator_id) or ())


class open_canonical:  # noqa: N801 - used as a context manager, like ``open``
    """Open ``path`` as a canonical savepoint: itself, or its rewrite in a scratch directory (removed after).

    The input is refused first where ``kg verify`` refuses it without reading key-group blocks (every
    file's size, range, offsets and header, every operator-state stream: ``keyed_values.require_verified``);
    the blocks are checked as ``state_batches`` reads them. A RocksDB NATIVE savepoint or a checkpoint's
    own layout is rewritten as key groups first (local disk only), which reads every keyed file.

    Raises:
        InvalidInputError: ``INPUT_FAILS_VERIFY``, or the input cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str] | Savepoint) -> None:
        self._path = path
        self._label = None if isinstance(path, Savepoint) else str(path)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Savepoint:
        from keygroup_cli.flink.layouts.heap import canonical_view, needs_canonical_view

        savepoint = self._path if isinstance(self._path, Savepoint) else open_savepoint(self._path)
        require_verified(savepoint, self._label)
        if not needs_canonical_view(savepoint):
            return savepoint
        directory = savepoint.directory
        if isinstance(directory, Location) and directory.local_path is None:
            raise UnsupportedFormatError(
                f"{savepoint.metadata_path}: a RocksDB NATIVE savepoint or a checkpoint's own layout is read "
                "only on local disk (every keyed file is rewritten first); download it, or take a canonical "
                "savepoint",
                code="LAYOUT_NEEDS_LOCAL_COPY",
            )
        self._scratch = tempfile.TemporaryDirectory(prefix="kg-state-")
        view = canonical_view(savepoint, Path(self._scratch.name) / "canonical")
        return Savepoint.rewritten(view, savepoint)

    def __exit__(self, *_exc: object) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()


def state_table(path: str | os.PathLike[str] | Savepoint, operator: str, state: str) -> pa.Table:
    """Return one keyed state of ``operator`` as a typed ``pyarrow.Table`` (columns: module docstring).

    Raises:
        InvalidArgumentError: No such operator or state.
        UnsupportedFormatError: The operator holds no keyed state, or a layout kg reads only locally.
    """
    with open_canonical(path) as savepoint:
        batches = [b for _, b in state_batches(savepoint, operator, frozenset({state}))]
        schema = next(s.schema for s in typed_states(savepoint, operator) if s.name == state)
        return pa.Table.from_batches(batches, schema=schema)


__all__ = [
    "BatchReader",
    "TypedState",
    "keyed_file_count",
    "open_canonical",
    "state_table",
    "state_batches",
    "state_schema",
    "typed_batch",
    "typed_states",
]
