"""The upgrade gate of ``kg check --target-flink``: which states a Flink 2.x job cannot restore from 1.x.

Judged from the serializer snapshots in the state headers (``assess.summary.StateSummary.serializers``) and
the ``_metadata`` version, never from the state's bytes. A savepoint whose ``_metadata`` is version 4 or older
was written by Flink 1.x (2.0 writes version 5): its Kryo serializer snapshots are Kryo 2's. Flink 2.x
serializes ``GenericType`` with Kryo 5, and a POJO field declared as a Java collection interface with its
own collection serializers. Measured on 1.20.3 savepoints restored in 2.3.0 (``tests/restore/
test_upgrade_gate.py``):

- Kryo values, Kryo map values and Kryo operator list state restore without an error and come back wrong
  (every list one element short); Kryo keyed list elements fail the restore; state under a Kryo key
  restores and is never found (every key reads as empty).
- A POJO whose ``List<String>`` field was ``GenericType<java.util.List>`` is refused
  (``StateMigrationException``).
- A POJO of basic fields, a ``Tuple2<String, Long>`` and a ``Long`` restore equal.

Connector states are flagged where the header names them with certainty: the state name *and* the class
their serializers name. Everything else a 2.x job may do differently (a legacy ``SourceFunction``'s own
state names, custom serializers) is in docs/how-to/upgrade-to-flink-2.md, not guessed here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from keygroup_cli.assess.summary import InputSummary, OperatorSummary, StateSummary
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.flink import (
    AVRO_SERIALIZER_SNAPSHOT,
    KRYO_SERIALIZER_SNAPSHOT,
    POJO_SERIALIZER_SNAPSHOT,
    SerializerSnapshot,
)

#: The newest ``_metadata`` version Flink 1.x writes (``MetadataV4Serializer``); Flink 2.0 writes 5.
LAST_FLINK_1_METADATA_VERSION = 4
#: Java collection interfaces Flink 2.x serializes with its own serializers when a POJO field declares
#: them with type arguments (``List<String>``), where Flink 1.x fell back to Kryo.
COLLECTION_INTERFACES = frozenset(
    ("java.util.List", "java.util.Map", "java.util.Set", "java.util.Collection")
)
#: Flink 1.x's Scala API serializers (``flink-scala``), removed in Flink 2.0.
SCALA_SERIALIZER_PREFIX = "org.apache.flink.api.scala."
#: Packages of Flink's own serializers, which nest no serializer kg cannot see (Kryo is judged by itself).
FLINK_CORE_PREFIXES = ("org.apache.flink.api.", "org.apache.flink.runtime.", "org.apache.flink.streaming.")
#: Where the how-to explains each finding's fix.
HOW_TO = "docs/how-to/upgrade-to-flink-2.md"


@dataclass(frozen=True, slots=True)
class TargetFlink:
    """The Flink version a savepoint is to be restored in (``--target-flink 2.2``)."""

    major: int
    minor: int | None

    def __str__(self) -> str:
        return f"{self.major}" if self.minor is None else f"{self.major}.{self.minor}"


def parse_target(text: str) -> TargetFlink:
    """Parse ``--target-flink``: ``2``, ``2.2`` or ``2.2.1`` (1.x and 2.x).

    Raises:
        InvalidArgumentError: Not a Flink 1.x or 2.x version (``INVALID_OPTION``).
    """
    parts = text.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts) or int(parts[0]) not in (1, 2):
        raise InvalidArgumentError(
            f"--target-flink {text}: expected a Flink version such as 2.2 or 1.20", code="INVALID_OPTION"
        )
    return TargetFlink(int(parts[0]), int(parts[1]) if len(parts) > 1 else None)


@dataclass(frozen=True, slots=True)
class _Use:
    """One serializer snapshot inside a state: where it sits (``value / field tags``) and what it is."""

    path: str
    snapshot: SerializerSnapshot
    in_pojo_field: bool


def _walk(role: str, snapshot: SerializerSnapshot, in_pojo_field: bool = False) -> Iterator[_Use]:
    """Yield a snapshot and every snapshot nested in it, each with its path from the state's role."""
    yield _Use(role, snapshot, in_pojo_field)
    names = snapshot.nested_names
    pojo = snapshot.class_name == POJO_SERIALIZER_SNAPSHOT
    for i, nested in enumerate(snapshot.nested):
        label = f"field {names[i]}" if pojo and i < len(names) else _position(snapshot, i)
        yield from _walk(f"{role} / {label}", nested, pojo and not label.startswith("field subclass"))


def _position(snapshot: SerializerSnapshot, index: int) -> str:
    """Name a composite snapshot's nested serializer: map key/value, list element, or its position."""
    outer = snapshot.serializer_name.split("<", 1)[0]
    if outer == "MapSerializer" and len(snapshot.nested) == 2:
        return ("map key", "map value")[index]
    if outer in ("ListSerializer", "GenericArraySerializer") and len(snapshot.nested) == 1:
        return "element"
    return f"{outer}[{index}]"


