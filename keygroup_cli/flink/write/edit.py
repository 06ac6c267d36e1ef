"""Edit one keyed file's rows as they stream: drop entries, add entries, key group by key group.

The format half of ``kg write`` and ``kg compact``. A ``KeyedEdit`` says, for the states it names, which
rows go (every row of the state for ``replace``; rows whose identity is in ``matches``; rows a
``CompactRule`` drops) and which rows come in (``inserts``: rows of kg's keyed schema, already encoded with
the state's own serializers and placed in the key group Flink computes). ``edited_batches`` applies it to
the rows a read task decodes (``write.keyed_tasks.read_keyed_task``: ascending key groups) and yields rows
still ascending by key group, each key group's kept rows first, then its inserted rows, so a write task
encodes them (``keyed.encode.write_keyed_file``) as it encodes any file. Rows of other states pass through
untouched.

Nothing here is tied to a process: an edit pickles (its tables are Arrow tables, a rule's key filter a
``pyarrow.compute`` expression), so a Spark executor applies it as this process does.

TTL: Flink's ``TtlStateFactory$TtlSerializer`` writes the last-access timestamp (a long) before the user
value, for a value state's value, each list element and each map value. An entry is expired at ``now`` when
``last_access + ttl <= now`` (``TtlUtils.expired``, the overflow saturating at ``Long.MAX_VALUE``); a list
keeps its unexpired elements, as ``TtlListState`` does, and goes when none is left.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.core.schema import keyed_schema
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.keyed.layout import kg_kind
from keygroup_cli.flink.types.values import LIST_DELIMITER, Codec, NotDecodable, StateCodecs

_LONG = struct.Struct(">q")
_LONG_MAX = (1 << 63) - 1
#: Key types whose keys the keyed rows hold typed (the others hold the serialized key's bytes).
_TYPED_KEYS = ("string", "long", "int", "boolean")


@dataclass(frozen=True, slots=True)
class CompactRule:
    """Which entries ``kg compact`` drops; each part applies where it means something, None: not asked."""

    #: Drop timers whose timestamp is below this (ms since the epoch).
    timers_before: int | None = None
    #: Drop entries whose TTL expired at ``now_ms`` under a time-to-live of ``ttl_ms``.
    ttl_ms: int | None = None
    now_ms: int | None = None
    #: A predicate on the decoded key (a table with one column, ``key``).
    key_filter: pc.Expression | None = None
    #: True: keep the entries of keys ``key_filter`` selects (drop the rest); False: drop them.
    filter_keeps: bool = False


@dataclass(frozen=True, slots=True)
class KeyedEdit:
    """What changes in the rows of the states ``states``; the rows of other states pass untouched."""

    states: frozenset[str]
    #: Drop every row of ``states`` (``kg write --mode replace``).
    replace: bool = False
    #: Rows whose identity (``state``, ``key`` and whichever of ``namespace``/``user_key`` the table has) is
    #: here are dropped (``upsert``, ``delete``).
    matches: pa.Table | None = None
    #: Rows to add: kg's keyed schema with ``state`` as text, ascending by ``key_group``.
    inserts: pa.Table | None = None
    rule: CompactRule | None = None


def edit_in_range(edit: KeyedEdit, key_groups: KeyGroupRange) -> KeyedEdit:
    """Return ``edit`` with only the data rows of ``key_groups`` (its tables ascending by key group).

    What one keyed file's task carries.
    """

    def part(table: pa.Table | None) -> pa.Table | None:
        if table is None:
            return None
        groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int64)
        lo = int(np.searchsorted(groups, key_groups.start, side="left"))
        hi = int(np.searchsorted(groups, key_groups.end, side="right"))
        return table.slice(lo, hi - lo)

    return KeyedEdit(edit.states, edit.replace, part(edit.matches), part(edit.inserts), edit.rule)


@dataclass
class EditCounts:
    """Rows of the edited states per ``(state, key group)``: before, removed, inserted."""

    before: dict[tuple[str, int], int] = field(default_factory=dict)
    removed: dict[tuple[str, int], int] = field(default_factory=dict)
    inserted: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Serialized bytes of the entries removed (key, namespace, user key, value, timer timestamp), by state.
    removed_bytes: dict[str, int] = field(default_factory=dict)

    def merge(self, other: EditCounts) -> None:
        """Add ``other``'s counts to these."""
        for mine, theirs in (
            (self.before, other.before),
            (self.removed, other.removed),
            (self.inserted, other.inserted),
            (self.removed_bytes, other.removed_bytes),
        ):
            for k, v in theirs.items():  # type: ignore[attr-defined]
                mine[k] = mine.get(k, 0) + v  # type: ignore[index]


