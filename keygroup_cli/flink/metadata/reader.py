"""The Flink ``_metadata`` parser: envelope, version dispatch, operators, subtasks, properties trailer.

Mirrors ``Checkpoints.loadCheckpointMetadata`` and ``MetadataV3Serializer`` … ``MetadataV6Serializer``
(Flink 2.3). Versions 3–6 are parsed completely and losslessly (master states, coordinator state,
finished markers, channel state and the raw Java-serialized ``CheckpointProperties`` trailer are kept) so a
writer can reproduce the file byte for byte. Versions 1, 2 and anything newer than 6 are refused with
``UnsupportedFormatError``; a wrong magic number or broken bytes raise ``InvalidInputError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.binary import DataInput
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle
from keygroup_cli.flink.metadata.handles import (
    AnyChannelHandle,
    ChangelogBackendHandle,
    KeyedHandle,
    OperatorStateHandle,
    read_channel_handle,
    read_keyed_handle,
    read_operator_handle,
    read_stream_handle,
)

#: ``Checkpoints.HEADER_MAGIC_NUMBER``.
HEADER_MAGIC_NUMBER = 0x4960672D
#: ``MetadataV2V3SerializerBase.MASTER_STATE_MAGIC_NUMBER``.
MASTER_STATE_MAGIC_NUMBER = 0xC96B1696
#: Metadata versions kg reads.
SUPPORTED_VERSIONS = (3, 4, 5, 6)
#: Start of a Java Object Serialization stream (``STREAM_MAGIC``, ``STREAM_VERSION``).
JAVA_SERIALIZATION_MAGIC = b"\xac\xed\x00\x05"


@dataclass(frozen=True, slots=True)
class MasterState:
    """A master (JobManager) hook's state: ``MasterState(name, bytes, version)``."""

    name: str
    version: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class SubtaskState:
    """The state of one subtask of an operator (``OperatorSubtaskState``).

    A finished subtask (``FinishedOperatorSubtaskState``) has ``finished=True`` and no handles.
    """

    index: int
    finished: bool = False
    managed_operator_state: OperatorStateHandle | None = None
    raw_operator_state: OperatorStateHandle | None = None
    managed_keyed_state: KeyedHandle | None = None
    raw_keyed_state: KeyedHandle | None = None
    input_channel_state: tuple[AnyChannelHandle, ...] = ()
    result_subpartition_state: tuple[AnyChannelHandle, ...] = ()
    #: Whether the subtask entry carried the operator-state presence ints as 1 with a NULL handle byte.
    managed_operator_flag: bool = False
    raw_operator_flag: bool = False

    @property
    def has_state(self) -> bool:
        """Return whether any handle is present (``OperatorSubtaskState.hasState``)."""
        return not self.finished and (
            self.managed_operator_state is not None
            or self.raw_operator_state is not None
            or self.managed_keyed_state is not None
            or self.raw_keyed_state is not None
            or bool(self.input_channel_state)
            or bool(self.result_subpartition_state)
        )

    @property
    def keyed_bytes(self) -> int:
        """Return the size of the managed and raw keyed state."""
        return sum(h.size for h in (self.managed_keyed_state, self.raw_keyed_state) if h is not None)

    @property
    def operator_state_bytes(self) -> int:
        """Return the size of the managed and raw operator state."""
        return sum(h.size for h in (self.managed_operator_state, self.raw_operator_state) if h is not None)


@dataclass(frozen=True, slots=True)
class OperatorState:
    """One operator's state in a checkpoint (``OperatorState`` / ``FullyFinishedOperatorState``)."""

    operator_id: str
    parallelism: int
    max_parallelism: int
    name: str | None = None
    uid: str | None = None
    coordinator_state: ByteStreamHandle | None = None
    subtasks: tuple[SubtaskState, ...] = ()
    fully_finished: bool = False

    @property
    def label(self) -> str:
        """Return the uid if there is one, else the operator id."""
        return self.uid or self.operator_id

    @property
    def has_state(self) -> bool:
        """Return whether restoring needs this operator (coordinator state or any subtask state)."""
        return self.coordinator_state is not None or any(s.has_state for s in self.subtasks)

    @property
    def has_keyed_state(self) -> bool:
        """Return whether any subtask has keyed state."""
        return any(s.managed_keyed_state is not None or s.raw_keyed_state is not None for s in self.subtasks)


