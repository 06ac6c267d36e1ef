"""Plan the rescale of a Flink savepoint without rescaling it: ``kg plan SAVEPOINT`` and ``--dry-run``.

``plan_savepoint`` runs the validation of ``execution.savepoint.rescale_savepoint`` in the same order and
with the same functions, and stops before anything is written:

1. ``_metadata`` (no in-flight data, ``convert.refuse_channel_state``);
2. ``savepoint.preflight``: a layout kg rescales, the operators named, ``--from``, Flink's bounds, keys it
   can re-hash, ``CHAIN_AMBIGUOUS``. A heap or RocksDB layout is first rewritten canonically by the
   rescale (which reads all its keyed state); here ``preflight`` judges a view of ``_metadata`` in which
   those keyed handles stand as canonical ones, with the key types read from their own headers;
3. operator state (small) decoded and redistributed in memory, exactly as the rescale plans it
   (``operator_rescale.rescale_operator_tables``, which checks every operator stream as ``kg verify``);
4. ``finished.require_finished_kept``;
5. timers kept in raw keyed state (the async state API on ForSt: a few hundred bytes per key group) read and
   placed as the rescale places them (``flink.raw_timers.plan_raw_timers``), so what it refuses is refused
   here too.

Managed keyed state is never read: each keyed operator's mode (copy, move, rehash) follows from its old and
new parallelism and maxParallelism, and its bytes per key group from the handles' offsets and the state
files' sizes (``flink.key_group_bytes``; a stat per file). Rows are known only once entries are decoded,
so the plan's keyed rows are None. RocksDB database files (NATIVE savepoints, incremental checkpoints)
record no offsets: their key groups move, but bytes per key group are unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from keygroup_cli.convert.from_savepoint import refuse_channel_state
from keygroup_cli.convert.operator_tables import read_operator_tables
from keygroup_cli.execution import OnProgress
from keygroup_cli.execution.operator_rescale import rescale_operator_tables
from keygroup_cli.execution.savepoint import (
    keyed_headers,
    operators_with_state,
    preflight,
    refuse_v2_state_in_canonical,
)
from keygroup_cli.flink.finished import require_finished_kept
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed_tasks import keyed_header
from keygroup_cli.flink.layouts.heap import needs_canonical_view
from keygroup_cli.flink.layouts.rocksdb import load_binding
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import FlinkSnapshot
from keygroup_cli.flink.metadata.reader import OperatorState
from keygroup_cli.flink.raw_timers import plan_raw_timers
from keygroup_cli.flink.savepoint import Savepoint, open_savepoint
from keygroup_cli.flink.state.key_group_bytes import operator_key_group_bytes
from keygroup_cli.flink.state.keyed_header import KeyedStateHeader, read_keyed_header
from keygroup_cli.flink.state.keyed_layout import KeyedLayout
from keygroup_cli.planning import OperatorPlan, RescalePlan, plan_key_groups
from keygroup_cli.storage.locations import Location


def plan_savepoint(
    source: Path | str | Location | Savepoint,
    new_parallelism: int,
    operators: Sequence[str] | None = None,
    new_max_parallelism: int | None = None,
    *,
    expected_parallelism: int | None = None,
    on_progress: OnProgress | None = None,
    output_format: str = "canonical",
) -> RescalePlan:
    """Plan the rescale of the Flink savepoint or checkpoint ``source``, reading no keyed state.

    The arguments are those of ``execution.rescale.rescale`` (``expected_parallelism`` is its
    ``from_parallelism``; ``output_format`` its ``--format``: ``native`` needs the binding, as there). The
    result has one ``OperatorPlan`` per operator of ``_metadata``, in its order: keyed operators with
    ``keyed_rows`` None and, where ``_metadata`` records offsets, key-group plans weighted by bytes; operator
    state as the rescale redistributes it.

    Raises:
        InvalidArgumentError: What the rescale refuses before writing: bounds, ``--from``, unknown
            operators, ``CHAIN_AMBIGUOUS``, ``FINISHED_SUBTASK_NOT_KEPT``.
        UnsupportedFormatError: A layout kg does not rescale, in-flight data, a maxParallelism change of
            keys kg cannot re-hash, raw keyed state that is not timers (``FLINK_RAW_STATE``).
        InvalidSnapshotError: ``_metadata``, a header or an operator stream kg cannot read.
        MissingDependencyError: ``native`` without ``rocksdict`` (``ROCKSDB_BINDING_MISSING``).
    """
    if output_format == "native":
        load_binding()  # exit 6 before anything is read, as the rescale refuses it
    savepoint = source if isinstance(source, Savepoint) else open_savepoint(source)
    refuse_channel_state(savepoint)
    types = _validated(savepoint, new_parallelism, operators, new_max_parallelism, expected_parallelism)
    if output_format != "native":
        headers = _layout_headers(savepoint) if needs_canonical_view(savepoint) else keyed_headers(savepoint)
        refuse_v2_state_in_canonical(headers, str(savepoint.metadata_path))
    state = read_operator_tables(savepoint, on_progress=on_progress)
    plan, rescaled = rescale_operator_tables(
        state,
        new_parallelism,
        from_parallelism=expected_parallelism,
        operators=operators,
        new_max_parallelism=new_max_parallelism,
        with_state=operators_with_state(savepoint),
    )
    targets = {p.operator_id: (p.new_parallelism, p.new_max_parallelism) for p in plan.operators}
    new_rows = {o.operator_id: {f.subtask: f.rows for f in o.operator_files} for o in rescaled.operators}
    require_finished_kept(savepoint.metadata.operators, targets, new_rows)
    plan_raw_timers(savepoint, targets)
    by_id = {op.operator_id: op for op in savepoint.metadata.operators}
    planned = tuple(
        _with_keyed(op_plan, by_id[op_plan.operator_id], savepoint, types.get(op_plan.operator_id))
        for op_plan in plan.operators
    )
    return replace(plan, operators=planned)


def _validated(
    savepoint: Savepoint,
    new_parallelism: int,
    operators: Sequence[str] | None,
    new_max_parallelism: int | None,
    expected_parallelism: int | None,
) -> dict[str, str]:
    """Refuse what the rescale refuses before writing (``preflight``); return the key types by operator id.

    A heap or RocksDB layout is judged from its own headers, as the canonical view the rescale reads.
    """
    if needs_canonical_view(savepoint):
        types = _layout_key_types(savepoint)
        checked: FlinkSnapshot = _canonical_stand_in(savepoint)
    else:
        types = dict(savepoint.key_types)
        checked = savepoint
    preflight(
        checked,
        new_parallelism,
        operators,
        new_max_parallelism,
        expected_parallelism=expected_parallelism,
        types=types,
    )
    return types


def _with_keyed(
    op_plan: OperatorPlan, op: OperatorState, savepoint: FlinkSnapshot, key_type: str | None
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


def _layout_key_types(savepoint: FlinkSnapshot) -> dict[str, str]:
    """Return the key type of every keyed operator of a heap or RocksDB layout, from its own header.

    The heap layout's streams begin with the same ``KeyedBackendSerializationProxy`` header as canonical
    ones; a RocksDB handle keeps it in its metadata stream. The canonical rewrite keeps the header, so the
    rescale reads the same key types from it.
    """
    return {op_id: layout.codec.key_type for op_id, (_header, layout) in _layout_parsed(savepoint).items()}


def _layout_headers(savepoint: FlinkSnapshot) -> dict[str, KeyedStateHeader]:
    """Return the first keyed header of every keyed operator of a heap or RocksDB layout, by its label."""
    labels = {op.operator_id: op.label for op in savepoint.metadata.operators}
    return {labels[op_id]: header for op_id, (header, _layout) in _layout_parsed(savepoint).items()}


def _layout_parsed(savepoint: FlinkSnapshot) -> dict[str, tuple[KeyedStateHeader, KeyedLayout]]:
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


def _canonical_stand_in(savepoint: FlinkSnapshot) -> FlinkSnapshot:
    """Return ``savepoint``'s metadata as its canonical rewrite will have it, for ``preflight`` to judge.

    The rescale rewrites every keyed handle of a heap or RocksDB layout as a canonical key-groups handle
    over the same range; nothing else changes that ``preflight`` looks at (operators, parallelism,
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


__all__ = ["plan_savepoint"]