def header_codecs(header: bytes, where: str) -> dict[str, StateCodecs]:
    """Return the decoders of every state a keyed file's header (``KeyedBackendSerializationProxy``) declares.

    Raises:
        InvalidInputError: The header does not parse.
    """
    parsed = read_keyed_header(header, where, len(header))
    assert parsed.states is not None and parsed.key_serializer is not None
    return {i.name: StateCodecs.of(i, kg_kind(i), parsed.key_serializer) for i in parsed.states}


def edited_batches(
    batches: Iterable[pa.RecordBatch | pa.Table],
    edit: KeyedEdit,
    codecs: Mapping[str, StateCodecs],
    key_type: str,
    state_names: tuple[str, ...],
    counts: EditCounts | None = None,
) -> Iterator[pa.Table]:
    """Yield ``batches`` (ascending key groups) edited by ``edit``, still ascending by key group.

    ``codecs`` are the decoders of the operator's states (a rule reads keys and TTL timestamps with them);
    ``state_names`` the ``state`` column's dictionary. ``counts`` receives what was kept and removed.

    Raises:
        InvalidInputError: An edited state has no decoder, or a TTL entry whose bytes do not decode.
    """
    schema = keyed_schema(key_type)
    inserts = _conformed(edit.inserts, schema, state_names)
    insert_groups = np.asarray(inserts.column("key_group").to_numpy(), dtype=np.int64)
    if counts is not None and inserts.num_rows:
        _count(counts.inserted, inserts, state_names, np.ones(inserts.num_rows, dtype=bool))
    ids = np.asarray([i for i, name in enumerate(state_names) if name in edit.states], dtype=np.int32)
    taken = 0
    carry: pa.Table | None = None
    for batch in batches:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if table.num_rows == 0:
            continue
        table = _kept(table.cast(schema), edit, codecs, key_type, state_names, ids, counts)
        if carry is not None:
            table = pa.concat_tables([carry, table])
        if table.num_rows == 0:
            carry = None
            continue
        groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int64)
        last = int(groups[-1])
        # Every key group below the last is complete: its kept rows, then its inserted rows.
        cut = int(np.searchsorted(groups, last, side="left"))
        head, carry = table.slice(0, cut), table.slice(cut)
        end = int(np.searchsorted(insert_groups, last, side="left"))
        if end > taken:
            head = _by_key_group(pa.concat_tables([head, inserts.slice(taken, end - taken)]))
            taken = end
        if head.num_rows:
            yield head
    rest = [t for t in (carry, inserts.slice(taken)) if t is not None and t.num_rows]
    if rest:
        yield _by_key_group(pa.concat_tables(rest))


def _by_key_group(table: pa.Table) -> pa.Table:
    """Return ``table`` stably sorted by key group (a key group's kept rows stay before its inserted rows)."""
    order = pc.sort_indices(table, sort_keys=[("key_group", "ascending")])
    return table.take(order)


