"""The plan of a rescale, made in one place: what ``kg plan`` and ``--dry-run`` print and ``kg rescale`` runs.

``plan_rescale_input(source, request)`` opens the input once, applies the operator migration, runs the gate,
chooses the route and plans; it returns a ``PlannedRescale``, a frozen value. ``execution.routes.rescale``'s
``run_rescale`` calls the same two steps, ``open_rescale_input`` (the route) and ``plan_input`` (the gate
and the plan), and then executes what they return; ``kg plan SNAPSHOT`` and ``kg rescale --dry-run`` print
it. The routes:

- ``in-place``: a Flink savepoint or checkpoint read where it is (local, or a canonical one on an object
  store); its plan is ``execution.routes.savepoint_plan.plan_savepoint``'s;
- ``download``: an input on an object store that kg rescales from a local copy (a kg snapshot, a layout
  kg rewrites first), or a ``--format native`` output to an object store (staged locally, uploaded);
- ``snapshot``: a local kg snapshot; its plan is ``planning.plan.plan_rescale``'s.

A plan reads ``_metadata``, the keyed headers, operator state and timers of raw keyed state (a savepoint),
or the manifest and operator-state files (a kg snapshot); never keyed state. A run plans with the same
functions on what it reads: a heap or RocksDB layout rewritten canonically (``scratch``), a local copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from keygroup_cli.assess.integrity import require_intact
from keygroup_cli.convert.from_savepoint import require_no_channel_state
from keygroup_cli.convert.inputs import readable
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.progress import OnProgress, no_progress, staged
from keygroup_cli.execution.routes.savepoint import OpenedInput, open_input
from keygroup_cli.execution.routes.savepoint_plan import (
    SavepointPlan,
    choose_output_format,
    plan_savepoint,
)
from keygroup_cli.flink import Savepoint, needs_canonical_view, try_open_savepoint
from keygroup_cli.planning.migration import (
    MigrationRequest,
    apply_changes,
    apply_migration,
    require_savepoint_for_migration,
)
from keygroup_cli.planning.plan import RescalePlan, plan_snapshot
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.model import Snapshot
from keygroup_cli.storage import is_remote
from keygroup_cli.storage.staging import require_outside_input

#: A savepoint read where it is.
IN_PLACE = "in-place"
#: Rescaled from a local copy of an input on an object store, or a NATIVE output staged, then uploaded.
DOWNLOAD = "download"
#: A local kg snapshot.
SNAPSHOT = "snapshot"

#: The scratch directory of a plan, which writes nothing: it does not exist and cannot be created.
_NO_SCRATCH = Path("/nonexistent/kg-plan-writes-nothing")


@dataclass(frozen=True)
class RescaleInput:
    """A rescale's input, opened once (``_metadata`` read), and the route it takes."""

    #: As the rescale reads it: an absolute local path, an object-store URI, or an opened kg snapshot.
    source: Path | str | Snapshot
    #: How the input is named in messages (as the user named it).
    label: str
    #: The opened Flink savepoint or checkpoint, before any migration; None for a kg snapshot.
    savepoint: Savepoint | None
    #: ``IN_PLACE``, ``DOWNLOAD`` or ``SNAPSHOT``.
    route: str
    #: The savepoint format the rescale writes (``--format``, else chosen: ``choose_output_format``); None
    #: for a kg snapshot.
    output_format: str | None = None
    #: Why kg chose ``output_format`` itself (no ``--format``, and canonical would be refused), else None.
    format_reason: str | None = None


@dataclass(frozen=True)
class PlannedRescale:
    """A rescale decided, before anything is written: the plan ``kg plan`` prints and the run executes."""

    #: Every operator's new parallelism and maxParallelism, key-group moves, estimates, operator state;
    #: operator migration in ``plan.migration``. What the request refuses was refused making it.
    plan: RescalePlan
    #: What was opened and the route it takes.
    input: RescaleInput
    #: The request as planned: ``operators`` name operators as the migration left them.
    request: RescaleRequest
    #: A savepoint's: the operator state redistributed, the targets, the timers placed; else None.
    savepoint: SavepointPlan | None = None
    #: A savepoint opened and past its gate (what a run reads: a rewritten layout's canonical view).
    opened: OpenedInput | None = None
    #: A local kg snapshot, opened (what a run reads); None for a savepoint or a remote kg snapshot.
    snapshot: Snapshot | None = None

    @property
    def route(self) -> str:
        """``IN_PLACE``, ``DOWNLOAD`` or ``SNAPSHOT`` (``RescaleInput.route``)."""
        return self.input.route

    @property
    def input_format(self) -> str:
        """``flink-savepoint`` (a savepoint or retained checkpoint) or ``kg-snapshot``."""
        return "flink-savepoint" if self.input.savepoint is not None else "kg-snapshot"

    @property
    def output_format(self) -> str:
        """What the rescale writes: ``flink-savepoint`` or ``kg-snapshot``, as the input is."""
        return self.input_format

    @property
    def savepoint_format(self) -> str | None:
        """The written savepoint's keyed state (``--format``: ``canonical`` or ``native``); None for kg."""
        return self.request.output_format if self.input.savepoint is not None else None

    @property
    def format_reason(self) -> str | None:
        """Why kg chose ``savepoint_format`` itself (no ``--format`` given), else None."""
        return self.input.format_reason


