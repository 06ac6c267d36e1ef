"""``kg plan``: where every key group goes when parallelism changes, before anything is executed.

With a kg SNAPSHOT the plan is ``planning.plan_rescale``'s, weighted by the manifest's row counts; with a
Flink savepoint or checkpoint it is ``execution.savepoint_plan.plan_savepoint``'s, weighted by the bytes
``_metadata``'s key-group offsets give (no keyed state is read). Either is what ``kg rescale --dry-run``
prints too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from keygroup_cli import planning
from keygroup_cli.cli.inputs import job_option, resolve_input
from keygroup_cli.cli.options import (
    max_parallelism_option,
    operator_option,
    output_options,
    require_bounds,
    savepoint_format_option,
    surgery_options,
    surgery_request,
    to_parallelism_option,
)
from keygroup_cli.cli.plan_render import plan_document, render_plan
from keygroup_cli.cli.render import Output, output_for

if TYPE_CHECKING:
    from keygroup_cli.migration import MigrationRequest

EPILOG = """\b
Examples:
  kg plan --from 3 --to 4 --max-parallelism 128
  kg plan --from 3 --to 4 -m 128 --json | jq '.runs[] | select(.from_subtask != .to_subtask)'
  kg plan snapshot/ --to 4                 # rows and bytes moved, from the manifest (no data read)
  kg plan snapshot/ --to 4 --operator counter --max-parallelism 256 --json
  kg plan savepoint-1a2b/ --from 3 --to 8  # a Flink savepoint: bytes moved, from _metadata's offsets
  kg plan savepoint-1a2b/ --to 8 --rename counter=counter-v2   # with kg rescale's operator surgery
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
    *,
    surgery: MigrationRequest | None = None,
) -> None:
    """Plan the rescale of a snapshot or savepoint and print it (shared with ``kg rescale --dry-run``).

    ``output_format`` is ``--format``: the plan names the output it leads to, and refuses what the
    rescale refuses for it (a kg snapshot input or a missing binding with ``native``). ``surgery``
    (``kg rescale --rename/--assign-uid/--drop``) is applied to the opened savepoint first, as the
    rescale applies it; the plan names the operators as it leaves them and lists the changes.
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
        from dataclasses import replace

        from keygroup_cli.execution.savepoint_plan import plan_savepoint
        from keygroup_cli.integrity import require_intact
        from keygroup_cli.migration import operate

        # The surgery first, as kg rescale applies it: refused before anything but _metadata is read.
        operated = operate(opened, surgery, operators)
        with progress(out) as on_progress:
            # What kg rescale checks first (no key-group block is decoded), then its own validation; both
            # on the savepoint opened once.
            require_intact(operated.savepoint, on_progress=on_progress, blocks=False, label=str(snapshot))
            plan = plan_savepoint(
                operated.savepoint,
                to_parallelism,
                operated.operators,
                max_parallelism,
                expected_parallelism=from_parallelism,
                on_progress=on_progress,
                output_format=output_format,
            )
        plan = replace(plan, surgery=operated.changes)
        input_format = "flink-savepoint"
    else:
        from keygroup_cli.migration import refuse_kg_snapshot

        refuse_kg_snapshot(surgery, str(snapshot))
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
@surgery_options
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
    rename: tuple[str, ...],
    assign_uid: tuple[str, ...],
    drop: tuple[str, ...],
    output_format: str,
) -> None:
    """Plan a parallelism change: old and new subtask of every key group (of SNAPSHOT, if given).

    SNAPSHOT is a kg snapshot, or a Flink savepoint or retained checkpoint (planned from its _metadata).
    """
    out = output_for(ctx)
    surgery = surgery_request(rename, assign_uid, drop)
    if snapshot is not None:
        snapshot = resolve_input(out, snapshot, job).path
        show_snapshot_plan(
            out,
            snapshot,
            to_parallelism,
            from_parallelism,
            operators,
            max_parallelism,
            output_format,
            surgery=surgery,
        )
        return
    if (
        from_parallelism is None
        or max_parallelism is None
        or operators
        or output_format != "canonical"
        or not surgery.empty
    ):
        raise click.UsageError(
            "Without SNAPSHOT, give --from and --max-parallelism (and no --operator, --format, --rename, "
            "--assign-uid or --drop)."
        )
    require_bounds(max_parallelism, from_parallelism, parallelism_option="--from")
    require_bounds(max_parallelism, to_parallelism, parallelism_option="--to")
    plan = planning.plan_key_groups(max_parallelism, from_parallelism, to_parallelism)
    out.result("plan", plan_document(plan), lambda console: render_plan(console, plan))
