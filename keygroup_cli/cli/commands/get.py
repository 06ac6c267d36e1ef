"""``kg get``: every state of one key (or a few), typed, reading only the key's key-group block."""

from __future__ import annotations

from typing import BinaryIO

import click

from keygroup_cli.cli.options import one_operator_option, output_options
from keygroup_cli.cli.render import output_for
from keygroup_cli.core.errors import ExitCode

EPILOG = """\b
Examples:
  kg get savepoint/ --operator keyed-state --key user-42
  kg get savepoint/ -o keyed-state -k 42 -k 43 --key-type long --json
  kg get s3://bucket/savepoints/sp-1a2b -o keyed-state -k user-42
  kg get savepoint/ -o keyed-state --keys-file keys.txt --json | jq '.keys[].found'
  kg get savepoint/ -o 4_group-aggregate -k '[42, "abc", true]'

\b
The key's key group is computed as Flink does (murmurHash(key.hashCode()) % maxParallelism), and only
that key group's block of the subtask file holding it is read (one ranged read on an object store).
A SQL job's key (a BinaryRowData of its key columns) is a JSON array of its fields, in the order
kg inspect shows ('[42, "abc"]'; a one-field key may be bare).
Values are decoded with the serializers of the state file's header: primitives, String, byte[], enums,
List, Map, TTL, Tuple, Row, SQL rows, POJOs, Avro, timers; Kryo and other serializers stay bytes,
with a note.
RocksDB NATIVE savepoints and checkpoints have no per-key-group offsets: their keyed files are
rewritten as key groups first (local disk only; as costly as kg convert).
Exit codes: 0 every key holds state, 1 a key holds none, 2 usage, 3 invalid savepoint,
4 unsupported (key type kg cannot hash, no keyed state).
"""


@click.command(epilog=EPILOG)
@click.argument("savepoint", type=click.Path())
@one_operator_option()
@click.option("--key", "-k", "key_args", multiple=True, metavar="KEY", help="A key (repeatable).")
@click.option("--keys-file", "-f", type=click.File("rb"), help="Keys from FILE, one per line ('-' = stdin).")
@click.option(
    "--key-type",
    "-t",
    type=click.Choice(("string", "long", "int", "boolean")),
    default=None,
    help="Java type of the keys; default: the type of the operator's key serializer (checked if given).",
)
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    savepoint: str,
    operator: str,
    key_args: tuple[str, ...],
    keys_file: BinaryIO | None,
    key_type: str | None,
) -> None:
    """Print every state of a key: values, list elements, map entries and timers, typed."""
    from keygroup_cli.cli.get_render import lookup_document, print_lookup
    from keygroup_cli.core.keys import split_lines
    from keygroup_cli.flink import lookup_keys, open_savepoint

    out = output_for(ctx)
    if keys_file is not None and key_args:
        raise click.UsageError("Give keys with --key or --keys-file, not both.")
    if keys_file is not None:
        texts = [line.decode("utf-8", "surrogateescape") for line in split_lines(keys_file.read())]
    else:
        texts = list(key_args)
    if not texts:
        raise click.UsageError("Give at least one --key KEY, or --keys-file FILE.")
    opened = open_savepoint(savepoint)
    lookup = lookup_keys(opened, operator, texts, key_type)
    name = next((op.name for op in opened.metadata.operators if op.operator_id == lookup.operator_id), None)
    out.result(
        "get", lookup_document(lookup, savepoint, name), lambda console: print_lookup(console, lookup, name)
    )
    if not all(k.found for k in lookup.keys):
        ctx.exit(ExitCode.CHECK_FAILED)