def plan(
    source: Path | str | Snapshot,
    new_parallelism: int,
    *,
    from_parallelism: int | None = None,
    operators: Sequence[str] | None = None,
    new_max_parallelism: int | None = None,
    output_format: str | None = None,
    migration: MigrationRequest | None = None,
    dest: Path | str | None = None,
    on_progress: OnProgress | None = None,
) -> PlannedRescale:
    """Plan what ``rescale()`` would do with these arguments, writing nothing and reading no keyed state.

    The arguments are ``execution.routes.rescale.rescale``'s (``dest``, optional, only chooses the route: a
    ``--format native`` output to an object store is staged locally). The result's ``plan`` is what
    ``kg plan SNAPSHOT --json`` prints; the refusals are the rescale's, word for word.

    Raises:
        InvalidArgumentError: Bad arguments, bounds, ``--from``, unknown operators, migration refused.
        UnsupportedFormatError: A layout or a key change kg does not rescale.
        InvalidInputError: The input is invalid (``INPUT_FAILS_VERIFY``) or cannot be read.
        MissingDependencyError: ``native`` without ``rocksdict``.
    """
    request = RescaleRequest.of(
        new_parallelism,
        from_parallelism=from_parallelism,
        operators=operators,
        new_max_parallelism=new_max_parallelism,
        output_format=output_format,
        migration=migration,
    )
    return plan_rescale_input(source, request, dest=dest, on_progress=on_progress)


def plan_rescale_input(
    source: Path | str | Snapshot,
    request: RescaleRequest,
    *,
    dest: Path | str | None = None,
    on_progress: OnProgress | None = None,
) -> PlannedRescale:
    """``plan`` with the request as a value: open the input once, gate it, choose its route and plan it.

    What ``kg plan SNAPSHOT`` and ``kg rescale --dry-run`` print. ``dest`` is checked as the rescale checks
    it first (not inside the input) and chooses the route; whether it exists is the caller's to check.
    """
    return plan_input(open_rescale_input(source, request, dest), request, on_progress=on_progress)


def open_rescale_input(
    source: Path | str | Snapshot, request: RescaleRequest, dest: Path | str | None = None
) -> RescaleInput:
    """Open the input once (``_metadata`` only) and choose its route; refuse what needs no more than that.

    Refused here, before anything is downloaded, staged or read beyond ``_metadata``: DEST inside the
    input, the migration (``planning.migration.apply_changes``), migration or ``--format native`` for a kg
    snapshot. A local input is named by its absolute path (tasks may run elsewhere, in their own directories).

    Raises:
        InvalidArgumentError: DEST inside the input, a change the migration refuses, ``native`` for a kg
            snapshot.
        UnsupportedFormatError: Migration on a kg snapshot.
        InvalidInputError: A ``_metadata`` kg cannot read.
    """
    if isinstance(source, Snapshot):
        require_savepoint_for_migration(request.migration, str(source.path))
        require_savepoint_for(request.output_format, "the input")
        return RescaleInput(source, str(source.path), None, SNAPSHOT)
    label = str(source)
    if not is_remote(source):
        source = Path(source).absolute()
    if dest is not None:
        require_outside_input(source, dest)
    savepoint = try_open_savepoint(source)  # _metadata read once, here
    output_format, reason = None, None
    if savepoint is None:
        require_savepoint_for_migration(request.migration, label)
        require_savepoint_for(request.output_format, label)
    else:
        if request.migration is not None:
            # Refused before anything is downloaded or staged; the plan applies it to this opened savepoint.
            apply_changes(savepoint.metadata, request.migration)
        # Before the route: a NATIVE output to an object store is staged locally, then uploaded.
        output_format, reason = choose_output_format(savepoint, request.output_format)
    remote_dest = dest is not None and is_remote(dest)
    native_upload = output_format == "native" and remote_dest  # staged locally, then uploaded
    if (
        savepoint is not None
        and (not is_remote(source) or not needs_canonical_view(savepoint))
        and not native_upload
    ):
        route = IN_PLACE
    elif is_remote(source) or remote_dest:
        route = DOWNLOAD
    else:
        route = SNAPSHOT
    return RescaleInput(source, label, savepoint, route, output_format, reason)


