"""``kg check``: the pre-deploy gate, "will this state restore into the job I am about to deploy?"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from keygroup_cli.assess.matching import MigrationSuggestion, suggest_migration
from keygroup_cli.assess.restore import RestorePlan, check_restore
from keygroup_cli.assess.summary import InputSummary, OperatorSummary, count_operators, summarize
from keygroup_cli.assess.upgrade import parse_target, upgrade_findings
from keygroup_cli.cli.check_render import finding_groups, print_findings
from keygroup_cli.cli.inputs import Input, deployment_document, job_option, render_deployment, resolve_input
from keygroup_cli.cli.options import (
    max_parallelism_option,
    output_options,
    parallelism_option,
    per_operator_values,
    read_job_uids,
)
from keygroup_cli.cli.render import output_for
from keygroup_cli.core.errors import ExitCode
from keygroup_cli.core.findings import Finding, Severity, exit_code_for

EPILOG = """\b
Examples:
  kg check savepoint/ --parallelism 8
  kg check savepoint/ -p 8 -p keyed-state=16 --max-parallelism 128
  kg check /checkpoints/<job-id> -p 4 --job-uids new-job-uids.txt --strict --json
  kg check zk://zk1:2181/flink/my-cluster --job <job-id> -p 12   # what the job resumes from
  kg check savepoint/ -p 8 --deep     # also decode every key group and operator-state stream
  kg check savepoint/ --target-flink 2.2   # what a Flink 2.2 job cannot restore (Kryo, POJOs, ...)
  kg check savepoint/ --against new-job-savepoint/   # map unmapped state by state names and serializers
  kg check deployment.yaml   # a FlinkDeployment: its start state at its parallelism, maxP and overrides

Exit codes: 0 no error finding (warnings fail only with --strict), 1 check failed,
3 invalid snapshot, 4 unsupported format.
"""


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
    p_all, p_for = per_operator_values(parallelism, "--parallelism")
    m_all, m_for = per_operator_values(max_parallelism, "--max-parallelism")
    uids = read_job_uids(job_uids) if job_uids else None
    # --against: the new job's operators, with their states, from a savepoint of it.
    new_job = summarize(against).operators if against is not None else None
    if new_job is not None and uids is None:
        uids = [op.uid or op.operator_id for op in new_job]
    plan = RestorePlan(p_all, p_for, m_all, m_for, uids, allow_non_restored_state)
    target = parse_target(target_flink) if target_flink is not None else None
    source = resolve_input(out, path, job)
    summary = summarize(source.path, read_states=target is not None or new_job is not None)
    modelled: list[Finding] = []
    if source.deployment is not None and source.deployment.deployment is not None:
        # The FlinkDeployment's parallelism, pipeline.max-parallelism and vertex overrides; -p/-m win.
        from keygroup_cli.assess.deployment import deployment_restore_plan

        plan, modelled = deployment_restore_plan(source.deployment.deployment, summary.operators, plan)
        p_all, p_for = plan.parallelism, dict(plan.parallelism_for)
    findings, damage = _findings(summary, plan, target, deep)
    findings = modelled + findings
    suggestion = _suggestion(summary, uids, path, new_job)
    findings += suggestion.findings() if suggestion else []
    # Damage is exit 3 in every command (kg verify's code); what Flink's restore refuses is exit 1.
    code = (
        ExitCode.SNAPSHOT_INVALID
        if any(f.severity is Severity.ERROR for f in damage)
        else exit_code_for(findings, strict=strict)
    )
    document = _document(summary, path, findings, ok=code == 0)
    if uids is not None:
        document["migrate"] = suggestion.document() if suggestion else None
    if source.deployment is not None:
        document["deployment"] = deployment_document(source)
    counts = (document["operators"], document["operators_with_state"])
    lines = suggestion.lines() if suggestion else []
    text = partial(
        print_findings,
        findings=findings,
        operators=counts,
        ok=code == 0,
        lines=lines,
        snapshot=path,
        modelled=_modelled(summary, p_all, p_for),
        ids=[op.operator_id for op in summary.operators],
    )
    out.result("check", document, partial(_with_deployment, source, text))
    ctx.exit(int(code))


def _with_deployment(source: Input, text: Callable[[Console], None], console: Console) -> None:
    """Print the FlinkDeployment block (which state, why) above the findings, for a deployment input."""
    render_deployment(console, source)
    text(console)


def _modelled(summary: InputSummary, p_all: int | None, p_for: dict[str, int]) -> str:
    """Return how the verdict line names the parallelism it judged: -p's, or the operators' current one."""
    named = ", ".join(f"{key}={value}" for key, value in p_for.items())
    if p_all is not None:
        return f" at parallelism {p_all}" + (f" ({named})" if named else "")
    current = sorted({op.parallelism for op in summary.operators}, reverse=True)
    shown = " and ".join(map(str, current)) if len(current) <= 3 else f"{current[-1]} to {current[0]}"
    across = f"{named}; others " if named else ""
    return f" at {across}their current parallelism ({shown}; -p N checks another)"


def _suggestion(
    summary: InputSummary, uids: list[str] | None, path: str, new_job: Sequence[OperatorSummary] | None
) -> MigrationSuggestion | None:
    """Return the candidates for the unmapped stateful operators, and the kg migrate command (#26)."""
    if uids is None:
        return None
    recorded = summary.metadata_version is None or summary.metadata_version >= 5
    return suggest_migration(summary.operators, uids, path, uids_recorded=recorded, job_operators=new_job)


def _findings(
    summary: InputSummary, plan: RestorePlan, target: Any, deep: bool
) -> tuple[list[Finding], list[Finding]]:
    """Return every finding of the restore, upgrade and state-file checks, and the damage among them."""
    findings = check_restore(summary.operators, plan, snapshot=str(summary.path))
    if target is not None:
        findings += upgrade_findings(summary, target)
    from keygroup_cli.assess.integrity import check_input

    # Every state file _metadata names is there, readable, of its size (a stat each); --deep decodes them.
    damage = check_input(summary.savepoint or summary.path, deep=deep)
    return [*findings, *damage], damage


def _document(summary: InputSummary, typed: str, findings: list[Finding], *, ok: bool) -> dict[str, Any]:
    """Return ``kg check --json``'s document (without ``migrate``): the input, operators counted, findings."""
    operators, with_state = count_operators(summary.operators, lambda op: op.has_state)
    return {
        "ok": ok,
        "input": typed,
        "input_format": summary.format,
        "operators": operators,
        "operators_with_state": with_state,
        "findings": [f.document() for f in findings],
        # Each problem once, as the text prints it, with the operators it applies to (schema 3: added).
        "groups": finding_groups(findings, typed),
    }
