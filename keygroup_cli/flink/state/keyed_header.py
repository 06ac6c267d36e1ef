"""The headers of Flink state files: serializer snapshots and the backend serialization proxies.

Mirrors ``KeyedBackendSerializationProxy.read`` and ``OperatorBackendSerializationProxy.read`` (Flink 2.3),
``StateMetaInfoSnapshotReadersWriters.CurrentReaderImpl`` (meta-info format 7) and
``TypeSerializerSnapshotSerializationUtil`` / ``TypeSerializerSnapshot.readVersionedSnapshot``.

Serializer snapshots carry no length, so a snapshot class kg does not know (POJO, Kryo, Avro, …) has no
findable end on its own. Two facts make the header parseable anyway: every ``CompositeTypeSerializerSnapshot``
is self-describing (magic ``911108``, outer version, outer body, magic ``1333245``, nested snapshots), and the
header's end is known from the file (the first key-group / element offset). Unknown bodies are therefore
resolved by backtracking: the parser tries each candidate end and keeps the one from which the rest of the
header parses and ends exactly where the data begins. Such snapshots are reported by class name with
``known=False``; their raw bytes are kept either way.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from keygroup_cli.errors import InvalidSnapshotError, UnsupportedFormatError
from keygroup_cli.flink.io.binary import decode_modified_utf8
from keygroup_cli.flink.metadata.handles import DISTRIBUTION_MODES, OperatorStateHandle
from keygroup_cli.flink.state.serializers import ROW_DATA_SNAPSHOT, read_string

#: ``CompositeTypeSerializerSnapshot.MAGIC_NUMBER``.
COMPOSITE_MAGIC = 911108
#: ``NestedSerializersSnapshotDelegate.MAGIC_NUMBER``.
NESTED_MAGIC = 1333245
#: ``TypeSerializerSnapshotSerializationUtil``'s proxy version (1, the pre-1.7 config snapshot, is refused).
SNAPSHOT_PROXY_VERSION = 2
#: flink-avro's ``AvroSerializerSnapshot`` (runtime class and writer schema; ``flink/state/avro.py``).
AVRO_SNAPSHOT = "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot"
#: ``LinkedOptionalMapSerializer.HEADER``: starts each of the three maps of a POJO serializer snapshot.
OPTIONAL_MAP_HEADER = 0x4F2C69A3D70
#: The POJO serializer's snapshot: not composite, but its nested snapshots are length-framed.
POJO_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot"
#: The Kryo serializer's snapshot (``GenericTypeInfo``), in Flink 1.x (Kryo 2) and 2.x (Kryo 5) alike.
KRYO_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"
#: ``ROW_DATA_SNAPSHOT``, the Table runtime's ``RowDataSerializer`` snapshot (SQL jobs' keys and rows), is
#: not composite, but its nested snapshots follow the fields' logical types (``writeSnapshot``: int arity,
#: each ``LogicalType`` Java-serialized, then ``NestedSerializersSnapshotDelegate``).
#: Snapshots whose body starts with the serialized type's class name (``writeUTF``).
TYPE_CLASS_FIRST = frozenset((POJO_SNAPSHOT, KRYO_SNAPSHOT))

#: ``StateMetaInfoSnapshot.BackendStateType`` by ordinal.
BACKEND_STATE_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE", "KEY_VALUE_V2")
#: ``StateDescriptor.Type`` names: a ``KEYED_STATE_TYPE`` option Flink's ``Type.valueOf`` accepts.
KEYED_STATE_TYPES = ("UNKNOWN", "VALUE", "LIST", "REDUCING", "FOLDING", "AGGREGATING", "MAP")
#: ``OperatorStateHandle.Mode`` names a list state's ``OPERATOR_STATE_DISTRIBUTION_MODE`` may hold; a
#: broadcast state's is ``BROADCAST``.
LIST_DISTRIBUTION_MODES = ("SPLIT_DISTRIBUTE", "UNION")

#: Snapshot classes whose body is empty (``SimpleTypeSerializerSnapshot`` and similar).
SIMPLE_SNAPSHOTS = frozenset(
    f"org.apache.flink.api.common.typeutils.base.{name}Serializer${name}SerializerSnapshot"
    for name in (
        "String",
        "Long",
        "Int",
        "Short",
        "Byte",
        "Boolean",
        "Char",
        "Double",
        "Float",
        "Void",
        "Date",
        "SqlDate",
        "SqlTime",
        "SqlTimestamp",
        "BigInteger",
        "BigDecimal",
        "Instant",
        "LocalDate",
        "LocalTime",
        "LocalDateTime",
        "BooleanValue",
        "ByteValue",
        "CharValue",
        "DoubleValue",
        "FloatValue",
        "IntValue",
        "LongValue",
        "NullValue",
        "ShortValue",
        "StringValue",
    )
) | frozenset(
    (
        "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer"
        "$BytePrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.LongPrimitiveArraySerializer"
        "$LongPrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.IntPrimitiveArraySerializer"
        "$IntPrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.StringArraySerializer$StringArraySerializerSnapshot",
        "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot",
        "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot",
        "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot",
        "org.apache.flink.runtime.state.JavaSerializer$JavaSerializerSnapshot",
    )
)

#: ``LinkedOptionalMapSerializer.HEADER``.
_CLASS_NAME = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_USHORT = struct.Struct(">H")
#: Upper bound on parse attempts while resolving unknown snapshot bodies (keeps corrupt input fast).
_BUDGET = 200_000


@dataclass(frozen=True, slots=True)
class SerializerSnapshot:
    """A ``TypeSerializerSnapshot`` as written by ``writeVersionedSnapshot``.

    Attributes:
        class_name: The snapshot class, e.g. ``…LongSerializer$LongSerializerSnapshot``.
        version: The snapshot version.
        raw: The exact bytes from the class name to the end of the body (lossless).
        nested: Nested snapshots of a composite snapshot, in order; of a POJO snapshot, its fields' then
            its subclasses' snapshots (``PojoSerializerSnapshotData``).
        known: False when the body's end was inferred by backtracking rather than understood.
        nested_names: What each nested snapshot serializes, where the snapshot names it: a POJO's field
            names, and ``subclass <class>`` for its subclasses (empty for composite snapshots).
    """

    class_name: str
    version: int
    raw: bytes
    nested: tuple[SerializerSnapshot, ...] = ()
    known: bool = True
    nested_names: tuple[str, ...] = ()

    @property
    def type_class(self) -> str | None:
        """Return the class a POJO or Kryo snapshot serializes (the first string of its body), else None."""
        if self.class_name not in TYPE_CLASS_FIRST:
            return None
        body = 2 + _USHORT.unpack_from(self.raw, 0)[0] + 4
        try:
            n = _USHORT.unpack_from(self.raw, body)[0]
            return decode_modified_utf8(self.raw[body + 2 : body + 2 + n])
        except (struct.error, ValueError):
            return None

    @property
    def serializer_name(self) -> str:
        """Return the short serializer name, e.g. ``LongSerializer`` or ``ListSerializer<LongSerializer>``."""
        outer = self.class_name.rsplit(".", 1)[-1].split("$", 1)[0]
        if outer.endswith("Snapshot"):
            outer = outer[: -len("Snapshot")]
        if self.nested:
            return f"{outer}<{', '.join(n.serializer_name for n in self.nested)}>"
        return outer


@dataclass(frozen=True, slots=True)
class StateMetaInfo:
    """One state's ``StateMetaInfoSnapshot``: name, backend type ordinal, options and serializers."""

    name: str
    backend_type: int
    options: tuple[tuple[str, str], ...]
    serializers: tuple[tuple[str, SerializerSnapshot], ...]

    @property
    def backend_type_name(self) -> str:
        """Return the ``BackendStateType`` name."""
        return BACKEND_STATE_TYPES[self.backend_type]

    def option(self, key: str) -> str | None:
        """Return an option value, e.g. ``KEYED_STATE_TYPE``."""
        return next((v for k, v in self.options if k == key), None)

    def serializer(self, key: str) -> SerializerSnapshot | None:
        """Return a serializer snapshot, e.g. ``VALUE_SERIALIZER``."""
        return next((s for k, s in self.serializers if k == key), None)

    @property
    def kind(self) -> str:
        """Return kg's kind: value/list/map/reducing/aggregating, timer, operator-split/union/broadcast."""
        kind = self.backend_type_name
        if kind == "PRIORITY_QUEUE":
            return "timer"
        if kind == "BROADCAST":
            return "operator-broadcast"
        if kind == "OPERATOR":
            # read_operator_header admits only SPLIT_DISTRIBUTE and UNION here.
            return "operator-union" if self.option(MODE_OPTION) == "UNION" else "operator-split"
        return (self.option("KEYED_STATE_TYPE") or "unknown").lower()