#: The roles of a header's serializers, in words.
_ROLES = {
    "VALUE_SERIALIZER": "value",
    "NAMESPACE_SERIALIZER": "namespace",
    "KEY_SERIALIZER": "key",
    "USER_KEY_SERIALIZER": "user key",
}


def check_upgrade(
    operators: Sequence[OperatorSummary], *, metadata_version: int, target: TargetFlink
) -> list[Finding]:
    """List, per operator and state, what a Flink ``target`` job cannot restore from this savepoint.

    Only a 1.x savepoint (``_metadata`` version 4 or older) restored in 2.x is judged; any other pair
    returns one INFO finding saying so. States come from ``summarize(..., read_states=True)``.

    Args:
        operators: The savepoint's operators, with their states' serializer snapshots.
        metadata_version: The ``_metadata`` version (4 or older: written by Flink 1.x).
        target: The Flink version the savepoint is to be restored in.
    """
    source_major = 1 if metadata_version <= LAST_FLINK_1_METADATA_VERSION else 2
    if source_major == target.major:
        return [
            Finding(
                "UPGRADE_SAME_MAJOR",
                Severity.INFO,
                f"Flink {target}",
                f"the savepoint was written by Flink {source_major}.x (_metadata version "
                f"{metadata_version}) and the target is Flink {target}: the upgrade gate flags nothing "
                "within a major version",
            )
        ]
    if source_major > target.major:
        return [
            Finding(
                "UPGRADE_SAME_MAJOR",
                Severity.INFO,
                f"Flink {target}",
                f"the savepoint was written by Flink 2.x (_metadata version {metadata_version}); Flink "
                f"{target} cannot read it at all (downgrades are not supported), and the gate judges 1.x "
                "to 2.x upgrades only",
            )
        ]
    findings: list[Finding] = []
    for op in operators:
        unread = [s.name for s in op.states or () if not s.serializers]
        if op.has_keyed_state and op.key_serializer_snapshot is None:
            unread.insert(0, "(key)")
        if op.has_state and op.states is None:
            unread = ["every state"]
        if unread:
            findings.append(_not_judged(op, unread))
        if op.key_serializer_snapshot is not None:
            findings.extend(_judge(op, "key", (("KEY_SERIALIZER", op.key_serializer_snapshot),), target))
        for state in op.states or ():
            if state.kind == "timer":
                # A timer's serializer nests the key's and the namespace's: judged as the key already.
                continue
            findings.extend(_judge(op, state.name, state.serializers, target, state))
    return findings


def _not_judged(op: OperatorSummary, names: list[str]) -> Finding:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return Finding(
        "UPGRADE_NOT_JUDGED",
        Severity.WARNING,
        op.label,
        f"kg could not read the serializer snapshots of {shown} (a state file it cannot read from here, or "
        "a header it could not resolve), so the upgrade gate has not judged them",
    )


def upgrade_findings(summary: InputSummary, target: TargetFlink) -> list[Finding]:
    """Run ``check_upgrade`` on a summary read with its states (``summarize(..., read_states=True)``).

    Raises:
        InvalidArgumentError: The input is a kg snapshot, which keeps no Flink serializer snapshots.
    """
    if summary.metadata_version is None:
        raise InvalidArgumentError(
            f"--target-flink {target}: judges a Flink savepoint or checkpoint; {summary.path} is a kg "
            "snapshot (convert it back to a savepoint first)",
            code="INVALID_OPTION",
        )
    return check_upgrade(summary.operators, metadata_version=summary.metadata_version, target=target)


def _judge(
    op: OperatorSummary,
    state_name: str,
    serializers: Sequence[tuple[str, SerializerSnapshot]],
    target: TargetFlink,
    state: StateSummary | None = None,
) -> list[Finding]:
    """Judge one state's (or the key's) serializers: at most one finding per code."""
    uses = [u for role, s in serializers for u in _walk(_ROLES.get(role, role.lower()), s)]
    subject = f"{op.label} / {state_name}" if state is not None else f"{op.label} / (key)"
    connector = _connector(state, uses) if state is not None else None
    if connector is not None:
        return [connector(subject, target)]
    found: dict[str, list[str]] = {}
    for use in uses:
        code = _code_of(use)
        if code is not None:
            found.setdefault(code, []).append(f"{use.path}: {_describe(use.snapshot)}")
    unchecked = [
        f"{u.path}: {u.snapshot.class_name}"
        for u in uses
        # kg reads an Avro snapshot's writer schema, but does not judge Avro across Flink versions.
        if (not u.snapshot.known or u.snapshot.class_name == AVRO_SERIALIZER_SNAPSHOT)
        and u.snapshot.class_name != KRYO_SERIALIZER_SNAPSHOT
        and not u.snapshot.class_name.startswith(FLINK_CORE_PREFIXES)
    ]
    findings = [_finding(code, subject, where, target) for code, where in sorted(found.items())]
    if unchecked:
        findings.append(
            Finding(
                "UPGRADE_SERIALIZER_UNCHECKED",
                Severity.INFO,
                subject,
                f"kg cannot see inside {'; '.join(unchecked[:3])}: whether Flink {target} restores it is "
                "that serializer's own (and any Kryo it nests). Flink's Avro serializer keeps its format in "
                f"2.x (not verified by kg's tests); a custom one must be built against 2.x, see {HOW_TO}",
            )
        )
    return findings


