"""Text and JSON of what kg says about a Flink Kubernetes Operator deployment.

``kg plan DEPLOYMENT`` prints the autoscaler's ceiling (``planning.autoscaler.AutoscalerPlan``), ``kg rescale
DEPLOYMENT`` the patch that redeploys it from the new savepoint (``k8s.DeploymentPatch``). The library
decides both; this only prints them.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from keygroup_cli.cli.inputs import Input, deployment_document, render_deployment
from keygroup_cli.cli.render import print_grid, print_table

if TYPE_CHECKING:
    from keygroup_cli.assess.deployment import DeploymentStart
    from keygroup_cli.k8s import DeploymentPatch
    from keygroup_cli.planning.autoscaler import AutoscalerPlan


def rescale_command(typed: str, plan: AutoscalerPlan) -> str | None:
    """Return the ``kg rescale`` command line that writes the proposed maxParallelism (None if allowed)."""
    if plan.proposal is None:
        return None
    m = plan.proposal.max_parallelism
    return f"kg rescale {shlex.quote(typed)} --max-parallelism {m} --out URI"


def autoscaler_document(
    typed: str, start: DeploymentStart, plan: AutoscalerPlan, where: str
) -> dict[str, Any]:
    """Return ``kg plan DEPLOYMENT --json``'s document (public API: docs/reference/json-output.md)."""
    return {
        "input": typed,
        "deployment": deployment_document(Input(start.pointer, start.ha, start)),
        "target_from": where,
        "autoscaler": plan.document(),
        "rescale_command": rescale_command(typed, plan),
    }


def render_autoscaler_plan(console: Console, document: dict[str, Any], plan: AutoscalerPlan) -> None:
    """Print the deployment, the verdict, the ranked maxParallelisms and the command that writes one."""
    start = document["deployment"]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    rows = [
        ("Deployment", f"{start['deployment'] or '-'} (state: {start['field']}: {start['path']})"),
        ("State maxParallelism", str(plan.state_max_parallelism)),
        (
            "pipeline.max-parallelism",
            str(plan.job_max_parallelism)
            if plan.job_max_parallelism is not None
            else "not set (the state's)",
        ),
        ("Autoscaler up to", f"{plan.target} ({document['target_from']})"),
    ]
    for key, value in rows:
        grid.add_row(f"[bold]{key}[/bold]", Text(value))
    print_grid(console, grid)
    console.print(Text(("OK: " if plan.allowed else "NO: ") + plan.verdict()))
    table = Table(title=f"maxParallelisms for the autoscaler up to {plan.target}")
    for name in ("maxParallelism", "even steps", "ceiling", "coarsest step", f"skew at {plan.target}"):
        table.add_column(name, justify="right", no_wrap=True)
    shown = [plan.current, *[c for c in plan.candidates if c.max_parallelism != plan.max_parallelism]]
    for c in shown:
        a, b = c.document()["coarsest_step"]
        label = f"{c.max_parallelism} (now)" if c is plan.current else str(c.max_parallelism)
        skew = "-" if c.skew_at_target is None else f"{c.skew_at_target:.2f}"
        table.add_row(label, str(len(c.reachable)), str(c.ceiling), f"{a} -> {b}", skew)
    print_table(console, table)
    command = document["rescale_command"]
    if command:
        console.print(
            Text(
                f"Proposed: maxParallelism {plan.proposal.max_parallelism if plan.proposal else '?'}. "
                "Write it "
                f"with: {command} (prints the FlinkDeployment patch; kg advise -m M --max {plan.target} "
                "lists every step)"
            )
        )


def render_patch(console: Console, patch: DeploymentPatch, style: str) -> None:
    """Print the fields the patch changes, the merge patch and the ``kubectl`` command that applies it."""
    from keygroup_cli.k8s import dump

    table = Table(title=f"Patch for {patch.deployment.label}")
    for name in ("field", "now", "after"):
        table.add_column(name)
    for name, old, new in patch.fields():
        table.add_row(name, "-" if old is None else str(old), str(new))
    print_table(console, table)
    console.print(Text("Merge patch (kubectl patch --type merge; --output patch prints only this):"))
    console.print(Text(dump(patch.merge_patch(), style)), soft_wrap=True)
    console.print(Text(f"Apply: {patch.kubectl_command()}"), soft_wrap=True)
    console.print(
        Text("FlinkStateSnapshot that registers it with the operator (optional; kubectl apply -f):")
    )
    console.print(Text(dump(patch.snapshot_resource(), style)), soft_wrap=True)


__all__ = ["autoscaler_document", "render_autoscaler_plan", "render_deployment", "render_patch"]