@dataclass(frozen=True, slots=True)
class KeyedStateHeader:
    """The ``KeyedBackendSerializationProxy`` at the start of a keyed-state stream.

    ``states`` is None when the header could not be resolved (an unknown serializer snapshot whose end
    could not be inferred); ``end`` is the byte length of the header when known.
    """

    version: int
    compressed: bool
    key_serializer: SerializerSnapshot | None
    states: tuple[StateMetaInfo, ...] | None
    end: int | None


@dataclass(frozen=True, slots=True)
class OperatorStateHeader:
    """The ``OperatorBackendSerializationProxy`` at the start of an operator-state stream."""

    version: int
    compressed: bool
    states: tuple[StateMetaInfo, ...] | None
    broadcast_states: tuple[StateMetaInfo, ...] | None
    end: int | None


class _Fail(Exception):
    """This alternative does not parse; try the next one."""


class _GiveUp(Exception):
    """The search budget is spent."""


_G = TypeVar("_G")


def _parser(fn: Callable[..., Iterator[_G]]) -> Callable[..., Iterator[_G]]:
    """Make a parse method yield no alternatives, instead of raising, when its own reads fail.

    A failure inside a *continuation* happens in the caller's frame, so it never cuts off this
    generator's remaining alternatives.
    """

    @functools.wraps(fn)
    def wrapper(*args: object) -> Iterator[_G]:
        try:
            yield from fn(*args)
        except _Fail:
            return

    return wrapper