def _conformed(inserts: pa.Table | None, schema: pa.Schema, state_names: tuple[str, ...]) -> pa.Table:
    """Return ``inserts`` in the read rows' schema (``state`` a dictionary over ``state_names``)."""
    if inserts is None or inserts.num_rows == 0:
        return schema.empty_table()
    names = inserts.column("state").cast(pa.string()).to_pylist()
    lookup = {name: i for i, name in enumerate(state_names)}
    unknown = sorted({n for n in names if n not in lookup})
    if unknown:
        raise InvalidInputError(
            f"state {unknown[0]!r} is not in the operator's keyed-state header", code="FLINK_STATE_UNKNOWN"
        )
    state = pa.DictionaryArray.from_arrays(
        pa.array([lookup[n] for n in names], type=pa.int32()), pa.array(state_names, type=pa.string())
    )
    columns = []
    for f in schema:
        if f.name == "state":
            columns.append(state)
        elif f.name in inserts.column_names:
            columns.append(inserts.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(inserts.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _kept(
    table: pa.Table,
    edit: KeyedEdit,
    codecs: Mapping[str, StateCodecs],
    key_type: str,
    state_names: tuple[str, ...],
    ids: np.ndarray,
    counts: EditCounts | None,
) -> pa.Table:
    """Return the rows of ``table`` the edit keeps (list states under TTL trimmed to unexpired elements)."""
    state_ids = _state_ids(table)
    target = np.isin(state_ids, ids)
    if not bool(target.any()):
        return table
    drop = np.zeros(table.num_rows, dtype=bool)
    if edit.replace:
        drop |= target
    if edit.matches is not None and edit.matches.num_rows:
        drop |= target & _matched(table, edit.matches)
    if edit.rule is not None:
        table, rule_drop = _rule_drop(table, edit.rule, codecs, key_type, state_names, state_ids, target)
        drop |= rule_drop
    if counts is not None:
        _count(counts.before, table, state_names, target)
        _count(counts.removed, table, state_names, drop)
        _count_bytes(counts.removed_bytes, table, state_names, drop)
    return table.filter(pa.array(~drop)) if bool(drop.any()) else table


def _state_ids(table: pa.Table) -> np.ndarray:
    """Return each row's index into the ``state`` dictionary (int32)."""
    state = table.column("state").combine_chunks()
    return np.asarray(state.indices.to_numpy(zero_copy_only=False), dtype=np.int32)


def _matched(table: pa.Table, matches: pa.Table) -> np.ndarray:
    """Return which rows of ``table`` have an identity in ``matches`` (an inner join on the identity)."""
    keys = [c for c in ("state", "key", "namespace", "user_key", "timestamp") if c in matches.column_names]
    left = pa.table(
        {
            **{c: table.column(c) for c in keys if c != "state"},
            "state": table.column("state").cast(pa.string()),
            "__row": pa.array(np.arange(table.num_rows, dtype=np.int64)),
        }
    )
    right = matches.select(keys)
    right = right.set_column(keys.index("state"), "state", right.column("state").cast(pa.string()))
    right = right.cast(pa.schema([pa.field(c, left.schema.field(c).type) for c in keys]))
    unique = right.group_by(keys, use_threads=False).aggregate([])
    joined = left.join(unique, keys=keys, join_type="inner", use_threads=False)
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[np.asarray(joined.column("__row").to_numpy(), dtype=np.int64)] = True
    return mask


def _rule_drop(
    table: pa.Table,
    rule: CompactRule,
    codecs: Mapping[str, StateCodecs],
    key_type: str,
    state_names: tuple[str, ...],
    state_ids: np.ndarray,
    target: np.ndarray,
) -> tuple[pa.Table, np.ndarray]:
    """Return ``table`` (TTL lists trimmed) and which of its rows ``rule`` drops."""
    drop = np.zeros(table.num_rows, dtype=bool)
    for sid, name in enumerate(state_names):
        rows = target & (state_ids == sid)
        if not bool(rows.any()):
            continue
        codec = codecs.get(name)
        if codec is None:
            raise InvalidInputError(f"state {name!r} has no decoder", code="FLINK_STATE_UNKNOWN")
        if rule.timers_before is not None and codec.kind == "timer":
            stamps = table.column("timestamp").to_numpy(zero_copy_only=False)
            drop |= rows & (np.nan_to_num(stamps.astype(np.float64), nan=np.inf) < rule.timers_before)
        if rule.ttl_ms is not None and rule.now_ms is not None and codec.kind != "timer":
            table, expired = _expired(table, codec, rows, rule.ttl_ms, rule.now_ms)
            drop |= expired
    if rule.key_filter is not None:
        selected = _selected_keys(table, rule.key_filter, codecs, key_type, state_names, state_ids, target)
        drop |= target & (selected if not rule.filter_keeps else ~selected)
    return table, drop


def is_ttl(codec: Codec | None) -> bool:
    """Return whether ``codec`` decodes Flink's ``TtlSerializer`` (a TTL timestamp before the value)."""
    return codec is not None and codec.type_name.startswith("Ttl<")


def _expired(
    table: pa.Table, codec: StateCodecs, rows: np.ndarray, ttl_ms: int, now_ms: int
) -> tuple[pa.Table, np.ndarray]:
    """Return ``table`` with TTL lists trimmed, and the rows of ``rows`` whose TTL expired at ``now_ms``."""
    drop = np.zeros(table.num_rows, dtype=bool)
    if not is_ttl(codec.value):
        return table, drop
    values = table.column("value").to_pylist()
    changed = False
    for i in np.flatnonzero(rows):
        raw = values[i]
        if raw is None:
            continue
        if codec.kind == "list":
            kept = [s for s in _element_spans(codec, raw) if not _stale(raw, s[0], ttl_ms, now_ms)]
            if not kept:
                drop[i] = True
            else:
                trimmed = bytes([LIST_DELIMITER]).join(raw[a:b] for a, b in kept)
                if trimmed != raw:
                    values[i], changed = trimmed, True
        elif _stale(raw, 0, ttl_ms, now_ms):
            drop[i] = True
    if changed:
        index = table.schema.get_field_index("value")
        table = table.set_column(index, table.schema.field(index), pa.array(values, type=pa.binary()))
    return table, drop


def _stale(raw: bytes, at: int, ttl_ms: int, now_ms: int) -> bool:
    """Return whether the TTL timestamp at ``raw[at:]`` is expired at ``now_ms`` (``TtlUtils.expired``)."""
    if len(raw) < at + 8:
        raise InvalidInputError("a TTL entry is shorter than its timestamp", code="FLINK_TTL_UNDECODABLE")
    stamp = _LONG.unpack_from(raw, at)[0]
    expires = stamp + ttl_ms
    if expires > _LONG_MAX:  # TtlUtils.getExpirationTimestamp saturates instead of overflowing
        expires = _LONG_MAX
    return expires <= now_ms


def _element_spans(codec: StateCodecs, raw: bytes) -> list[tuple[int, int]]:
    """Return the byte span of each element of a list state's value (``ListDelimitedSerializer``)."""
    element = codec.value
    assert element is not None
    spans, pos = [], 0
    try:
        while pos < len(raw):
            _value, end = element.read(raw, pos)
            spans.append((pos, end))
            pos = end
            if pos < len(raw):
                if raw[pos] != LIST_DELIMITER:
                    raise NotDecodable(f"no ',' between list elements at {pos}")
                pos += 1
    except (NotDecodable, struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise InvalidInputError(
            f"state {codec.name!r}: a list under TTL does not decode ({exc})", code="FLINK_TTL_UNDECODABLE"
        ) from None
    return spans


def decoded_keys(table: pa.Table, codec: Codec, key_type: str) -> pa.Array:
    """Return the keys of ``table`` decoded (typed key columns as they are; others by ``codec``).

    Raises:
        InvalidInputError: A key its serializer does not decode (``FLINK_KEY_UNDECODABLE``).
    """
    keys = table.column("key").combine_chunks()
    if key_type in _TYPED_KEYS:
        return keys
    if codec.reason:
        return keys  # opaque keys: their bytes
    out = []
    for raw in keys.to_pylist():
        try:
            out.append(codec.to_arrow(codec.decode(raw)))
        except NotDecodable as exc:
            raise InvalidInputError(f"a key does not decode ({exc})", code="FLINK_KEY_UNDECODABLE") from None
    return pa.array(out, type=codec.arrow_type())


def _selected_keys(
    table: pa.Table,
    expression: pc.Expression,
    codecs: Mapping[str, StateCodecs],
    key_type: str,
    state_names: tuple[str, ...],
    state_ids: np.ndarray,
    target: np.ndarray,
) -> np.ndarray:
    """Return which rows' keys ``expression`` selects (null counts as not selected, as in SQL)."""
    rows = np.flatnonzero(target)
    selected = np.zeros(table.num_rows, dtype=bool)
    if not len(rows):
        return selected
    codec = codecs[state_names[int(state_ids[rows[0]])]].key
    keys = decoded_keys(table.take(pa.array(rows)), codec, key_type)
    probe = pa.table({"key": keys, "__row": pa.array(rows, type=pa.int64())})
    # One thread (Table.filter would start Acero's pool, which a low address-space limit can deadlock).
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(probe)),
            acero.Declaration("filter", acero.FilterNodeOptions(expression)),
        ]
    )
    hits = plan.to_table(use_threads=False)
    selected[np.asarray(hits.column("__row").to_numpy(), dtype=np.int64)] = True
    return selected


