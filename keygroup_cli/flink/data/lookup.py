"""One key's state, typed: find its key group's block, read only that block, decode its entries.

``lookup_keys(savepoint, operator, keys)`` is ``kg get``: each key's key group is computed as Flink computes
it (``javahash`` and ``keygroups``), the subtask file holding that key group is found from the keyed handles
in ``_metadata``, and only that key group's block is read (one ``pread`` locally, one ranged GET on an object
store; ``decode_keyed_file`` with ``key_groups``). Its rows are filtered to the key and decoded with the
serializers of the file's header (``state.values``). A SQL job's key (``RowDataSerializer``) is given as a
JSON array of its fields: kg builds the ``BinaryRowData`` Flink would (``state.binary_row``), hashes it as
``BinaryRowData.hashCode()`` and matches the rows' key bytes against it.

A layout without per-key-group offsets (a RocksDB NATIVE savepoint or incremental checkpoint, a HashMap
checkpoint) is first rewritten as canonical key groups in a scratch directory
(``layouts.heap.canonical_view``), which reads every keyed file of the savepoint: that costs what
``kg convert`` costs, not one block.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.findings import Finding, fails_verify_error
from keygroup_cli.core.javahash import PRIMITIVE_KEY_TYPES, hash_code, parse_key
from keygroup_cli.core.keygroups import (
    KeyGroupRange,
    find_named_operator,
    key_group_for_hash,
    operator_index_for_key_group,
)
from keygroup_cli.core.schema import KEY_ARROW_TYPES
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import decode_keyed_file
from keygroup_cli.flink.keyed.layout import KeyedLayout, kg_kind
from keygroup_cli.flink.metadata.reader import OperatorState
from keygroup_cli.flink.metadata.state_files import size_finding
from keygroup_cli.flink.operator.streams import class_finding, raw_class_finding
from keygroup_cli.flink.savepoint import KeyedStream, Savepoint
from keygroup_cli.flink.types.binary_row import (
    RowFields,
    encode_row,
    parse_row_key,
    row_hash_code,
    serialized_row,
)
from keygroup_cli.flink.types.serializers import ROW_DATA_SERIALIZER_SNAPSHOT
from keygroup_cli.flink.types.values import NotDecodable, StateCodecs
from keygroup_cli.flink.write.keyed_tasks import keyed_header, require_keys_in_groups
from keygroup_cli.storage.locations import Location


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One entry of one state of a key, typed where kg can decode it.

    ``value`` is a value state's value, a list state's elements, a map entry's value (None: a null value),
    or None for a timer. Where a part does not decode, it is the raw bytes and ``note`` says why.
    """

    state: str
    kind: str
    namespace: Any
    user_key: Any
    value: Any
    timestamp: int | None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class StateType:
    """How one state is typed: its kind, its decoders' type names and why parts of it stay bytes."""

    name: str
    kind: str
    type_name: str
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KeyState:
    """Every entry of one key, and where the key lives."""

    key: Any
    key_group: int
    subtask: int
    entries: tuple[StateEntry, ...]

    @property
    def found(self) -> bool:
        """Return whether any state holds an entry for the key."""
        return bool(self.entries)


@dataclass(frozen=True, slots=True)
class KeyLookup:
    """What ``kg get`` found: the operator, its states' types, and each key's entries."""

    savepoint: str
    operator_uid: str | None
    operator_id: str
    key_type: str
    key_serializer: str
    max_parallelism: int
    states: tuple[StateType, ...]
    keys: tuple[KeyState, ...]
    #: Set when the layout had to be rewritten first (what that cost).
    layout_note: str | None = None


def find_operator(savepoint: Savepoint, label: str) -> OperatorState:
    """Return the operator ``label`` names: uid (or its hash), 32-hex id, name or id prefix.

    Raises:
        InvalidArgumentError: No operator of the savepoint is named so (``OPERATOR_NOT_FOUND``), or several
            are (``OPERATOR_AMBIGUOUS``, ``core.keygroups.find_named_operator``).
    """
    found = find_named_operator(label, savepoint.metadata.operators)
    if found is not None:
        return found
    known = ", ".join(op.label for op in savepoint.metadata.operators)
    raise InvalidArgumentError(
        f"No operator {label!r} in {savepoint.metadata_path} (operators: {known})", code="OPERATOR_NOT_FOUND"
    )


def state_codecs(stream: KeyedStream) -> dict[str, StateCodecs]:
    """Return the decoders of every state of one keyed file, by state name."""
    header = stream.header
    assert header.states is not None and header.key_serializer is not None  # KeyedLayout.from_header checked
    return {i.name: StateCodecs.of(i, kg_kind(i), header.key_serializer) for i in header.states}


