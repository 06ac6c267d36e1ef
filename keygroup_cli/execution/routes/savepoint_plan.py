"""The plan of a savepoint rescale, made in one place: what ``kg plan`` prints and ``kg rescale`` executes.

``plan_savepoint(opened, request)`` takes a savepoint opened once and past its gate
(``savepoint.OpenedInput``) and returns a ``SavepointPlan``: kg's ``RescalePlan``, the operator state
redistributed in memory, each operator's new parallelism and maxParallelism, and the timers of raw keyed
state placed in the new key groups. Everything the rescale refuses before writing is refused here, in this
order:

1. ``--format native`` without the ``rocksdict`` binding (exit 6);
2. ``require_rescalable``: a layout kg rescales, the operators named, ``--from``, Flink's bounds, keys it can
   re-hash, ``CHAIN_AMBIGUOUS``;
3. operator state (small, decoded once when the savepoint was opened, every stream checked as ``kg verify``
   checks it) planned on the savepoint's own handles (``planning.savepoint.plan_savepoint_operators``) and
   redistributed exactly as Flink does, on the driver (``operator_state.redistribute_savepoint_state``);
4. ``finished.require_finished_kept``;
5. state of the async state API in a canonical output asked for with ``--format canonical``
   (``FLINK_V2_STATE_CANONICAL``; without ``--format`` kg writes native: ``choose_output_format``);
6. timers kept in raw keyed state (the async state API on ForSt: a few hundred bytes per key group) read
   and placed (``flink.write.raw_timers.plan_raw_timers``).

The rescale calls it on the input as it reads it; a heap or RocksDB layout has then been rewritten in the
canonical layout (``savepoint.open_input``). ``kg plan`` and ``--dry-run`` call it on the input as named,
never rewritten (the rewrite reads every key group): ``require_rescalable`` then judges a view of
``_metadata`` in which those keyed handles stand as canonical ones, with the key types read from their own
headers.

Managed keyed state is never read here. Each keyed operator's mode (copy, move, rehash) follows from its old
and new parallelism and maxParallelism, and its bytes per key group from the handles' offsets and the state
files' sizes in the input as named (``flink.key_group_bytes``; a stat per file). Rows are known only once
entries are decoded, so the plan's keyed rows are None. RocksDB database files (NATIVE savepoints,
incremental checkpoints) record no offsets: their key groups move, but bytes per key group are unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from keygroup_cli.convert.operator_tables import OperatorStateTables, read_operator_state
from keygroup_cli.core.errors import KgError
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.execution.routes.operator_state import redistribute_savepoint_state
from keygroup_cli.execution.routes.savepoint import (
    OpenedInput,
    keyed_headers,
    require_no_v2_state_in_canonical,
    require_rescalable,
)
from keygroup_cli.flink import (
    FlinkCheckpoint,
    IncrementalKeyedHandle,
    KeyedLayout,
    KeyedStateHeader,
    KeyGroupsHandle,
    OperatorState,
    RawTimers,
    RescaledOperator,
    Savepoint,
    StreamSource,
    keyed_header,
    load_binding,
    needs_canonical_view,
    operator_key_group_bytes,
    plan_raw_timers,
    read_keyed_header,
    require_finished_kept,
)
from keygroup_cli.planning.plan import OperatorPlan, RescalePlan, plan_key_groups
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.planning.savepoint import plan_savepoint_operators


@dataclass(frozen=True)
class SavepointPlan:
    """Everything a savepoint rescale does, decided before anything is staged (no engine, no DEST)."""

    #: kg's plan (what ``kg plan`` prints): every operator's new parallelism, key groups, operator state.
    plan: RescalePlan
    #: Every operator of the new savepoint, in ``_metadata``'s order: its operator state redistributed in
    #: memory by new subtask (what ``flink.write.rescaled`` encodes).
    operators: tuple[RescaledOperator, ...]
    #: The input's operator state as it was held (its states, rows by old subtask), by operator id.
    operator_state: Mapping[str, OperatorStateTables]
    #: The new (parallelism, maxParallelism) of every operator, by id.
    targets: Mapping[str, tuple[int, int]]
    #: Timers kept in raw keyed state, placed in the new key groups (``flink.write.raw_timers``), by operator
    #: id.
    raw_timers: Mapping[str, RawTimers] = field(default_factory=dict)
    #: ``--format native``: one RocksDB database per new subtask; the seal's properties say NATIVE.
    native: bool = False


def plan_savepoint(
    opened: OpenedInput, request: RescaleRequest, on_progress: OnProgress | None = None
) -> SavepointPlan:
    """Plan the rescale of the opened savepoint completely, reading no keyed state (steps: module docstring).

    ``request.operators`` names operators as the migration left them (``opened.operators``).

    Raises:
        InvalidArgumentError: What ``require_rescalable`` or the plan refuses: bounds, ``--from``, unknown
            operators, ``CHAIN_AMBIGUOUS``, ``FINISHED_SUBTASK_NOT_KEPT``.
        UnsupportedFormatError: A layout kg does not rescale, a maxParallelism change of keys kg cannot
            re-hash, raw keyed state that is not timers (``FLINK_RAW_STATE``), async state in a canonical
            output (``FLINK_V2_STATE_CANONICAL``).
        InvalidInputError: A header or an operator stream kg cannot read.
        MissingDependencyError: ``native`` without ``rocksdict`` (``ROCKSDB_BINDING_MISSING``).
    """
    savepoint = opened.savepoint
    native = request.output_format == "native"
    if native:
        load_binding()  # MissingDependencyError (exit 6) before anything is read or staged
    types = _checked_key_types(savepoint, request)
    # Operator state (small) was decoded once when the input was opened: planned on the savepoint's own
    # handles and streams, then redistributed in memory on the driver.
    held = read_operator_state(
        savepoint, origin=opened.origin, on_progress=_stage(on_progress, "read operator state")
    )
    plan = plan_savepoint_operators(savepoint, request, held, types)
    rescaled = redistribute_savepoint_state(held, plan)
    targets = {p.operator_id: (p.new_parallelism, p.new_max_parallelism) for p in plan.operators}
    # A partially finished operator keeps a finished subtask, one that gets no state: refused before any
    # keyed file is written where none is left (flink.write.finished).
    new_rows = {o.operator_id: {i: t.num_rows for i, t in o.tables.items()} for o in rescaled}
    require_finished_kept(savepoint.metadata.operators, targets, new_rows)
    if not native:
        headers = _layout_headers(savepoint) if needs_canonical_view(savepoint) else keyed_headers(savepoint)
        require_no_v2_state_in_canonical(headers, opened.label or str(opened.origin.metadata_path))
    # Timers in raw keyed state (async state on ForSt, heap timers): read from the input as named (a
    # rewritten layout's view does not carry them), refused or placed before anything is staged.
    timers = plan_raw_timers(opened.origin, targets)
    # The keyed part, estimated from the input as named, whichever view is read.
    by_id = {op.operator_id: op for op in opened.origin.metadata.operators}
    planned = tuple(
        _with_keyed(op_plan, by_id[op_plan.operator_id], opened.origin, types.get(op_plan.operator_id))
        for op_plan in plan.operators
    )
    plan = replace(plan, operators=planned, migration=opened.changes)
    return SavepointPlan(plan, rescaled, held, targets, timers, native)


def choose_output_format(savepoint: Savepoint, given: str | None) -> tuple[str, str | None]:
    """Return the savepoint format a rescale writes, and why kg chose it when ``--format`` was not given.

    ``given`` is ``--format``; it wins. Without it, canonical, unless an operator holds state of the async
    state API (``KEY_VALUE_V2``, State V2): Flink restores that only from a NATIVE savepoint (the canonical
    output is refused, ``require_no_v2_state_in_canonical``), so kg writes native and says why (the
    reason, else None). Reads one keyed header per operator; a header kg cannot read chooses canonical and
    leaves the refusal to the gate, which reads it again.
    """
    if given is not None:
        return given, None
    try:
        headers = _layout_headers(savepoint) if needs_canonical_view(savepoint) else keyed_headers(savepoint)
    except KgError:
        return "canonical", None
    for label, header in headers.items():
        v2 = sorted(s.name for s in header.states or () if s.backend_type_name == "KEY_VALUE_V2")
        if v2:
            return "native", (
                f"operator {label!r} holds state of the async state API (KEY_VALUE_V2: {', '.join(v2)}), "
                "which Flink restores only from a NATIVE savepoint"
            )
    return "canonical", None


def _checked_key_types(savepoint: Savepoint, request: RescaleRequest) -> dict[str, str]:
    """Refuse what the rescale refuses before writing (``require_rescalable``); return key types by id.

    A heap or RocksDB layout not rewritten yet (a plan) is judged from its own headers, as the canonical
    view the rescale reads.
    """
    if needs_canonical_view(savepoint):
        types = _layout_key_types(savepoint)
        checked: FlinkCheckpoint = _canonical_stand_in(savepoint)
    else:
        types = dict(savepoint.key_types)
        checked = savepoint
    require_rescalable(checked, request, types=types)
    return types


def _with_keyed(
    op_plan: OperatorPlan, op: OperatorState, savepoint: FlinkCheckpoint, key_type: str | None
) -> OperatorPlan:
    """Return ``op_plan`` (operator state only) with the keyed part planned from ``_metadata``."""
    if not op.has_keyed_state:
        return op_plan
    sizes = operator_key_group_bytes(op, savepoint.directory)
    per_key_group: list[int] | None = None
    if sizes.available:
        per_key_group = [0] * op.max_parallelism
        for handle in sizes.handles:
            per_key_group[handle.key_group_start : handle.key_group_end + 1] = handle.bytes
        keyed_bytes = sum(per_key_group)
    else:
        # RocksDB files: no key-group offsets, only the sizes _metadata records for the database files.
        keyed_bytes = sum(sub.keyed_bytes for sub in op.subtasks)
    new_p, new_max = op_plan.new_parallelism, op_plan.new_max_parallelism
    if not op_plan.rescaled:
        mode, key_groups = "copy", None
    elif new_max != op.max_parallelism:
        mode, key_groups = "rehash", None
    else:
        mode = "copy" if new_p == op.parallelism else "move"
        key_groups = plan_key_groups(op.max_parallelism, op.parallelism, new_p, key_group_bytes=per_key_group)
    return replace(
        op_plan,
        key_type=key_type,
        keyed_mode=mode,
        key_groups=key_groups,
        keyed_rows=None,
        keyed_bytes=keyed_bytes,
    )


def _layout_key_types(savepoint: FlinkCheckpoint) -> dict[str, str]:
    """Return the key type of every keyed operator of a heap or RocksDB layout, from its own header.

    The heap layout's streams begin with the same ``KeyedBackendSerializationProxy`` header as canonical
    ones; a RocksDB handle keeps it in its metadata stream. The canonical rewrite keeps the header, so the
    rescale reads the same key types from it.
    """
    return {op_id: layout.codec.key_type for op_id, (_header, layout) in _layout_parsed(savepoint).items()}


def _layout_headers(savepoint: FlinkCheckpoint) -> dict[str, KeyedStateHeader]:
    """Return the first keyed header of every keyed operator of a heap or RocksDB layout, by its label."""
    labels = {op.operator_id: op.label for op in savepoint.metadata.operators}
    return {labels[op_id]: header for op_id, (header, _layout) in _layout_parsed(savepoint).items()}


def _layout_parsed(savepoint: FlinkCheckpoint) -> dict[str, tuple[KeyedStateHeader, KeyedLayout]]:
    """Return each keyed operator's first header and its layout, by operator id."""
    found: dict[str, tuple[KeyedStateHeader, KeyedLayout]] = {}
    for op in savepoint.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if isinstance(handle, KeyGroupsHandle):
                with StreamSource(handle.delegate, savepoint.directory) as src:
                    _raw, header = keyed_header(src, handle)
                    layout = KeyedLayout.from_header(header, op.max_parallelism, src.source)
            elif isinstance(handle, IncrementalKeyedHandle):
                with StreamSource(handle.metadata, savepoint.directory) as src:
                    header = read_keyed_header(src.read(0, src.size), src.source, src.size)
                    layout = KeyedLayout.from_header(header, op.max_parallelism, src.source)
            else:
                continue
            found[op.operator_id] = (header, layout)
            break
    return found


