"""The upgrade gate (keygroup_cli/assess/upgrade.py): its verdicts on Flink 1.20's savepoints and on crafted
headers.

What Flink 2.3 itself does with the same savepoints is pinned by tests/restore/test_upgrade_gate.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from keygroup_cli.assess.summary import OperatorSummary, StateSummary, summarize
from keygroup_cli.assess.upgrade import TargetFlink, check_upgrade, parse_target, upgrade_findings
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.findings import FINDING_CODES, Finding, Severity
from keygroup_cli.core.keygroups import operator_id_for_uid
from keygroup_cli.flink.io.binary import DataOutput
from keygroup_cli.flink.types.serializer_snapshots import (
    KRYO_SERIALIZER_SNAPSHOT,
    POJO_SERIALIZER_SNAPSHOT,
    SerializerSnapshot,
)

ROOT = Path(__file__).resolve().parents[2]
UPGRADE_CASES = ("upgrade-heap-canonical-p2", "upgrade-rocksdb-canonical-p2")
BASE = "org.apache.flink.api.common.typeutils.base."
TWO = TargetFlink(2, 2)


def _codes(findings: list[Finding]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in findings:
        out.setdefault(f.subject, set()).add(f.code)
    return out


@pytest.mark.parametrize("case", UPGRADE_CASES)
def test_flink_1_20_state_the_issue_names_is_judged_as_flink_2_3_restores_it(case: str) -> None:
    summary = summarize(ROOT / "fixtures" / "flink" / "1.20" / case, read_states=True)
    assert summary.metadata_version == 4
    findings = check_upgrade(summary.operators, metadata_version=4, target=TWO)
    by_state = {subject.split(" / ")[1]: codes for subject, codes in _codes(findings).items()}
    assert by_state == {
        "kryo-value": {"UPGRADE_KRYO_STATE"},
        "kryo-map": {"UPGRADE_KRYO_STATE"},
        "kryo-list": {"UPGRADE_KRYO_STATE"},
        "op-kryo": {"UPGRADE_KRYO_STATE"},
        "(key)": {"UPGRADE_KRYO_STATE"},
        "pojo-list": {"UPGRADE_POJO_COLLECTION_FIELD"},
    }
    assert all(f.severity is Severity.ERROR for f in findings)
    # Subjects name the operator (by id: V4 metadata records no uid) and the state.
    assert f"{operator_id_for_uid('kryo-map')} / kryo-map" in _codes(findings)
    assert f"{operator_id_for_uid('kryo-key')} / (key)" in _codes(findings)
    pojo = next(f for f in findings if f.code == "UPGRADE_POJO_COLLECTION_FIELD")
    assert "field tags: GenericType<java.util.List>" in pojo.message
    assert "StateMigrationException" in pojo.message
    kryo_map = next(f for f in findings if f.subject.endswith("/ kryo-map"))
    assert "map value: GenericType<kg.versioned.UpgradeJob$Bag>" in kryo_map.message
    assert "docs/how-to/upgrade-to-flink-2.md" in kryo_map.message


def test_same_major_and_downgrade_flag_nothing() -> None:
    summary = summarize(ROOT / "fixtures" / "flink" / "1.20" / UPGRADE_CASES[0], read_states=True)
    same = check_upgrade(summary.operators, metadata_version=4, target=parse_target("1.20"))
    assert [(f.code, f.severity) for f in same] == [("UPGRADE_SAME_MAJOR", Severity.INFO)]
    newer = summarize(ROOT / "fixtures" / "flink" / "2.3" / "uid-heap-canonical-p3", read_states=True)
    assert newer.metadata_version is not None and newer.metadata_version >= 5
    for target in ("2", "2.0", "1.20"):
        found = upgrade_findings(newer, parse_target(target))
        assert [(f.code, f.severity) for f in found] == [("UPGRADE_SAME_MAJOR", Severity.INFO)]


def test_flink_1_x_savepoints_of_basic_state_pass() -> None:
    for version in ("1.15", "1.17", "1.20"):
        summary = summarize(ROOT / "fixtures" / "flink" / version / "uid-rocksdb-native-p3", read_states=True)
        assert upgrade_findings(summary, TWO) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2", TargetFlink(2, None)),
        ("2.2", TargetFlink(2, 2)),
        ("2.2.1", TargetFlink(2, 2)),
        ("1.20", TargetFlink(1, 20)),
    ],
)
def test_parse_target(text: str, expected: TargetFlink) -> None:
    assert parse_target(text) == expected


@pytest.mark.parametrize("text", ["3.0", "0.9", "two", "2.x", "", "2.2.1.0", "-2"])
def test_parse_target_refuses_what_is_not_a_flink_1_or_2_version(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="--target-flink") as info:
        parse_target(text)
    assert info.value.code == "INVALID_OPTION"


def test_a_kg_snapshot_is_refused_with_one_line() -> None:
    summary = summarize(ROOT / "fixtures" / "snapshots" / "valid")
    with pytest.raises(InvalidArgumentError, match="kg snapshot"):
        upgrade_findings(summary, TWO)


# -- crafted serializer snapshots ----------------------------------------------------------------------------


def _snap(
    cls: str, body: bytes = b"", nested: tuple[SerializerSnapshot, ...] = (), **kw: object
) -> SerializerSnapshot:
    out = DataOutput()
    out.write_utf(cls)
    out.write_int(1)
    out.write_bytes(body)
    return SerializerSnapshot(cls, 1, out.getvalue(), nested, **kw)  # type: ignore[arg-type]


def _utf(text: str) -> bytes:
    out = DataOutput()
    out.write_utf(text)
    return out.getvalue()


def _kryo(type_class: str) -> SerializerSnapshot:
    return _snap(KRYO_SERIALIZER_SNAPSHOT, _utf(type_class) + b"\x00\x00\x00\x00", known=False)


def _pojo(type_class: str, fields: dict[str, SerializerSnapshot]) -> SerializerSnapshot:
    return _snap(
        POJO_SERIALIZER_SNAPSHOT, _utf(type_class), tuple(fields.values()), nested_names=tuple(fields)
    )


STRING = _snap(f"{BASE}StringSerializer$StringSerializerSnapshot")
LONG = _snap(f"{BASE}LongSerializer$LongSerializerSnapshot")


def _tuple(*nested: SerializerSnapshot) -> SerializerSnapshot:
    return _snap("org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot", nested=nested)


def _op(
    states: tuple[StateSummary, ...] | None,
    key: SerializerSnapshot | None = STRING,
    keyed: bool | None = None,
) -> OperatorSummary:
    return OperatorSummary(
        uid="op",
        operator_id="0" * 32,
        name=None,
        parallelism=1,
        max_parallelism=128,
        has_state=True,
        has_keyed_state=key is not None if keyed is None else keyed,
        states=states,
        subtasks=(),
        key_serializer_snapshot=key,
    )


def _state(name: str, value: SerializerSnapshot, kind: str = "value") -> StateSummary:
    return StateSummary(name, kind, serializers=(("VALUE_SERIALIZER", value),))


def test_kryo_is_found_wherever_it_is_nested_and_a_collection_counts_only_as_a_pojo_field() -> None:
    states = (
        # A POJO field of a class that is no collection stays Kryo in 2.x: silent corruption, not refusal.
        _state("pojo-bag", _pojo("com.acme.P", {"bag": _kryo("com.acme.Bag"), "n": LONG})),
        # A top-level Kryo List (GenericType<java.util.List>) is Kryo state.
        _state("list", _kryo("java.util.List")),
        _state("deep", _tuple(STRING, _tuple(LONG, _pojo("com.acme.Q", {"tags": _kryo("java.util.Set")})))),
        _state("fine", _tuple(STRING, LONG)),
        _state("timers", _tuple(_kryo("com.acme.Key")), kind="timer"),
    )
    findings = check_upgrade([_op(states, key=_kryo("com.acme.Key"))], metadata_version=3, target=TWO)
    assert _codes(findings) == {
        "op / (key)": {"UPGRADE_KRYO_STATE"},
        "op / pojo-bag": {"UPGRADE_KRYO_STATE"},
        "op / list": {"UPGRADE_KRYO_STATE"},
        "op / deep": {"UPGRADE_POJO_COLLECTION_FIELD"},
    }
    deep = next(f for f in findings if f.subject == "op / deep")
    assert (
        "value / TupleSerializer[1] / TupleSerializer[1] / field tags: GenericType<java.util.Set>"
        in deep.message
    )


def test_legacy_kafka_and_kinesis_consumers_are_named_by_state_and_class() -> None:
    kafka = _tuple(_kryo("org.apache.flink.streaming.connectors.kafka.internals.KafkaTopicPartition"), LONG)
    kinesis = _tuple(
        _pojo("org.apache.flink.streaming.connectors.kinesis.model.StreamShardMetadata", {"shardId": STRING}),
        _kryo("org.apache.flink.streaming.connectors.kinesis.model.SequenceNumber"),
    )
    states = (
        _state("topic-partition-offset-states", kafka, kind="operator-union"),
        _state("Kinesis-Stream-Shard-State", kinesis, kind="operator-union"),
        # The Kafka state's name with another class (another connector reuses it): only its Kryo counts.
        _state("topic-partition-offset-states-2", kafka, kind="operator-union"),
    )
    findings = check_upgrade([_op(states, key=None)], metadata_version=4, target=TWO)
    assert _codes(findings) == {
        "op / topic-partition-offset-states": {"UPGRADE_LEGACY_KAFKA_CONSUMER"},
        "op / Kinesis-Stream-Shard-State": {"UPGRADE_LEGACY_KINESIS_CONSUMER"},
        "op / topic-partition-offset-states-2": {"UPGRADE_KRYO_STATE"},
    }
    kafka_finding = next(f for f in findings if f.code == "UPGRADE_LEGACY_KAFKA_CONSUMER")
    assert "KafkaSource" in kafka_finding.message and kafka_finding.severity is Severity.ERROR


def test_scala_serializers_are_errors_and_custom_ones_are_noted() -> None:
    scala = _snap("org.apache.flink.api.scala.typeutils.ScalaCaseClassSerializerSnapshot", nested=(STRING,))
    avro = _snap("org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot", known=False)
    # kg reads an Avro snapshot's writer schema (known), but still does not judge Avro across versions.
    read_avro = _snap("org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot", known=True)
    enum = _snap(
        "org.apache.flink.api.common.typeutils.base.EnumSerializer$EnumSerializerSnapshot", known=False
    )
    states = (
        _state("case-class", scala),
        _state("avro", avro),
        _state("read-avro", read_avro),
        _state("enum", enum),
    )
    findings = check_upgrade([_op(states)], metadata_version=4, target=TWO)
    assert {(f.subject, f.code, f.severity) for f in findings} == {
        ("op / case-class", "UPGRADE_SCALA_SERIALIZER", Severity.ERROR),
        ("op / avro", "UPGRADE_SERIALIZER_UNCHECKED", Severity.INFO),
        ("op / read-avro", "UPGRADE_SERIALIZER_UNCHECKED", Severity.INFO),
    }


def test_states_whose_serializers_kg_could_not_read_are_a_warning_not_a_pass() -> None:
    states = (StateSummary("opaque", "value"), _state("fine", LONG))
    findings = check_upgrade([_op(states, key=None, keyed=True)], metadata_version=4, target=TWO)
    assert [(f.code, f.severity) for f in findings] == [("UPGRADE_NOT_JUDGED", Severity.WARNING)]
    assert "(key), opaque" in findings[0].message
    unread = check_upgrade([_op(None, key=None)], metadata_version=4, target=TWO)
    assert [f.code for f in unread] == ["UPGRADE_NOT_JUDGED"]


def test_every_upgrade_code_is_registered() -> None:
    import keygroup_cli.assess.upgrade as upgrade

    used = set(re.findall(r'"(UPGRADE_[A-Z_]+)"', Path(upgrade.__file__).read_text(encoding="utf-8")))
    assert len(used) == 8
    assert used <= set(FINDING_CODES)
