"""Encode one keyed-state entry from typed values: key, namespace, user key and value bytes.

The inverse of ``data.lookup.typed_entry`` and of the export's typed rows (``data.tables``): given a state's
codecs (``types.values.StateCodecs``, built from the serializer snapshots of its file's header), the bytes
Flink's serializers write for each part of an entry, in the layout of a canonical key-group block
(``FullSnapshotAsyncWriter``, ``keyed_layout``) and of kg's keyed rows (``core.schema.keyed_schema``):

- the key: the key serializer's bytes (a SQL key: ``RowDataSerializer``'s int length and
  ``BinaryRowData``); in a kg row typed for String, Long, Integer and Boolean keys (``KeyCodec.decode``);
- the namespace: the namespace serializer's bytes (``VoidNamespace``: one 0 byte);
- a value state's value: the value serializer's bytes (TTL: ``TtlSerializer``'s timestamp, then the value);
- a list state's value: the elements' bytes joined by one ``,`` byte (``ListDelimitedSerializer``, as
  RocksDB stores lists and every canonical savepoint writes them);
- a map state: one entry per user key, the user key's bytes after the namespace, the value as a boolean
  isNull and the user value's bytes (kg rows keep the value without the flag; None for a null value);
- a timer: key and namespace bytes and the timestamp (``TimerSerializer``).

Nothing is written for a part kg cannot encode: ``NotEncodable`` names it before any value is encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from keygroup_cli.flink.types.serializers import KeyCodec
from keygroup_cli.flink.types.values import (
    NotEncodable,
    StateCodecs,
    ValueNotEncodable,
)

_T = TypeVar("_T")

#: The columns of an export row (``data.tables.state_schema``) per state kind (``key_group`` is ignored).
_COLUMNS = {
    "timer": frozenset({"key_group", "key", "namespace", "timestamp", "undecoded"}),
    "map": frozenset({"key_group", "key", "namespace", "user_key", "value", "undecoded"}),
    "list": frozenset({"key_group", "key", "namespace", "value", "undecoded"}),
    "value": frozenset({"key_group", "key", "namespace", "value", "undecoded"}),
}


@dataclass(frozen=True, slots=True)
class EncodedEntry:
    """The bytes of one keyed-state entry.

    Attributes:
        key: The key serializer's bytes.
        namespace: The namespace serializer's bytes.
        user_key: A map state's user key bytes (None otherwise).
        value: The kg keyed row's ``value``: a value state's bytes, a list state's elements joined by ``,``,
            a map state's user value without its null flag (None: a null map value); None for a timer.
        timestamp: A timer's timestamp (None otherwise).
    """

    key: bytes
    namespace: bytes
    user_key: bytes | None = None
    value: bytes | None = None
    timestamp: int | None = None

    def block_value(self, kind: str) -> bytes:
        """Return the value as the key-group block stores it for a state of ``kind``.

        A map entry's value is ``MapSerializer``'s boolean isNull and the value; a timer has no value bytes.
        """
        if kind == "map":
            return b"\x01" if self.value is None else b"\x00" + self.value
        return self.value or b""

    def key_cell(self, codec: KeyCodec) -> object:
        """Return the key as the kg keyed schema's ``key`` column holds it (``codec``: ``KeyedLayout.codec``).

        Typed for String, Long, Integer and Boolean keys; the serializer's bytes for any other.
        """
        return codec.decode(self.key)

    def row(self, codec: KeyCodec, key_group: int, state: str) -> dict[str, Any]:
        """Return the entry as a kg keyed row (``core.schema.keyed_schema``) in ``key_group``."""
        return {
            "key_group": key_group,
            "state": state,
            "key": self.key_cell(codec),
            "namespace": self.namespace,
            "user_key": self.user_key,
            "value": self.value,
            "timestamp": self.timestamp,
        }


def require_encodable(codecs: StateCodecs, columns: tuple[str, ...] | None = None) -> None:
    """Refuse a state with a part kg cannot encode (among ``columns``; default: every part it has).

    Raises:
        NotEncodable: The first such part, with the column and the reason.
    """
    reasons = codecs.write_reasons()
    if not reasons:
        return
    for column in columns or ("key", "namespace", "user_key", "value"):
        if column in reasons:
            raise NotEncodable(f"state {codecs.name!r} column {column!r}", reasons[column])


def encode_entry(
    codecs: StateCodecs,
    key: Any,
    namespace: Any = None,
    value: Any = None,
    *,
    user_key: Any = None,
    timestamp: int | None = None,
) -> EncodedEntry:
    """Encode one entry from values as ``Codec.decode`` returns them.

    Args:
        codecs: The state's codecs.
        key: The key (a SQL key: the list of its fields).
        namespace: The namespace (None for ``VoidNamespace``; a window: ``{"start", "end"}``).
        value: A value state's value; a list state's list of elements; a map state's user value (None: a
            null value); unused for timers.
        user_key: A map state's user key.
        timestamp: A timer's timestamp.

    Raises:
        NotEncodable: A part of the state kg cannot encode (before anything is encoded).
        ValueNotEncodable: A value that does not fit its part (a null value or list element, say).
    """
    require_encodable(codecs, _parts(codecs.kind))
    return _encode(codecs, key, namespace, value, user_key, timestamp)


def _encode(
    codecs: StateCodecs, key: Any, namespace: Any, value: Any, user_key: Any, timestamp: int | None
) -> EncodedEntry:
    """``encode_entry`` once the state's parts are known to encode."""
    key_bytes, namespace_bytes, user_bytes = _head(codecs, key, namespace, user_key)
    kind, element = codecs.kind, codecs.value
    if kind == "timer":
        if timestamp is None:
            raise ValueNotEncodable(f"state {codecs.name!r}", "a timer without a timestamp")
        return EncodedEntry(key_bytes, namespace_bytes, timestamp=_timestamp(codecs, timestamp))
    assert element is not None
    if kind == "map":
        item = None if value is None else _part(codecs, "value", lambda: element.write(value))
        return EncodedEntry(key_bytes, namespace_bytes, user_bytes, item)
    if value is None:
        raise ValueNotEncodable(
            f"state {codecs.name!r}", f"a {kind} state holds no null value (Flink clears the state instead)"
        )
    if kind == "list":
        return EncodedEntry(key_bytes, namespace_bytes, value=codecs.list_bytes(value))
    return EncodedEntry(
        key_bytes, namespace_bytes, value=_part(codecs, "value", lambda: element.write(value))
    )


