"""KafkaSource state (flink/data/connectors.py) against a real KafkaSource's savepoint and the broker's
offsets.

fixtures/flink/2.0/kafka-p2 (fixtures/flink/README-kafka.md) was written by Flink 2.0.1 with Apache's
flink-connector-kafka 4.0.1-2.0 after reading every record of a 3-partition topic; the offsets the broker
acknowledged are in its expected-connector-state.json.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from keygroup_cli.core.errors import UnsupportedFormatError
from keygroup_cli.flink.data.connectors import (
    kafka_sink_state,
    kafka_source_state,
    parse_kafka_enumerator,
    parse_kafka_split,
    parse_kafka_writer,
)
from keygroup_cli.flink.savepoint import open_savepoint

FLINK = Path(__file__).resolve().parents[3] / "fixtures" / "flink"
CASE = FLINK / "2.0" / "kafka-p2"


def test_the_splits_resume_where_the_broker_says_each_partition_ends() -> None:
    want = json.loads((CASE / "expected-connector-state.json").read_text(encoding="utf-8"))
    state = kafka_source_state(open_savepoint(CASE), want["uid"])
    got = {(s.topic, s.partition): (s.offset, s.stopping_offset) for s in state.splits}
    assert got == {(want["topic"], p["partition"]): (p["nextOffset"], None) for p in want["partitions"]}
    assert sorted(s.subtask for s in state.splits) == [0, 1, 1]  # parallelism 2, three partitions
    assert state.partitions is not None and state.initial_discovery_finished is True
    assert [(p.topic, p.partition, p.status) for p in state.partitions] == [
        (want["topic"], p["partition"], "assigned") for p in want["partitions"]
    ]


def test_another_sources_state_is_refused_not_guessed() -> None:
    # The UidJob source is a NumberSequenceSource: its splits are another serializer's.
    with pytest.raises(UnsupportedFormatError, match="not a KafkaSource's") as raised:
        kafka_source_state(open_savepoint(FLINK / "2.3" / "uid-heap-canonical-p3"), "uid-source")
    assert raised.value.code == "CONNECTOR_STATE_UNKNOWN"


def _split(topic: bytes, tail: bytes, version: int = 0) -> bytes:
    body = struct.pack(">H", len(topic)) + topic + tail
    inner = struct.pack(">ii", version, len(body)) + body
    return struct.pack(">i", len(inner)) + inner


@pytest.mark.parametrize(
    ("element", "message"),
    [
        (_split(b"t", struct.pack(">iqq", 0, 5, -1), version=1), "version 1"),
        (_split(b"t", struct.pack(">iqq", 0, 5, -1) + b"\x00"), "left over"),
        (_split(b"t", struct.pack(">iq", 0, 5)), "unpack"),
    ],
)
def test_splits_that_do_not_parse_exactly_are_refused(element: bytes, message: str) -> None:
    with pytest.raises((ValueError, struct.error), match=message):
        parse_kafka_split(element, 0)


def test_markers_and_an_old_enumerator_version() -> None:
    split = parse_kafka_split(_split(b"t", struct.pack(">iqq", 3, -2, -1)), 1)
    assert (split.offset, split.stopping_offset) == (-2, -1)  # earliest, until the latest offset
    with pytest.raises(ValueError, match="version 1"):
        parse_kafka_enumerator(struct.pack(">iii", 1, 1, 0))


def test_the_sink_keeps_its_transactional_id_prefix_per_writer() -> None:
    want = json.loads((CASE / "expected-connector-state.json").read_text(encoding="utf-8"))["sink"]
    state = kafka_sink_state(open_savepoint(CASE), want["uid"])
    assert state.prefixes == (want["transactionalIdPrefix"],)
    assert [(w.subtask, w.owned_subtask, w.owned_subtasks) for w in state.writers] == [
        (i, i, want["parallelism"]) for i in range(want["parallelism"])
    ]
    # Each writer's open transaction is named prefix-subtask-checkpoint (the savepoint is checkpoint 1).
    for w in state.writers:
        assert w.ownership == "implicit-by-subtask-id"
        assert w.precommitted == ((f"{want['transactionalIdPrefix']}-{w.subtask}-1", 1),)
    with pytest.raises(UnsupportedFormatError, match="not a KafkaSink's"):
        kafka_sink_state(open_savepoint(CASE), "kafka-source")


def test_a_writer_state_that_does_not_parse_exactly_is_refused() -> None:
    body = struct.pack(">H", 1) + b"p" + struct.pack(">iiii", 0, 1, 7, 0)
    inner = struct.pack(">ii", 2, len(body)) + body
    with pytest.raises(ValueError, match="transaction ownership 7"):
        parse_kafka_writer(struct.pack(">i", len(inner)) + inner, 0)
