"""``kg check``'s text: one entry per finding (a line each under ``--table plain|tsv``), then the verdict."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from keygroup_cli.cli.render import counted, print_table, table_style
from keygroup_cli.core.findings import Finding, Severity


def print_findings(
    console: Console, findings: list[Finding], checked: int, ok: bool, lines: list[str]
) -> None:
    """Print ``kg check``'s findings, its verdict and (``--job-uids``) the migration it proposes."""
    if table_style(console) == "rich":
        styles = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
        for f in findings:
            console.print(
                f"[{styles[f.severity]}]{f.severity.value.upper():7}[/] {f.code} [bold]{f.subject}[/]"
            )
            console.print(f"        {f.message}", markup=False, highlight=False)
    else:
        # --table plain|tsv: one line per finding (for cut, awk, sort).
        table = Table()
        for name in ("severity", "code", "subject", "message"):
            table.add_column(name)
        for f in findings:
            table.add_row(*(Text(v) for v in (f.severity.value, f.code, f.subject, f.message)))
        print_table(console, table)
    errors = sum(f.severity is Severity.ERROR for f in findings)
    warnings = sum(f.severity is Severity.WARNING for f in findings)
    verdict = "[green]OK[/]" if ok else "[bold red]FAILED[/]"
    console.print(
        f"{verdict}: {counted(checked, 'operator')} with state checked, {counted(errors, 'error')}, "
        f"{counted(warnings, 'warning')}"
    )
    for line in lines:  # --job-uids: candidates for the unmapped operators, and the kg migrate command
        console.print(line, markup=False, highlight=False, soft_wrap=True)
