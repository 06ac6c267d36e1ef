"""Turn a command's PATH argument (and ``--job``) into what the command reads.

A ``zk://`` URI or an exported HA ConfigMap names a Flink HA store: it becomes the ``chk-N`` / savepoint
directory the job would resume from (``keygroup_cli.ha``). A YAML/JSON file of the Flink Kubernetes
Operator's resources (a ``FlinkDeployment``, ``FlinkStateSnapshot``s) becomes the state the deployment starts
from (``keygroup_cli.assess.deployment``). Anything else (a local path, an object-store
URI) passes through unchanged, as the string the user typed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from keygroup_cli.cli.render import Output, print_grid
from keygroup_cli.core.errors import LeaderLiveError

if TYPE_CHECKING:  # keygroup_cli.ha itself is imported only when PATH names an HA store
    from keygroup_cli.assess.deployment import DeploymentStart
    from keygroup_cli.ha import HaResolution

F = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Input:
    """What a command reads: ``path`` (as typed, or the resolved pointer), the HA store, the deployment."""

    path: str
    ha: HaResolution | None = None
    deployment: DeploymentStart | None = None


def job_option(func: F) -> F:
    """``--job JOBID``: the job in an HA store (needed only when it holds several)."""
    return click.option(
        "--job",
        metavar="JOBID",
        help="With zk://…, an HA ConfigMap export or a FlinkDeployment: the job (32 hex digits); needed "
        "only when the store holds several jobs.",
    )(func)


def resolve_input(out: Output, path: str, job: str | None, *, refuse_live_leader: bool = False) -> Input:
    """Return what to read for ``path``; for an HA store, warn (or refuse) when a leader is live.

    Args:
        out: Where warnings go.
        path: The raw PATH argument.
        job: ``--job``, if given.
        refuse_live_leader: Raise instead of warning when a JobManager still leads the job (``rescale``).

    Raises:
        click.UsageError: ``--job`` without an HA store.
        LeaderLiveError: ``refuse_live_leader`` and a live leader (exit 7).
    """
    from keygroup_cli.k8s import is_operator_file

    if is_operator_file(path):
        return _deployment_input(out, path, job, refuse_live_leader)
    from keygroup_cli.ha import is_ha_source

    if not is_ha_source(path):
        if job is not None:
            raise click.UsageError("--job applies only to zk://… or an HA ConfigMap export.")
        return Input(path)
    from keygroup_cli.ha import resolve

    resolution = resolve(path, job)
    _judge_leader(out, resolution, refuse_live_leader)
    return Input(resolution.pointer, resolution)


def _deployment_input(out: Output, path: str, job: str | None, refuse_live_leader: bool) -> Input:
    """Return the state a FlinkDeployment starts from (``assess.deployment.resolve_start``)."""
    from keygroup_cli.assess.deployment import resolve_start

    start = resolve_start(path, job=job)
    for warning in start.warnings:
        out.warn(warning)
    if start.ha is not None:
        _judge_leader(out, start.ha, refuse_live_leader)
    return Input(start.pointer, start.ha, start)


def _judge_leader(out: Output, resolution: HaResolution, refuse_live_leader: bool) -> None:
    """Warn about the HA store's warnings and a live leader; refuse one when ``refuse_live_leader``."""
    for warning in resolution.warnings:
        out.warn(warning)
    if resolution.live_leader:
        signs = "; ".join(resolution.live_reasons)
        if refuse_live_leader:
            expiry = (
                "its ZooKeeper session timeout (the ephemeral nodes vanish then)"
                if resolution.store == "zookeeper"
                else "its lease to expire"
            )
            raise LeaderLiveError(
                f"job {resolution.job_id} still has a live leader, {resolution.leader_text()}: {signs}. "
                "Its JobManager may write new checkpoints at any moment: stop the job with a savepoint "
                f"(flink stop --savepointPath ...) and rescale that, or, if the JobManager crashed, wait for "
                f"{expiry} and retry"
            )
        out.warn(
            f"job {resolution.job_id} has a live leader, {resolution.leader_text()}: {signs}; "
            f"chk-{resolution.checkpoint_id} may be subsumed by a newer checkpoint at any moment"
        )


def ha_document(source: Input) -> dict[str, object] | None:
    """Return the ``ha`` object of ``kg inspect --json`` (None for a path that is no HA store)."""
    if source.ha is None:
        return None
    from keygroup_cli.ha import resolution_document

    return resolution_document(source.ha)


def render_deployment(console: Console, source: Input) -> None:
    """Print which state a FlinkDeployment starts from and why (nothing for any other input)."""
    start = source.deployment
    if start is None:
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    d = start.deployment
    rows = [("Resources", start.resources.source)]
    if d is not None:
        where = f"{d.namespace}/" if d.namespace else ""
        rows.append(("FlinkDeployment", f"{where}{d.name}"))
        p, m = d.parallelism, d.max_parallelism
        rows.append(("Parallelism", f"{p} ({d.parallelism_source})" if p is not None else "not set"))
        rows.append(("pipeline.max-parallelism", str(m) if m is not None else "not set"))
        overrides = d.vertex_overrides
        if overrides:
            rows.append(("Vertex overrides", ", ".join(f"{k}:{v}" for k, v in overrides.items())))
    rows += [
        ("Starts from", f"{start.field}: {start.written}"),
        ("Why", start.reason),
    ]
    rows += [("Passed over", line) for line in start.considered]
    if start.pointer != start.written:
        rows.append(("Reads", start.pointer))
    for key, value in rows:
        grid.add_row(f"[bold]{key}[/bold]", Text(value))
    print_grid(console, grid)


def deployment_document(source: Input) -> dict[str, object] | None:
    """Return the ``deployment`` object of ``kg inspect/check --json`` (None for other inputs)."""
    return None if source.deployment is None else source.deployment.document()


def render_ha(console: Console, source: Input) -> None:
    """Print which HA store entry was used and who leads the job (nothing for a plain path)."""
    ha = source.ha
    if ha is None:
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    kind = ha.kind + (f" ({ha.type_name})" if ha.type_name else "")
    if ha.kind == "savepoint":
        kind += ": the savepoint the job was started from; no checkpoint has completed since"
    ids = ", ".join(str(i) for i in ha.checkpoint_ids)
    rows = [
        ("HA store", f"{ha.store} ({ha.source}), layout {ha.layout}"),
        ("Job", ha.job_id),
        ("Store entry", f"{ha.entry} (highest of: {ids})"),
        ("Resumes from", f"{kind}, id {ha.checkpoint_id}"),
        ("Pointer", ha.pointer),
        (
            "Leader",
            ha.leader_text()
            + (f", ZooKeeper session {ha.leader.zk_session}" if ha.leader and ha.leader.zk_session else ""),
        ),
        ("Live leader", "yes: " + "; ".join(ha.live_reasons) if ha.live_leader else "no"),
    ]
    for key, value in rows:
        grid.add_row(f"[bold]{key}[/bold]", Text(value))
    print_grid(console, grid)


def with_ha(source: Input, render: Callable[[Console], None]) -> Callable[[Console], None]:
    """Return ``render`` preceded by ``render_ha`` (the HA block first, for an HA store)."""

    def both(console: Console) -> None:
        render_deployment(console, source)
        render_ha(console, source)
        render(console)

    return both
