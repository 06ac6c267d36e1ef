"""``kg generate``: a deterministic synthetic kg snapshot with every state kind, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.options import (
    key_type_option,
    max_parallelism_option,
    operator_option,
    output_options,
    parallelism_option,
)
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import format_bytes, format_count, operator_document, output_for, print_table
from keygroup_cli.core import javahash

if TYPE_CHECKING:
    from keygroup_cli.snapshot.model import Manifest, Operator

EPILOG = """\b
Examples:
  kg generate snap/ --operator counter --keys 1000 --parallelism 3 --max-parallelism 128
  kg generate snap/ --operator counter:string:1000:3:128 --operator sessions:long:50000:4:256
  kg generate big/ --operator events:long:2000000:8 --seed 7 --value-bytes 24
  SOURCE_DATE_EPOCH=0 kg generate fixed/ --operator c:int:20:2:10 --json

\b
--operator UID[:TYPE[:KEYS[:P[:MAXP]]]] is repeatable; empty or missing fields take
--key-type, --keys, --parallelism and --max-parallelism (maxP defaults as Flink's would).
The same --seed gives byte-identical files at any parallelism and the same logical
state (kg diff exits 0). SOURCE_DATE_EPOCH fixes created_at in the manifest.
"""


@click.command(epilog=EPILOG)
@click.argument("out", type=click.Path(dir_okay=True, file_okay=False))
@operator_option(help="UID[:TYPE[:KEYS[:P[:MAXP]]]] (repeatable).", metavar="SPEC")
@key_type_option(
    choices=(*javahash.PRIMITIVE_KEY_TYPES, "binary"),
    help="Java type of the keys of operators that do not say.",
)
@click.option(
    "--keys", "-n", type=click.IntRange(min=0), default=1000, show_default=True, help="Distinct keys."
)
@parallelism_option("Parallelism of operators that do not say.", default=1, show_default=True)
@max_parallelism_option(
    required=False, help="maxParallelism of operators that do not say [default: Flink's for P]."
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--value-bytes", type=click.IntRange(min=1), default=24, show_default=True)
@click.option("--snapshot-id", type=int, default=1, show_default=True)
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    out: str,
    operators: tuple[str, ...],
    key_type: str,
    keys: int,
    parallelism: int,
    max_parallelism: int | None,
    seed: int,
    value_bytes: int,
    snapshot_id: int,
) -> None:
    """Generate a synthetic kg snapshot at OUT (which must not exist)."""
    from keygroup_cli.snapshot import synthetic

    output = output_for(ctx)
    specs = [
        synthetic.parse_operator_spec(
            text, key_type=key_type, keys=keys, parallelism=parallelism, max_parallelism=max_parallelism
        )
        for text in (operators or ("counter",))
    ]
    from keygroup_cli.storage import is_remote
    from keygroup_cli.storage.remote import remote_output

    with progress(output) as on_progress, contextlib.ExitStack() as stack:
        # An object-store OUT must be empty; the snapshot is written locally, uploaded manifest last.
        local = (
            stack.enter_context(remote_output(out, "_manifest.json", on_progress)) if is_remote(out) else out
        )
        manifest = synthetic.generate_snapshot(
            local,
            specs,
            seed=seed,
            value_bytes=value_bytes,
            snapshot_id=snapshot_id,
            created_at=_created_at(),
            on_progress=on_progress,
        )
    document = {
        "output": out,
        "checkpoint_id": manifest.snapshot_id,
        "seed": seed,
        "operators": [_operator_document(op) for op in manifest.operators],
    }
    output.result("generate", document, lambda console: _text(console, manifest, out, seed))


def _created_at() -> str | None:
    """Return the manifest's ``created_at`` that SOURCE_DATE_EPOCH fixes (None: now)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not epoch.isdigit():
        return None
    return datetime.fromtimestamp(int(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _operator_document(op: Operator) -> dict[str, Any]:
    """Return one generated operator of ``kg generate --json``."""
    return {
        **operator_document(op.uid, op.name, op.operator_id),
        "key_type": op.key_type,
        "parallelism": op.parallelism,
        "max_parallelism": op.max_parallelism,
        "keyed_rows": op.keyed_rows,
        "keyed_files": len(op.keyed_files),
        "operator_state_files": len(op.operator_files),
        "bytes": op.total_bytes,
    }


def _text(console: Console, manifest: Manifest, out: str, seed: int) -> None:
    """Print the generated operators: uid, key type, parallelism, rows, files and bytes."""
    table = Table(title=f"generated {out} (seed {seed})")
    for name in ("uid", "key type", "p", "maxP", "keyed rows", "files", "bytes"):
        text = name in ("uid", "key type")
        table.add_column(name, justify="left" if text else "right", no_wrap=not text)
    for op in manifest.operators:
        files = len(op.keyed_files) + len(op.operator_files)
        values = (
            op.uid,
            op.key_type,
            str(op.parallelism),
            str(op.max_parallelism),
            format_count(op.keyed_rows),
            format_count(files),
            format_bytes(op.total_bytes),
        )
        table.add_row(*values)
    print_table(console, table)