class _Grammar:
    """Backtracking parser over a header's bytes; every method yields ``(value, next_pos)`` alternatives."""

    def __init__(self, data: bytes, limit: int) -> None:
        self.data = data
        self.limit = limit
        self.steps = 0

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > _BUDGET:
            raise _GiveUp

    def int_at(self, pos: int) -> int:
        if pos + 4 > self.limit:
            raise _Fail
        value: int = _INT.unpack_from(self.data, pos)[0]
        return value

    def utf_at(self, pos: int) -> tuple[str, int]:
        if pos + 2 > self.limit:
            raise _Fail
        n = _USHORT.unpack_from(self.data, pos)[0]
        end = pos + 2 + n
        if end > self.limit:
            raise _Fail
        try:
            return decode_modified_utf8(self.data[pos + 2 : end]), end
        except ValueError:
            raise _Fail from None

    @_parser
    def top_snapshot(self, pos: int) -> Iterator[tuple[SerializerSnapshot, int]]:
        # TypeSerializerSnapshotSerializationUtil.readSerializerSnapshot: proxy version, then the snapshot.
        if self.int_at(pos) != SNAPSHOT_PROXY_VERSION:
            raise _Fail
        yield from self.versioned(pos + 4)

    @_parser
    def versioned(self, pos: int) -> Iterator[tuple[SerializerSnapshot, int]]:
        # TypeSerializerSnapshot.readVersionedSnapshot: class name, version, body.
        self._tick()
        name, p = self.utf_at(pos)
        if not _CLASS_NAME.fullmatch(name):
            raise _Fail
        version = self.int_at(p)
        p += 4
        if name in SIMPLE_SNAPSHOTS:
            yield SerializerSnapshot(name, version, self.data[pos:p]), p
            return
        if name == POJO_SNAPSHOT:
            # The frames make a POJO snapshot's end certain: the only alternative (backtracking over it would
            # also accept a split inside it, its field snapshots read as the next serializers).
            for (nested, names), q in self._pojo(p):
                yield SerializerSnapshot(name, version, self.data[pos:q], nested, nested_names=names), q
            return
        if name == KRYO_SNAPSHOT:
            # Kryo's own maps give its end first; a body that is not them (inside a POJO field's frame,
            # which bounds it) falls through to the alternatives below.
            for q in self._kryo(p):
                yield SerializerSnapshot(name, version, self.data[pos:q]), q
        delimited = _DELIMITED.get((name, version))
        if delimited is not None:
            # A body whose end its own bytes give (an enum's constants): the only alternative.
            q = delimited(self, p)
            yield SerializerSnapshot(name, version, self.data[pos:q]), q
            return
        if name == ROW_DATA_SNAPSHOT:
            # The arity bounds the search for the nested snapshots after the Java-serialized logical types.
            for nested, q in self._nested_after(p + 4, self.int_at(p)):
                yield SerializerSnapshot(name, version, self.data[pos:q], nested), q
        if p + 4 <= self.limit and _INT.unpack_from(self.data, p)[0] == COMPOSITE_MAGIC:
            for nested, q in self._composite(p):
                yield SerializerSnapshot(name, version, self.data[pos:q], nested), q
        for q in range(p, self.limit + 1):
            self._tick()
            yield SerializerSnapshot(name, version, self.data[pos:q], known=False), q

    @_parser
    def _composite(self, pos: int) -> Iterator[tuple[tuple[SerializerSnapshot, ...], int]]:
        # CompositeTypeSerializerSnapshot: magic, outer version, outer body (class-specific, usually
        # empty or a class name), then NestedSerializersSnapshotDelegate: magic, version 1, n snapshots.
        marker = _INT.pack(NESTED_MAGIC)
        start = pos + 8
        while True:
            at = self.data.find(marker, start, self.limit)
            if at < 0:
                return
            start = at + 1
            try:
                if self.int_at(at + 4) != 1:
                    continue
                count = self.int_at(at + 8)
            except _Fail:
                return
            if not 0 <= count <= 255:
                continue
            yield from self._sequence(at + 12, count)

    @_parser
    def _nested_after(self, pos: int, count: int) -> Iterator[tuple[tuple[SerializerSnapshot, ...], int]]:
        # A NestedSerializersSnapshotDelegate of ``count`` snapshots somewhere at or after ``pos``.
        if not 0 <= count <= 255:
            return
        marker = _INT.pack(NESTED_MAGIC) + _INT.pack(1) + _INT.pack(count)
        start = pos
        while True:
            at = self.data.find(marker, start, self.limit)
            if at < 0:
                return
            start = at + 1
            yield from self._sequence(at + 12, count)

    @_parser
    def _pojo(self, pos: int) -> Iterator[tuple[tuple[tuple[SerializerSnapshot, ...], tuple[str, ...]], int]]:
        # PojoSerializerSnapshotData.writeSnapshotData: the POJO class, then three LinkedOptionalMaps
        # (fields, registered subclasses, other subclasses). Each map: header, size, then per entry its
        # name, a present flag and a length-framed key (PojoFieldUtils.writeField for a field, nothing
        # for a subclass), a present flag and a length-framed writeVersionedSnapshot. The frames make
        # this body's end certain: one alternative at most.
        _pojo_class, p = self.utf_at(pos)
        nested: list[SerializerSnapshot] = []
        names: list[str] = []
        for field_map in (True, False, False):
            if p + 12 > self.limit or _LONG.unpack_from(self.data, p)[0] != OPTIONAL_MAP_HEADER:
                raise _Fail
            count = self.int_at(p + 8)
            if not 0 <= count <= 65535:
                raise _Fail
            p += 12
            for _ in range(count):
                key, p = self.utf_at(p)
                if self._flag(p):
                    p = self._frame(p + 1)[1]
                else:
                    p += 1
                present = self._flag(p)
                p += 1
                if present:
                    start, p = self._frame(p)
                    nested.append(self._framed_snapshot(start, p))
                    names.append(key if field_map else f"subclass {key}")
        yield (tuple(nested), tuple(names)), p

    @_parser
    def _kryo(self, pos: int) -> Iterator[int]:
        # KryoSerializerSnapshotData.writeSnapshotData: the type class, then three LinkedOptionalMaps
        # (registrations, default serializers, default serializer classes) whose keys and values are
        # length-framed: the body's end is certain. Kryo's own bytes stay opaque.
        _type_class, p = self.utf_at(pos)
        for _ in range(3):
            if p + 12 > self.limit or _LONG.unpack_from(self.data, p)[0] != OPTIONAL_MAP_HEADER:
                raise _Fail
            count = self.int_at(p + 8)
            if not 0 <= count <= 65535:
                raise _Fail
            p += 12
            for _ in range(count):
                _key, p = self.utf_at(p)
                for _part in range(2):
                    present = self._flag(p)
                    p = self._frame(p + 1)[1] if present else p + 1
        yield p

    def _flag(self, pos: int) -> bool:
        if pos >= self.limit or self.data[pos] > 1:
            raise _Fail
        return self.data[pos] == 1

    def _frame(self, pos: int) -> tuple[int, int]:
        """Return the start and end of the length-framed bytes at ``pos`` (an int length, then them)."""
        n = self.int_at(pos)
        if n < 0 or pos + 4 + n > self.limit:
            raise _Fail
        return pos + 4, pos + 4 + n

    def _framed_snapshot(self, start: int, end: int) -> SerializerSnapshot:
        """Parse the one versioned snapshot that fills ``data[start:end]`` exactly."""
        inner = _Grammar(self.data, end)
        inner.steps = self.steps
        found = _first(inner.versioned(start), end)
        self.steps = inner.steps
        if found is None:
            raise _Fail
        return found[0]

    @_parser
    def _sequence(self, pos: int, count: int) -> Iterator[tuple[tuple[SerializerSnapshot, ...], int]]:
        if count == 0:
            yield (), pos
            return
        for value, p in self.versioned(pos):
            for rest, q in self._sequence(p, count - 1):
                yield (value, *rest), q

    @_parser
    def meta_info(self, pos: int) -> Iterator[tuple[StateMetaInfo, int]]:
        # StateMetaInfoSnapshotReadersWriters.CurrentReaderImpl.readStateMetaInfoSnapshot
        name, p = self.utf_at(pos)
        backend_type = self.int_at(p)
        if not 0 <= backend_type < len(BACKEND_STATE_TYPES):
            raise _Fail
        n_options = self.int_at(p + 4)
        if not 0 <= n_options <= 64:
            raise _Fail
        p += 8
        options = []
        for _ in range(n_options):
            key, p = self.utf_at(p)
            value, p = self.utf_at(p)
            options.append((key, value))
        n_serializers = self.int_at(p)
        if not 0 <= n_serializers <= 64:
            raise _Fail
        for serializers, q in self._serializers(p + 4, n_serializers):
            yield StateMetaInfo(name, backend_type, tuple(options), serializers), q

    @_parser
    def _serializers(
        self, pos: int, count: int
    ) -> Iterator[tuple[tuple[tuple[str, SerializerSnapshot], ...], int]]:
        if count == 0:
            yield (), pos
            return
        key, p = self.utf_at(pos)
        for snapshot, q in self.top_snapshot(p):
            for rest, r in self._serializers(q, count - 1):
                yield ((key, snapshot), *rest), r

    @_parser
    def meta_infos(self, pos: int, count: int) -> Iterator[tuple[tuple[StateMetaInfo, ...], int]]:
        if count == 0:
            yield (), pos
            return
        for info, p in self.meta_info(pos):
            for rest, q in self.meta_infos(p, count - 1):
                yield (info, *rest), q

    def enum_end(self, pos: int) -> int:
        """``EnumSerializerSnapshot`` (version 3): class name, int count, each constant's name."""
        _name, pos = self.utf_at(pos)
        count = self.int_at(pos)
        if not 0 <= count <= 1 << 16:
            raise _Fail
        pos += 4
        for _ in range(count):
            _constant, pos = self.utf_at(pos)
        return pos

    def avro_end(self, pos: int, version: int) -> int:
        """Return where an ``AvroSerializerSnapshot`` body of ``version`` ends.

        v2: runtime class and schema (``writeUTF``); v3: both as ``StringValue.writeString`` strings.
        """
        if version == 3:
            for _ in range(2):
                try:
                    _text, pos = read_string(self.data, pos)
                except InvalidSnapshotError:
                    raise _Fail from None
            if pos > self.limit:
                raise _Fail
            return pos
        for _ in range(2):
            _text, pos = self.utf_at(pos)
        return pos

    def short_at(self, pos: int) -> int:
        if pos + 2 > self.limit:
            raise _Fail
        value: int = _SHORT.unpack_from(self.data, pos)[0]
        return value

    def short_at_or(self, pos: int, default: int) -> int:
        return int(_SHORT.unpack_from(self.data, pos)[0]) if pos + 2 <= self.limit else default