def state_types(codecs: Mapping[str, StateCodecs]) -> tuple[StateType, ...]:
    """Describe each state's type (sorted by name)."""
    out = []
    for name in sorted(codecs):
        c = codecs[name]
        if c.kind == "map":
            assert c.user_key is not None and c.value is not None
            type_name = f"{c.user_key.type_name} -> {c.value.type_name}"
        elif c.kind == "timer":
            type_name = f"timer, namespace {c.namespace.type_name}"
        else:
            assert c.value is not None
            type_name = c.value.type_name
        out.append(StateType(name, c.kind, type_name, c.notes))
    return tuple(out)


def typed_entry(codecs: StateCodecs, row: Mapping[str, Any]) -> StateEntry:
    """Decode one kg keyed row (``core.schema.keyed_schema``) of the state ``codecs`` describes."""
    note = None
    try:
        namespace = codecs.namespace.decode(row["namespace"])
    except NotDecodable as exc:
        namespace, note = row["namespace"], str(exc)
    if codecs.kind == "timer":
        return StateEntry(codecs.name, "timer", namespace, None, None, row["timestamp"], note)
    user_key = None
    if codecs.kind == "map":
        assert codecs.user_key is not None
        try:
            user_key = codecs.user_key.decode(row["user_key"])
        except NotDecodable as exc:
            user_key, note = row["user_key"], note or str(exc)
    raw = row["value"]
    try:
        if raw is None:
            value = None
        elif codecs.kind == "list":
            value = codecs.list_elements(raw)
        else:
            assert codecs.value is not None
            value = codecs.value.decode(raw)
    except NotDecodable as exc:
        value, note = raw, note or str(exc)
    return StateEntry(codecs.name, codecs.kind, namespace, user_key, value, None, note)


