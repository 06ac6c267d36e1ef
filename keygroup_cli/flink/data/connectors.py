"""Connector state, read-only: what a KafkaSource holds in a savepoint.

A ``KafkaSource`` (``flink-connector-kafka``) keeps two things:

- each reader's splits, in the operator list state ``SourceReaderState`` (``SourceOperator``; elements written
  by ``BytePrimitiveArraySerializer``: int length, bytes): each is ``SimpleVersionedSerialization`` (int
  version, int length, bytes) of a ``KafkaPartitionSplit`` by ``KafkaPartitionSplitSerializer`` version 0:
  topic (``writeUTF``), int partition, long starting offset, long stopping offset. Negative offsets are
  markers: -1 latest, -2 earliest, -3 committed; a stopping offset of ``Long.MIN_VALUE`` means none;
- the enumerator's state, in the operator's coordinator state in ``_metadata`` (``SourceCoordinator``: int
  coordinator serde version 1, int enumerator serializer version, int length, bytes), here
  ``KafkaSourceEnumStateSerializer`` version 2: int count, then per partition topic, int partition, int
  ``AssignmentStatus`` code (0 assigned, 1 unassigned initial), then a boolean (initial discovery finished).

A ``KafkaSink``'s writers keep, under exactly-once only, their ``KafkaWriterState`` in the operator list state
``writer_raw_states`` (``SinkWriterOperator``; ``byte[]`` elements as above, ``SimpleVersionedSerialization``
of ``KafkaWriterStateSerializer`` version 2): the transactional id prefix (``writeUTF``), int owned subtask
id, int total number of owned subtasks, int ``TransactionOwnership`` ordinal (0 implicit by subtask id, 1
explicit by writer state), int count, then per precommitted transaction its id (``writeUTF``) and long
checkpoint id.

Nothing in these bytes names the connector, so kg decodes them only for an operator the user names as a
Kafka source, and refuses bytes that do not parse to their last byte as the layouts above.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from keygroup_cli.core.errors import UnsupportedFormatError
from keygroup_cli.flink.data.lookup import find_operator
from keygroup_cli.flink.io.binary import decode_modified_utf8
from keygroup_cli.flink.savepoint import Savepoint

#: ``SourceOperator``'s list state of serialized splits.
READER_STATE = "SourceReaderState"
#: ``KafkaPartitionSplit`` offset markers.
OFFSET_MARKERS = {-1: "latest", -2: "earliest", -3: "committed"}
NO_STOPPING_OFFSET = -(2**63)
#: ``SinkWriterOperator``'s list state of serialized writer states.
WRITER_STATE = "writer_raw_states"
#: ``TransactionOwnership`` by ordinal.
OWNERSHIPS = ("implicit-by-subtask-id", "explicit-by-writer-state")
#: ``AssignmentStatus`` by status code.
ASSIGNMENT_STATUSES = {0: "assigned", 1: "unassigned-initial"}

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class KafkaSplit:
    """One partition a reader subtask holds, and where it resumes."""

    subtask: int
    topic: str
    partition: int
    offset: int
    stopping_offset: int | None


@dataclass(frozen=True, slots=True)
class KafkaPartitionStatus:
    """One partition the enumerator knows, and whether it was assigned to a reader."""

    topic: str
    partition: int
    status: str


@dataclass(frozen=True, slots=True)
class KafkaSourceState:
    """A KafkaSource's state: its readers' splits and its enumerator's partitions (None: none kept)."""

    operator_uid: str | None
    operator_id: str
    splits: tuple[KafkaSplit, ...]
    partitions: tuple[KafkaPartitionStatus, ...] | None
    initial_discovery_finished: bool | None