@dataclass(frozen=True, slots=True)
class CheckpointProperties:
    """What kg reads from the V4+ ``CheckpointProperties`` trailer (the raw bytes are kept alongside).

    Attributes:
        is_savepoint: True for ``SavepointType``, False for ``CheckpointType``, None if not recognisable.
        type_name: ``SnapshotType.getName()``: "Savepoint", "Checkpoint", "Full Checkpoint", ….
        format_type: ``SavepointFormatType``: "CANONICAL" or "NATIVE" (savepoints only).
    """

    is_savepoint: bool | None
    type_name: str | None
    format_type: str | None


@dataclass(frozen=True, slots=True)
class CheckpointMetadata:
    """A parsed ``_metadata`` file (``CheckpointMetadata`` plus its version and raw trailer)."""

    version: int
    checkpoint_id: int
    master_states: tuple[MasterState, ...]
    operators: tuple[OperatorState, ...]
    properties_bytes: bytes | None = None
    properties: CheckpointProperties | None = None

    @property
    def is_savepoint(self) -> bool | None:
        """Return whether this is a savepoint (None for V3, which has no properties)."""
        return None if self.properties is None else self.properties.is_savepoint


def parse_metadata(data: bytes, source: str = "_metadata") -> CheckpointMetadata:
    """Parse the bytes of a ``_metadata`` file.

    Args:
        data: The whole file.
        source: The file's path, for error messages.

    Raises:
        InvalidInputError: Wrong magic number, truncated or corrupt bytes.
        UnsupportedFormatError: A metadata version other than 3–6.
    """
    reader = DataInput(data, source)
    if len(data) < 8:
        raise InvalidInputError(
            f"{source}: not a Flink _metadata file ({len(data)} bytes, too short for the header)",
            code="FLINK_METADATA_TRUNCATED",
        )
    magic = reader.read_uint()
    if magic != HEADER_MAGIC_NUMBER:
        raise InvalidInputError(
            f"{source}: Unexpected magic number 0x{magic:08x} (expected 0x{HEADER_MAGIC_NUMBER:08x}): not a "
            "Flink savepoint or checkpoint _metadata file, or a corrupted one",
            code="FLINK_BAD_MAGIC",
        )
    version = reader.read_int()
    if version == 1:
        raise UnsupportedFormatError(
            f"{source}: This savepoint / checkpoint version (Flink 1.1 / 1.2) is no longer supported.",
            code="FLINK_METADATA_VERSION",
        )
    if version not in SUPPORTED_VERSIONS:
        detail = " (written by Flink 1.3–1.10; kg reads versions 3–6, Flink 1.11+)" if version == 2 else ""
        raise UnsupportedFormatError(
            f"{source}: Unrecognized checkpoint version number: {version}{detail}",
            code="FLINK_METADATA_VERSION",
        )
    return _parse_body(reader, version)


def _corrupt(reader: DataInput, message: str) -> InvalidInputError:
    return InvalidInputError(f"{reader.source}: {message}", code="FLINK_METADATA_CORRUPT")


def _parse_body(reader: DataInput, version: int) -> CheckpointMetadata:
    # MetadataV2V3SerializerBase.deserializeMetadata
    checkpoint_id = reader.read_long()
    if checkpoint_id < 0:
        raise _corrupt(reader, f"invalid checkpoint ID: {checkpoint_id}")
    num_master = reader.read_int()
    if num_master < 0:
        raise _corrupt(reader, f"invalid number of master states: {num_master}")
    masters = tuple(_read_master_state(reader) for _ in range(num_master))
    num_operators = reader.read_int()
    if num_operators < 0:
        raise _corrupt(reader, f"invalid number of operator states: {num_operators}")
    operators = tuple(_read_operator_state(reader, version) for _ in range(num_operators))
    if version < 4:
        if not reader.at_end():
            raise _corrupt(reader, f"{reader.remaining} unexpected trailing bytes after the last operator")
        return CheckpointMetadata(version, checkpoint_id, masters, operators)
    # MetadataV4Serializer.deserializeProperties: the rest is one Java-serialized CheckpointProperties.
    trailer = _read_properties(reader)
    return CheckpointMetadata(
        version, checkpoint_id, masters, operators, trailer, describe_properties(trailer)
    )


