"""JSON documents and text of a snapshot ``RescalePlan`` and of a finished rescale.

Shared by ``kg plan SNAPSHOT`` and ``kg rescale`` so that ``kg rescale --dry-run`` prints exactly what
``kg plan`` prints for the same arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from keygroup_cli.assess.summary import count_operators, operator_label
from keygroup_cli.cli.migrate_render import change_document, render_changes
from keygroup_cli.cli.plan_render import plan_document, render_plan
from keygroup_cli.cli.render import (
    counted,
    format_bytes,
    format_count,
    operator_document,
    operators_counted,
    print_table,
)
from keygroup_cli.core.keygroups import skew
from keygroup_cli.execution.routes.rescale import RescaleResult
from keygroup_cli.planning.plan import OperatorPlan, RescalePlan

if TYPE_CHECKING:
    from keygroup_cli.execution.routes.plan import PlannedRescale
    from keygroup_cli.execution.routes.snapshot import SavepointRescaleResult
    from keygroup_cli.snapshot.model import Operator

_MODES = {
    "none": "no keyed state",
    "copy": "keyed files kept as they are",
    "move": "key groups move between subtasks",
    "rehash": "every key is re-hashed into new key groups",
}


def new_byte_loads(op: OperatorPlan) -> tuple[int, ...] | None:
    """Return the (estimated) keyed bytes per new subtask, or None where they are unknown (re-hash)."""
    if op.keyed_mode == "none":
        return (0,) * op.new_parallelism
    if op.key_groups is None or any(r.bytes is None for r in op.key_groups.runs):
        return None
    loads = [0] * op.new_parallelism
    for run in op.key_groups.runs:
        loads[run.to_subtask] += run.bytes or 0
    return tuple(loads)


def operator_plan_document(op: OperatorPlan, name: str | None = None) -> dict[str, Any]:
    """Return the JSON form of one operator's plan; key-group fields as ``kg plan --from/--to`` has them.

    ``name`` is the operator's name in the input (a plan does not carry it).
    """
    loads = op.new_row_loads
    byte_loads = new_byte_loads(op)
    document: dict[str, Any] = {
        **operator_document(op.uid, name, op.operator_id),
        "rescaled": op.rescaled,
        "has_state": op.holds_state,
        "mode": op.keyed_mode,
        "key_type": op.key_type,
        "from_parallelism": op.old_parallelism,
        "to_parallelism": op.new_parallelism,
        "from_max_parallelism": op.old_max_parallelism,
        "to_max_parallelism": op.new_max_parallelism,
        "keyed_rows": op.keyed_rows,
        "key_group_bytes": op.keyed_bytes,
        "moved_rows": op.moved_rows,
        "moved_bytes": op.moved_bytes,
        "to_row_loads": None if loads is None else list(loads),
        "to_row_skew": None if loads is None else skew(loads),
        "to_byte_loads": None if byte_loads is None else list(byte_loads),
        "to_byte_skew": None if byte_loads is None else skew(byte_loads),
        "runs": [],
    }
    if op.key_groups is not None:
        kg_doc = plan_document(op.key_groups)
        for name in ("from_parallelism", "to_parallelism"):
            kg_doc.pop(name)
        document.update(kg_doc)
    state = op.operator_state
    document["operator_state"] = (
        None
        if state is None
        else {
            "unchanged": state.unchanged,
            "to_rows": list(state.new_counts),
            "moved_rows": state.moved_elements,
        }
    )
    return document


def plan_snapshot_document(
    typed: str,
    plan: RescalePlan,
    input_format: str = "kg-snapshot",
    output_format: str | None = "canonical",
    names: Mapping[str, str | None] | None = None,
    format_reason: str | None = None,
) -> dict[str, Any]:
    """Return the JSON document of ``kg plan SNAPSHOT`` (and ``kg rescale --dry-run``).

    ``typed`` is the input as the user typed it. ``output_format`` is ``--format`` (or what kg chose,
    ``format_reason`` saying why); a savepoint input leads to a savepoint of that format, a kg snapshot to a
    kg snapshot. ``names``: operator names by id.
    """
    savepoint = input_format == "flink-savepoint"
    names = names or {}
    return {
        "input": typed,
        "input_format": input_format,
        "output_format": "flink-savepoint" if savepoint else "kg-snapshot",
        "savepoint_format": output_format if savepoint else None,
        "savepoint_format_reason": format_reason if savepoint else None,
        "checkpoint_id": plan.snapshot_id,
        "to_parallelism": plan.new_parallelism,
        "to_max_parallelism": plan.new_max_parallelism,
        "migration": [change_document(c) for c in plan.migration],
        "operators": [operator_plan_document(op, names.get(op.operator_id)) for op in plan.operators],
    }


def operator_names(planned: PlannedRescale) -> dict[str, str | None]:
    """Return the names of a planned rescale's operators by id, as the plan carries them."""
    return {op.operator_id: op.name for op in planned.plan.operators}


