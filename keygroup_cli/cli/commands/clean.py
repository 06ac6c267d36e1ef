"""``kg clean``: remove what a killed kg run left beside (or at) a destination."""

from __future__ import annotations

import click
from rich.console import Console

from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.render import output_for

EPILOG = """\b
Examples:
  kg clean rescaled/                  # stale .rescaled.kg-staging-* beside it
  kg clean s3://bkt/savepoints/p8     # an upload that never wrote its _metadata
  kg clean rescaled/ --dry-run --json
  kg clean s3://bkt/savepoints/p8 --force   # the writer ran on another host

\b
A kg run killed with SIGKILL cannot clean up: it leaves a staging directory beside DEST, or on an
object store the objects it uploaded without the _metadata / _manifest.json that would commit them.
Both carry a writer mark (host, pid, process start time). kg clean removes them once that writer
provably no longer runs (same host, process gone); every later write to DEST does the same by itself.
--force removes kg's leftovers whatever their writer (one on another host cannot be proven gone).
A committed DEST and anything kg did not write are never touched, except the writer mark a kill right
after an object-store commit leaves inside it (removed like the rest). Exit code 0.
"""


@click.command(epilog=EPILOG)
@click.argument("dest", type=click.Path(path_type=str))
@click.option("--force", is_flag=True, help="Remove kg's leftovers even if their writer may still run.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@output_options
@click.pass_context
def command(ctx: click.Context, dest: str, force: bool, dry_run: bool) -> None:
    """Remove what a killed kg run left at or beside DEST (staging, uncommitted uploads)."""
    from keygroup_cli.storage.cleanup import clean

    out = output_for(ctx)
    found = clean(dest, force=force, dry_run=dry_run)
    document = {
        "output": dest,
        "dry_run": dry_run,
        "leftovers": [
            {"path": f.path, "writer": f.writer, "writer_gone": f.writer_gone, "removed": f.removed}
            for f in found
        ],
    }

    def text(console: Console) -> None:
        if not found:
            console.print(f"nothing of kg's left at or beside {dest}", markup=False)
        for f in found:
            state = (
                "removed"
                if f.removed
                else ("would remove" if dry_run and (f.writer_gone or force) else "kept")
            )
            why = "writer gone" if f.writer_gone else "writer may still run (--force removes it)"
            console.print(f"{state}: {f.path} ({f.writer}; {why})", markup=False)

    out.result("clean", document, text)
