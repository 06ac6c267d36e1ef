"""Findings: what a check or a verification found, as data, with stable codes and the exit code they imply.

Every finding code lives in ``FINDING_CODES`` (kept sorted and unique by a test). Rules that judge a
savepoint or snapshot (``assess.restore``, ``flink.check.verify``, ``snapshot.verify``) return ``Finding``
records; they never raise for what they find and never print.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from keygroup_cli.core.errors import ExitCode, InvalidInputError, KgError


class Severity(str, Enum):
    """How bad a finding is; errors fail ``kg check``, warnings only under ``--strict``."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a check found: a stable ``code``, its severity, what it is about, and a message."""

    code: str
    severity: Severity
    subject: str
    message: str

    def document(self) -> dict[str, str]:
        """Return the finding as ``--json`` prints it (docs/reference/json-output.md)."""
        return {
            "code": self.code,
            "severity": self.severity.value,
            "subject": self.subject,
            "message": self.message,
        }


#: Every finding code kg can emit, sorted, with a one-line meaning (rendered in docs/reference).
FINDING_CODES: dict[str, str] = {
    "CHANNEL_STATE_RESCALE": (
        "An unaligned checkpoint's in-flight data meets a parallelism change; Flink refuses it on edges now "
        "pointwise or chained."
    ),
    "DEFAULT_MAX_PARALLELISM_TRAP": "State has the default maxParallelism 128 and the parallelism nears it.",
    "FILE_CHECKSUM_MISMATCH": "A kg snapshot file's xxh64 differs from the manifest's.",
    "FILE_EXTRA": "A kg snapshot operator directory holds a file the manifest does not name.",
    "FILE_MISSING": "A file the kg manifest names does not exist.",
    "FILE_ROW_COUNT_MISMATCH": "A kg state file holds a different number of rows than the manifest says.",
    "FILE_SCHEMA_MISMATCH": "A kg state file's columns or types differ from the format's schema.",
    "FILE_SIZE_MISMATCH": "A kg snapshot file's size differs from the manifest's.",
    "FILE_UNREADABLE": "A kg state file is not readable Parquet.",
    "FLINK_DATABASE_CORRUPT": (
        "A RocksDB or ForSt database file of a NATIVE savepoint or checkpoint is damaged or missing."
    ),
    "FLINK_END_OF_KEY_GROUP_MISSING": "A Flink key-group block ends before its END_OF_KEY_GROUP mark.",
    "FLINK_KEYED_STATE_UNREADABLE": (
        "A Flink heap-layout or RocksDB keyed file cannot be read into key groups."
    ),
    "FLINK_KEY_GROUP_BLOCK_CORRUPT": (
        "A Flink key-group block names an unknown state or its entries do not decode."
    ),
    "FLINK_KEY_GROUP_OFFSETS": (
        "A Flink keyed file's key-group offsets are outside it, out of order, or leave bytes."
    ),
    "FLINK_KEY_GROUP_RANGE": "A Flink keyed handle's key-group range is not Flink's range for its subtask.",
    "FLINK_KEY_IN_WRONG_KEY_GROUP": (
        "A key in a Flink key-group block has another key group's prefix or hash."
    ),
    "FLINK_NOT_VERIFIED": "A Flink state stream kg cannot decode (an unknown serializer, a remote file).",
    "FLINK_OPERATOR_STATE_CORRUPT": (
        "A Flink operator-state element lies outside its stream or does not decode."
    ),
    "FLINK_SERIALIZER_LENGTH": "A key or value length in a Flink key-group block exceeds the bytes left.",
    "FLINK_SNAPPY_CORRUPT": "A snappy frame of a Flink state stream is truncated or malformed.",
    "FLINK_SNAPPY_CRC": "A snappy frame's CRC32C does not match its data (Flink itself never checks it).",
    "FLINK_STATE_FILE_MISSING": "A state file Flink's _metadata names does not exist.",
    "FLINK_STATE_FILE_SIZE": "A Flink state file's size differs from the size its handle records.",
    "FLINK_STATE_FILE_UNREADABLE": "A Flink state file cannot be opened or read.",
    "FLINK_STATE_HEADER_INVALID": (
        "A Flink keyed or operator-state stream's serialization header does not parse."
    ),
    "KEY_GROUPS_UNSORTED": "A keyed file's rows are not sorted by key group.",
    "KEY_GROUP_COUNTS_MISMATCH": "A keyed file's rows per key group differ from its key_group_rows.",
    "KEY_GROUP_OUT_OF_RANGE": "A row's key group lies outside its keyed file's key-group range.",
    "KEY_GROUP_WRONG_FOR_KEY": "A row's key group is not murmurHash(key.hashCode()) % maxParallelism.",
    "MAX_PARALLELISM_ADOPTION_UNVERIFIED": (
        "A job that sets no maxParallelism adopts the state's only if its whole chain is in the savepoint."
    ),
    "MAX_PARALLELISM_MISMATCH": "The new job's explicit maxParallelism differs from the state's.",
    "MAX_PARALLELISM_NOT_ADOPTED": (
        "The new job has operators the savepoint lacks, which would restore a chain at Flink's default."
    ),
    "NULL_IN_REQUIRED_COLUMN": "A column the kg format declares non-null holds nulls.",
    "OPERATOR_ID_NOT_UID_HASH": "An operator's id is not Flink's id for its uid.",
    "OPERATOR_NOT_IN_JOB": "A stateful operator of the snapshot is not in the new job.",
    "OPERATOR_STATE_AMBIGUOUS": (
        "With --against: an unmapped stateful operator's state equals that of several new operators; "
        "kg does not choose."
    ),
    "OPERATOR_STATE_CANDIDATE": (
        "With --against: an unmapped stateful operator's state equals one new operator's; the kg migrate "
        "option maps it."
    ),
    "OPERATOR_STATE_POSITIONS": "An operator state's positions in a file are not 0..n-1.",
    "OPTION_OPERATOR_NOT_IN_SNAPSHOT": "A per-operator option names an operator the snapshot lacks.",
    "PARALLELISM_EXCEEDS_MAX_PARALLELISM": "The new parallelism is above the state's maxParallelism.",
    "STATE_ROW_SHAPE": "A row lacks (or has) a column its state kind requires (or forbids).",
    "STATE_UNDECLARED": "A row names a state the operator does not declare with that kind.",
    "UNEVEN_KEY_GROUPS": "The busiest subtask owns clearly more key groups than the mean.",
    "UNION_REPLICAS_DIFFER": "A union state marked replicated holds different lists on different subtasks.",
    "UPGRADE_KRYO_STATE": (
        "A 1.x savepoint's state is Kryo-serialized (Kryo 2); Flink 2.x (Kryo 5) restores it wrong or fails."
    ),
    "UPGRADE_LEGACY_KAFKA_CONSUMER": (
        "FlinkKafkaConsumer's offsets: no operator of a Flink 2.x job restores them."
    ),
    "UPGRADE_LEGACY_KINESIS_CONSUMER": (
        "FlinkKinesisConsumer's shard positions: the Flink 2.x Kinesis connector cannot restore them."
    ),
    "UPGRADE_NOT_JUDGED": "The upgrade gate could not read an operator's serializer snapshots.",
    "UPGRADE_POJO_COLLECTION_FIELD": (
        "A 1.x POJO field declared as a Java collection was Kryo; Flink 2.x refuses the restore."
    ),
    "UPGRADE_SAME_MAJOR": (
        "The savepoint's and the target's Flink major versions leave the upgrade gate nothing to judge."
    ),
    "UPGRADE_SCALA_SERIALIZER": "State serialized with Flink's Scala API, which Flink 2.0 removed.",
    "UPGRADE_SERIALIZER_UNCHECKED": "An Avro or custom serializer kg does not judge across versions.",
}