def planned_document(typed: str, planned: PlannedRescale) -> dict[str, Any]:
    """Return the JSON document of ``kg plan SNAPSHOT`` for the library's ``PlannedRescale``, warnings too."""
    request = planned.request
    names = operator_names(planned)
    return {
        **plan_snapshot_document(
            typed, planned.plan, planned.input_format, request.output_format, names, planned.format_reason
        ),
        "warnings": mixed_parallelism_warning(
            planned.plan, request.from_parallelism, request.operators or (), names
        ),
    }


def _label(op: OperatorPlan, names: Mapping[str, str | None]) -> str:
    """Return how every command shows a planned operator (uid, else name, else id)."""
    return operator_label(op.uid, names.get(op.operator_id), op.operator_id)


def render_snapshot_plan(
    console: Console,
    plan: RescalePlan,
    document: dict[str, Any] | None = None,
    names: Mapping[str, str | None] | None = None,
    subtasks: bool = False,
) -> None:
    """Print each operator's plan: what moves, new loads and skew, operator state.

    Operators without state (a savepoint lists every operator of the job) are counted, not shown. The
    operator migration done in the same pass, if any, comes first, one line per change. With the plan's
    ``document``, a last line names the output the rescale writes. ``names``: operator names by id.
    ``subtasks`` (``--subtasks``): also each operator's transfer table and every new subtask's load; by
    default loads of more than :data:`LISTED_SUBTASKS` subtasks are summed up as their least and most.
    """
    render_changes(console, (change_document(c) for c in plan.migration))
    names = names or {}
    folded = False
    for op in plan.operators:
        if op.holds_state:
            folded |= _render_operator_plan(console, op, _label(op, names), subtasks)
    total, with_state = count_operators(plan.operators, lambda op: op.holds_state)
    if with_state < total:
        console.print(_without_state(total, with_state))
    if folded:
        console.print("--subtasks lists every transfer and new subtask")
    if document is not None:
        console.print(f"output: {_PLANNED[document['savepoint_format']]}")
        _print_format_reason(console, document)


#: New subtasks whose loads a plan lists one by one without ``--subtasks``; more are summed up.
LISTED_SUBTASKS = 8


def _loads(values: Sequence[Any], show: Any, subtasks: bool) -> tuple[str, bool]:
    """Return new subtasks' loads as a list, or (more than LISTED_SUBTASKS, no --subtasks) least to most.

    The flag says whether the list was summed up.
    """
    if subtasks or len(values) <= LISTED_SUBTASKS:
        return ", ".join(show(v) for v in values), False
    return f"{show(min(values))} to {show(max(values))} over {len(values)} subtasks", True


def _render_operator_plan(console: Console, op: OperatorPlan, label: str, subtasks: bool = False) -> bool:
    """Print one operator's plan: kept, or its key-group moves, keyed state and operator state.

    Returns whether anything ``--subtasks`` would list was summed up or left out.
    """
    if not op.rescaled:
        console.print(
            f"{label}: kept as it is (parallelism {op.old_parallelism}, "
            f"maxParallelism {op.old_max_parallelism})"
        )
        return False
    title = (
        f"{label}: parallelism {op.old_parallelism} -> {op.new_parallelism}, maxParallelism "
        f"{op.old_max_parallelism}"
        + ("" if op.old_max_parallelism == op.new_max_parallelism else f" -> {op.new_max_parallelism}")
        + f" ({_MODES[op.keyed_mode]})"
    )
    folded = False
    if op.key_groups is not None and op.keyed_mode == "move" and subtasks:
        render_plan(console, op.key_groups, title=title)
    else:
        console.print(title)
        if op.key_groups is not None and op.keyed_mode == "move":
            folded = True
            plan = op.key_groups
            console.print(
                f"  {counted(len(plan.transfers), 'transfer')}: {format_count(plan.moved_key_groups)} of "
                f"{format_count(plan.max_parallelism)} key groups change subtask "
                f"({plan.moved_fraction:.1%}); key groups per subtask skew {plan.old_skew:.2f} -> "
                f"{plan.new_skew:.2f}"
            )
    if op.keyed_mode != "none":
        folded |= _render_keyed(console, op, subtasks)
    state = op.operator_state
    if state is not None:
        what = "kept as it is" if state.unchanged else "redistributed as Flink's round-robin repartitioner"
        counts, summed = _loads(state.new_counts, format_count, subtasks)
        folded |= summed
        console.print(f"  operator state {what}: rows per new subtask {counts}")
    return folded


