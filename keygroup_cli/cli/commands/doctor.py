"""``kg doctor``: which Python, kg, Java and extras kg runs with, and what works here."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.render import output_for, print_grid, print_table
from keygroup_cli.core.errors import ExitCode
from keygroup_cli.execution import environment

EPILOG = """\b
Examples:
  kg doctor
  kg doctor --spark                      # also start Spark as kg rescale --engine spark does
  kg doctor --require ha --require rocksdb --json    # a container image's build check
  kg doctor --spark --master spark://host:7077       # the cluster's executors import kg too

Without --spark no JVM is started: Java's version comes from its installation's release file, and
pyspark is not imported. Capabilities: core (inspect, check, verify, ranges, key, plan, advise, diff),
local (rescale --engine local, convert, generate), spark (Java 17+ and pyspark), ha ([ha] extra),
rocksdb ([rocksdb]), rocksdb-merge ([rocksdb-merge]), flink-tests (apache-flink-libraries and Java 17+).

Exit codes: 0 the core works (and what --spark and --require ask for); 6 something asked for is
missing or broken (the core always is asked for), with its error code in --json's "error".
"""


@click.command(epilog=EPILOG)
@click.option(
    "--spark",
    "start_spark",
    is_flag=True,
    help="Start a Spark session and its Python workers as kg rescale --engine spark does (seconds), and run "
    "java -version.",
)
@click.option(
    "--master",
    envvar="KG_MASTER",
    show_envvar=True,
    metavar="URL",
    help="With --spark: the Spark master to start on (default: local[*]).",
)
@click.option(
    "--require",
    "required",
    multiple=True,
    type=click.Choice(environment.CAPABILITIES),
    help="Exit 6 unless this capability works (repeatable); spark without --spark: pyspark and Java 17+ "
    "are there.",
)
@output_options
@click.pass_context
def command(ctx: click.Context, start_spark: bool, master: str | None, required: tuple[str, ...]) -> None:
    """Show which Python, kg, Java and extras kg uses, and which capabilities work."""
    out = output_for(ctx)
    probe = java = None
    if start_spark:
        from keygroup_cli.cli.progress import progress  # rich.progress only when a bar may be drawn

        with progress(out) as on_progress:
            on_progress("starting Spark", 0, None)
            probe, java = environment.probe_spark(master)
            on_progress("starting Spark", 1, 1)
    found = environment.diagnose(probe, java)
    problems = found.problems(required)
    document: dict[str, Any] = {"ok": not problems, **_document(found)}
    if problems:
        first = problems[0]
        message = "; ".join(f"{p.name}: {p.detail}" + (f" ({p.fix})" if p.fix else "") for p in problems)
        document["error"] = {"code": first.code or "MISSING_DEPENDENCY", "message": message}
    out.result("doctor", document, lambda console: _text(console, found, problems))
    if problems:
        # Exit 6 says what failed on stderr in one line, as every kg failure does (the report is on stdout).
        click.echo(f"kg: error: {' '.join(document['error']['message'].split())}", err=True)
    ctx.exit(ExitCode.MISSING_DEPENDENCY if problems else ExitCode.OK)


def _document(found: environment.Diagnosis) -> dict[str, Any]:
    java = found.java
    return {
        "python": {
            "executable": found.python_executable,
            "version": found.python_version,
            "implementation": found.python_implementation,
        },
        "kg": {
            "version": found.kg_version,
            "location": found.kg_location,
            "install": found.kg_install,
            "source": found.kg_source,
        },
        "java": {
            "launcher": java.launcher,
            "java_home": java.java_home,
            "home": java.home,
            "version": java.version,
            "major": java.major,
            "vendor": java.vendor,
            "version_line": java.version_line,
            "problem": java.problem,
        },
        "packages": [
            {"name": p.name, "group": p.group, "version": p.version, "status": p.status, "error": p.error}
            for p in found.packages
        ],
        "environment": {name: value for name, value, _ in found.environment},
        "capabilities": [
            {"name": c.name, "enables": c.enables, "status": c.status, "detail": c.detail, "fix": c.fix}
            for c in found.capabilities
        ],
        "spark": None
        if found.spark is None
        else {
            "ok": found.spark.ok,
            "version": found.spark.version,
            "master": found.spark.master,
            "seconds": round(found.spark.seconds, 3),
            "code": found.spark.code,
            "message": found.spark.message,
        },
    }


def _text(
    console: Console, found: environment.Diagnosis, problems: tuple[environment.Capability, ...]
) -> None:
    java = found.java
    if java.launcher is None:
        java_text = java.problem or "not found"
    else:
        vendor = f" ({java.vendor})" if java.vendor else ""
        java_text = f"{java.version or 'version unknown'}{vendor} {java.launcher}"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    rows = [
        ("Python", f"{found.python_version} ({found.python_implementation}) {found.python_executable}"),
        ("kg", f"{found.kg_version}, {found.kg_install}: {found.kg_location}"),
        ("Java", java_text),
    ]
    if java.version_line:
        rows.append(("java -version", java.version_line))
    rows.append(("JAVA_HOME", java.java_home or "not set"))
    pyspark = next(p for p in found.packages if p.name == "pyspark")
    rows.append(("pyspark", pyspark.version or "not installed"))
    rows += [(name, f"{value}  ({what})") for name, value, what in found.environment]
    for key, value in rows:
        grid.add_row(Text(key, style="bold"), Text(value))
    print_grid(console, grid)
    packages = Table(title="Packages")
    for name in ("group", "package", "version", "import"):
        packages.add_column(name)
    for p in found.packages:
        shown = {"ok": "ok" if p.module else "not imported", "missing": "not installed"}.get(
            p.status, p.error
        )
        packages.add_row(p.group, p.name, p.version or "-", Text(shown or ""))
    print_table(console, packages)
    capabilities = Table(title="Capabilities")
    for name in ("capability", "status", "detail"):
        capabilities.add_column(name)
    for c in found.capabilities:
        detail = c.detail + (f"; {c.fix}" if c.fix else "")
        capabilities.add_row(c.name, c.status, Text(detail))
    print_table(console, capabilities)
    if problems:
        names = ", ".join(p.name for p in problems)
        console.print(f"[bold red]FAILED[/]: {names} (exit 6)")
    else:
        usable = sum(c.works for c in found.capabilities)
        console.print(
            f"[green]OK[/]: kg's core works; {usable} of {len(found.capabilities)} capabilities usable"
        )
