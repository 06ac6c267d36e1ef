"""``kg plan``: where every key group goes when parallelism changes, before anything is executed.

With a kg SNAPSHOT the plan is ``planning.plan_rescale``'s, weighted by the manifest's row counts; with a
Flink savepoint or checkpoint it is ``execution.savepoint_plan.plan_savepoint``'s, weighted by the bytes
``_metadata``'s key-group offsets give (no keyed state is read). Either is what ``kg rescale --dry-run``
prints too.
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
    savepoint_format_option,
    to_parallelism_option,
)
from keygroup_cli.cli.plan_render import plan_document, render_plan
from keygroup_cli.cli.render import Output, output_for

EPILOG = """\b
Examples:
  kg plan --from 3 --to 4 --max-parallelism 128
  kg plan --from 3 --to 4 -m 128 --json | jq '.runs[] | select(.from_subtask != .to_subtask)'
  kg plan snapshot/ --to 4                 # rows and bytes moved, from the manifest (no data read)
  kg plan snapshot/ --to 4 --operator counter --max-parallelism 256 --json
  kg plan savepoint-1a2b/ --from 3 --to 8  # a Flink savepoint: bytes moved, from _metadata's offsets
  kg plan savepoint-1a2b/ --to 4 --format native   # the plan of kg rescale ... --format native

With a Flink savepoint or checkpoint the plan is validated as kg rescale validates it (same refusals,
same messages) from _metadata, the keyed headers and the operator state; keyed state is never read, so
keyed rows are unknown (-, null in JSON) and bytes come from the key-group offsets.
"""


def show_snapshot_plan(
    out: Output,
    snapshot: str | Path,
    to_parallelism: int,
    from_parallelism: int | None = None,
    operators: Sequence[str] = (),
    max_parallelism: int | None = None,
    output_format: str = "canonical",
) -> None:
    """Plan the rescale of a snapshot or savepoint and print it (shared with ``kg rescale --dry-run``).

    ``output_format`` is ``--format``: the plan names the output it leads to, and refuses what the
    rescale refuses for it (a kg snapshot input or a missing binding with ``native``).
    """
    # Deferred: the snapshot plan needs the snapshot reader, pure math does not.
    from keygroup_cli.cli.progress import progress
    from keygroup_cli.cli.rescale_render import (
        mixed_parallelism_warning,
        plan_snapshot_document,
        render_snapshot_plan,
    )
    from keygroup_cli.flink.savepoint import try_open_savepoint
    from keygroup_cli.snapshot import open_snapshot
    from keygroup_cli.storage import is_remote

    # As kg rescale names it (rescale() reads a local input by its absolute path).
    opened = try_open_savepoint(snapshot if is_remote(snapshot) else Path(snapshot).absolute())
    if opened is not None:
        from keygroup_cli.execution.savepoint_plan import plan_savepoint
        from keygroup_cli.integrity import require_intact

        with progress(out) as on_progress:
            # What kg rescale checks first (no key-group block is decoded), then its own validation; both
            # on the savepoint opened once.
            require_intact(opened, on_progress=on_progress, blocks=False, label=str(snapshot))
            plan = plan_savepoint(
                opened,
                to_parallelism,
                operators,
                max_parallelism,
                expected_parallelism=from_parallelism,
                on_progress=on_progress,
                output_format=output_format,
            )
        input_format = "flink-savepoint"
    else:
        from keygroup_cli.convert.inputs import readable

        if output_format == "native":
            from keygroup_cli.execution.rescale import require_savepoint_for

            require_savepoint_for(output_format, str(snapshot))

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
        input_format = "kg-snapshot"
    warnings = mixed_parallelism_warning(plan, from_parallelism, operators)
    for warning in warnings:
        out.warn(warning)
    document = {
        **plan_snapshot_document(str(snapshot), plan, input_format, output_format),
        "warnings": warnings,
    }
    out.result("plan", document, lambda console: render_snapshot_plan(console, plan, document))


@click.command(epilog=EPILOG)
@click.argument("snapshot", required=False, type=click.Path(path_type=str))
@job_option
@click.option("--from", "from_parallelism", type=int, metavar="P", help="Current parallelism.")
@to_parallelism_option()
@max_parallelism_option(
    required=False, help="maxParallelism (required without SNAPSHOT; with one: a new maxParallelism)."
)
@operator_option()
@savepoint_format_option()
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
    output_format: str,
) -> None:
    """Plan a parallelism change: old and new subtask of every key group (of SNAPSHOT, if given).

    SNAPSHOT is a kg snapshot, or a Flink savepoint or retained checkpoint (planned from its _metadata).
    """
    out = output_for(ctx)
    if snapshot is not None:
        snapshot = resolve_input(out, snapshot, job).path
        show_snapshot_plan(
            out, snapshot, to_parallelism, from_parallelism, operators, max_parallelism, output_format
        )
        return
    if from_parallelism is None or max_parallelism is None or operators or output_format != "canonical":
        raise click.UsageError(
            "Without SNAPSHOT, give --from and --max-parallelism (and no --operator or --format)."
        )
    require_bounds(max_parallelism, from_parallelism, parallelism_option="--from")
    require_bounds(max_parallelism, to_parallelism, parallelism_option="--to")
    plan = planning.plan_key_groups(max_parallelism, from_parallelism, to_parallelism)
    out.result("plan", plan_document(plan), lambda console: render_plan(console, plan))
