"""Serializer snapshots and state meta infos: the grammar both state headers are written in.

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

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.io.binary import decode_modified_utf8
from keygroup_cli.flink.types.serializers import ROW_DATA_SERIALIZER_SNAPSHOT, read_string

#: ``CompositeTypeSerializerSnapshot.MAGIC_NUMBER``.
COMPOSITE_MAGIC = 911108


#: ``NestedSerializersSnapshotDelegate.MAGIC_NUMBER``.
NESTED_MAGIC = 1333245


#: ``TypeSerializerSnapshotSerializationUtil``'s proxy version (1, the pre-1.7 config snapshot, is refused).
SERIALIZER_SNAPSHOT_PROXY_VERSION = 2


#: flink-avro's ``AvroSerializerSnapshot`` (runtime class and writer schema; ``flink/types/avro.py``).
AVRO_SERIALIZER_SNAPSHOT = "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot"


#: ``LinkedOptionalMapSerializer.HEADER``: starts each of the three maps of a POJO serializer snapshot.
OPTIONAL_MAP_HEADER = 0x4F2C69A3D70


#: The POJO serializer's snapshot: not composite, but its nested snapshots are length-framed.
POJO_SERIALIZER_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot"


#: The Kryo serializer's snapshot (``GenericTypeInfo``), in Flink 1.x (Kryo 2) and 2.x (Kryo 5) alike.
KRYO_SERIALIZER_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"


#: ``ROW_DATA_SERIALIZER_SNAPSHOT``, the Table runtime's ``RowDataSerializer`` snapshot (SQL jobs' keys and
#: rows), is not composite, but its nested snapshots follow the fields' logical types (``writeSnapshot``: int
#: arity, each ``LogicalType`` Java-serialized, then ``NestedSerializersSnapshotDelegate``).
#: Snapshots whose body starts with the serialized type's class name (``writeUTF``).
TYPE_CLASS_FIRST = frozenset((POJO_SERIALIZER_SNAPSHOT, KRYO_SERIALIZER_SNAPSHOT))


#: ``StateMetaInfoSnapshot.BackendStateType`` by ordinal.
BACKEND_STATE_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE", "KEY_VALUE_V2")


#: ``StateDescriptor.Type`` names: a ``KEYED_STATE_TYPE`` option Flink's ``Type.valueOf`` accepts.
KEYED_STATE_TYPES = ("UNKNOWN", "VALUE", "LIST", "REDUCING", "FOLDING", "AGGREGATING", "MAP")


#: ``OperatorStateHandle.Mode`` names a list state's ``OPERATOR_STATE_DISTRIBUTION_MODE`` may hold; a
#: broadcast state's is ``BROADCAST``.
LIST_DISTRIBUTION_MODES = ("SPLIT_DISTRIBUTE", "UNION")


#: Snapshot classes whose body is empty (``SimpleTypeSerializerSnapshot`` and similar).
SIMPLE_SERIALIZER_SNAPSHOTS = frozenset(
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


class _Fail(Exception):
    """This alternative does not parse; try the next one."""


class GiveUp(Exception):
    """The search budget is spent."""


_G = TypeVar("_G")


def parser(fn: Callable[..., Iterator[_G]]) -> Callable[..., Iterator[_G]]:
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


class Grammar:
    """Backtracking parser over a header's bytes; every method yields ``(value, next_pos)`` alternatives."""

    def __init__(self, data: bytes, limit: int) -> None:
        self.data = data
        self.limit = limit
        self.steps = 0

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > _BUDGET:
            raise GiveUp

    def int_at(self, pos: int) -> int:
        """Return the big-endian int at ``pos`` (no alternative if the header ends first)."""
        if pos + 4 > self.limit:
            raise _Fail
        value: int = _INT.unpack_from(self.data, pos)[0]
        return value

    def utf_at(self, pos: int) -> tuple[str, int]:
        """Return the ``writeUTF`` string at ``pos`` and where it ends."""
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

    @parser
    def top_snapshot(self, pos: int) -> Iterator[tuple[SerializerSnapshot, int]]:
        """Yield the serializer snapshots a header can hold at ``pos`` (``writeSerializerSnapshot``)."""
        # TypeSerializerSnapshotSerializationUtil.readSerializerSnapshot: proxy version, then the snapshot.
        if self.int_at(pos) != SERIALIZER_SNAPSHOT_PROXY_VERSION:
            raise _Fail
        yield from self.versioned(pos + 4)

    @parser
    def versioned(self, pos: int) -> Iterator[tuple[SerializerSnapshot, int]]:
        """Yield the ``writeVersionedSnapshot``s (class name, version, body) that can start at ``pos``."""
        # TypeSerializerSnapshot.readVersionedSnapshot: class name, version, body.
        self._tick()
        name, p = self.utf_at(pos)
        if not _CLASS_NAME.fullmatch(name):
            raise _Fail
        version = self.int_at(p)
        p += 4
        if name in SIMPLE_SERIALIZER_SNAPSHOTS:
            yield SerializerSnapshot(name, version, self.data[pos:p]), p
            return
        if name == POJO_SERIALIZER_SNAPSHOT:
            # The frames make a POJO snapshot's end certain: the only alternative (backtracking over it would
            # also accept a split inside it, its field snapshots read as the next serializers).
            for (nested, names), q in self._pojo(p):
                yield SerializerSnapshot(name, version, self.data[pos:q], nested, nested_names=names), q
            return
        if name == KRYO_SERIALIZER_SNAPSHOT:
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
        if name == ROW_DATA_SERIALIZER_SNAPSHOT:
            # The arity bounds the search for the nested snapshots after the Java-serialized logical types.
            for nested, q in self._nested_after(p + 4, self.int_at(p)):
                yield SerializerSnapshot(name, version, self.data[pos:q], nested), q
        if p + 4 <= self.limit and _INT.unpack_from(self.data, p)[0] == COMPOSITE_MAGIC:
            for nested, q in self._composite(p):
                yield SerializerSnapshot(name, version, self.data[pos:q], nested), q
        for q in range(p, self.limit + 1):
            self._tick()
            yield SerializerSnapshot(name, version, self.data[pos:q], known=False), q

    @parser
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

    @parser
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

    @parser
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

    @parser
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
        inner = Grammar(self.data, end)
        inner.steps = self.steps
        found = first_alternative(inner.versioned(start), end)
        self.steps = inner.steps
        if found is None:
            raise _Fail
        return found[0]

    @parser
    def _sequence(self, pos: int, count: int) -> Iterator[tuple[tuple[SerializerSnapshot, ...], int]]:
        if count == 0:
            yield (), pos
            return
        for value, p in self.versioned(pos):
            for rest, q in self._sequence(p, count - 1):
                yield (value, *rest), q

    @parser
    def meta_info(self, pos: int) -> Iterator[tuple[StateMetaInfo, int]]:
        """Yield the ``StateMetaInfoSnapshot``s that can start at ``pos``."""
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

    @parser
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

    @parser
    def meta_infos(self, pos: int, count: int) -> Iterator[tuple[tuple[StateMetaInfo, ...], int]]:
        """Yield ``count`` meta infos in a row from ``pos``, one alternative per way they can parse."""
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
                except InvalidInputError:
                    raise _Fail from None
            if pos > self.limit:
                raise _Fail
            return pos
        for _ in range(2):
            _text, pos = self.utf_at(pos)
        return pos

    def short_at(self, pos: int) -> int:
        """Return the big-endian short at ``pos`` (no alternative if the header ends first)."""
        if pos + 2 > self.limit:
            raise _Fail
        value: int = _SHORT.unpack_from(self.data, pos)[0]
        return value

    def short_at_or(self, pos: int, default: int) -> int:
        """Return the big-endian short at ``pos``, or ``default`` past the header's end."""
        return int(_SHORT.unpack_from(self.data, pos)[0]) if pos + 2 <= self.limit else default