def _read_master_state(reader: DataInput) -> MasterState:
    # MetadataV2V3SerializerBase.deserializeMasterState
    if reader.read_uint() != MASTER_STATE_MAGIC_NUMBER:
        raise _corrupt(reader, "incorrect magic number in master state byte sequence")
    num_bytes = reader.read_int()
    if num_bytes <= 0:
        raise _corrupt(reader, "found zero or negative length for master state bytes")
    inner = DataInput(reader.read_bytes(num_bytes), reader.source, reader.base + reader.pos - num_bytes)
    version = inner.read_int()
    name = inner.read_utf()
    payload = inner.read_bytes(inner.read_int())
    if not inner.at_end():
        raise _corrupt(reader, "found trailing bytes in master state")
    return MasterState(name, version, payload)


def _read_operator_state(reader: DataInput, version: int) -> OperatorState:
    name = uid = None
    if version >= 5:
        # MetadataV5Serializer: "" stands for an absent name / uid.
        name = reader.read_utf() or None
        uid = reader.read_utf() or None
    # OperatorID: lowerPart then upperPart; the 16 bytes in file order are the hex id (AbstractID).
    operator_id = reader.read_bytes(16).hex()
    parallelism = reader.read_int()
    max_parallelism = reader.read_int()
    if parallelism <= 0 or max_parallelism <= 0 or parallelism > max_parallelism or max_parallelism > 32768:
        # OperatorState's constructor: checkArgument(parallelism <= maxParallelism) and positive values;
        # Flink never configures a maxParallelism above KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM.
        raise _corrupt(
            reader,
            f"operator {operator_id}: invalid parallelism {parallelism} / max parallelism {max_parallelism}",
        )
    coordinator = read_stream_handle(reader)
    if coordinator is not None and not isinstance(coordinator, ByteStreamHandle):
        raise _corrupt(
            reader,
            f"operator {operator_id}: Expected a ByteStreamStateHandle but found a "
            f"{type(coordinator).__name__}",
        )
    num_subtasks = reader.read_int()
    if num_subtasks == -1:
        # FullyFinishedOperatorState
        if coordinator is not None:
            raise _corrupt(reader, f"operator {operator_id}: fully finished operator with coordinator state")
        return OperatorState(operator_id, parallelism, max_parallelism, name, uid, None, (), True)
    if num_subtasks < 0:
        raise _corrupt(reader, f"operator {operator_id}: invalid number of subtask states {num_subtasks}")
    subtasks = []
    for _ in range(num_subtasks):
        index = reader.read_int()
        finished = index < 0
        if finished:
            index = -index - 1
        if index >= parallelism:
            raise _corrupt(
                reader,
                f"operator {operator_id}: subtask index {index} is not below parallelism {parallelism}",
            )
        subtask = SubtaskState(index, finished=True) if finished else _read_subtask(reader, index, version)
        for handle in (subtask.managed_keyed_state, subtask.raw_keyed_state):
            _require_key_group_range_inside(reader, operator_id, max_parallelism, handle)
        subtasks.append(subtask)
    return OperatorState(operator_id, parallelism, max_parallelism, name, uid, coordinator, tuple(subtasks))


def _require_key_group_range_inside(
    reader: DataInput, operator_id: str, max_parallelism: int, handle: KeyedHandle | None
) -> None:
    """Refuse a keyed handle whose key-group range is not inside ``[0, max_parallelism)``.

    Flink's ``KeyGroupRange`` never leaves the operator's key groups. The range's count is an untrusted
    int32 that readers size lists by (one slot per key group of a RocksDB handle), so it is bounded here,
    before anything is allocated from it; nested changelog handles are checked too.
    """
    if handle is None:
        return
    start, count = handle.key_group_start, handle.num_key_groups
    if start < 0 or count < 0 or start + count > max_parallelism:
        raise _corrupt(
            reader,
            f"operator {operator_id}: keyed state handle covers {count} key group(s) from {start}, outside "
            f"the operator's {max_parallelism} key groups",
        )
    if isinstance(handle, ChangelogBackendHandle):
        for nested in (*handle.materialized, *handle.non_materialized):
            _require_key_group_range_inside(reader, operator_id, max_parallelism, nested)


