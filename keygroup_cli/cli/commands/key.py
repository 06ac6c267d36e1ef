"""``kg key``: the Java hash code, key group and subtask of keys, one by one or a million from a file."""

from __future__ import annotations

import json
import sys
from typing import BinaryIO

import click
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.options import (
    key_type_option,
    max_parallelism_option,
    output_options,
    parallelism_option,
    require_bounds,
)
from keygroup_cli.cli.render import SCHEMA_VERSION, output_for, print_table, table_lines, write_lines
from keygroup_cli.core import keys as keys_core

EPILOG = """\b
Examples:
  kg key hello --max-parallelism 128
  kg key user-1 user-2 -m 128 -p 4 --json
  kg key 42 -9000000000 --key-type long -m 4096 -p 7
  kg key --keys-file keys.txt -m 128 -p 3 > placement.tsv
  cut -f1 users.csv | kg key --keys-file - -m 128 -p 3 --json
  kg key '[42, "abc"]' --sql-key INT,STRING -m 128 -p 4
  kg key '["1.25", "2024-02-29T12:34:56.789", [0, "n1"]]' -m 128 \\
      --sql-key 'DECIMAL(10, 2), TIMESTAMP(3), ROW<INT, STRING>'

\b
--sql-key: the keys of a SQL job (GROUP BY, PARTITION BY, join keys), whose key is a BinaryRowData of
the key columns; give its field types in order and each key as a JSON array ('42' for one field):
a DECIMAL as a string or number, a TIMESTAMP as ISO text (up to nanoseconds), a ROW as an array.
kg get and kg inspect read the types from a savepoint.

Keys files are UTF-8, one key per line (\\n or \\r\\n); '-' reads stdin.
More than 50 keys print as tab-separated lines instead of a table (--table plain: aligned columns).
"""

#: Above this many keys the text output is tab-separated lines, not a rich table.
TABLE_LIMIT = 50


@click.command(epilog=EPILOG)
@click.argument("key_args", nargs=-1, metavar="KEY...")
@click.option(
    "--keys-file", "-f", type=click.File("rb"), help="Read keys from FILE, one per line ('-' = stdin)."
)
@key_type_option()
@click.option(
    "--sql-key",
    metavar="TYPES",
    help="Keys of a SQL job: the key row's field types in order (INT,STRING,BOOLEAN); keys as JSON arrays.",
)
@max_parallelism_option(required=True)
@parallelism_option("Also show the owning subtask at parallelism P.")
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    key_args: tuple[str, ...],
    keys_file: BinaryIO | None,
    key_type: str,
    sql_key: str | None,
    max_parallelism: int,
    parallelism: int | None,
) -> None:
    """Show where keys land: Java hashCode(), key group and subtask."""
    out = output_for(ctx)
    require_bounds(max_parallelism, parallelism or 1)
    if keys_file is not None and key_args:
        raise click.UsageError("Give keys as arguments or with --keys-file, not both.")
    if keys_file is None and not key_args:
        raise click.UsageError("Give at least one KEY, or --keys-file FILE.")
    if sql_key is not None and ctx.get_parameter_source("key_type") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("Give --key-type or --sql-key, not both.")
    source = "argument"
    if keys_file is not None:
        name = str(getattr(keys_file, "name", "<stdin>"))
        source = "stdin" if name in ("<stdin>", "-") else name
        texts = keys_core.split_lines(keys_file.read())
    else:
        # Arguments that were not valid UTF-8 arrive surrogate-escaped; re-encode so parsing names them.
        texts = [a.encode("utf-8", "surrogateescape") for a in key_args]
    if sql_key is not None:
        from keygroup_cli.flink import locate_row_keys, row_fields_from_sql

        fields = row_fields_from_sql(sql_key)
        rows = [t.decode("utf-8", "surrogateescape") for t in texts]
        located = locate_row_keys(rows, fields, max_parallelism, parallelism)
    else:
        parsed = keys_core.parse_keys(texts, key_type, source=source)
        located = keys_core.locate_keys(parsed, key_type, max_parallelism, parallelism)
    if out.json:
        _write(_json_document(located))
    elif out.table == "plain":
        _print_plain(out.stdout, located)
    elif out.table == "rich" and len(located.keys) <= TABLE_LIMIT:
        _print_table(out.stdout, located)
    else:
        _write(_tsv(located))


def _columns(located: keys_core.KeyLocations) -> dict[str, pa.Array]:
    columns = {
        "hash_code": pa.array(located.hash_codes),
        "key_group": pa.array(located.key_groups),
    }
    if located.subtasks is not None:
        columns["subtask"] = pa.array(located.subtasks)
    return columns