#: Snapshot bodies whose end their own bytes give, by (class, version).
_DELIMITED: dict[tuple[str, int], Callable[[Grammar, int], int]] = {
    (
        "org.apache.flink.api.common.typeutils.base.EnumSerializer$EnumSerializerSnapshot",
        3,
    ): Grammar.enum_end,
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
    **{(AVRO_SERIALIZER_SNAPSHOT, v): functools.partial(lambda v, g, p: g.avro_end(p, v), v) for v in (2, 3)},
}


def first_alternative(alternatives: Iterator[tuple[_G, int]], end: int | None) -> tuple[_G, int] | None:
    """Return the first alternative that ends at ``end`` (any, when ``end`` is None), or None."""
    for value, pos in alternatives:
        if end is None or pos == end:
            return value, pos
    return None


#: Proxy versions are small counts Flink bumps by one (keyed 1-6, operator state 1-6 so far): a version
#: outside ``(0, 2**16)`` was written by no Flink, past or future; it is damage, not an old format.
PLAUSIBLE_VERSIONS = 1 << 16


def implausible_version(source: str, what: str, version: int) -> InvalidInputError:
    """Return the error for a header version no Flink writes (``FLINK_STATE_HEADER_CORRUPT``)."""
    return InvalidInputError(
        f"{source}: {what} header version {version} is one no Flink writes (damaged bytes)",
        code="FLINK_STATE_HEADER_CORRUPT",
    )