def _read_subtask(reader: DataInput, index: int, version: int) -> SubtaskState:
    # MetadataV2V3SerializerBase.deserializeSubtaskState + MetadataV3Serializer's channel collections.
    managed_flag = reader.read_int() != 0
    managed_op = read_operator_handle(reader) if managed_flag else None
    raw_flag = reader.read_int() != 0
    raw_op = read_operator_handle(reader) if raw_flag else None
    managed_keyed = read_keyed_handle(reader)
    raw_keyed = read_keyed_handle(reader)
    typed = version >= 6
    inputs = tuple(
        read_channel_handle(reader, 1, typed) for _ in range(_count(reader, "input channel handle"))
    )
    outputs = tuple(
        read_channel_handle(reader, 2, typed) for _ in range(_count(reader, "result subpartition handle"))
    )
    return SubtaskState(
        index,
        False,
        managed_op,
        raw_op,
        managed_keyed,
        raw_keyed,
        inputs,
        outputs,
        managed_operator_flag=managed_flag and managed_op is None,
        raw_operator_flag=raw_flag and raw_op is None,
    )


def _count(reader: DataInput, what: str) -> int:
    n = reader.read_int()
    if n < 0:
        raise _corrupt(reader, f"negative {what} count {n}")
    return n


# -- the V4+ properties trailer: one Java Object Serialization stream --------------------------------------

#: ``java.io.ObjectStreamConstants`` type codes.
_TC_NULL, _TC_REFERENCE, _TC_CLASSDESC, _TC_OBJECT, _TC_STRING, _TC_ARRAY, _TC_CLASS = range(0x70, 0x77)
_TC_BLOCKDATA, _TC_ENDBLOCKDATA, _TC_RESET, _TC_BLOCKDATALONG, _TC_EXCEPTION = range(0x77, 0x7C)
_TC_LONGSTRING, _TC_PROXYCLASSDESC, _TC_ENUM = range(0x7C, 0x7F)
_BASE_WIRE_HANDLE = 0x7E0000
_SC_WRITE_METHOD, _SC_SERIALIZABLE, _SC_EXTERNALIZABLE, _SC_BLOCK_DATA = 0x01, 0x02, 0x04, 0x08
#: Bytes of each primitive field type code.
_PRIMITIVE_BYTES = {"B": 1, "C": 2, "D": 8, "F": 4, "I": 4, "J": 8, "S": 2, "Z": 1}
#: Nesting limit for objects inside objects; CheckpointProperties nests three levels.
_MAX_JAVA_DEPTH = 64
#: The class ``MetadataV4Serializer.deserializeProperties`` casts the object to.
PROPERTIES_CLASS = "org.apache.flink.runtime.checkpoint.CheckpointProperties"


@dataclass(frozen=True, slots=True)
class _JavaClass:
    """A class descriptor of the stream: what the walk needs to skip an instance's field values."""

    name: str
    flags: int
    fields: tuple[str, ...]  # one type code per serializable field, in stream order
    parent: _JavaClass | None


def _read_properties(reader: DataInput) -> bytes:
    """Return the trailer after walking it as ``new ObjectInputStream(dis).readObject()`` reads it.

    Flink reads exactly one object and casts it to ``CheckpointProperties``: a trailer cut anywhere (the
    stream header included, or absent altogether) fails its restore with an ``EOFException``, another
    object with a ``ClassCastException``. Flink reads nothing after the object; kg refuses bytes there
    (as after a V3 file's last operator): a ``_metadata`` that is not exactly one metadata is corrupt.

    Raises:
        InvalidInputError: ``FLINK_METADATA_TRUNCATED`` (the trailer ends early),
            ``FLINK_METADATA_CORRUPT`` (not a CheckpointProperties stream, or bytes after it).
    """
    start = reader.base + reader.pos
    trailer = reader.slice(reader.pos, reader.pos + reader.remaining)
    if JAVA_SERIALIZATION_MAGIC.startswith(trailer[:4]) and len(trailer) < len(JAVA_SERIALIZATION_MAGIC):
        raise _truncated_trailer(reader, start, len(trailer))
    if not trailer.startswith(JAVA_SERIALIZATION_MAGIC):
        raise _corrupt(
            reader,
            f"Could not deserialize properties: the CheckpointProperties trailer at byte {start} is not a "
            "Java serialization stream",
        )
    inner = DataInput(trailer, reader.source, start)
    inner.read_bytes(len(JAVA_SERIALIZATION_MAGIC))
    try:
        top = _JavaWalk(inner).read_object(0)
    except InvalidInputError as exc:
        if exc.code != "FLINK_TRUNCATED":
            raise
        raise _truncated_trailer(reader, start, len(trailer)) from None
    if not isinstance(top, _JavaObject) or top.cls != PROPERTIES_CLASS:
        raise _corrupt(reader, f"the properties trailer at byte {start} holds no {PROPERTIES_CLASS}")
    if not inner.at_end():
        raise _corrupt(
            reader,
            f"{inner.remaining} unexpected trailing bytes after the CheckpointProperties trailer (it ends at "
            f"byte {inner.base + inner.pos} of {inner.base + len(trailer)})",
        )
    reader.read_bytes(len(trailer))
    return trailer


