"""``kg plan``: where every key group goes when parallelism changes, before anything is executed.

With a SNAPSHOT the plan is ``planning.plan_rescale``'s, weighted by the manifest's row counts; it is what
``kg rescale --dry-run`` prints too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from keygroup_cli import planning
from keygroup_cli.cli.inputs import job_option, resolve_input
from keygroup_cli.cli.options import (
    max_parallelism_option,
    operator_option,
    output_options,
    require_bounds,
    to_parallelism_option,
)
from keygroup_cli.cli.plan_render import plan_document, render_plan
from keygroup_cli.cli.render import Output, output_for
from keygroup_cli.errors import UnsupportedFormatError

EPILOG = """\b
Examples:
  kg plan --from 3 --to 4 --max-parallelism 128
  kg plan --from 3 --to 4 -m 128 --json | jq '.runs[] | select(.from_subtask != .to_subtask)'
  kg plan snapshot/ --to 4                 # rows and bytes moved, from the manifest (no data read)
  kg plan snapshot/ --to 4 --operator counter --max-parallelism 256 --json
"""


def show_snapshot_plan(
    out: Output,
    snapshot: str | Path,
    to_parallelism: int,
    from_parallelism: int | None = None,
    operators: Sequence[str] = (),
    max_parallelism: int | None = None,
) -> None:
    """Plan the rescale of a snapshot and print it (shared with ``kg rescale --dry-run``)."""
    # Deferred: the snapshot plan needs the snapshot reader, pure math does not.
    from keygroup_cli.cli.rescale_render import plan_snapshot_document, render_snapshot_plan
    from keygroup_cli.flink import is_flink_savepoint
    from keygroup_cli.snapshot import open_snapshot

    if is_flink_savepoint(snapshot):
        raise UnsupportedFormatError(
            f"{snapshot} is a Flink savepoint; kg plan reads kg snapshots. For a savepoint, "
            "`kg inspect SAVEPOINT --key-groups` shows bytes per key group and balanced parallelisms, "
            "and `kg plan --from P --to Q -m M` the key-group moves",
            code="PLAN_NEEDS_KG_SNAPSHOT",
        )
    from keygroup_cli.storage.remote import readable

    # A plan needs the manifest and the (small) operator-state files: on an object store only those
    # are fetched, never keyed state.
    with readable(snapshot, everything=False, operator_state=True) as local:
        plan = planning.plan_rescale(
            open_snapshot(local),
            to_parallelism,
            operators,
            max_parallelism,
            expected_parallelism=from_parallelism,
        )
    document = plan_snapshot_document(str(snapshot), plan)
    out.result("plan", document, lambda console: render_snapshot_plan(console, plan))


@click.command(epilog=EPILOG)
@click.argument("snapshot", required=False, type=click.Path(path_type=str))
@job_option
@click.option("--from", "from_parallelism", type=int, metavar="P", help="Current parallelism.")
@to_parallelism_option()
@max_parallelism_option(
    required=False, help="maxParallelism (required without SNAPSHOT; with one: a new maxParallelism)."
)
@operator_option()
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    snapshot: str | None,
    job: str | None,
    from_parallelism: int | None,
    to_parallelism: int,
    max_parallelism: int | None,
    operators: tuple[str, ...],
) -> None:
    """Plan a parallelism change: old and new subtask of every key group (of SNAPSHOT, if given)."""
    out = output_for(ctx)
    if snapshot is not None:
        snapshot = resolve_input(out, snapshot, job).path
        show_snapshot_plan(out, snapshot, to_parallelism, from_parallelism, operators, max_parallelism)
        return
    if from_parallelism is None or max_parallelism is None or operators:
        raise click.UsageError("Without SNAPSHOT, give --from and --max-parallelism (and no --operator).")
    require_bounds(max_parallelism, from_parallelism, parallelism_option="--from")
    require_bounds(max_parallelism, to_parallelism, parallelism_option="--to")
    plan = planning.plan_key_groups(max_parallelism, from_parallelism, to_parallelism)
    out.result("plan", plan_document(plan), lambda console: render_plan(console, plan))