#: Snapshot bodies whose end their own bytes give, by (class, version).
_DELIMITED: dict[tuple[str, int], Callable[[_Grammar, int], int]] = {
    (
        "org.apache.flink.api.common.typeutils.base.EnumSerializer$EnumSerializerSnapshot",
        3,
    ): _Grammar.enum_end,
    # The Table runtime's DECIMAL (precision, scale) and TIMESTAMP (precision) serializers: fixed bodies.
    **{
        ("org.apache.flink.table.runtime.typeutils.DecimalDataSerializer$DecimalSerializerSnapshot", v): (
            lambda _g, p: p + 8
        )
        for v in (1, 2, 3)
    },
    (
        "org.apache.flink.table.runtime.typeutils.TimestampDataSerializer$TimestampDataSerializerSnapshot",
        1,
    ): lambda _g, p: p + 4,
    # flink-avro's snapshot: its strings give its end (the writer schema is the last of them). Version 1
    # bodies were written both with and without the runtime class: found by backtracking instead.
    **{(AVRO_SNAPSHOT, v): functools.partial(lambda v, g, p: g.avro_end(p, v), v) for v in (2, 3)},
}


def _first(alternatives: Iterator[tuple[_G, int]], end: int | None) -> tuple[_G, int] | None:
    for value, pos in alternatives:
        if end is None or pos == end:
            return value, pos
    return None