def _count(
    into: dict[tuple[str, int], int], table: pa.Table, names: tuple[str, ...], mask: np.ndarray
) -> None:
    """Add the rows of ``mask`` to ``into`` by ``(state, key group)``."""
    if not bool(mask.any()):
        return
    groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int64)[mask]
    state = table.column("state")
    if pa.types.is_dictionary(state.type):
        ids = _state_ids(table)[mask]
    else:
        lookup = {n: i for i, n in enumerate(names)}
        ids = np.asarray([lookup[n] for n in state.to_pylist()], dtype=np.int64)[mask]
    pairs, n = np.unique(ids.astype(np.int64) * (1 << 32) + groups, return_counts=True)
    for pair, count in zip(pairs.tolist(), n.tolist(), strict=True):
        key = (names[pair >> 32], pair & 0xFFFFFFFF)
        into[key] = into.get(key, 0) + count


def _count_bytes(into: dict[str, int], table: pa.Table, names: tuple[str, ...], mask: np.ndarray) -> None:
    """Add the serialized bytes of the rows of ``mask`` (namespace, user key, value) to ``into`` by state."""
    if not bool(mask.any()):
        return
    chosen = pa.array(np.flatnonzero(mask))
    part = table.take(chosen)
    sizes = np.zeros(part.num_rows, dtype=np.int64)
    key = part.column("key")
    if pa.types.is_string(key.type) or pa.types.is_binary(key.type):
        sizes += np.asarray(pc.binary_length(key).to_numpy(zero_copy_only=False), dtype=np.int64)
    else:
        sizes += max(key.type.bit_width // 8, 1)
    for column in ("namespace", "user_key", "value"):
        lengths = pc.binary_length(part.column(column)).to_numpy(zero_copy_only=False)
        sizes += np.nan_to_num(lengths.astype(np.float64)).astype(np.int64)
    sizes += np.where(pc.is_valid(part.column("timestamp")).to_numpy(zero_copy_only=False), 8, 0)
    ids = _state_ids(part)
    for sid in np.unique(ids).tolist():
        into[names[sid]] = into.get(names[sid], 0) + int(sizes[ids == sid].sum())


__all__ = [
    "CompactRule",
    "EditCounts",
    "KeyedEdit",
    "edit_in_range",
    "decoded_keys",
    "edited_batches",
    "header_codecs",
    "is_ttl",
]
