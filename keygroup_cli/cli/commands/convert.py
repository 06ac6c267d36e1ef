"""``kg convert``: a canonical Flink savepoint to a kg snapshot, or (``--to-flink``) back to a savepoint."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console

from keygroup_cli.assess.summary import is_kg_snapshot
from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import counted, format_bytes, format_count, output_for
from keygroup_cli.convert.from_savepoint import (
    is_flink_savepoint,
    require_destination_absent,
    savepoint_to_snapshot,
)
from keygroup_cli.convert.inputs import readable
from keygroup_cli.convert.to_savepoint import snapshot_to_savepoint
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.storage import is_remote
from keygroup_cli.storage.remote import remote_output
from keygroup_cli.storage.staging import require_outside_input

EPILOG = """\b
Examples:
  kg convert /savepoints/savepoint-1a2b3c --out ./state.kg
  kg rescale ./state.kg --to 8 --out ./state-p8.kg
  kg convert ./state-p8.kg --to-flink --out /savepoints/rescaled-p8
  kg convert ./state.kg --to-flink --no-compression --out ./plain-savepoint --json
  kg convert ./state.kg --to-flink --format native --out ./native-savepoint   # for RocksDB / ForSt jobs
  kg convert s3://bkt/savepoints/sp-1a2b --out s3://bkt/kg/sp-1a2b.kg
"""


@click.command(epilog=EPILOG)
@click.argument("source", type=click.Path(path_type=str))
@click.option(
    "--out",
    "dest",
    required=True,
    type=click.Path(path_type=str),
    help="Directory to create: a path, or a URI (s3://, gs://, abfs://, hdfs://).",
)
@click.option("--to-flink", is_flag=True, help="Write SOURCE (a kg snapshot) as a canonical Flink savepoint.")
@click.option(
    "--compression/--no-compression",
    default=None,
    help="With --to-flink: snappy-compress state (default: as the original savepoint was).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["canonical", "native"]),
    default=None,
    help="With --to-flink: canonical keyed state (every backend; the default) or native (RocksDB/ForSt "
    "database files, the [rocksdb] extra).",
)
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    source: str,
    dest: str,
    to_flink: bool,
    compression: bool | None,
    output_format: str | None,
) -> None:
    """Convert a canonical savepoint into a kg snapshot, or a kg snapshot into a savepoint Flink restores.

    Besides canonical savepoints, NATIVE savepoints and retained checkpoints (HashMap; RocksDB with the
    [rocksdb] extra) are read too; with --to-flink, --format native writes NATIVE keyed state.
    """
    out = output_for(ctx)
    _require_applicable(source, dest, to_flink, compression, output_format)
    commit_file = "_metadata" if to_flink else "_manifest.json"
    with progress(out) as on_progress, contextlib.ExitStack() as stack:
        # An object-store DEST is checked empty first, written locally, then uploaded metadata last.
        local_dest = (
            stack.enter_context(remote_output(dest, commit_file, on_progress)) if is_remote(dest) else dest
        )
        local_source = stack.enter_context(readable(source, on_progress=on_progress))
        if to_flink:
            result = snapshot_to_savepoint(
                Path(local_source),
                local_dest,
                compression=compression,
                on_progress=on_progress,
                output_format=output_format or "canonical",
            )
        else:
            result = savepoint_to_snapshot(Path(local_source), local_dest, on_progress=on_progress)
    result = replace(result, source=str(source), destination=str(dest))
    document = {
        "direction": result.direction,
        "input": source,
        "output": dest,
        "operators": result.operators,
        "keyed_files": result.keyed_files,
        "keyed_rows": result.keyed_rows,
        "operator_state_files": result.operator_files,
        "operator_state_rows": result.operator_rows,
        "bytes": result.bytes,
        "compression": result.compressed,
    }

    def text(console: Console) -> None:
        what = "Flink savepoint" if to_flink else "kg snapshot"
        console.print(
            f"wrote {what} {dest}: {counted(result.operators, 'operator')}, "
            f"{format_count(result.keyed_rows)} keyed rows in {counted(result.keyed_files, 'file')}, "
            f"{format_count(result.operator_rows)} operator-state rows in "
            f"{counted(result.operator_files, 'file')} ({format_bytes(result.bytes)})"
        )

    out.result("convert", document, text)


def _require_applicable(
    source: str, dest: str, to_flink: bool, compression: bool | None, output_format: str | None
) -> None:
    """Refuse a conversion in the wrong direction, options that do not apply, and a DEST kg cannot write.

    Raises:
        InvalidArgumentError: ``CONVERT_DIRECTION``, or a DEST inside SOURCE or already there.
        click.UsageError: ``--compression`` or ``--format`` without ``--to-flink``.
    """
    is_savepoint = is_flink_savepoint(source)
    if to_flink and is_savepoint:
        raise InvalidArgumentError(
            f"{source} is already a Flink savepoint; --to-flink takes a kg snapshot", code="CONVERT_DIRECTION"
        )
    if not to_flink and not is_savepoint and is_kg_snapshot(source):
        raise InvalidArgumentError(
            f"{source} is a kg snapshot; add --to-flink to write a Flink savepoint", code="CONVERT_DIRECTION"
        )
    if compression is not None and not to_flink:
        raise click.UsageError("--compression/--no-compression only applies with --to-flink")
    if output_format is not None and not to_flink:
        raise click.UsageError("--format only applies with --to-flink")
    require_outside_input(source, dest)
    if not is_remote(dest):
        require_destination_absent(dest)
