"""The JSON and text of ``kg write`` and ``kg compact`` (the plan, what was written), and their time flags.

``--dry-run`` prints the same document a run prints, with ``dry_run: true`` and no bytes after: rows per
operator and state before, written, deleted, kept and after, and rows per key group the edit touches.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from keygroup_cli.assess.summary import operator_label
from keygroup_cli.cli.render import (
    counted,
    format_bytes,
    format_count,
    operator_document,
    print_table,
    short_ids,
)
from keygroup_cli.execution.routes.state_edit import StateEditResult
from keygroup_cli.planning.state_edit import StateEditPlan

#: Key groups listed in the text output at most (the JSON lists them all).
SHOWN_KEY_GROUPS = 20


_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class Instant(click.ParamType):
    """A point in time: milliseconds since the epoch, or ISO 8601 (``2026-11-29T12:00:00Z``; no zone: UTC)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """Return ``value`` as milliseconds since the epoch."""
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{value!r} is neither milliseconds since the epoch nor an ISO 8601 time", param, ctx)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        return int(parsed.timestamp() * 1000)


class Duration(click.ParamType):
    """A duration: milliseconds, or a number with a unit (``500ms``, ``30s``, ``15m``, ``12h``, ``7d``)."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """Return ``value`` in milliseconds."""
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"(\d+)\s*(ms|s|m|h|d)?", str(value).strip())
        if match is None or int(match.group(1)) <= 0:
            self.fail(f"{value!r} is not a positive duration such as 7d, 12h, 30m, 10s or 500ms", param, ctx)
        return int(match.group(1)) * _UNITS[match.group(2) or "ms"]


def state_edit_document(result: StateEditResult, source: str) -> dict[str, Any]:
    """Return the JSON result of a write or a compaction (``schema_version`` and ``command`` are added).

    Per operator its states' rows (before, written, deleted, after) and removed bytes, its keyed files'
    bytes before and after; per key group the edit touches, its rows (``key_group_changes``).
    """
    plan = result.plan
    saved = result.bytes_saved
    totals: dict[str, list[dict[str, Any]]] = {}
    for row in plan.totals():
        totals.setdefault(row["operator"], []).append(
            {
                "name": row["state"],
                "rows_before": row["before"],
                "written_rows": row["written"],
                "deleted_rows": row["deleted"],
                "rows_after": row["after"],
                "removed_bytes": row["removed_bytes"],
            }
        )
    ids = {op.label: op.operator_id for op in plan.operators}
    return {
        "input": source,
        "output": result.out,
        "dry_run": result.dry_run,
        "checkpoint_id": plan.checkpoint_id,
        "mode": plan.mode,
        "operators": [
            {
                **operator_document(op.uid, op.name, op.operator_id),
                "states": totals.get(op.label, []),
                "keyed_files_rewritten": op.files,
                "keyed_file_bytes_before": result.keyed_bytes_before.get(op.label),
                "keyed_file_bytes_after": None if result.dry_run else result.keyed_bytes_after.get(op.label),
                "saved_bytes": None if result.dry_run else saved.get(op.label),
            }
            for op in plan.operators
        ],
        "key_group_changes": [
            {
                "operator_id": ids.get(c.operator, c.operator),
                "state": c.state,
                "key_group": c.key_group,
                "rows_before": c.before,
                "written_rows": c.written,
                "deleted_rows": c.deleted,
                "kept_rows": c.kept,
            }
            for c in plan.changes
        ],
        "wall_seconds": round(result.seconds, 3),
    }


def _labels(plan: StateEditPlan) -> dict[str, str]:
    """Return how text names each edited operator (``operator_label``), its id shortened as git does."""
    short = short_ids(op.operator_id for op in plan.operators)
    return {
        op.label: operator_label(op.uid, op.name, short.get(op.operator_id, op.operator_id))
        for op in plan.operators
    }


def render_state_edit(console: Console, result: StateEditResult) -> None:
    """Print the states the edit changes, the touched key groups (dry run) and the outcome, in 80 columns.

    A state the edit leaves alone is counted, not listed. The dry run also lists the first
    ``SHOWN_KEY_GROUPS`` key groups it touches (``--json`` lists all of them, and every state).
    """
    plan = result.plan
    labels = _labels(plan)
    rows = plan.totals()
    changed = [r for r in rows if r["written"] or r["deleted"]]
    title = f"kg {plan.command}" + (" --dry-run (nothing written)" if result.dry_run else "")
    if changed:
        totals = Table(title=title)
        for name in ("operator", "deleted", "written", "rows after", "removed"):
            totals.add_column(
                name, justify="left" if name == "operator" else "right", no_wrap=name != "operator"
            )
        totals.add_column("state")
        for row in changed:
            totals.add_row(
                labels.get(row["operator"], row["operator"]),
                format_count(row["deleted"]),
                format_count(row["written"]),
                format_count(row["after"]),
                format_bytes(row["removed_bytes"]),
                row["state"],
            )
        print_table(console, totals)
    unchanged = len(rows) - len(changed)
    console.print(
        f"{counted(len(changed), 'state')} changed"
        + (f", {format_count(unchanged)} unchanged" if unchanged else "")
        + f"; {counted(len(plan.changes), 'key group')} touched",
        markup=False,
        highlight=False,
    )
    if result.dry_run and plan.changes:
        groups = Table(title=f"rows per key group (the first {min(len(plan.changes), SHOWN_KEY_GROUPS)})")
        for name in ("operator", "key group", "deleted", "written", "kept"):
            groups.add_column(
                name, justify="left" if name == "operator" else "right", no_wrap=name != "operator"
            )
        groups.add_column("state")
        for c in plan.changes[:SHOWN_KEY_GROUPS]:
            label = labels.get(c.operator, c.operator)
            groups.add_row(label, str(c.key_group), str(c.deleted), str(c.written), str(c.kept), c.state)
        print_table(console, groups)
        if len(plan.changes) > SHOWN_KEY_GROUPS:
            console.print(
                f"... {len(plan.changes) - SHOWN_KEY_GROUPS} more key groups (--json lists all)",
                highlight=False,
            )
    if result.dry_run:
        console.print(f"dry run: nothing written; {result.out} would be the new savepoint", highlight=False)
        return
    for op in plan.operators:
        before = result.keyed_bytes_before.get(op.label, 0)
        after = result.keyed_bytes_after.get(op.label, 0)
        console.print(
            f"{labels[op.label]}: keyed state {format_bytes(before)} -> {format_bytes(after)} "
            f"(saved {format_bytes(before - after)})",
            markup=False,
            highlight=False,
        )
    console.print(
        f"wrote Flink savepoint {result.out} (checkpoint id {plan.checkpoint_id} kept) "
        f"in {result.seconds:.1f} s",
        markup=False,
        highlight=False,
    )


__all__ = ["SHOWN_KEY_GROUPS", "Duration", "Instant", "render_state_edit", "state_edit_document"]
