"""``kg migrate``: operator surgery on a savepoint: rename a uid, give a hashed operator a uid, drop state."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from keygroup_cli.cli.inputs import job_option, resolve_input
from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import counted, format_bytes, output_for

EPILOG = """\b
Examples:
  kg migrate savepoint/ --out fixed/ --rename keyed-sum=keyed-sum-v2
  kg migrate savepoint/ --out fixed/ --assign-uid 6cdc5bb954874d922eaee11a8e7ca5e2=my-window
  kg migrate savepoint/ --out fixed/ --drop old-dedup --dry-run
  kg migrate s3://bkt/sp-1a2b --out s3://bkt/sp-1a2b-v2 --rename a=b --drop c --json
  kg migrate sp/ --out sp-v2/ --rename a=b && kg rescale sp-v2/ --to 8 --out sp-v2-p8/   # and rescale

\b
Flink maps state to operators by OperatorID = murmur3_128(uid); a new uid is a new id. The new
savepoint keeps the checkpoint id; its state files are copied beside the new _metadata (written
last, verified); the input is only read. A refused change writes nothing: exit 2 with
OPERATOR_NOT_IN_SAVEPOINT, OPERATOR_ID_TAKEN, OPERATOR_HAS_UID or OPERATOR_CHANGED_TWICE.
"""


@click.command(epilog=EPILOG)
@click.argument("path", type=click.Path(path_type=str))
@click.option("--out", "dest", required=True, metavar="DEST", help="The new savepoint (must not exist).")
@click.option("--rename", multiple=True, metavar="OLD=NEW", help="Rename uid OLD (or id) to NEW; repeatable.")
@click.option(
    "--assign-uid",
    multiple=True,
    metavar="ID=UID",
    help="Give the operator with 32-hex id ID (and no uid) the uid UID; repeatable.",
)
@click.option("--drop", multiple=True, metavar="UID|ID", help="Drop an operator and its state; repeatable.")
@click.option("--dry-run", is_flag=True, help="Validate and print the plan; write nothing.")
@job_option
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    path: str,
    dest: str,
    rename: tuple[str, ...],
    assign_uid: tuple[str, ...],
    drop: tuple[str, ...],
    dry_run: bool,
    job: str | None,
) -> None:
    """Rename, assign or drop operators' state in a savepoint or checkpoint; write a new savepoint."""
    from keygroup_cli.execution.migrate import run_migration
    from keygroup_cli.migration import MigrationRequest, parse_pair

    out = output_for(ctx)
    source = resolve_input(out, path, job, refuse_live_leader=not dry_run).path
    request = MigrationRequest(
        tuple(parse_pair(v, "--rename") for v in rename),
        tuple(parse_pair(v, "--assign-uid") for v in assign_uid),
        drop,
    )
    with progress(out) as on_progress:
        result = run_migration(source, dest, request, dry_run=dry_run, on_progress=on_progress)
    document: dict[str, Any] = {
        "source": result.source,
        "destination": result.destination,
        "dry_run": result.dry_run,
        "checkpoint_id": result.checkpoint_id,
        "changes": [
            {
                "action": c.action,
                "operator_id": c.operator_id,
                "uid": c.uid,
                "new_operator_id": c.new_operator_id,
                "new_uid": c.new_uid,
                "has_state": c.has_state,
                "replaces": c.replaces,
            }
            for c in result.plan.changes
        ],
        "operators": len(result.plan.metadata.operators),
        "files": len(result.plan.files),
        "bytes": result.plan.bytes,
        "copy": result.copy_mode,
        "wall_seconds": round(result.wall_seconds, 3),
    }
    out.result("migrate", document, lambda console: _text(console, document))


def _text(console: Console, doc: dict[str, Any]) -> None:
    for c in doc["changes"]:
        old = f"{c['uid']} ({c['operator_id']})" if c["uid"] else c["operator_id"]
        state = "" if c["has_state"] else " [no state]"
        if c["action"] == "drop":
            line = f"drop        {old}{state}"
        else:
            line = f"{c['action']:<11} {old} -> {c['new_uid']} ({c['new_operator_id']}){state}"
            if c["replaces"]:
                line += f", replacing the stateless entry {c['replaces']}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    verb = "would write" if doc["dry_run"] else "wrote"
    console.print(
        f"{verb} {doc['destination']}: checkpoint {doc['checkpoint_id']}, "
        f"{counted(doc['operators'], 'operator')}, {counted(doc['files'], 'state file')} "
        f"({format_bytes(doc['bytes'])}, {doc['copy']})",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