def _canonical_stand_in(savepoint: FlinkCheckpoint) -> FlinkCheckpoint:
    """Return ``savepoint``'s metadata as its canonical rewrite has it (``require_rescalable`` judges it).

    The rescale rewrites every keyed handle of a heap or RocksDB layout as a canonical key-groups handle
    over the same range; nothing else changes that ``require_rescalable`` looks at (operators, parallelism,
    maxParallelism, which subtasks hold state, raw state). The stand-in handles point at no stream: the
    key types come from the real headers (``_layout_key_types``).
    """
    operators = []
    for op in savepoint.metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if isinstance(handle, KeyGroupsHandle | IncrementalKeyedHandle):
                offsets = (0,) * handle.num_key_groups
                sub = replace(
                    sub, managed_keyed_state=KeyGroupsHandle(7, handle.key_group_start, offsets, None)
                )
            subtasks.append(sub)
        operators.append(replace(op, subtasks=tuple(subtasks)))
    return replace(savepoint, metadata=replace(savepoint.metadata, operators=tuple(operators)))


def _stage(report: OnProgress | None, name: str) -> OnProgress | None:
    """Return ``report`` with its stage named ``name`` (None stays None)."""
    if report is None:
        return None

    def renamed(_stage: str, completed: int, total: int | None) -> None:
        report(name, completed, total)

    return renamed


__all__ = ["SavepointPlan", "choose_output_format", "plan_savepoint"]