def _print_format_reason(console: Console, document: Mapping[str, Any]) -> None:
    """Print why kg chose the savepoint format itself (no ``--format`` given), if it did."""
    reason = document.get("savepoint_format_reason")
    if reason:
        console.print(
            f"--format native chosen: {reason} (--format canonical refuses it)", markup=False, highlight=False
        )


#: What ``kg rescale`` of the plan writes, by ``savepoint_format``.
_PLANNED = {
    None: "a kg snapshot",
    "canonical": "a canonical Flink savepoint (every state backend restores it)",
    "native": "a NATIVE Flink savepoint, one RocksDB database per new subtask (RocksDB and ForSt restore it)",
}


def _without_state(operators: int, with_state: int) -> str:
    """Return the line that counts the operators a plan or rescale does not list, as ``kg inspect`` does."""
    return (
        f"{operators_counted(operators, with_state)}; "
        f"the {format_count(operators - with_state)} without state are not shown (--json lists them)"
    )


def _render_keyed(console: Console, op: OperatorPlan, subtasks: bool = False) -> bool:
    """Print what moves of an operator's keyed state: rows (kg snapshots) or bytes (savepoints).

    Returns whether a list of new subtasks' loads was summed up (``--subtasks`` lists it).
    """
    summed = False
    loads = op.new_row_loads
    byte_loads = new_byte_loads(op)
    if op.keyed_rows is not None and op.moved_rows is not None:
        share = op.moved_rows / op.keyed_rows if op.keyed_rows else 0.0
        console.print(
            f"  keyed rows moved: {format_count(op.moved_rows)} of {format_count(op.keyed_rows)} "
            f"({share:.1%}), ~{format_bytes(op.moved_bytes or 0)} of {format_bytes(op.keyed_bytes or 0)}"
        )
    elif op.moved_bytes is not None and op.keyed_bytes is not None:
        share = op.moved_bytes / op.keyed_bytes if op.keyed_bytes else 0.0
        console.print(
            f"  keyed bytes moved: {format_bytes(op.moved_bytes)} of {format_bytes(op.keyed_bytes)} "
            f"({share:.1%}), from _metadata's key-group offsets (keyed state is not read: rows unknown)"
        )
    else:
        console.print(
            f"  keyed state: {format_bytes(op.keyed_bytes or 0)} of RocksDB files, which record no key-group "
            "offsets: bytes per key group unknown"
        )
    if loads is not None:
        shown, summed = _loads(loads, format_count, subtasks)
        console.print(f"  keyed rows per new subtask: {shown} (skew {skew(loads):.2f})")
    elif byte_loads is not None:
        shown, summed = _loads(byte_loads, format_bytes, subtasks)
        console.print(f"  keyed bytes per new subtask: {shown} (skew {skew(byte_loads):.2f})")
    elif op.keyed_mode == "rehash":
        if subtasks or len(op.new_ranges) <= LISTED_SUBTASKS:
            ranges = ", ".join(f"{r.start}-{r.end}" for r in op.new_ranges)
        else:
            summed = True
            sizes = [r.end - r.start + 1 for r in op.new_ranges]
            ranges = f"{min(sizes)} to {max(sizes)} key groups each over {len(sizes)} subtasks"
        console.print(f"  new key-group ranges: {ranges}; rows per subtask are known once keys are read")
    return summed


def mixed_parallelism_warning(
    plan: RescalePlan,
    from_parallelism: int | None,
    operators: Sequence[str],
    names: Mapping[str, str | None] | None = None,
) -> list[str]:
    """Return the warning of a rescale without --from or --operator that moves operators not at P.

    P is the parallelism most operators with state run at (the higher one on a tie: a job's default
    parallelism, against a non-parallel source at 1). "With state" is what the operator selection counts
    (``OperatorPlan.holds_state``). No warning when --from or --operator chose the operators, when every
    operator with state runs at P, or when the others already run at the new parallelism.
    """
    if from_parallelism is not None or operators:
        return []
    at: dict[int, list[str]] = {}
    for op in plan.operators:
        if op.holds_state:
            at.setdefault(op.old_parallelism, []).append(_label(op, names or {}))
    if len(at) < 2:
        return []
    common = max(at, key=lambda p: (len(at[p]), p))
    moved = sorted((p, labels) for p, labels in at.items() if p not in (common, plan.new_parallelism))
    if not moved:
        return []
    named = "; ".join(f"{_some(labels)} at {p}" for p, labels in moved)
    return [
        f"without --from or --operator every operator is rescaled to parallelism {plan.new_parallelism}, "
        f"also those not at {common}: {named}; --from {common} rescales only the operators at {common} "
        "and keeps the others' parallelism"
    ]


