"""Render ``kg migrate``'s result: its JSON document, and the text made from that document.

``change_document`` and ``render_changes`` also render the migration of ``kg rescale --rename/--assign-uid/
--drop`` (``cli.rescale_render``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console

from keygroup_cli.assess.summary import count_operators
from keygroup_cli.cli.render import counted, format_bytes, operators_counted, shorten_ids
from keygroup_cli.execution.routes.migrate import MigrationResult
from keygroup_cli.planning.migration import OperatorChange


def change_document(c: OperatorChange) -> dict[str, Any]:
    """Return one operator change as ``kg migrate --json`` lists it (``changes``)."""
    return {
        "action": c.action,
        "operator_id": c.operator_id,
        "uid": c.uid,
        "new_operator_id": c.new_operator_id,
        "new_uid": c.new_uid,
        "has_state": c.has_state,
        "replaces": c.replaces,
    }


def render_changes(console: Console, changes: Iterable[dict[str, Any]]) -> None:
    """Print one line per change document (``change_document``)."""
    for c in changes:
        old = f"{c['uid']} ({c['operator_id']})" if c["uid"] else c["operator_id"]
        state = "" if c["has_state"] else " [no state]"
        if c["action"] == "drop":
            line = f"drop        {old}{state}"
        else:
            line = f"{c['action']:<11} {old} -> {c['new_uid']} ({c['new_operator_id']}){state}"
            if c["replaces"]:
                line += f", replacing the stateless entry {c['replaces']}"
        # Ids as git shortens hashes (--json: whole).
        console.print(shorten_ids(line), markup=False, highlight=False)


def migrate_document(result: MigrationResult, typed_input: str, typed_output: str) -> dict[str, Any]:
    """Return the ``kg migrate`` document (docs/reference/json-output.md), paths as the user typed them."""
    operators, with_state = count_operators(result.plan.metadata.operators, lambda op: op.has_state)
    return {
        "input": typed_input,
        "output": typed_output,
        "dry_run": result.dry_run,
        "checkpoint_id": result.checkpoint_id,
        "changes": [change_document(c) for c in result.plan.changes],
        "operators": operators,
        "operators_with_state": with_state,
        "files": len(result.plan.files),
        "bytes": result.plan.bytes,
        "copy": result.copy_mode,
        "wall_seconds": round(result.wall_seconds, 3),
    }


def render_migrate(console: Console, doc: dict[str, Any]) -> None:
    """Print one line per change, then what was (or would be) written."""
    render_changes(console, doc["changes"])
    verb = "would write" if doc["dry_run"] else "wrote"
    console.print(
        f"{verb} {doc['output']}: checkpoint {doc['checkpoint_id']}, "
        f"{operators_counted(doc['operators'], doc['operators_with_state'])}, "
        f"{counted(doc['files'], 'state file')} "
        f"({format_bytes(doc['bytes'])}, {doc['copy']})",
        markup=False,
        highlight=False,
    )