#: Proxy versions are small counts Flink bumps by one (keyed 1-6, operator state 1-6 so far): a version
#: outside ``(0, 2**16)`` was written by no Flink, past or future; it is damage, not an old format.
_PLAUSIBLE_VERSIONS = 1 << 16


def _implausible_version(source: str, what: str, version: int) -> InvalidSnapshotError:
    return InvalidSnapshotError(
        f"{source}: {what} header version {version} is one no Flink writes (damaged bytes)",
        code="FLINK_STATE_HEADER_CORRUPT",
    )


def read_keyed_header(data: bytes, source: str, end: int | None = None) -> KeyedStateHeader:
    """Parse a ``KeyedBackendSerializationProxy`` from the first bytes of a keyed-state stream.

    Args:
        data: The stream's first bytes (at least the header).
        source: The file, for error messages.
        end: Where the header ends (the first non-zero key-group offset, or the stream size), if known.

    Raises:
        UnsupportedFormatError: A proxy version below 6 (Flink < 1.8; Flink 1.17+ refuses them too).
        InvalidSnapshotError: The bytes are not a keyed-state header.
    """
    if len(data) < 5:
        raise InvalidSnapshotError(
            f"{source}: keyed-state header truncated", code="FLINK_STATE_HEADER_CORRUPT"
        )
    version = _INT.unpack_from(data, 0)[0]
    if not 0 < version < _PLAUSIBLE_VERSIONS:
        raise _implausible_version(source, "keyed-state", version)
    if version < 6:
        raise UnsupportedFormatError(
            f"{source}: Unsupported readVersion [{version}], please migrate using Flink 1.16",
            code="FLINK_STATE_HEADER_VERSION",
        )
    compressed = data[4] != 0
    grammar = _Grammar(data, min(len(data), end) if end is not None else len(data))

    @_parser
    def header(pos: int) -> Iterator[tuple[tuple[SerializerSnapshot, tuple[StateMetaInfo, ...]], int]]:
        for key, p in grammar.top_snapshot(pos):
            count = grammar.short_at_or(p, -1)
            if count < 0:
                continue
            for states, q in grammar.meta_infos(p + 2, count):
                yield (key, states), q

    try:
        found = _first(header(5), end)
    except _GiveUp:
        return KeyedStateHeader(version, compressed, None, None, end)
    if found is None:
        raise InvalidSnapshotError(
            f"{source}: cannot parse the keyed-state header (KeyedBackendSerializationProxy)",
            code="FLINK_STATE_HEADER_CORRUPT",
        )
    (key, states), pos = found
    _check_keyed_states(states, source)
    return KeyedStateHeader(version, compressed, key, states, pos)