def _code_of(use: _Use) -> str | None:
    snap = use.snapshot
    if snap.class_name == KRYO_SERIALIZER_SNAPSHOT:
        if use.in_pojo_field and snap.type_class in COLLECTION_INTERFACES:
            return "UPGRADE_POJO_COLLECTION_FIELD"
        return "UPGRADE_KRYO_STATE"
    if snap.class_name.startswith(SCALA_SERIALIZER_PREFIX):
        return "UPGRADE_SCALA_SERIALIZER"
    return None


def _describe(snapshot: SerializerSnapshot) -> str:
    if snapshot.class_name == KRYO_SERIALIZER_SNAPSHOT:
        return f"GenericType<{snapshot.type_class or '?'}> (Kryo)"
    return snapshot.serializer_name


def _finding(code: str, subject: str, where: list[str], target: TargetFlink) -> Finding:
    shown = "; ".join(where[:4]) + (f" and {len(where) - 4} more" if len(where) > 4 else "")
    if code == "UPGRADE_KRYO_STATE":
        message = (
            f"serialized with Kryo 2 by Flink 1.x ({shown}); Flink {target} reads it with Kryo 5, which "
            "restores Kryo values, map values and operator lists without an error but wrong (every list "
            "one element short, measured) and fails on Kryo keyed list elements. Fix: move the state off "
            "Kryo before the upgrade (a POJO or explicit TypeInformation, migrated with the State Processor "
            f"API), see {HOW_TO}"
        )
    elif code == "UPGRADE_POJO_COLLECTION_FIELD":
        message = (
            f"a POJO field declared as a Java collection was serialized with Kryo by Flink 1.x ({shown}); "
            f"Flink {target} serializes it with its own collection serializer and refuses the restore "
            "(StateMigrationException). Fix: migrate the field's state on 1.x with the State Processor "
            f"API (or change the field to a type that is not a collection interface), see {HOW_TO}"
        )
    else:
        message = (
            f"serialized with Flink's Scala API ({shown}), which Flink 2.0 removed: Flink {target} cannot "
            f"load this serializer. Fix: migrate the state to Java serializers on 1.x, see {HOW_TO}"
        )
    return Finding(code, Severity.ERROR, subject, message)


# -- connectors whose legacy (SourceFunction) consumers are gone in their Flink 2.x releases ---------------

#: (code, state name, a class one of the state's serializers names, connector and fix) per legacy consumer.
_CONNECTORS = (
    (
        "UPGRADE_LEGACY_KAFKA_CONSUMER",
        "topic-partition-offset-states",
        ".KafkaTopicPartition",
        "the offsets of FlinkKafkaConsumer (SourceFunction), which the Kafka connector for Flink 2.x no "
        "longer has: no operator of a 2.x job restores them, and this state is Kryo-serialized too",
        "switch to KafkaSource on Flink 1.x first (a new uid, --allowNonRestoredState, starting from the "
        "committed group offsets), take a savepoint, then upgrade",
    ),
    (
        "UPGRADE_LEGACY_KINESIS_CONSUMER",
        "Kinesis-Stream-Shard-State",
        ".StreamShardMetadata",
        "the shard positions of FlinkKinesisConsumer (SourceFunction), whose state the Kinesis connector "
        "for Flink 2.x (KinesisStreamsSource, 5.0+) cannot restore; its SequenceNumber is Kryo-serialized",
        "move to KinesisStreamsSource (connector 5.0+) on Flink 1.x first, as the connector's migration "
        "guide describes, take a savepoint, then upgrade",
    ),
)


def _connector(state: StateSummary, uses: list[_Use]) -> _ConnectorFinding | None:
    for code, name, marker, what, fix in _CONNECTORS:
        if state.name == name and any((u.snapshot.type_class or "").endswith(marker) for u in uses):
            return _ConnectorFinding(code, what, fix)
    return None


@dataclass(frozen=True, slots=True)
class _ConnectorFinding:
    code: str
    what: str
    fix: str

    def __call__(self, subject: str, target: TargetFlink) -> Finding:
        return Finding(
            self.code,
            Severity.ERROR,
            subject,
            f"{self.what}; Flink {target} will not restore it. Fix: {self.fix}; see {HOW_TO}",
        )


__all__ = [
    "LAST_FLINK_1_METADATA_VERSION",
    "TargetFlink",
    "check_upgrade",
    "parse_target",
    "upgrade_findings",
]
