"""JSON document and text of a key-group plan (``planning.plan.KeyGroupPlan``).

``kg plan --from/--to`` prints one; ``rescale_render`` embeds one per operator in ``kg plan SNAPSHOT`` and
``kg rescale --dry-run``. Kept out of the command module so that renderers never import a command.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.render import format_bytes, format_count, print_table, table_style
from keygroup_cli.planning import plan as planning


def plan_document(plan: planning.KeyGroupPlan) -> dict[str, Any]:
    """Return the JSON form of a key-group plan (public API: docs/reference/json-output.md)."""
    return {
        "max_parallelism": plan.max_parallelism,
        "from_parallelism": plan.old_parallelism,
        "to_parallelism": plan.new_parallelism,
        "moved_key_groups": plan.moved_key_groups,
        "moved_fraction": plan.moved_fraction,
        "from_key_group_skew": plan.old_skew,
        "to_key_group_skew": plan.new_skew,
        "from_key_group_loads": list(plan.old_loads),
        "to_key_group_loads": list(plan.new_loads),
        "transfers": [
            {
                "from_subtask": t.from_subtask,
                "to_subtask": t.to_subtask,
                "key_groups": t.key_groups,
                "runs": [list(r) for r in t.runs],
                **({"rows": t.rows} if t.rows is not None else {}),
                **({"bytes": t.bytes} if t.bytes is not None else {}),
            }
            for t in plan.transfers
        ],
        "runs": [
            {
                "key_group_start": r.start,
                "key_group_end": r.end,
                "from_subtask": r.from_subtask,
                "to_subtask": r.to_subtask,
                **({"rows": r.rows} if r.rows is not None else {}),
                **({"bytes": r.bytes} if r.bytes is not None else {}),
            }
            for r in plan.runs
        ],
    }


def render_plan(console: Console, plan: planning.KeyGroupPlan, title: str = "") -> None:
    """Print the transfer table and the summary lines of a key-group plan.

    A ``title`` (an operator's heading in ``kg plan SNAPSHOT``) is printed on a line of its own under
    ``--table tsv``, whose tables carry no title, so each operator's rows stay under its name.
    """
    if title and table_style(console) == "tsv":
        console.print(title, markup=False, highlight=False)
    weighted = any(t.rows is not None for t in plan.transfers)
    # A Flink savepoint's plan knows bytes per key group (from _metadata's offsets) but no rows.
    sized = weighted or any(t.bytes is not None for t in plan.transfers)
    table = Table(
        title=title
        or f"maxParallelism {plan.max_parallelism}: "
        f"parallelism {plan.old_parallelism} -> {plan.new_parallelism}"
    )
    weights_columns = ("rows",) if weighted else ()
    for name in ("from", "to", "key groups", *weights_columns, *(("bytes",) if sized else ()), "runs"):
        table.add_column(name, justify="left" if name == "runs" else "right", no_wrap=name != "runs")
    for t in plan.transfers:
        runs = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in t.runs)
        marker = "" if t.from_subtask != t.to_subtask else " (stays)"
        weights = ((format_count(t.rows or 0),) if weighted else ()) + (
            (format_bytes(t.bytes or 0),) if sized else ()
        )
        table.add_row(
            str(t.from_subtask), f"{t.to_subtask}{marker}", format_count(t.key_groups), *weights, runs
        )
    print_table(console, table)
    console.print(
        f"{format_count(plan.moved_key_groups)} of {format_count(plan.max_parallelism)} key groups change "
        f"subtask ({plan.moved_fraction:.1%}); key groups per subtask skew (max/mean): "
        f"{plan.old_skew:.2f} -> {plan.new_skew:.2f}"
    )


__all__ = ["plan_document", "render_plan"]
