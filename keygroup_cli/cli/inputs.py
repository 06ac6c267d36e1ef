"""Turn a command's PATH argument (and ``--job``) into what the command reads.

A ``zk://`` URI or an exported HA ConfigMap names a Flink HA store: it becomes the ``chk-N`` / savepoint
directory the job would resume from (``keygroup_cli.ha``). Anything else (a local path, an object-store
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
    from keygroup_cli.ha import HaResolution

F = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Input:
    """What a command reads: ``path`` (unchanged, or the resolved pointer) and the HA resolution."""

    path: str
    ha: HaResolution | None = None


def job_option(func: F) -> F:
    """``--job JOBID``: the job in an HA store (needed only when it holds several)."""
    return click.option(
        "--job",
        metavar="JOBID",
        help="With zk://… or an HA ConfigMap export: the job (32 hex digits); needed only when the "
        "store holds several jobs.",
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
    from keygroup_cli.ha import is_ha_source

    if not is_ha_source(path):
        if job is not None:
            raise click.UsageError("--job applies only to zk://… or an HA ConfigMap export.")
        return Input(path)
    from keygroup_cli.ha import resolve

    resolution = resolve(path, job)
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
    return Input(resolution.pointer, resolution)


def ha_document(source: Input) -> dict[str, object] | None:
    """Return the ``ha`` object of ``kg inspect --json`` (None for a path that is no HA store)."""
    if source.ha is None:
        return None
    from keygroup_cli.ha import resolution_document

    return resolution_document(source.ha)


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
        render_ha(console, source)
        render(console)

    return both