def checked_batches(
    savepoint: Savepoint,
    stream: KeyedStream,
    op: OperatorState,
    key_groups: KeyGroupRange | None = None,
    label: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``stream``'s keyed file (only ``key_groups``), each block checked as kg verify does.

    The check is the read itself, not a second pass: ``decode_keyed_file(strict=True)`` proves every block's
    structure (key-group prefix, lengths, END_OF_KEY_GROUP, nothing after it, snappy CRCs) and every key is
    hashed against the key group it is stored in (``require_keys_in_groups``, Flink's
    ``KeyGroupRangeAssignment``). ``label`` names the input in the error (default: its directory).

    Raises:
        InvalidInputError: ``INPUT_FAILS_VERIFY``: the first problem, in one line; nothing after it is
            yielded.
    """
    key_type = stream.layout.codec.key_type
    try:
        with StreamSource(stream.handle.delegate, savepoint.directory) as src:
            for batch in decode_keyed_file(
                src,
                stream.handle,
                stream.layout,
                compressed=stream.header.compressed,
                key_groups=key_groups,
                strict=True,
            ):
                require_keys_in_groups(batch, key_type, op.max_parallelism, src.source)
                yield batch
    except InvalidInputError as exc:
        if exc.code == "INPUT_FAILS_VERIFY":
            raise
        raise fails_verify_error(label or str(savepoint.directory), exc) from None


def require_verified(savepoint: Savepoint, label: str | None = None) -> None:
    """Refuse ``savepoint`` where ``kg verify`` does without reading key-group blocks.

    ``flink.check.verify.verify_flink(blocks=False)``: every file's size, key-group range, offsets and header,
    and every operator-state stream (what the opened savepoint read already is not read again). A reader
    that then reads blocks through ``checked_batches`` refuses everything ``kg verify`` does in the blocks
    it reads; the gate of ``assess.integrity.require_intact``, at this layer.

    Raises:
        InvalidInputError: ``INPUT_FAILS_VERIFY``: the first error finding, in one line.
    """
    from keygroup_cli.core.findings import first_error
    from keygroup_cli.flink.check.verify import verify_flink

    problem = first_error(verify_flink(savepoint, blocks=False).findings)
    if problem is not None:
        raise fails_verify_error(str(label or savepoint.directory), problem)


def _entries(
    savepoint: Savepoint, stream: KeyedStream, op: OperatorState, group: int, keys: set[Any]
) -> Iterator[tuple[Any, StateEntry]]:
    """Yield (key, entry) for the rows of ``keys`` in key group ``group`` of ``stream``'s file."""
    codecs = state_codecs(stream)
    batches = checked_batches(savepoint, stream, op, KeyGroupRange(group, group))
    wanted = pa.array(sorted(keys), type=KEY_ARROW_TYPES[stream.layout.codec.key_type])
    for batch in batches:
        # Only the key's rows become Python objects: a key group may hold a million entries.
        for row in batch.filter(pc.is_in(batch.column("key"), value_set=wanted)).to_pylist():
            yield row["key"], typed_entry(codecs[row["state"]], row)


def lookup_keys(
    savepoint: Savepoint, operator: str, key_texts: Sequence[str], key_type: str | None = None
) -> KeyLookup:
    """Return every state entry of each key in ``key_texts`` of ``operator`` (see the module docstring).

    Args:
        savepoint: The opened savepoint or checkpoint.
        operator: The operator's uid (or id).
        key_texts: Keys as text, parsed as the key serializer's type (a SQL key: a JSON array of fields).
        key_type: The key type the caller expects (``string``, ``long``, ``int``, ``boolean``), checked
            against the key serializer; None takes the serializer's (a SQL key takes none).

    Raises:
        InvalidArgumentError: No such operator, a key that does not parse, or a ``key_type`` that is not
            the key serializer's.
        UnsupportedFormatError: The operator has no keyed state, or keys kg cannot hash (a POJO or Tuple
            key, a SQL key with a field type kg does not build).
    """
    from keygroup_cli.flink.layouts.heap import canonical_view, needs_canonical_view

    op = find_operator(savepoint, operator)
    if needs_canonical_view(savepoint):
        directory = savepoint.directory
        if isinstance(directory, Location) and directory.local_path is None:
            raise UnsupportedFormatError(
                f"{savepoint.metadata_path}: kg get reads a RocksDB NATIVE savepoint or a checkpoint's own "
                "layout only on local disk (it rewrites every keyed file first); download it, or take a "
                "canonical savepoint",
                code="LAYOUT_NEEDS_LOCAL_COPY",
            )
        # The rewrite reads every keyed file: gated first as kg verify does without blocks (every file's
        # size, range, offsets and header, every operator-state stream).
        require_verified(savepoint)
        with tempfile.TemporaryDirectory(prefix="kg-get-") as scratch:
            view = Savepoint.rewritten(canonical_view(savepoint, Path(scratch) / "canonical"), savepoint)
            found = _lookup(view, find_operator(view, op.operator_id), key_texts, key_type)
        note = "the layout has no per-key-group offsets: every keyed file was rewritten as key groups first"
        return _with(found, str(savepoint.directory), note)
    return _with(_lookup(savepoint, op, key_texts, key_type), str(savepoint.directory), None)


def _with(found: KeyLookup, where: str, note: str | None) -> KeyLookup:
    return KeyLookup(
        where,
        found.operator_uid,
        found.operator_id,
        found.key_type,
        found.key_serializer,
        found.max_parallelism,
        found.states,
        found.keys,
        note,
    )


def _keyed_stream(savepoint: Savepoint, op: OperatorState, index: int) -> KeyedStream | None:
    """Return subtask ``index``'s keyed file with its header, reading only that file's header."""
    known = savepoint.keyed_streams_read()
    if known is not None:
        return next((s for s in known.get(op.operator_id, ()) if s.subtask == index), None)
    sub = next((s for s in op.subtasks if s.index == index), None)
    handle = sub.managed_keyed_state if sub is not None else None
    if not isinstance(handle, KeyGroupsHandle):
        return None
    with StreamSource(handle.delegate, savepoint.directory) as src:
        # A canonical savepoint's key is a few ranged reads: the gate is kg verify's check of what is read,
        # this file's size and header here (as ``verify._keyed_stream`` judges them) and its blocks in
        # ``checked_batches``.
        _raise_finding(savepoint, size_finding(handle.delegate, src.size, src.source, op.label))
        try:
            raw, header = keyed_header(src, handle)
        except UnsupportedFormatError:
            # A header kg cannot delimit: a misspelt Flink class in it is damage (kg verify's exit 3).
            end = min((o for o in handle.offsets if o > 0), default=src.size)
            _raise_finding(
                savepoint, raw_class_finding(src.read(0, min(end, src.size)), src.source, op.label)
            )
            raise
        _raise_finding(
            savepoint, class_finding(header.key_serializer, header.states or (), src.source, op.label)
        )
        layout = KeyedLayout.from_header(header, op.max_parallelism, src.source)
    return KeyedStream(op.operator_id, index, handle, raw, header, layout)


def _raise_finding(savepoint: Savepoint, problem: Finding | None) -> None:
    """Raise ``INPUT_FAILS_VERIFY`` for ``problem``, a finding of kg verify's on what ``kg get`` read."""
    if problem is not None:
        raise fails_verify_error(str(savepoint.directory), problem)


def _lookup(
    savepoint: Savepoint, op: OperatorState, key_texts: Sequence[str], key_type: str | None
) -> KeyLookup:
    holders = [s.index for s in op.subtasks if isinstance(s.managed_keyed_state, KeyGroupsHandle)]
    first = _keyed_stream(savepoint, op, holders[0]) if holders else None
    if first is None:
        raise UnsupportedFormatError(f"operator {op.label!r} holds no keyed state", code="NO_KEYED_STATE")
    codec = first.layout.codec
    actual = codec.key_type
    serializer = codec.serializer_class.rsplit(".", 1)[-1].split("$")[0]
    # What the key column of the decoded rows holds for each key -> (the key as shown, its key group).
    located: dict[Any, tuple[Any, int]] = {}
    if actual in PRIMITIVE_KEY_TYPES:
        if key_type is not None and key_type != actual:
            raise InvalidArgumentError(
                f"--key-type {key_type}: operator {op.label!r} has {actual} keys ({serializer})",
                code="KEY_TYPE_MISMATCH",
            )
        for k in dict.fromkeys(parse_key(text, actual) for text in key_texts):
            located[k] = (k, key_group_for_hash(hash_code(k, actual), op.max_parallelism))
    else:
        fields = _sql_key_fields(first, op.label, serializer)
        actual = fields.type_name
        if key_type is not None:
            raise InvalidArgumentError(
                f"--key-type {key_type}: operator {op.label!r} has SQL keys ({actual}); give each key "
                "as a JSON array of its fields, without --key-type",
                code="KEY_TYPE_MISMATCH",
            )
        for text in key_texts:
            values = parse_row_key(text, fields)
            row = encode_row(fields, values)
            group = key_group_for_hash(row_hash_code(row), op.max_parallelism)
            located[serialized_row(row)] = (list(values), group)
    keys = list(located)
    groups = {k: located[k][1] for k in keys}
    by_group: dict[int, set[Any]] = {}
    for k, g in groups.items():
        by_group.setdefault(g, set()).add(k)
    entries: dict[Any, list[StateEntry]] = {k: [] for k in keys}
    subtasks: dict[int, int] = {}
    streams = {first.subtask: first}
    for group in sorted(by_group):
        subtask = operator_index_for_key_group(op.max_parallelism, op.parallelism, group)
        subtasks[group] = subtask
        if subtask not in streams:
            found = _keyed_stream(savepoint, op, subtask)
            if found is None:
                continue
            streams[subtask] = found
        for k, entry in _entries(savepoint, streams[subtask], op, group, by_group[group]):
            entries[k].append(entry)
    found_keys = tuple(
        KeyState(located[k][0], groups[k], subtasks[groups[k]], tuple(sorted(entries[k], key=_order)))
        for k in keys
    )
    states = state_types(state_codecs(first))
    return KeyLookup(
        "", op.uid, op.operator_id, actual, codec.serializer_class, op.max_parallelism, states, found_keys
    )


def _sql_key_fields(stream: KeyedStream, label: str, serializer: str) -> RowFields:
    """Return the fields of a SQL job's key rows, or refuse a key serializer kg cannot hash."""
    snapshot = stream.header.key_serializer
    if snapshot is None or snapshot.class_name != ROW_DATA_SERIALIZER_SNAPSHOT:
        raise UnsupportedFormatError(
            f"operator {label!r}: kg cannot compute the key group of keys written by {serializer} "
            "(it hashes String, Long, Integer and Boolean keys, and SQL jobs' BinaryRowData keys)",
            code="KEY_TYPE_UNSUPPORTED",
        )
    fields = RowFields.of(snapshot)
    if fields.unbuildable:
        raise UnsupportedFormatError(
            f"operator {label!r}: its SQL key {fields.type_name} has a {fields.unbuildable} field; kg "
            "builds keys of BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, STRING and BYTES fields",
            code="KEY_TYPE_UNSUPPORTED",
        )
    return fields


def _order(entry: StateEntry) -> tuple[str, int]:
    # States by name; a timer state's entries by timestamp; other entries keep the file's order.
    return entry.state, entry.timestamp or 0


__all__ = [
    "KeyLookup",
    "KeyState",
    "StateEntry",
    "StateType",
    "checked_batches",
    "find_operator",
    "lookup_keys",
    "fails_verify_error",
    "require_verified",
    "state_codecs",
    "state_types",
    "typed_entry",
]