def parse_serializer_snapshot(data: bytes, source: str) -> SerializerSnapshot:
    """Parse one ``writeVersionedSnapshot`` (class name, version, body) that fills ``data`` exactly.

    For snapshots framed with their length, e.g. a POJO field's in ``PojoSerializerSnapshotData``.

    Raises:
        InvalidInputError: The bytes are not one serializer snapshot.
    """
    grammar = Grammar(data, len(data))
    try:
        found = first_alternative(grammar.versioned(0), len(data))
    except GiveUp:
        found = None
    if found is None:
        raise InvalidInputError(f"{source}: not a serializer snapshot", code="FLINK_STATE_HEADER_CORRUPT")
    return found[0]


def read_serializer_snapshot(data: bytes, pos: int, end: int) -> tuple[SerializerSnapshot, int] | None:
    """Parse one ``writeVersionedSnapshot`` at ``pos`` whose end its own bytes give, or return None.

    For snapshots that are not framed by a length (a timer section's key and namespace serializers): only a
    body kg understands counts (a simple snapshot, a POJO's frames, Kryo's maps, a composite's nested
    snapshots), never one whose end would be a guess.
    """
    grammar = Grammar(data, end)
    try:
        for snapshot, q in grammar.versioned(pos):
            if snapshot.known and all(n.known for n in snapshot.nested):
                return snapshot, q
            return None
    except GiveUp:
        return None
    return None


#: The option naming a keyed state's ``StateDescriptor.Type``.
TYPE_OPTION = "KEYED_STATE_TYPE"


#: The option naming an operator state's ``OperatorStateHandle.Mode``.
MODE_OPTION = "OPERATOR_STATE_DISTRIBUTION_MODE"


def invalid_enum(source: str, what: str) -> InvalidInputError:
    """Return the error for a meta info Flink's restore refuses (``FLINK_STATE_META_INFO_INVALID``)."""
    return InvalidInputError(f"{source}: {what}", code="FLINK_STATE_META_INFO_INVALID")


def require_unique(names: list[str], source: str) -> None:
    """Refuse a header that declares a state name twice (``FLINK_STATE_META_INFO_INVALID``)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise invalid_enum(source, f"the header declares state {name!r} twice")
        seen.add(name)