def _some(labels: Sequence[str], shown: int = 3) -> str:
    names = ", ".join(repr(label) for label in labels[:shown])
    return names if len(labels) <= shown else f"{names} and {len(labels) - shown} more"


def rescale_document(result: RescaleResult, typed_input: str, typed_output: str) -> dict[str, Any]:
    """Return the JSON result document of ``kg rescale``; the paths as the user typed them."""
    operators = [_operator_result(result, op_plan) for op_plan in result.plan.operators]
    written = result.savepoint
    return {
        "input": typed_input,
        "output": typed_output,
        "output_format": "kg-snapshot" if written is None else "flink-savepoint",
        "savepoint_format": result.savepoint_format if written is not None else None,
        "savepoint_format_reason": result.savepoint_format_reason if written is not None else None,
        "engine": result.engine,
        "engine_reason": result.engine_reason,
        "wall_seconds": round(result.wall_seconds, 3),
        "checkpoint_id": result.manifest.snapshot_id,
        "migration": [change_document(c) for c in result.plan.migration],
        "moved_rows": sum(op["moved_rows"] or 0 for op in operators),
        "operators": operators,
        "savepoint": None if written is None else _savepoint_part(written),
    }


def _operator_result(result: RescaleResult, op_plan: OperatorPlan) -> dict[str, Any]:
    """Return one operator of ``kg rescale --json``: its plan, and its new subtasks' rows and bytes."""
    new = result.operator(op_plan.operator_id)
    copied = (result.regrouped or {}).get(op_plan.operator_id)
    subtasks = _subtask_rows(op_plan, new)
    document: dict[str, Any] = {
        **operator_document(op_plan.uid, new.name, op_plan.operator_id),
        "rescaled": op_plan.rescaled,
        "has_state": op_plan.holds_state,
        "mode": op_plan.keyed_mode,
        "from_parallelism": op_plan.old_parallelism,
        "to_parallelism": op_plan.new_parallelism,
        "from_max_parallelism": op_plan.old_max_parallelism,
        "to_max_parallelism": op_plan.new_max_parallelism,
        "keyed_rows": new.keyed_rows,
        "moved_rows": op_plan.moved_rows,
        "subtasks": subtasks,
    }
    rows = (result.keyed_rows or {}).get(op_plan.operator_id)
    if copied is not None and rows is not None:
        # A savepoint's keyed state written by the engine's tasks (keys re-hashed for a new
        # maxParallelism, or --format native's databases): every entry decoded, so counted. At the same
        # maxParallelism key groups keep their numbers (entries that change subtask are not counted).
        if op_plan.new_max_parallelism != op_plan.old_max_parallelism:
            document.update(mode="rehash", keyed_rows=sum(rows), moved_rows=sum(rows))
        else:
            same = op_plan.new_parallelism == op_plan.old_parallelism
            document.update(mode="copy" if same else "move", keyed_rows=sum(rows), moved_rows=None)
        for subtask, size, count in zip(subtasks, copied, rows, strict=True):
            subtask.update(keyed_rows=count, keyed_file_bytes=size)
    elif copied is not None:
        # Key groups copied as bytes between savepoint files: sizes known, entries not decoded.
        document.update(mode="regroup", keyed_rows=None, moved_rows=None)
        for subtask, size in zip(subtasks, copied, strict=True):
            subtask.update(keyed_rows=None, keyed_file_bytes=size)
    return document


def _subtask_rows(op_plan: OperatorPlan, new: Operator) -> list[dict[str, int | None]]:
    """Return one operator's new subtasks in ``kg rescale --json``: key groups, rows and bytes."""
    keyed = {f.subtask: f for f in new.keyed_files}
    state = {f.subtask: f for f in new.operator_files}
    return [
        {
            "subtask": i,
            "key_group_start": rng.start,
            "key_group_end": rng.end,
            "keyed_rows": keyed[i].rows if i in keyed else 0,
            "keyed_file_bytes": keyed[i].bytes if i in keyed else 0,
            "operator_state_rows": state[i].rows if i in state else 0,
            "operator_state_bytes": state[i].bytes if i in state else 0,
        }
        for i, rng in enumerate(op_plan.new_ranges)
    ]