def _truncated_trailer(reader: DataInput, start: int, length: int) -> InvalidInputError:
    where = (
        f"the file ends at byte {start}, where its CheckpointProperties trailer starts"
        if length == 0
        else f"the CheckpointProperties trailer from byte {start} ends after {length} bytes, inside its "
        "serialized object"
    )
    return InvalidInputError(
        f"{reader.source}: truncated: {where} (Flink's restore fails with an EOFException)",
        code="FLINK_METADATA_TRUNCATED",
    )


@dataclass(frozen=True, slots=True)
class _JavaObject:
    """An instance the walk passed over: only its class name is kept."""

    cls: str


class _JavaWalk:
    """Skip Java serialization contents exactly as ``ObjectInputStream`` consumes them, building nothing.

    Keeps the handle table (class descriptors are needed again when a reference names one). Running past
    the end raises ``FLINK_TRUNCATED`` from ``DataInput``; anything Java would refuse raises
    ``FLINK_METADATA_CORRUPT``.
    """

    def __init__(self, reader: DataInput) -> None:
        self.r = reader
        self.handles: list[object] = []

    def _bad(self, message: str) -> InvalidInputError:
        return _corrupt(self.r, f"properties trailer, byte {self.r.base + self.r.pos}: {message}")

    def _assign(self, value: object) -> int:
        self.handles.append(value)
        return len(self.handles) - 1

    def _reference(self) -> object:
        handle = self.r.read_int() - _BASE_WIRE_HANDLE
        if not 0 <= handle < len(self.handles):
            raise self._bad(f"invalid handle value {handle + _BASE_WIRE_HANDLE:#x}")
        return self.handles[handle]

    def read_object(self, depth: int) -> object:
        """Walk one ``readObject()``; return a ``_JavaClass``, a ``_JavaObject``, a ``str`` or None."""
        if depth > _MAX_JAVA_DEPTH:
            raise self._bad("objects nested too deeply")
        tc = self.r.read_unsigned_byte()
        while tc == _TC_RESET:
            self.handles.clear()
            tc = self.r.read_unsigned_byte()
        if tc == _TC_NULL:
            return None
        if tc == _TC_REFERENCE:
            return self._reference()
        if tc in (_TC_CLASSDESC, _TC_PROXYCLASSDESC):
            return self._new_class(tc, depth)
        if tc == _TC_STRING:
            self._assign(None)
            text = self.r.read_utf()
            self.handles[-1] = text
            return text
        if tc == _TC_LONGSTRING:
            handle = self._assign(None)
            length = self.r.read_long()
            if length < 0:
                raise self._bad(f"negative string length {length}")
            text = self.r.read_bytes(min(length, self.r.remaining + 1)).decode("utf-8", "replace")
            self.handles[handle] = text
            return text
        if tc in (_TC_OBJECT, _TC_ENUM, _TC_CLASS, _TC_ARRAY):
            cls = self._class(depth)
            if cls is None:
                raise self._bad(f"type code {tc:#x} without a class descriptor")
            obj = _JavaObject(cls.name)
            self._assign(obj)
            if tc == _TC_OBJECT:
                self._class_data(cls, depth)
            elif tc == _TC_ENUM:
                if not isinstance(self.read_object(depth + 1), str):
                    raise self._bad(f"enum constant of {cls.name} without a name")
            elif tc == _TC_ARRAY:
                self._array(cls, depth)
            return obj
        raise self._bad(f"unexpected type code {tc:#04x}")

    def _class(self, depth: int) -> _JavaClass | None:
        """Walk a ``classDesc``: a new one, a reference to one, or null."""
        found = self.read_object(depth + 1)
        if found is not None and not isinstance(found, _JavaClass):
            raise self._bad("a class descriptor expected")
        return found

    def _new_class(self, tc: int, depth: int) -> _JavaClass:
        r = self.r
        if tc == _TC_PROXYCLASSDESC:
            handle = self._assign(None)
            names = [r.read_utf() for _ in range(_count(r, "proxy interface"))]
            self._annotation(depth)
            cls = _JavaClass(f"proxy({', '.join(names)})", _SC_SERIALIZABLE, (), self._class(depth))
            self.handles[handle] = cls
            return cls
        name = r.read_utf()
        r.read_long()  # serialVersionUID
        handle = self._assign(None)
        flags = r.read_unsigned_byte()
        count = r.read_short()
        if count < 0:
            raise self._bad(f"negative field count {count} in {name}")
        fields = []
        for _ in range(count):
            code = chr(r.read_unsigned_byte())
            r.read_utf()  # the field's name
            if code in "L[":
                if not isinstance(self.read_object(depth + 1), str):
                    raise self._bad(f"field of {name} without a type name")
            elif code not in _PRIMITIVE_BYTES:
                raise self._bad(f"invalid field type code {code!r} in {name}")
            fields.append(code)
        self._annotation(depth)
        cls = _JavaClass(name, flags, tuple(fields), self._class(depth))
        self.handles[handle] = cls
        return cls

    def _class_data(self, cls: _JavaClass, depth: int) -> None:
        lineage: list[_JavaClass] = []
        walk: _JavaClass | None = cls
        while walk is not None:
            lineage.append(walk)
            walk = walk.parent
        for each in reversed(lineage):
            if each.flags & _SC_EXTERNALIZABLE:
                if not each.flags & _SC_BLOCK_DATA:
                    raise self._bad(f"{each.name}: externalizable data without block data framing")
                self._annotation(depth)
                continue
            if not each.flags & _SC_SERIALIZABLE:
                continue
            self.r.read_bytes(sum(_PRIMITIVE_BYTES.get(code, 0) for code in each.fields))
            for code in each.fields:
                if code in "L[":
                    self.read_object(depth + 1)
            if each.flags & _SC_WRITE_METHOD:
                self._annotation(depth)

    def _array(self, cls: _JavaClass, depth: int) -> None:
        size = _count(self.r, "array element")
        if len(cls.name) < 2 or cls.name[0] != "[":
            raise self._bad(f"array of {cls.name} with {size} elements")
        element = cls.name[1]
        if element in _PRIMITIVE_BYTES:
            self.r.read_bytes(size * _PRIMITIVE_BYTES[element])
            return
        for _ in range(size):
            self.read_object(depth + 1)

    def _annotation(self, depth: int) -> None:
        """Walk block data and objects up to ``TC_ENDBLOCKDATA`` (class and writeObject annotations)."""
        r = self.r
        while True:
            tc = r.slice(r.pos, r.pos + 1)
            if tc == bytes((_TC_ENDBLOCKDATA,)):
                r.read_unsigned_byte()
                return
            if tc == bytes((_TC_BLOCKDATA,)):
                r.read_unsigned_byte()
                r.read_bytes(r.read_unsigned_byte())
            elif tc == bytes((_TC_BLOCKDATALONG,)):
                r.read_unsigned_byte()
                r.read_bytes(_count(r, "block data byte"))
            else:
                self.read_object(depth + 1)


