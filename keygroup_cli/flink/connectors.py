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

Nothing in these bytes names the connector, so kg decodes them only for an operator the user names as a
Kafka source, and refuses bytes that do not parse to their last byte as the layouts above.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from keygroup_cli.errors import UnsupportedFormatError
from keygroup_cli.flink.io.binary import decode_modified_utf8
from keygroup_cli.flink.keyed_values import find_operator
from keygroup_cli.flink.savepoint import Savepoint

#: ``SourceOperator``'s list state of serialized splits.
READER_STATE = "SourceReaderState"
#: ``KafkaPartitionSplit`` offset markers.
OFFSET_MARKERS = {-1: "latest", -2: "earliest", -3: "committed"}
NO_STOPPING_OFFSET = -(2**63)
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


def _not_kafka(label: str, what: str, why: str) -> UnsupportedFormatError:
    return UnsupportedFormatError(
        f"operator {label!r}: its {what} is not a KafkaSource's ({why})", code="CONNECTOR_STATE_UNKNOWN"
    )


def parse_kafka_split(element: bytes, subtask: int) -> KafkaSplit:
    """Decode one ``SourceReaderState`` element as a ``KafkaPartitionSplit``.

    Raises:
        ValueError: The bytes are not one (another version, another connector, trailing bytes).
    """
    outer = _Reader(element, "element")
    n = outer.int32()
    if n != len(element) - 4:
        raise ValueError(f"element length {n} for {len(element) - 4} bytes")
    version, size = outer.int32(), outer.int32()
    if version != 0:
        raise ValueError(f"split serializer version {version} (kg reads version 0)")
    if size != len(element) - 12:
        raise ValueError(f"split length {size} for {len(element) - 12} bytes")
    reader = _Reader(element[12:], "split")
    topic, partition, offset, stopping = reader.utf(), reader.int32(), reader.int64(), reader.int64()
    reader.end()
    return KafkaSplit(subtask, topic, partition, offset, None if stopping == NO_STOPPING_OFFSET else stopping)


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
    "KafkaSourceState",
    "KafkaSplit",
    "kafka_source_state",
    "offset_text",
    "parse_kafka_enumerator",
    "parse_kafka_split",
]