@dataclass(frozen=True, slots=True)
class KafkaWriterStatus:
    """One exactly-once KafkaSink writer's state: its transactional id prefix and open transactions."""

    subtask: int
    transactional_id_prefix: str
    owned_subtask: int
    owned_subtasks: int
    ownership: str
    precommitted: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class KafkaSinkState:
    """A KafkaSink's writers' states (empty: an at-least-once or none sink keeps none)."""

    operator_uid: str | None
    operator_id: str
    writers: tuple[KafkaWriterStatus, ...]

    @property
    def prefixes(self) -> tuple[str, ...]:
        """Return the transactional id prefixes the writers use (one, unless the state was merged)."""
        return tuple(sorted({w.transactional_id_prefix for w in self.writers}))


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def int32(self) -> int:
        value: int = _INT.unpack_from(self.data, self.pos)[0]
        self.pos += 4
        return value

    def int64(self) -> int:
        value: int = _LONG.unpack_from(self.data, self.pos)[0]
        self.pos += 8
        return value

    def utf(self) -> str:
        n = struct.unpack_from(">H", self.data, self.pos)[0]
        end = self.pos + 2 + n
        if end > len(self.data):
            raise ValueError("string runs past the end")
        text = decode_modified_utf8(self.data[self.pos + 2 : end])
        self.pos = end
        return text

    def boolean(self) -> bool:
        value = self.data[self.pos]
        if value not in (0, 1):
            raise ValueError(f"boolean byte {value}")
        self.pos += 1
        return value == 1

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{len(self.data) - self.pos} byte(s) left over")


def _not_kafka(label: str, what: str, why: str, kind: str = "Source") -> UnsupportedFormatError:
    return UnsupportedFormatError(
        f"operator {label!r}: its {what} is not a Kafka{kind}'s ({why})", code="CONNECTOR_STATE_UNKNOWN"
    )


def parse_kafka_split(element: bytes, subtask: int) -> KafkaSplit:
    """Decode one ``SourceReaderState`` element as a ``KafkaPartitionSplit``.

    Raises:
        ValueError: The bytes are not one (another version, another connector, trailing bytes).
    """
    reader = _Reader(_versioned(element, 0, "split"), "split")
    topic, partition, offset, stopping = reader.utf(), reader.int32(), reader.int64(), reader.int64()
    reader.end()
    return KafkaSplit(subtask, topic, partition, offset, None if stopping == NO_STOPPING_OFFSET else stopping)


def _versioned(element: bytes, want: int, what: str) -> bytes:
    """Return the payload of a ``byte[]`` element: ``SimpleVersionedSerialization`` of version ``want``."""
    outer = _Reader(element, "element")
    n = outer.int32()
    if n != len(element) - 4:
        raise ValueError(f"element length {n} for {len(element) - 4} bytes")
    version, size = outer.int32(), outer.int32()
    if version != want:
        raise ValueError(f"{what} serializer version {version} (kg reads version {want})")
    if size != len(element) - 12:
        raise ValueError(f"{what} length {size} for {len(element) - 12} bytes")
    return element[12:]


def parse_kafka_writer(element: bytes, subtask: int) -> KafkaWriterStatus:
    """Decode one ``writer_raw_states`` element as a ``KafkaWriterState``.

    Raises:
        ValueError: The bytes are not one (another version, another sink, trailing bytes).
    """
    reader = _Reader(_versioned(element, 2, "writer state"), "writer state")
    prefix, owned, total, ownership = reader.utf(), reader.int32(), reader.int32(), reader.int32()
    if not 0 <= ownership < len(OWNERSHIPS):
        raise ValueError(f"transaction ownership {ownership}")
    count = reader.int32()
    if not 0 <= count <= len(element):
        raise ValueError(f"transaction count {count}")
    precommitted = tuple((reader.utf(), reader.int64()) for _ in range(count))
    reader.end()
    return KafkaWriterStatus(subtask, prefix, owned, total, OWNERSHIPS[ownership], precommitted)


def kafka_sink_state(savepoint: Savepoint, label: str) -> KafkaSinkState:
    """Return the KafkaSink writer state of operator ``label`` (uid or id).

    Raises:
        InvalidArgumentError: No such operator (``OPERATOR_NOT_FOUND``).
        UnsupportedFormatError: Its state is not a KafkaSink writer's (``CONNECTOR_STATE_UNKNOWN``).
    """
    op = find_operator(savepoint, label)
    writers: list[KafkaWriterStatus] = []
    for (op_id, subtask), stream in sorted(savepoint.operator_streams.items()):
        if op_id != op.operator_id:
            continue
        table = stream.table
        if table is None:
            raise _not_kafka(
                op.label, f"operator state of subtask {subtask}", "kg could not decode it", "Sink"
            )
        for row in table.to_pylist():
            if row["state"] != WRITER_STATE:
                raise _not_kafka(op.label, "operator state", f"a state {row['state']!r}", "Sink")
            try:
                writers.append(parse_kafka_writer(row["value"], subtask))
            except (ValueError, struct.error, IndexError) as exc:
                raise _not_kafka(
                    op.label, f"{WRITER_STATE} element of subtask {subtask}", str(exc), "Sink"
                ) from None
    return KafkaSinkState(op.uid, op.operator_id, tuple(writers))