def _print_table(console: Console, located: keys_core.KeyLocations) -> None:
    table = Table(title=f"{located.key_type} keys, maxParallelism {located.max_parallelism}")
    columns = _columns(located)
    table.add_column("key")
    for name in columns:
        table.add_column(name.replace("_", " "), justify="right", no_wrap=True)
    keys = located.keys.to_pylist()
    for i, key in enumerate(keys):
        shown = json.dumps(key) if isinstance(key, bool) else str(key)
        table.add_row(shown, *(str(col[i].as_py()) for col in columns.values()))
    print_table(console, table)


def _print_plain(console: Console, located: keys_core.KeyLocations) -> None:
    # Aligned columns of any number of keys, without a rich Table (table_lines escapes as the TSV does).
    columns = _columns(located)
    cells = [_escaped_keys(located, []), *(c.cast(pa.string()) for c in columns.values())]
    rows = [list(row) for row in zip(*(c.to_pylist() for c in cells), strict=True)]
    headers = ["key", *(name.replace("_", " ") for name in columns)]
    title = f"{located.key_type} keys, maxParallelism {located.max_parallelism}"
    justify = ["left", *(["right"] * len(columns))]
    write_lines(console, table_lines("plain", headers, rows, justify, title=title))


def _escaped_keys(located: keys_core.KeyLocations, escapes: list[tuple[str, str]]) -> pa.Array:
    keys = located.keys
    if located.key_type == "boolean":
        return pc.if_else(keys, "true", "false")
    if located.key_type != "string":
        return keys.cast(pa.string())
    for pattern, replacement in escapes:
        keys = pc.replace_substring(keys, pattern, replacement)
    return keys


_TSV_ESCAPES = [("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")]


def _tsv(located: keys_core.KeyLocations) -> bytes:
    # Tab-separated lines with backslash-escaped keys, joined by Arrow (no per-key Python work).
    columns = _columns(located)
    fields = [_escaped_keys(located, _TSV_ESCAPES), *(c.cast(pa.string()) for c in columns.values())]
    lines = pc.binary_join_element_wise(*fields, "\t")
    header = "\t".join(["key", *columns]) + "\n"
    return header.encode() + _concatenated(pc.binary_join_element_wise(lines, "\n", ""))


def _json_key(located: keys_core.KeyLocations) -> pa.Array:
    if located.key_type != "string":
        return _escaped_keys(located, [])
    keys = located.keys
    encoded = pc.binary_join_element_wise(
        '"', _escaped_keys(located, [("\\", "\\\\"), ('"', '\\"')]), '"', ""
    )
    # Control characters need \u escapes; they are rare, so those keys go through json.dumps one by one.
    control = pc.match_substring_regex(keys, "[\\x00-\\x1f]")
    if pc.any(control).as_py():
        rows = np.flatnonzero(control.to_numpy(zero_copy_only=False))
        fixed = encoded.to_pylist()
        for row in rows.tolist():
            fixed[row] = json.dumps(keys[row].as_py(), ensure_ascii=False)
        encoded = pa.array(fixed, type=pa.string())
    return encoded


def _json_document(located: keys_core.KeyLocations) -> bytes:
    # One JSON document; the keys array is assembled by Arrow, so a million keys take a fraction of a second.
    parts: list[pa.Array | str] = ['{"key": ', _json_key(located)]
    for name, column in _columns(located).items():
        parts += [f', "{name}": ', column.cast(pa.string())]
    parts.append("},\n")
    items = _concatenated(pc.binary_join_element_wise(*parts, ""))
    head = {
        "schema_version": SCHEMA_VERSION,
        "command": "key",
        "max_parallelism": located.max_parallelism,
        "parallelism": located.parallelism,
        "key_type": located.key_type,
    }
    opening = json.dumps(head, ensure_ascii=False)[:-1] + ', "keys": [\n'
    # Every item ends with ",\n"; the last one's comma is dropped.
    return opening.encode("utf-8") + items[:-2] + b"\n]}\n"


def _concatenated(strings: pa.Array) -> bytes:
    """Return the bytes of all strings back to back (the Arrow data buffer, no per-string copies)."""
    strings = strings.cast(pa.large_string())
    offsets = np.frombuffer(
        strings.buffers()[1], dtype=np.int64, count=len(strings) + 1, offset=strings.offset * 8
    )
    data = strings.buffers()[2]
    return b"" if data is None else data.to_pybytes()[int(offsets[0]) : int(offsets[-1])]


def _write(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
