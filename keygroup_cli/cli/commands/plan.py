"""``kg plan``: where every key group goes when parallelism changes, before anything is executed.

The library makes the plan (``execution.routes.plan.plan_rescale_input``, the functions ``kg rescale`` plans
with): with a kg SNAPSHOT it is weighted by the manifest's row counts; with a Flink savepoint or
checkpoint by the bytes ``_metadata``'s key-group offsets give (no keyed state is read). This prints it,
as ``kg rescale --dry-run`` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from keygroup_cli.cli.inputs import job_option, resolve_input
from keygroup_cli.cli.options import (
    max_parallelism_option,
    migration_options,
    migration_request,
    operator_option,
    output_options,
    require_bounds,
    savepoint_format_option,
    subtasks_option,
    to_parallelism_option,
)
from keygroup_cli.cli.plan_render import plan_document, render_plan
from keygroup_cli.cli.render import Output, output_for
from keygroup_cli.core.errors import KgError
from keygroup_cli.planning import plan as planning

if TYPE_CHECKING:
    from keygroup_cli.planning.request import RescaleRequest

EPILOG = """\b
Examples:
  kg plan --from 3 --to 4 --max-parallelism 128
  kg plan --from 3 --to 4 -m 128 --json | jq '.runs[] | select(.from_subtask != .to_subtask)'
  kg plan snapshot/ --to 4                 # rows and bytes moved, from the manifest (no data read)
  kg plan snapshot/ --to 4 --operator counter --max-parallelism 256 --json
  kg plan savepoint-1a2b/ --from 3 --to 8  # a Flink savepoint: bytes moved, from _metadata's offsets
  kg plan savepoint-1a2b/ --to 8 --rename counter=counter-v2   # with kg rescale's operator migration
  kg plan savepoint-1a2b/ --to 4 --format native   # the plan of kg rescale ... --format native

With a Flink savepoint or checkpoint the plan is validated as kg rescale validates it (same refusals,
same messages) from _metadata, the keyed headers and the operator state; keyed state is never read, so
keyed rows are unknown (-, null in JSON) and bytes come from the key-group offsets.
"""


def show_snapshot_plan(
    out: Output, snapshot: str | Path, request: RescaleRequest, typed: str, subtasks: bool = False
) -> None:
    """Plan the rescale of a snapshot or savepoint and print it (shared with ``kg rescale --dry-run``).

    The library decides (``execution.routes.plan.plan_rescale_input``: the route, the gate, the plan and every
    refusal, the rescale's own) and this prints what it returns: ``--format`` names the output the plan
    leads to, the migration comes first, then the operators as it leaves them. ``typed`` is the input as
    the user typed it (``input``).
    """
    # Deferred: the snapshot plan needs the snapshot and savepoint readers, pure math does not.
    from keygroup_cli.cli.progress import progress
    from keygroup_cli.cli.rescale_render import operator_names, planned_document, render_snapshot_plan
    from keygroup_cli.execution.routes.plan import plan_rescale_input

    with progress(out) as on_progress, from_hint(snapshot, request):
        planned = plan_rescale_input(snapshot, request, on_progress=on_progress)
    document = planned_document(typed, planned)
    for warning in document["warnings"]:
        out.warn(warning)
    names = operator_names(planned)
    out.result(
        "plan",
        document,
        lambda console: render_snapshot_plan(console, planned.plan, document, names, subtasks),
    )


@contextmanager
def from_hint(snapshot: str | Path, request: RescaleRequest) -> Iterator[None]:
    """Add the ``--from`` that would work to a ``--from P`` no operator with state runs at.

    ``kg rescale --from 5`` on a savepoint at 3 is refused by the planner (``PARALLELISM_MISMATCH``);
    the refusal then names the parallelism most operators with state run at (the higher on a tie), as
    the rescale's warning about mixed parallelisms does.
    """
    try:
        yield
    except KgError as exc:
        if exc.code != "PARALLELISM_MISMATCH" or request.from_parallelism is None or request.operators:
            raise
        from keygroup_cli.assess.summary import summarize

        try:
            operators = summarize(snapshot, read_states=False).operators
        except KgError:
            raise exc from None
        at = Counter(op.parallelism for op in operators if op.has_state)
        if not at or request.from_parallelism in at:
            raise
        common = max(at, key=lambda p: (at[p], p))
        raise type(exc)(
            f"{exc.message}; --from {common} selects the operators at {common}", code=exc.code
        ) from None


@click.command(epilog=EPILOG)
@click.argument("snapshot", required=False, type=click.Path(path_type=str))
@job_option
@click.option("--from", "from_parallelism", type=int, metavar="P", help="Current parallelism.")
@to_parallelism_option()
@max_parallelism_option(
    required=False, help="maxParallelism (required without SNAPSHOT; with one: a new maxParallelism)."
)
@operator_option()
@migration_options
@savepoint_format_option()
@subtasks_option("With SNAPSHOT: also each operator's transfer table and every new subtask's load.")
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
    subtasks: bool,
) -> None:
    """Plan a parallelism change: old and new subtask of every key group (of SNAPSHOT, if given).

    SNAPSHOT is a kg snapshot, or a Flink savepoint or retained checkpoint (planned from its _metadata).
    """
    out = output_for(ctx)
    migration = migration_request(rename, assign_uid, drop)
    if snapshot is not None:
        from keygroup_cli.planning.request import RescaleRequest  # deferred: pure math needs no reader

        typed, snapshot = snapshot, resolve_input(out, snapshot, job).path
        request = RescaleRequest.of(
            to_parallelism,
            from_parallelism=from_parallelism,
            operators=operators,
            new_max_parallelism=max_parallelism,
            output_format=output_format,
            migration=migration,
        )
        show_snapshot_plan(out, snapshot, request, typed, subtasks)
        return
    if (
        from_parallelism is None
        or max_parallelism is None
        or operators
        or output_format != "canonical"
        or not migration.empty
    ):
        raise click.UsageError(
            "Without SNAPSHOT, give --from and --max-parallelism (and no --operator, --format, --rename, "
            "--assign-uid or --drop)."
        )
    require_bounds(max_parallelism, from_parallelism, parallelism_option="--from")
    require_bounds(max_parallelism, to_parallelism, parallelism_option="--to")
    plan = planning.plan_key_groups(max_parallelism, from_parallelism, to_parallelism)
    out.result("plan", plan_document(plan), lambda console: render_plan(console, plan))