def exit_code_for(findings: Iterable[Finding], *, strict: bool = False) -> ExitCode:
    """Return the exit code the worst finding implies: 1 for an error (or a warning under ``strict``)."""
    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    return ExitCode.CHECK_FAILED if any(f.severity in failing for f in findings) else ExitCode.OK


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What ``kg verify`` found: counts of what was checked and every finding."""

    snapshot: str
    files: int
    rows: int
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        """Return whether no error-severity finding was made."""
        return not any(f.severity is Severity.ERROR for f in self.findings)


def first_error(findings: Iterable[Finding]) -> str | None:
    """Return the first error finding as ``CODE: message`` (with how many more there are), or None.

    How a gate that refuses on ``kg verify``'s findings words its one line.
    """
    errors = [f for f in findings if f.severity is Severity.ERROR]
    if not errors:
        return None
    more = f" (and {len(errors) - 1} more; run kg verify)" if len(errors) > 1 else ""
    return f"{errors[0].code}: {errors[0].message}{more}"


def fails_verify_error(name: str, problem: str | Finding | KgError) -> InvalidInputError:
    """Return the one-line refusal of input ``kg verify`` rejects (``INPUT_FAILS_VERIFY``, exit 3).

    ``name`` is the input as the message names it; ``problem`` what verify found: a finding, the error a
    strict reader raised, or ``first_error``'s ``CODE: message`` line. Every gate and reader words it so.
    """
    text = problem if isinstance(problem, str) else f"{problem.code}: {problem.message}"
    return InvalidInputError(f"{name}: input fails kg verify: {text}", code="INPUT_FAILS_VERIFY")


__all__ = [
    "FINDING_CODES",
    "Finding",
    "Severity",
    "VerifyReport",
    "exit_code_for",
    "fails_verify_error",
    "first_error",
]
