"""``kg migrate``: rename a uid, give a hashed operator a uid, or drop state, in a savepoint."""

from __future__ import annotations

import click

from keygroup_cli.cli.inputs import job_option, resolve_input
from keygroup_cli.cli.options import migration_options, migration_request, output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import output_for

EPILOG = """\b
Examples:
  kg migrate savepoint/ --out fixed/ --rename keyed-sum=keyed-sum-v2
  kg migrate savepoint/ --out fixed/ --assign-uid 6cdc5bb954874d922eaee11a8e7ca5e2=my-window
  kg migrate savepoint/ --out fixed/ --drop old-dedup --dry-run
  kg migrate s3://bkt/sp-1a2b --out s3://bkt/sp-1a2b-v2 --rename a=b --drop c --json
  kg rescale sp/ --to 8 --out sp-v2-p8/ --rename a=b    # rescale in the same pass (kg rescale)

\b
Flink maps state to operators by OperatorID = murmur3_128(uid); a new uid is a new id. The new
savepoint keeps the checkpoint id; its state files are copied beside the new _metadata (written
last, verified); the input is only read. A refused change writes nothing: exit 2 with
OPERATOR_NOT_IN_SAVEPOINT, OPERATOR_ID_TAKEN, OPERATOR_HAS_UID or OPERATOR_CHANGED_TWICE.
"""


@click.command(epilog=EPILOG)
@click.argument("path", type=click.Path(path_type=str))
@click.option("--out", "dest", required=True, metavar="DEST", help="The new savepoint (must not exist).")
@migration_options
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
    from keygroup_cli.execution.routes.migrate import run_migration

    out = output_for(ctx)
    source = resolve_input(out, path, job, refuse_live_leader=not dry_run).path
    request = migration_request(rename, assign_uid, drop)
    with progress(out) as on_progress:
        result = run_migration(source, dest, request, dry_run=dry_run, on_progress=on_progress)
    from keygroup_cli.cli.migrate_render import migrate_document, render_migrate

    document = migrate_document(result, path, dest)
    out.result("migrate", document, lambda console: render_migrate(console, document))
