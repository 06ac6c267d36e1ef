"""``kg check``: the pre-deploy gate, "will this state restore into the job I am about to deploy?"."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from keygroup_cli.checks import RestorePlan, check_restore
from keygroup_cli.cli.inputs import job_option, resolve_input
from keygroup_cli.cli.options import max_parallelism_option, output_options, parallelism_option
from keygroup_cli.cli.render import counted, output_for, print_table, table_style
from keygroup_cli.errors import InvalidArgumentError
from keygroup_cli.findings import Finding, Severity, exit_code_for
from keygroup_cli.keygroups import UPPER_BOUND_MAX_PARALLELISM
from keygroup_cli.operator_matching import suggest_migration
from keygroup_cli.summary import summarize
from keygroup_cli.upgrade import parse_target, upgrade_findings

EPILOG = """\b
Examples:
  kg check savepoint/ --parallelism 8
  kg check savepoint/ -p 8 -p keyed-state=16 --max-parallelism 128
  kg check /checkpoints/<job-id> -p 4 --job-uids new-job-uids.txt --strict --json
  kg check zk://zk1:2181/flink/my-cluster --job <job-id> -p 12   # what the job resumes from
  kg check savepoint/ -p 8 --deep     # also decode every key group and operator-state stream
  kg check savepoint/ --target-flink 2.2   # what a Flink 2.2 job cannot restore (Kryo, POJOs, ...)
  kg check savepoint/ --against new-job-savepoint/   # map unmapped state by state names and serializers

Exit codes: 0 no error finding (warnings fail only with --strict), 1 check failed,
3 invalid snapshot, 4 unsupported format.
"""


def _per_operator(values: tuple[str, ...], flag: str) -> tuple[int | None, dict[str, int]]:
    """Split ``N`` and ``UID=N`` values; bounds as Flink's ``checkParallelismPreconditions``."""
    default, per_op = None, {}
    for value in values:
        key, _, number = value.rpartition("=")
        try:
            n = int(number)
        except ValueError:
            raise InvalidArgumentError(
                f"{flag} {value}: expected N or UID=N", code="INVALID_OPTION"
            ) from None
        if not 0 < n <= UPPER_BOUND_MAX_PARALLELISM:
            kind = "maxParallelism" if flag == "--max-parallelism" else "parallelism"
            raise InvalidArgumentError(
                f"{flag} {value}: Operator parallelism not within bounds: {n} "
                f"(Flink allows a {kind} of 1 to {UPPER_BOUND_MAX_PARALLELISM})",
                code="PARALLELISM_OUT_OF_BOUNDS",
            )
        if key:
            per_op[key] = n
        else:
            default = n
    return default, per_op


def _read_uids(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidArgumentError(
            f"--job-uids {path}: cannot read: {exc.strerror}", code="INVALID_OPTION"
        ) from None
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@click.command(epilog=EPILOG)
@click.argument("path", type=click.Path(path_type=str))
@job_option
@parallelism_option(
    "New parallelism for all operators (N) or one operator (UID=N, uid or operator id); repeatable.",
    multiple=True,
    metavar="N|UID=N",
    type=str,
)
@max_parallelism_option(
    required=False,
    help="The new job's explicitly configured maxParallelism, for all or one operator; repeatable.",
    multiple=True,
    metavar="M|UID=M",
    type=str,
)
@click.option(
    "--job-uids",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    help="File with the new job's operator uids (or 32-hex ids), one per line; # comments.",
)
@click.option(
    "--against",
    metavar="NEW_SAVEPOINT",
    help="A savepoint or checkpoint of the new job version: its operators are the job's, and unmapped "
    "state is matched to them by state names and serializers.",
)
@click.option(
    "--allow-non-restored-state",
    is_flag=True,
    help="Stateful operators missing from --job-uids are warnings, not errors (Flink's -n).",
)
@click.option("--strict", is_flag=True, help="Warnings fail the check too (exit 1).")
@click.option(
    "--deep",
    is_flag=True,
    help="Also verify every state file as kg verify does (every key group and operator-state stream).",
)
@click.option(
    "--target-flink",
    metavar="VERSION",
    help="Also list the states a job on this Flink version (e.g. 2.2) cannot restore (reads state headers).",
)
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    path: str,
    job: str | None,
    parallelism: tuple[str, ...],
    max_parallelism: tuple[str, ...],
    job_uids: Path | None,
    against: str | None,
    allow_non_restored_state: bool,
    strict: bool,
    deep: bool,
    target_flink: str | None,
) -> None:
    """Check that a savepoint, checkpoint or kg snapshot restores at the planned parallelism.

    Applies Flink's own restore checks (maxParallelism mismatch, parallelism above maxParallelism,
    operators missing from the new job) to every operator Flink judges, stateless ones included, and
    warns about uneven key-group spreads and Flink's default-maxParallelism trap. Without -m it models
    a job that sets no maxParallelism (pass --job-uids to settle whether Flink adopts the state's).
    Reads _metadata to its last byte and stats every state file it names (with --deep, decodes every
    state file too, as kg verify); no JVM.
    """
    out = output_for(ctx)
    p_all, p_for = _per_operator(parallelism, "--parallelism")
    m_all, m_for = _per_operator(max_parallelism, "--max-parallelism")
    uids = _read_uids(job_uids) if job_uids else None
    # --against: the new job's operators, with their states, from a savepoint of it.
    new_job = summarize(against).operators if against is not None else None
    if new_job is not None and uids is None:
        uids = [op.uid or op.operator_id for op in new_job]
    plan = RestorePlan(p_all, p_for, m_all, m_for, uids, allow_non_restored_state)
    target = parse_target(target_flink) if target_flink is not None else None
    read_states = target is not None or new_job is not None
    summary = summarize(resolve_input(out, path, job).path, read_states=read_states)
    findings = check_restore(summary.operators, plan, snapshot=str(summary.path))
    if target is not None:
        findings += upgrade_findings(summary, target)
    from keygroup_cli.integrity import check_input

    # Every state file _metadata names is there, readable, of its size (a stat each); --deep decodes them.
    findings = [*findings, *check_input(summary.savepoint or summary.path, deep=deep)]
    # Unmapped stateful operators: candidates among the job's uids and the kg migrate command (#26).
    suggestion = None
    if uids is not None:
        recorded = summary.metadata_version is None or summary.metadata_version >= 5
        suggestion = suggest_migration(
            summary.operators, uids, path, uids_recorded=recorded, job_operators=new_job
        )
        findings += suggestion.findings() if suggestion else []
    code = exit_code_for(findings, strict=strict)
    checked = sum(1 for op in summary.operators if op.has_state)
    document = {
        "ok": code == 0,
        "path": str(summary.path),
        "format": summary.format,
        "checked_operators": checked,
        "findings": [
            {"code": f.code, "severity": f.severity.value, "subject": f.subject, "message": f.message}
            for f in findings
        ],
    }
    if uids is not None:
        document["migrate"] = suggestion.document() if suggestion else None
    lines = suggestion.lines() if suggestion else []
    out.result("check", document, lambda console: _text(console, findings, checked, code == 0, lines))
    ctx.exit(int(code))


def _text(console: Console, findings: list[Finding], checked: int, ok: bool, lines: list[str]) -> None:
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
