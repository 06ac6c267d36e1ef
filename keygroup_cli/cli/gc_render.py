"""JSON document and text of ``kg gc`` (``execution.routes.gc.GcResult``)."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.table import Table

from keygroup_cli.assess.orphans import duration_text
from keygroup_cli.cli.render import counted, format_bytes, print_table
from keygroup_cli.execution.routes.gc import GcResult


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def gc_document(result: GcResult, *, typed: str, delete: bool, older_than: float | None) -> dict[str, Any]:
    """Return the JSON form of a ``kg gc`` run (public API: docs/reference/json-output.md)."""
    plan, removal = result.plan, result.removal
    removed = {f.path for f in removal.removed} if removal else set()
    changed = {f.path for f in removal.changed} if removal else set()

    def status(path: str, hold: str | None) -> str:
        if path in removed:
            return "deleted"
        if path in changed:
            return "changed"
        return "held" if hold is not None else ("kept" if delete else "would_delete")

    return {
        "input": typed,
        "directory": plan.directory,
        "job_id": plan.job_id,
        "dry_run": not delete,
        "older_than_seconds": older_than,
        "checkpoint_ids": list(plan.checkpoints),
        "incomplete_checkpoint_ids": list(plan.incomplete),
        "in_progress_checkpoint_id": plan.in_progress,
        "savepoints": list(plan.savepoints),
        "referenced": {"files": plan.referenced_files, "bytes": plan.referenced_bytes},
        "orphans": [
            {
                "path": o.path,
                "bytes": o.size,
                "modified": _iso(o.mtime),
                "reason": o.reason,
                "hold": o.hold,
                "status": status(o.path, o.hold),
            }
            for o in plan.orphans
        ],
        "orphaned_bytes": plan.orphan_bytes,
        "deletable_bytes": plan.deletable_bytes,
        "deleted": {
            "files": len(removal.removed) if removal else 0,
            "bytes": sum(f.size for f in removal.removed) if removal else 0,
            "directories": sorted(removal.directories) if removal else [],
        },
        "skipped": [{"path": p, "reason": why} for p, why in plan.skipped],
        "outside_references": list(plan.outside),
        "missing_references": list(plan.missing),
        "liveness": None
        if result.liveness is None
        else {
            "method": result.liveness.method,
            "live": result.liveness.live,
            "reason": result.liveness.reason,
        },
    }


def render_gc(console: Console, result: GcResult, *, delete: bool) -> None:
    """Print the orphans (path, size, age, what happens to each) and the totals."""
    plan, removal = result.plan, result.removal
    removed = {f.path for f in removal.removed} if removal else set()
    changed = {f.path for f in removal.changed} if removal else set()
    now = time.time()
    retained = ", ".join(f"chk-{n}" for n in plan.checkpoints) or "none"
    console.print(f"{plan.directory}: retained checkpoints {retained}", markup=False, highlight=False)
    if plan.orphans:
        table = Table(title="Orphaned files")
        table.add_column("File", overflow="fold")
        table.add_column("Size", justify="right", no_wrap=True)
        table.add_column("Age", justify="right", no_wrap=True)
        table.add_column("Action")
        for o in plan.orphans:
            if o.path in removed:
                action = "deleted"
            elif o.path in changed:
                action = "kept: changed since it was listed"
            elif o.hold is not None:
                action = f"kept: {o.hold}"
            else:
                action = "kept" if delete else "would delete"
            table.add_row(o.path, format_bytes(o.size), duration_text(max(0.0, now - o.mtime)), action)
        print_table(console, table)
    for path, why in plan.skipped:
        console.print(f"skipped {path}: {why}", markup=False, highlight=False)
    lines = [
        f"referenced: {counted(plan.referenced_files, 'file')}, {format_bytes(plan.referenced_bytes)} "
        f"(never deleted)",
        f"orphaned: {counted(len(plan.orphans), 'file')}, {format_bytes(plan.orphan_bytes)}",
    ]
    if removal is not None:
        gone = sum(f.size for f in removal.removed)
        lines.append(
            f"deleted: {counted(len(removal.removed), 'file')}, {format_bytes(gone)}"
            + (f", {counted(len(removal.directories), 'empty directory', 'empty directories')}")
        )
    else:
        lines.append(
            f"would delete: {counted(len(plan.deletable), 'file')}, {format_bytes(plan.deletable_bytes)} "
            "(a dry run: --delete --older-than D deletes)"
        )
    if plan.outside:
        lines.append(
            f"{counted(len(plan.outside), 'reference')} lead outside the directory, where kg reads nothing: "
            "files of their names here are kept"
        )
    if plan.missing:
        lines.append(
            f"warning: {counted(len(plan.missing), 'referenced file')} missing: "
            "a retained checkpoint is damaged"
        )
    if result.liveness is not None:
        lines.append(
            f"job: {'may be live' if result.liveness.live else 'not live'} ({result.liveness.reason})"
        )
    for line in lines:
        console.print(line, markup=False, highlight=False)
