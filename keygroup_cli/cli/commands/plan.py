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

from keygroup_cli.cli.inputs import Input, job_option, resolve_input
from keygroup_cli.cli.options import (
    max_parallelism_option,
    migration_options,
    migration_request,
    operator_option,
    output_options,
    require_bounds,
    require_option,
    savepoint_format_option,
    subtasks_option,
    to_parallelism_option,
)
from keygroup_cli.cli.plan_render import plan_document, render_plan
from keygroup_cli.cli.render import Output, output_for
from keygroup_cli.core.errors import KgError
from keygroup_cli.planning import plan as planning

if TYPE_CHECKING:
    from keygroup_cli.execution.routes.plan import PlannedRescale
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
  kg plan deployment.yaml --autoscaler-max 200   # may the autoscaler reach 200? if not, a better maxP

With a Flink savepoint or checkpoint the plan is validated as kg rescale validates it (same refusals,
same messages) from _metadata, the keyed headers and the operator state; keyed state is never read, so
keyed rows are unknown (-, null in JSON) and bytes come from the key-group offsets.

With a Flink Kubernetes Operator FlinkDeployment (YAML or JSON), kg plan judges the autoscaler's ceiling
instead: whether the maxParallelism the job runs with (pipeline.max-parallelism, else the state's) lets the
autoscaler choose parallelism N (--autoscaler-max N or --to N; default: the deployment's
job.autoscaler.vertex.max-parallelism, 200 when the autoscaler is enabled). The autoscaler never exceeds
maxParallelism and aligns a keyed vertex's parallelism to a divisor of it; if N is not one, kg proposes a
maxParallelism N divides with the most divisors up to N, and the kg rescale command that writes it.
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
    from keygroup_cli.cli.rescale_render import operator_names, planned_document, render_snapshot_plan

    planned = plan_snapshot(out, snapshot, request)
    document = planned_document(typed, planned)
    for warning in document["warnings"]:
        out.warn(warning, even_quiet=True)  # what the rescale would write: said even under -q
    names = operator_names(planned)
    out.result(
        "plan",
        document,
        lambda console: render_snapshot_plan(console, planned.plan, document, names, subtasks),
    )


def plan_snapshot(out: Output, snapshot: str | Path, request: RescaleRequest) -> PlannedRescale:
    """Return the library's plan of the rescale (``plan_rescale_input``), with progress and ``from_hint``."""
    # Deferred: the snapshot plan needs the snapshot and savepoint readers, pure math does not.
    from keygroup_cli.cli.progress import progress
    from keygroup_cli.execution.routes.plan import plan_rescale_input

    with progress(out) as on_progress, from_hint(snapshot, request):
        return plan_rescale_input(snapshot, request, on_progress=on_progress)


def show_autoscaler_plan(out: Output, typed: str, source: Input, target: int | None) -> None:
    """Judge the autoscaler's ceiling for a FlinkDeployment's state and print it (``kg plan DEPLOYMENT``).

    The library decides (``planning.autoscaler.autoscaler_plan``); this prints the verdict, the ranked
    maxParallelisms and the ``kg rescale`` command that writes the proposed one.
    """
    from keygroup_cli.assess.summary import summarize
    from keygroup_cli.cli.k8s_render import autoscaler_document, render_autoscaler_plan
    from keygroup_cli.planning.autoscaler import autoscaler_plan, autoscaler_target, state_max_parallelism

    start = source.deployment
    assert start is not None
    deployment = start.deployment
    where = "--autoscaler-max"
    if target is None and deployment is not None:
        configured = autoscaler_target(deployment.configuration)
        if configured is not None:
            target, where = configured
    if target is None:
        raise click.UsageError(
            "Give --autoscaler-max N (or --to N): the deployment enables no autoscaler "
            "(job.autoscaler.enabled) and sets no job.autoscaler.vertex.max-parallelism."
        )
    operators = summarize(source.path, read_states=False).operators
    plan = autoscaler_plan(
        target, state_max_parallelism(operators), None if deployment is None else deployment.max_parallelism
    )
    document = autoscaler_document(typed, start, plan, where)
    out.result("plan", document, lambda console: render_autoscaler_plan(console, document, plan))


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
@to_parallelism_option(
    "New parallelism; with a FlinkDeployment: the parallelism the autoscaler should reach.", required=False
)
@click.option(
    "--autoscaler-max",
    type=int,
    metavar="N",
    help="With a FlinkDeployment: judge the autoscaler's ceiling at N "
    "(job.autoscaler.vertex.max-parallelism) [default: the deployment's].",
)
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
    to_parallelism: int | None,
    autoscaler_max: int | None,
    max_parallelism: int | None,
    operators: tuple[str, ...],
    rename: tuple[str, ...],
    assign_uid: tuple[str, ...],
    drop: tuple[str, ...],
    output_format: str | None,
    subtasks: bool,
) -> None:
    """Plan a parallelism change: old and new subtask of every key group (of SNAPSHOT, if given).

    SNAPSHOT is a kg snapshot, or a Flink savepoint or retained checkpoint (planned from its _metadata), or
    a FlinkDeployment (the autoscaler's ceiling, see below).
    """
    out = output_for(ctx)
    migration = migration_request(rename, assign_uid, drop)
    if snapshot is not None:
        from keygroup_cli.planning.request import RescaleRequest  # deferred: pure math needs no reader

        source = resolve_input(out, snapshot, job)
        if source.deployment is not None:
            show_autoscaler_plan(out, snapshot, source, autoscaler_max or to_parallelism)
            return
        if autoscaler_max is not None:
            raise click.UsageError("--autoscaler-max applies to a FlinkDeployment (YAML or JSON).")
        if to_parallelism is None:
            require_option(ctx, "to_parallelism")
        typed, snapshot = snapshot, source.path
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
    if to_parallelism is None:
        require_option(ctx, "to_parallelism")
    if autoscaler_max is not None:
        raise click.UsageError("--autoscaler-max applies to a FlinkDeployment (YAML or JSON).")
    if (
        from_parallelism is None
        or max_parallelism is None
        or operators
        or output_format not in (None, "canonical")
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