def parse_snapshot(data: bytes, source: str) -> SerializerSnapshot:
    """Parse one ``writeVersionedSnapshot`` (class name, version, body) that fills ``data`` exactly.

    For snapshots framed with their length, e.g. a POJO field's in ``PojoSerializerSnapshotData``.

    Raises:
        InvalidSnapshotError: The bytes are not one serializer snapshot.
    """
    grammar = _Grammar(data, len(data))
    try:
        found = _first(grammar.versioned(0), len(data))
    except _GiveUp:
        found = None
    if found is None:
        raise InvalidSnapshotError(f"{source}: not a serializer snapshot", code="FLINK_STATE_HEADER_CORRUPT")
    return found[0]


def read_versioned_snapshot(data: bytes, pos: int, end: int) -> tuple[SerializerSnapshot, int] | None:
    """Parse one ``writeVersionedSnapshot`` at ``pos`` whose end its own bytes give, or return None.

    For snapshots that are not framed by a length (a timer section's key and namespace serializers): only a
    body kg understands counts (a simple snapshot, a POJO's frames, Kryo's maps, a composite's nested
    snapshots), never one whose end would be a guess.
    """
    grammar = _Grammar(data, end)
    try:
        for snapshot, q in grammar.versioned(pos):
            if snapshot.known and all(n.known for n in snapshot.nested):
                return snapshot, q
            return None
    except _GiveUp:
        return None
    return None