def _savepoint_part(written: SavepointRescaleResult) -> dict[str, Any]:
    """Return the ``savepoint`` part of ``kg rescale --json``: what was written into the new savepoint."""
    return {
        "keyed_files": written.keyed_files,
        "keyed_rows": written.keyed_rows,
        "operator_state_files": written.operator_files,
        "operator_state_rows": written.operator_rows,
        "bytes": written.bytes,
        "compression": written.compressed,
    }


#: What ``kg rescale`` committed, by ``savepoint_format``.
_OUTPUTS = {None: "kg snapshot", "canonical": "Flink savepoint", "native": "NATIVE Flink savepoint"}


def render_rescale(console: Console, document: dict[str, Any], subtasks: bool = False) -> None:
    """Print the operator migration done in the same pass (if any), then the summary table of a rescale.

    One row per operator with state: its parallelism, keyed rows and bytes, operator-state rows and the
    skew (max/mean) of keyed bytes over its new subtasks. ``subtasks`` (``--subtasks``): one row per new
    subtask instead, with its key-group range.
    """
    render_changes(console, document["migration"])
    table = _subtask_table(document) if subtasks else _operator_table(document)
    print_table(console, table)
    total, with_state = count_operators(document["operators"], lambda op: op["has_state"])
    if with_state < total:
        console.print(_without_state(total, with_state))
    what = _OUTPUTS[document.get("savepoint_format")]
    moved = f"{format_count(document['moved_rows'])} keyed rows moved"
    if any(op["mode"] == "regroup" for op in document["operators"]):
        moved = "keyed state copied key group by key group (same maxParallelism; entries not decoded: -)"
    elif document.get("savepoint_format") == "native" and not any(
        op["mode"] == "rehash" for op in document["operators"]
    ):
        entries = sum(op["keyed_rows"] or 0 for op in document["operators"])
        moved = f"{format_count(entries)} keyed entries written into one RocksDB database per subtask"
    console.print(
        f"{moved}; engine {document['engine']} ({document['engine_reason']}), "
        f"{document['wall_seconds']:.1f} s"
    )
    console.print(f"wrote {what} {document['output']}")
    _print_format_reason(console, document)


def _operator_table(document: dict[str, Any]) -> Table:
    """Return ``kg rescale``'s default table: one row per operator with state."""
    table = Table()
    for name in ("operator", "parallelism", "keyed rows", "keyed bytes", "op state rows", "skew"):
        label = name == "operator"
        table.add_column(name, justify="left" if label else "right", no_wrap=not label)
    for op in document["operators"]:
        if not op["has_state"]:
            continue  # a savepoint lists every operator of the job; most hold no state
        label = operator_label(op["uid"], op["name"], op["operator_id"])
        if not op["rescaled"]:
            kept = f"{op['from_parallelism']} (kept)"
            table.add_row(label, kept, format_count(op["keyed_rows"]), "", "", "")
            continue
        rows = [s["keyed_rows"] for s in op["subtasks"]]
        sizes = [s["keyed_file_bytes"] for s in op["subtasks"]]
        known = None not in sizes
        table.add_row(
            label,
            f"{op['from_parallelism']} -> {op['to_parallelism']}",
            format_count(None if None in rows else sum(rows)),
            format_bytes(sum(sizes) if known else None),
            format_count(sum(s["operator_state_rows"] for s in op["subtasks"])),
            f"{skew(sizes):.2f}" if known and sum(sizes) else "-",
        )
    return table


def _subtask_table(document: dict[str, Any]) -> Table:
    """Return ``kg rescale --subtasks``'s table: one row per new subtask of each operator with state."""
    table = Table()
    for name in ("operator", "subtask", "key groups", "keyed rows", "keyed bytes", "op state rows"):
        label = name == "operator"
        table.add_column(name, justify="left" if label else "right", no_wrap=not label)
    for op in document["operators"]:
        label = operator_label(op["uid"], op["name"], op["operator_id"])
        if not op["has_state"]:
            continue
        if not op["rescaled"]:
            table.add_row(label, "kept", "", format_count(op["keyed_rows"]), "", "")
            continue
        for s in op["subtasks"]:
            table.add_row(
                label,
                str(s["subtask"]),
                f"{s['key_group_start']}-{s['key_group_end']}",
                format_count(s["keyed_rows"]),
                format_bytes(s["keyed_file_bytes"]),
                format_count(s["operator_state_rows"]),
            )
    return table
