"""``kg check``'s text: one entry per finding (a line each under ``--table plain|tsv``), then the verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from keygroup_cli.assess.restore import fix_hint
from keygroup_cli.cli.render import (
    HEX_ID,
    counted,
    operators_counted,
    print_table,
    shorten_ids,
    table_style,
)
from keygroup_cli.core.findings import Finding, Severity


def print_findings(
    console: Console,
    findings: list[Finding],
    operators: tuple[int, int],
    ok: bool,
    lines: list[str],
    *,
    snapshot: str = "SNAPSHOT",
    modelled: str = "",
    ids: Sequence[str] = (),
) -> None:
    """Print ``kg check``'s findings, its verdict and (``--job-uids``) the migration it proposes.

    ``operators`` are the operators judged and those of them with state, counted as every command counts.
    Findings that differ only in their operator (Flink refuses each operator of a too-high parallelism
    with the same sentence) are printed once, naming the operators, with the fix (``assess.restore.
    fix_hint``; ``snapshot`` is the input as typed); ``--json`` keeps one finding per operator in
    ``findings`` and these groups in ``groups`` (``finding_groups``). Ids are shortened as ``git`` shortens
    hashes (``ids``: every operator id of the input). ``modelled`` says at which parallelism the verdict
    holds.
    """
    if table_style(console) == "rich":
        styles = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
        for group in _grouped(findings):
            f = group[0]
            subjects = [shorten_ids(g.subject, ids) for g in group]
            severity = (f"{f.severity.value.upper():7}", styles[f.severity])
            head = Text.assemble(severity, " ", f.code, " ", (_subjects(subjects), "bold"))
            console.print(head, soft_wrap=False)
            # One message for many operators: the id in Flink's sentence is each one's (--json has them).
            many = len(group) > 1
            message = HEX_ID.sub("<operator id>", f.message) if many else shorten_ids(f.message, ids)
            console.print(Padding(Text(message), (0, 0, 0, 8), expand=False))
            hint = fix_hint(f, snapshot)
            if hint is not None:
                console.print(Padding(Text(f"fix: {hint}"), (0, 0, 0, 8), expand=False))
    else:
        # --table plain|tsv: one line per finding (for cut, awk, sort).
        table = Table()
        for name in ("severity", "code", "subject", "message"):
            table.add_column(name)
        for f in findings:
            table.add_row(*(Text(v) for v in (f.severity.value, f.code, f.subject, f.message)))
        print_table(console, table)
    # One problem shared by many operators counts once, as it is printed (plain|tsv: a line each).
    shown = [g[0] for g in _grouped(findings)] if table_style(console) == "rich" else findings
    errors = sum(f.severity is Severity.ERROR for f in shown)
    warnings = sum(f.severity is Severity.WARNING for f in shown)
    verdict = "[green]OK[/]" if ok else "[bold red]FAILED[/]"
    console.print(
        f"{verdict}: {operators_counted(*operators)} checked{modelled}; {counted(errors, 'error')}, "
        f"{counted(warnings, 'warning')}"
    )
    for line in lines:  # --job-uids: candidates for the unmapped operators, and the kg migrate command
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _grouped(findings: list[Finding]) -> list[list[Finding]]:
    """Return the findings grouped where only the operator differs: same code, severity and message."""
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.code, f.severity.value, HEX_ID.sub("", f.message)), []).append(f)
    return list(groups.values())


def finding_groups(findings: list[Finding], snapshot: str = "SNAPSHOT") -> list[dict[str, Any]]:
    """Return ``kg check --json``'s ``groups``: each problem once, as the text prints it, with its subjects.

    Findings that differ only in their operator (Flink's sentence names each one's id) make one group; its
    ``message`` then says ``<operator id>`` where each one's id stood (``findings`` keeps each finding
    whole). ``fix`` is the fix the text prints (``assess.restore.fix_hint``; ``snapshot`` as typed), or None.
    """
    groups = []
    for group in _grouped(findings):
        f = group[0]
        message = HEX_ID.sub("<operator id>", f.message) if len(group) > 1 else f.message
        groups.append(
            {
                "code": f.code,
                "severity": f.severity.value,
                "subjects": [g.subject for g in group],
                "message": message,
                "fix": fix_hint(f, snapshot),
            }
        )
    return groups


def _subjects(subjects: list[str], shown: int = 3) -> str:
    """Return one subject, or ``N operators: a, b, c and M more (--json lists each)``."""
    if len(subjects) == 1:
        return subjects[0]
    names = ", ".join(subjects[:shown])
    more = f" and {len(subjects) - shown} more (--json lists each)" if len(subjects) > shown else ""
    return f"{len(subjects)} operators: {names}{more}"