def read_operator_header(data: bytes, source: str, end: int | None = None) -> OperatorStateHeader:
    """Parse an ``OperatorBackendSerializationProxy`` from the first bytes of an operator-state stream.

    Args:
        data: The stream's first bytes (at least the header).
        source: The file, for error messages.
        end: Where the header ends, if known (see ``operator_header_end``).

    Raises:
        UnsupportedFormatError: A proxy version below 5.
        InvalidSnapshotError: The bytes are not an operator-state header.
    """
    if len(data) < 4:
        raise InvalidSnapshotError(
            f"{source}: operator-state header truncated", code="FLINK_STATE_HEADER_CORRUPT"
        )
    version = _INT.unpack_from(data, 0)[0]
    if not 0 < version < _PLAUSIBLE_VERSIONS:
        raise _implausible_version(source, "operator-state", version)
    if version not in (5, 6):
        raise UnsupportedFormatError(
            f"{source}: unsupported operator-state proxy version {version} (kg reads 5 and 6, Flink 1.8+)",
            code="FLINK_STATE_HEADER_VERSION",
        )
    # The compression flag exists from proxy version 6 (meta-info format 7) on.
    compressed = version >= 6 and len(data) > 4 and data[4] != 0
    start = 5 if version >= 6 else 4
    grammar = _Grammar(data, min(len(data), end) if end is not None else len(data))

    @_parser
    def header(pos: int) -> Iterator[tuple[tuple[tuple[StateMetaInfo, ...], tuple[StateMetaInfo, ...]], int]]:
        count = grammar.short_at(pos)
        if count < 0:
            return
        for states, p in grammar.meta_infos(pos + 2, count):
            n_broadcast = grammar.short_at_or(p, -1)
            if n_broadcast < 0:
                continue
            for broadcast, q in grammar.meta_infos(p + 2, n_broadcast):
                yield (states, broadcast), q

    try:
        found = _first(header(start), end)
    except _GiveUp:
        return OperatorStateHeader(version, compressed, None, None, end)
    if found is None:
        raise InvalidSnapshotError(
            f"{source}: cannot parse the operator-state header (OperatorBackendSerializationProxy)",
            code="FLINK_STATE_HEADER_CORRUPT",
        )
    (states, broadcast), pos = found
    _check_operator_states(states, broadcast, source)
    return OperatorStateHeader(version, compressed, states, broadcast, pos)


#: The option naming a keyed state's ``StateDescriptor.Type``.
TYPE_OPTION = "KEYED_STATE_TYPE"
#: The option naming an operator state's ``OperatorStateHandle.Mode``.
MODE_OPTION = "OPERATOR_STATE_DISTRIBUTION_MODE"


def _invalid_enum(source: str, what: str) -> InvalidSnapshotError:
    return InvalidSnapshotError(f"{source}: {what}", code="FLINK_STATE_META_INFO_INVALID")