def plan_input(
    rescale_input: RescaleInput,
    request: RescaleRequest,
    *,
    on_progress: OnProgress | None = None,
    scratch: Path | None = None,
    on_opened: Callable[[OpenedInput], None] | None = None,
) -> PlannedRescale:
    """Gate and plan an opened input: a savepoint by ``plan_savepoint``, a kg snapshot by ``plan_rescale``.

    A savepoint's gate (``kg verify``'s, blocks left to the reader) runs on it opened once, after the
    migration (``savepoint.open_input``). With ``scratch`` (a run) a heap or RocksDB layout is rewritten in
    the canonical layout there first and planned as it will be read; without (a plan) it is planned as
    named, reading no keyed state. ``on_opened`` is called with the opened input before it is planned (a
    run starts its engine then). A kg snapshot's gate reads every file (its checksums): a run calls it
    before this.
    """
    report = on_progress or no_progress
    savepoint = rescale_input.savepoint
    if savepoint is None:
        return _plan_snapshot(rescale_input, request)
    if rescale_input.output_format is None:
        chosen, reason = choose_output_format(savepoint, request.output_format)
        rescale_input = replace(rescale_input, output_format=chosen, format_reason=reason)
    request = replace(request, output_format=rescale_input.output_format)
    opened = _open(rescale_input, savepoint, request, report, scratch)
    if on_opened is not None:
        on_opened(opened)
    request = replace(request, operators=opened.operators)
    planned = plan_savepoint(opened, request, report)
    return PlannedRescale(planned.plan, rescale_input, request, planned, opened)


def _open(
    rescale_input: RescaleInput,
    savepoint: Savepoint,
    request: RescaleRequest,
    report: OnProgress,
    scratch: Path | None,
) -> OpenedInput:
    """Open the savepoint past its gate (``open_input``); a plan never rewrites a layout (it reads all)."""
    label = rescale_input.label
    copy = scratch is not None and request.output_format != "native"
    if scratch is not None or not needs_canonical_view(savepoint):
        # A plan opens a canonical savepoint as the run does, copying nothing: no scratch is used (one
        # that were would fail, not write).
        where = scratch if scratch is not None else _NO_SCRATCH
        return open_input(savepoint, where, request, report, label, copy=copy)
    # A plan of a heap or RocksDB layout: open_input's migration and gate, without its canonical rewrite.
    migrated = apply_migration(savepoint, request.migration, request.operators)
    origin = migrated.savepoint
    require_intact(origin, blocks=False, label=label, on_progress=staged(report, "verify input"))
    require_no_channel_state(origin)
    name = label or str(origin.directory)
    return OpenedInput(origin, origin, None, name, migrated.changes, migrated.operators)


def _plan_snapshot(rescale_input: RescaleInput, request: RescaleRequest) -> PlannedRescale:
    """Plan a kg snapshot's rescale from its manifest (and operator-state files on an object store)."""
    source = rescale_input.source
    if isinstance(source, Snapshot) or not is_remote(source):
        snapshot = source if isinstance(source, Snapshot) else open_snapshot(source)
        return PlannedRescale(plan_snapshot(snapshot, request), rescale_input, request, snapshot=snapshot)
    # On an object store only the manifest and the (small) operator-state files are fetched.
    with readable(source, everything=False, operator_state=True) as local:
        planned = plan_snapshot(open_snapshot(local), request)
    return PlannedRescale(planned, rescale_input, request)


def require_savepoint_for(output_format: str | None, label: str) -> None:
    """Refuse ``--format native`` for a kg snapshot input (``label`` names it): its rescale is a kg snapshot.

    Raises:
        InvalidArgumentError: ``output_format`` is ``native``.
    """
    if output_format == "native":
        raise InvalidArgumentError(
            f"--format native writes a Flink savepoint; {label} is a kg snapshot (kg rescale writes a kg "
            "snapshot of it; kg convert turns that into a savepoint)"
        )


__all__ = [
    "DOWNLOAD",
    "IN_PLACE",
    "SNAPSHOT",
    "PlannedRescale",
    "RescaleInput",
    "open_rescale_input",
    "plan",
    "plan_input",
    "plan_rescale_input",
    "require_savepoint_for",
]
