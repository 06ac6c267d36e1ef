"""``kg verify``: check every file and row of a kg snapshot, or every block of a Flink savepoint."""

from __future__ import annotations

import click
from rich.console import Console

from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import counted, format_count, output_for
from keygroup_cli.core.errors import ExitCode

EPILOG = """\b
Examples:
  kg verify snap/
  kg verify snap/_manifest.json --json | jq '.findings[].code'
  kg verify rescaled/ -q && echo "safe to use"
  kg verify savepoint-1a2b/            # a Flink savepoint or checkpoint: every key group decoded

\b
kg snapshots: checks sizes and xxh64 of every file, the Parquet schema, that each row's key group
is in its file's range, sorted, and equals murmurHash(key.hashCode()) % maxParallelism,
per-key-group counts, state kinds vs columns, operator-state positions, and that no
unnamed file sits in an operator directory.
Flink savepoints and checkpoints: file sizes, key-group ranges and offsets, every key-group
block (state ids, entry lengths, each key's key-group prefix and hash, END_OF_KEY_GROUP),
snappy frame CRCs, and every operator-state element; files are read block by block.
Exit codes: 0 clean, 3 violations found (or the manifest itself is invalid),
4 unsupported format version.
"""


@click.command(epilog=EPILOG)
@click.argument("snapshot", type=click.Path())
@output_options
@click.pass_context
def command(ctx: click.Context, snapshot: str) -> None:
    """Verify a kg snapshot or Flink savepoint deeply: files, checksums, every row or key-group block."""
    from keygroup_cli.assess.integrity import verify_input

    out = output_for(ctx)
    with progress(out) as on_progress:
        report = verify_input(snapshot, on_progress=on_progress)
    document = {
        "input": snapshot,
        "ok": report.ok,
        "files": report.files,
        "rows": report.rows,
        "findings": [f.document() for f in report.findings],
    }

    def text(console: Console) -> None:
        for f in report.findings:
            line = f"{f.severity.value.upper()} {f.code}: {f.message}"
            console.print(line, markup=False, highlight=False)
        verdict = "OK" if report.ok else "INVALID"
        console.print(
            f"{verdict}: {snapshot}: {counted(report.files, 'file')}, "
            f"{format_count(report.rows)} rows checked, {counted(len(report.findings), 'finding')}",
            markup=False,
            highlight=False,
        )

    out.result("verify", document, text)
    if not report.ok:
        ctx.exit(ExitCode.SNAPSHOT_INVALID)