def parse_kafka_enumerator(data: bytes) -> tuple[tuple[KafkaPartitionStatus, ...], bool]:
    """Decode a KafkaSource's coordinator state: its partitions and whether initial discovery finished.

    Raises:
        ValueError: The bytes are not that (another serializer version, another connector, trailing bytes).
    """
    outer = _Reader(data, "coordinator state")
    serde, version, size = outer.int32(), outer.int32(), outer.int32()
    if serde != 1:
        raise ValueError(f"coordinator serde version {serde}")
    if version != 2:
        raise ValueError(f"enumerator state serializer version {version} (kg reads version 2)")
    if size != len(data) - 12:
        raise ValueError(f"enumerator state length {size} for {len(data) - 12} bytes")
    reader = _Reader(data[12:], "enumerator state")
    count = reader.int32()
    if not 0 <= count <= len(data):
        raise ValueError(f"partition count {count}")
    partitions = []
    for _ in range(count):
        topic, partition, code = reader.utf(), reader.int32(), reader.int32()
        if code not in ASSIGNMENT_STATUSES:
            raise ValueError(f"assignment status {code}")
        partitions.append(KafkaPartitionStatus(topic, partition, ASSIGNMENT_STATUSES[code]))
    finished = reader.boolean()
    reader.end()
    return tuple(sorted(partitions, key=lambda p: (p.topic, p.partition))), finished


def kafka_source_state(savepoint: Savepoint, label: str) -> KafkaSourceState:
    """Return the KafkaSource state of operator ``label`` (uid or id).

    Raises:
        InvalidArgumentError: No such operator (``OPERATOR_NOT_FOUND``).
        UnsupportedFormatError: Its state is not a KafkaSource's (``CONNECTOR_STATE_UNKNOWN``).
    """
    op = find_operator(savepoint, label)
    splits: list[KafkaSplit] = []
    found_reader_state = False
    for (op_id, subtask), stream in sorted(savepoint.operator_streams.items()):
        if op_id != op.operator_id:
            continue
        table = stream.table
        if table is None:
            raise _not_kafka(op.label, f"operator state of subtask {subtask}", "kg could not decode it")
        for row in table.to_pylist():
            if row["state"] != READER_STATE:
                continue
            found_reader_state = True
            try:
                splits.append(parse_kafka_split(row["value"], subtask))
            except (ValueError, struct.error, IndexError) as exc:
                raise _not_kafka(op.label, f"{READER_STATE} element of subtask {subtask}", str(exc)) from None
    if not found_reader_state and op.coordinator_state is None:
        raise _not_kafka(op.label, "state", f"no {READER_STATE} and no coordinator state")
    partitions, finished = None, None
    if op.coordinator_state is not None:
        try:
            partitions, finished = parse_kafka_enumerator(op.coordinator_state.data)
        except (ValueError, struct.error, IndexError) as exc:
            raise _not_kafka(op.label, "coordinator state", str(exc)) from None
    order = sorted(splits, key=lambda s: (s.topic, s.partition))
    return KafkaSourceState(op.uid, op.operator_id, tuple(order), partitions, finished)


def offset_text(offset: int) -> str:
    """Return an offset for people: the number, or its marker's name (``earliest``)."""
    return OFFSET_MARKERS.get(offset, str(offset)) if offset < 0 else str(offset)


__all__ = [
    "KafkaPartitionStatus",
    "KafkaSinkState",
    "KafkaWriterStatus",
    "KafkaSourceState",
    "KafkaSplit",
    "kafka_sink_state",
    "kafka_source_state",
    "offset_text",
    "parse_kafka_enumerator",
    "parse_kafka_split",
    "parse_kafka_writer",
]
