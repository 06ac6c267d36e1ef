"""Findings: validation results as data, with stable codes, and the exit code they imply.

Every finding code lives in ``FINDING_CODES`` (kept sorted and unique by a test). Rules that judge a
savepoint or snapshot return ``Finding`` records; they never raise for what they find and never print.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from keygroup_cli.errors import ExitCode


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


#: Every finding code kg can emit, sorted, with a one-line meaning (rendered in docs/reference).
FINDING_CODES: dict[str, str] = {
    "FILE_CHECKSUM_MISMATCH": "A kg snapshot file's xxh64 differs from the manifest's.",
    "FILE_EXTRA": "A kg snapshot operator directory holds a file the manifest does not name.",
    "FILE_MISSING": "A file the kg manifest names does not exist.",
    "FILE_ROW_COUNT_MISMATCH": "A kg state file holds a different number of rows than the manifest says.",
    "FILE_SCHEMA_MISMATCH": "A kg state file's columns or types differ from the format's schema.",
    "FILE_SIZE_MISMATCH": "A kg snapshot file's size differs from the manifest's.",
    "FILE_UNREADABLE": "A kg state file is not readable Parquet.",
    "KEY_GROUPS_UNSORTED": "A keyed file's rows are not sorted by key group.",
    "KEY_GROUP_COUNTS_MISMATCH": "A keyed file's rows per key group differ from its key_group_rows.",
    "KEY_GROUP_OUT_OF_RANGE": "A row's key group lies outside its keyed file's key-group range.",
    "KEY_GROUP_WRONG_FOR_KEY": "A row's key group is not murmurHash(key.hashCode()) % maxParallelism.",
    "NULL_IN_REQUIRED_COLUMN": "A column the kg format declares non-null holds nulls.",
    "OPERATOR_ID_NOT_UID_HASH": "An operator's id is not Flink's id for its uid.",
    "OPERATOR_STATE_POSITIONS": "An operator state's positions in a file are not 0..n-1.",
    "STATE_ROW_SHAPE": "A row lacks (or has) a column its state kind requires (or forbids).",
    "STATE_UNDECLARED": "A row names a state the operator does not declare with that kind.",
}


def exit_code_for(findings: Iterable[Finding], *, strict: bool = False) -> ExitCode:
    """Return the exit code the worst finding implies: 1 for an error (or a warning under ``strict``)."""
    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    return ExitCode.CHECK_FAILED if any(f.severity in failing for f in findings) else ExitCode.OK
