"""``kg gc``: list, and with ``--delete`` remove, the checkpoint files nothing retained references."""

from __future__ import annotations

import click
from rich.console import Console

from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import output_for

EPILOG = """\b
Examples:
  kg gc s3://bkt/checkpoints/3f2a...c1          # dry run: orphans, their sizes and ages
  kg gc /data/checkpoints                       # the base directory of one job works too
  kg gc s3://bkt/checkpoints/3f2a...c1 --delete --older-than 7d --ha ha-configmaps.yaml
  kg gc ckpt/3f2a...c1 --savepoint s3://bkt/savepoints/sp-1 --delete --older-than 1d
  kg gc ckpt/3f2a...c1 --json | jq '.orphans[] | select(.hold == null) | .path'

\b
CHECKPOINT_DIR is a job's checkpoint directory (<execution.checkpointing.dir>/<job id>/),
or the directory above it when that holds one job. kg reads the _metadata of every retained
checkpoint there (each chk-N that has one), of any other _metadata under it and of every
--savepoint (a savepoint, a chk-N, or the directory of a job restored from this one), and
lists each file under shared/, taskowned/ and chk-*/ that none of them references, with its
size and age. A chk-N without _metadata is orphaned as a whole, except the newest one while no
completed checkpoint is newer: it may be in progress (--force deletes it). A _metadata kg
cannot read, or a state handle it does not know, stops kg gc before it decides anything.

\b
--delete needs --older-than (--older-than 0: any age). It deletes nothing while a job may
still write there: with --ha (zk://... or an exported HA ConfigMap), while its store names a
live leader; without, while a file under the directory was written within the last hour (or
within --older-than, if longer). Every _metadata is read again right before deleting; files
go first, then the folders they leave empty. A _metadata, a referenced file or a symbolic
link is never deleted, and no link is followed.
Exit codes: 0 done (or dry run), 2 usage, 3 unreadable _metadata or not a checkpoint
directory, 4 unsupported _metadata or handle, 5 a deletion failed, 7 a job may still write.
"""


@click.command(epilog=EPILOG)
@click.argument("checkpoint_dir", type=click.Path(path_type=str))
@click.option(
    "--savepoint",
    "savepoints",
    multiple=True,
    metavar="SP",
    help="Also keep what SP references (a savepoint, a chk-N, or a job directory: all its retained "
    "checkpoints). Repeatable.",
)
@click.option("--delete", is_flag=True, help="Delete the orphans (needs --older-than).")
@click.option(
    "--older-than", "older_than", metavar="D", help="Only orphans older than D (0, 90s, 30m, 12h, 7d)."
)
@click.option(
    "--force",
    is_flag=True,
    help="Delete even if a job may still write there, and the newest checkpoint without _metadata.",
)
@click.option(
    "--ha",
    metavar="SOURCE",
    help="The job's HA store (zk://HOST:PORT/root/cluster-id or an exported HA ConfigMap): --delete "
    "refuses while it names a live leader.",
)
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    checkpoint_dir: str,
    savepoints: tuple[str, ...],
    delete: bool,
    older_than: str | None,
    force: bool,
    ha: str | None,
) -> None:
    """List (and with --delete remove) checkpoint files no retained checkpoint or savepoint references."""
    from keygroup_cli.assess.orphans import parse_duration
    from keygroup_cli.cli.gc_render import gc_document, render_gc
    from keygroup_cli.execution.routes.gc import collect_garbage

    out = output_for(ctx)
    if delete and older_than is None:
        raise click.UsageError("--delete needs --older-than D (7d, 12h, ...; --older-than 0 for any age).")
    seconds = None if older_than is None else parse_duration(older_than)
    with progress(out) as on_progress:
        result = collect_garbage(
            checkpoint_dir,
            savepoints,
            delete=delete,
            older_than=seconds,
            force=force,
            ha=ha,
            on_progress=on_progress,
        )
    for path in result.plan.missing[:3]:
        out.warn(f"a retained checkpoint names {path}, which is missing")

    def text(console: Console) -> None:
        render_gc(console, result, delete=delete)

    out.result("gc", gc_document(result, typed=checkpoint_dir, delete=delete, older_than=seconds), text)