#: ``SnapshotType.getName()`` values, longest first so "Full Checkpoint" wins over "Checkpoint".
_TYPE_NAMES = ("Terminate Savepoint", "Suspend Savepoint", "Full Checkpoint", "Checkpoint", "Savepoint")


def _java_string(text: str) -> bytes:
    # TC_STRING (0x74), unsigned short length, then the characters, as ObjectOutputStream writes them.
    return b"\x74" + len(text).to_bytes(2, "big") + text.encode("ascii")


def describe_properties(trailer: bytes) -> CheckpointProperties:
    """Summarise a Java-serialized ``CheckpointProperties`` without a JVM.

    Savepoint vs checkpoint is the serialized class of ``checkpointType`` (``SavepointType`` or
    ``CheckpointType``); the format is the ``SavepointFormatType`` enum constant, written as a string.
    """
    if b"org.apache.flink.runtime.checkpoint.SavepointType" in trailer:
        is_savepoint: bool | None = True
    elif b"org.apache.flink.runtime.checkpoint.CheckpointType" in trailer:
        is_savepoint = False
    else:
        is_savepoint = None
    format_type = None
    if is_savepoint:
        format_type = next((f for f in ("CANONICAL", "NATIVE") if _java_string(f) in trailer), None)
    type_name = next((n for n in _TYPE_NAMES if _java_string(n) in trailer), None)
    return CheckpointProperties(is_savepoint, type_name, format_type)
