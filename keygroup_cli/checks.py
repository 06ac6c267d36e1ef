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
FINDING_CODES: dict[str, str] = {}


def exit_code_for(findings: Iterable[Finding], *, strict: bool = False) -> ExitCode:
    """Return the exit code the worst finding implies: 1 for an error (or a warning under ``strict``)."""
    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    return ExitCode.CHECK_FAILED if any(f.severity in failing for f in findings) else ExitCode.OK