def encode_arrow_entry(codecs: StateCodecs, row: Mapping[str, Any]) -> EncodedEntry:
    """Encode one row of the state's export schema (``data.tables.state_schema``), as ``arrow_rows`` reads it.

    Columns: ``key``, ``namespace`` (absent for ``VoidNamespace``), ``user_key`` (map states), ``value``
    (value, list and map states) or ``timestamp`` (timers), ``undecoded``; ``key_group`` is ignored (the key
    decides it). A row whose ``undecoded`` holds bytes and whose ``value`` is null is an entry kg exported
    without decoding its value: those bytes are written back unchanged.

    Raises:
        NotEncodable: A part of the state kg cannot encode (before anything is encoded).
        ValueNotEncodable: A value that does not fit its part, or a column the schema does not have.
    """
    kind = codecs.kind
    require_encodable(codecs, _parts(kind))
    if not row.keys() <= _COLUMNS[kind]:
        unknown = sorted(set(row) - _COLUMNS[kind])
        raise ValueNotEncodable(f"state {codecs.name!r}", f"the export schema has no column {unknown[0]!r}")
    if "key" not in row:
        raise ValueNotEncodable(f"state {codecs.name!r}", "no key column")
    key = _part(codecs, "key", lambda: codecs.key.from_arrow(row["key"]))
    namespace = _part(codecs, "namespace", lambda: codecs.namespace.from_arrow(row.get("namespace")))
    if kind == "timer":
        return _encode(codecs, key, namespace, None, None, row.get("timestamp"))
    element, user_codec = codecs.value, codecs.user_key
    assert element is not None
    user_key = None
    if user_codec is not None:
        user_key = _part(codecs, "user_key", lambda: user_codec.from_arrow(row.get("user_key")))
    undecoded, value = row.get("undecoded"), row.get("value")
    if undecoded is not None:
        if value is not None:
            raise ValueNotEncodable(f"state {codecs.name!r}", "a row with both a value and undecoded bytes")
        key_bytes, namespace_bytes, user_bytes = _head(codecs, key, namespace, user_key)
        return EncodedEntry(key_bytes, namespace_bytes, user_bytes, bytes(undecoded))
    if kind == "list" and value is not None:
        elements = _part(codecs, "value", lambda: [element.from_arrow(v) for v in value])
        return _encode(codecs, key, namespace, elements, None, None)
    decoded = None if value is None else _part(codecs, "value", lambda: element.from_arrow(value))
    return _encode(codecs, key, namespace, decoded, user_key, None)


def _head(codecs: StateCodecs, key: Any, namespace: Any, user_key: Any) -> tuple[bytes, bytes, bytes | None]:
    """Return the key's, the namespace's and (map states) the user key's bytes."""
    if key is None:
        # KeyGroupRangeAssignment.assignToKeyGroup: "Assigned key must not be null!"
        raise ValueNotEncodable(f"state {codecs.name!r} column 'key'", "None: Flink keys are never null")
    key_bytes = _part(codecs, "key", lambda: codecs.key.write(key))
    namespace_bytes = _part(codecs, "namespace", lambda: codecs.namespace.write(namespace))
    user_codec = codecs.user_key
    if codecs.kind != "map" or user_codec is None:
        return key_bytes, namespace_bytes, None
    return key_bytes, namespace_bytes, _part(codecs, "user_key", lambda: user_codec.write(user_key))


def _parts(kind: str) -> tuple[str, ...]:
    if kind == "timer":
        return ("key", "namespace")
    if kind == "map":
        return ("key", "namespace", "user_key", "value")
    return ("key", "namespace", "value")


def _part(codecs: StateCodecs, column: str, encode: Callable[[], _T]) -> _T:
    """Run ``encode``; a value that does not fit is named by state and column."""
    try:
        return encode()
    except ValueNotEncodable as exc:
        if exc.type_name.startswith("state "):
            raise
        raise exc.inside(f"state {codecs.name!r} column {column!r}: {exc.type_name}", "") from None


def _timestamp(codecs: StateCodecs, timestamp: Any) -> int:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or not -(2**63) <= timestamp < 2**63:
        raise ValueNotEncodable(f"state {codecs.name!r}", f"timer timestamp {timestamp!r} is not a long")
    return timestamp


__all__ = [
    "EncodedEntry",
    "encode_arrow_entry",
    "encode_entry",
    "require_encodable",
]