def _check_unique(names: list[str], source: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise _invalid_enum(source, f"the header declares state {name!r} twice")
        seen.add(name)


def _check_keyed_states(states: tuple[StateMetaInfo, ...], source: str) -> None:
    """Refuse what Flink's restore refuses in a keyed header's meta infos (the enums it ``valueOf``s).

    A keyed backend restores ``KEY_VALUE`` (``KEY_VALUE_V2``) and ``PRIORITY_QUEUE`` states only, and
    ``RegisteredKeyValueStateBackendMetaInfo`` reads ``StateDescriptor.Type.valueOf(KEYED_STATE_TYPE)``:
    a name that is not one (a flipped byte: ``VALUF``, ``vALUE``) or none at all fails there.

    Raises:
        InvalidSnapshotError: ``FLINK_STATE_META_INFO_INVALID``.
    """
    for info in states:
        backend = info.backend_type_name
        if backend not in ("KEY_VALUE", "KEY_VALUE_V2", "PRIORITY_QUEUE"):
            raise _invalid_enum(source, f"keyed state {info.name!r} has backend state type {backend}")
        if backend != "PRIORITY_QUEUE" and info.option(TYPE_OPTION) not in KEYED_STATE_TYPES:
            raise _invalid_enum(
                source, f"keyed state {info.name!r} has state type {info.option(TYPE_OPTION)!r}"
            )
        for required in _REQUIRED_SERIALIZERS.get(backend, ()):
            if info.serializer(required) is None:
                # Registered*BackendMetaInfo(snapshot) checkNotNull's them: a flipped key name fails there.
                raise _invalid_enum(
                    source,
                    f"keyed state {info.name!r} has no {required} (its serializers: "
                    f"{', '.join(k for k, _ in info.serializers) or 'none'})",
                )
    _check_unique([i.name for i in states], source)


#: The serializer snapshots Flink's restore requires of a keyed state (``CommonSerializerKeys``):
#: ``RegisteredKeyValueStateBackendMetaInfo`` and ``RegisteredPriorityQueueStateBackendMetaInfo``.
_REQUIRED_SERIALIZERS = {
    "KEY_VALUE": ("NAMESPACE_SERIALIZER", "VALUE_SERIALIZER"),
    "PRIORITY_QUEUE": ("VALUE_SERIALIZER",),
}


def _check_operator_states(
    states: tuple[StateMetaInfo, ...], broadcast: tuple[StateMetaInfo, ...], source: str
) -> None:
    """Refuse what Flink's restore refuses in an operator-state header's meta infos.

    ``RegisteredOperatorStateBackendMetaInfo`` reads ``OperatorStateHandle.Mode.valueOf`` of the
    distribution-mode option: list states are ``OPERATOR`` states in ``SPLIT_DISTRIBUTE`` or ``UNION``
    mode, broadcast states ``BROADCAST`` states in ``BROADCAST`` mode, every name once.

    Raises:
        InvalidSnapshotError: ``FLINK_STATE_META_INFO_INVALID``.
    """
    for infos, backend, modes in (
        (states, "OPERATOR", LIST_DISTRIBUTION_MODES),
        (broadcast, "BROADCAST", ("BROADCAST",)),
    ):
        for info in infos:
            if info.backend_type_name != backend:
                raise _invalid_enum(
                    source,
                    f"operator state {info.name!r} has backend state type {info.backend_type_name} among "
                    f"the {backend} states",
                )
            if info.option(MODE_OPTION) not in modes:
                raise _invalid_enum(
                    source,
                    f"operator state {info.name!r} has distribution mode {info.option(MODE_OPTION)!r} "
                    f"(expected {' or '.join(modes)})",
                )
    _check_unique([i.name for i in (*states, *broadcast)], source)


#: The snappy framing-format stream identifier chunk a compressed operator-state stream starts with.
SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"


def operator_header_end(data: bytes, offsets: list[int], size: int) -> int | None:
    """Return where an operator-state header ends, from the element offsets and the stream bytes.

    Uncompressed, the first element starts right after the header. Compressed
    (``CompressibleFSDataOutputStream``), one snappy frame stream starts after the header, so its 10-byte
    stream identifier sits between the header and the first element (or at the end, with no elements).
    """
    first = min((o for o in offsets if o > 0), default=size)
    marker = first - len(SNAPPY_STREAM_IDENTIFIER)
    if marker >= 0 and data[marker:first] == SNAPPY_STREAM_IDENTIFIER:
        return marker
    return first


def mode_ordinal(mode: str | None, source: str, name: str) -> int:
    """Return the ``OperatorStateHandle.Mode`` ordinal of a mode name, as Flink's ``Mode.valueOf`` reads it.

    Raises:
        InvalidSnapshotError: Not one of the three names, exactly (``FLINK_STATE_META_INFO_INVALID``).
    """
    if mode not in DISTRIBUTION_MODES:
        raise _invalid_enum(source, f"operator state {name!r} has distribution mode {mode!r}")
    return DISTRIBUTION_MODES.index(mode)


def check_handle_states(handle: OperatorStateHandle, header: OperatorStateHeader, source: str) -> None:
    """Refuse a handle whose states are not exactly those its stream's header declares, in the same modes.

    Flink writes one handle entry per state of the header (``DefaultOperatorStateBackendSnapshotStrategy``),
    in the header's mode, and its restore fails on a handle state the header does not declare ("Found state
    without corresponding meta info"). A difference is damage to ``_metadata`` (a name, or the mode ordinal
    a rescale redistributes by) or to the stream's header: kg would drop, mislabel or redistribute the state
    in the wrong mode. A header kg could not resolve (``states`` None) is not compared.

    Raises:
        InvalidSnapshotError: ``FLINK_OPERATOR_STATE_INCONSISTENT``.
    """
    if header.states is None or header.broadcast_states is None:
        return
    declared = {i.name: mode_ordinal(i.option(MODE_OPTION), source, i.name) for i in header.states}
    declared.update((i.name, DISTRIBUTION_MODES.index("BROADCAST")) for i in header.broadcast_states)
    named: set[str] = set()
    for entry in handle.states:
        if entry.name in named:
            raise _inconsistent(source, f"_metadata names operator state {entry.name!r} twice")
        named.add(entry.name)
        mode = declared.get(entry.name)
        if mode is None:
            raise _inconsistent(
                source, f"operator state {entry.name!r} in _metadata is not declared by the stream's header"
            )
        if mode != entry.mode:
            raise _inconsistent(
                source,
                f"operator state {entry.name!r} is {entry.mode_name} in _metadata and "
                f"{DISTRIBUTION_MODES[mode]} in the stream's header",
            )
    missing = [name for name in declared if name not in named]
    if missing:
        raise _inconsistent(
            source, f"the stream's header declares operator state {missing[0]!r}, _metadata does not"
        )


def _inconsistent(source: str, what: str) -> InvalidSnapshotError:
    return InvalidSnapshotError(f"{source}: {what}", code="FLINK_OPERATOR_STATE_INCONSISTENT")
