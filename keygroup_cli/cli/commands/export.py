"""``kg export``: keyed state of an operator as Parquet files with typed columns."""

from __future__ import annotations

import click
from rich.console import Console

from keygroup_cli.assess.summary import operator_label
from keygroup_cli.cli.options import one_operator_option, output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import counted, format_count, operator_document, output_for

EPILOG = """\b
Examples:
  kg export savepoint/ --operator keyed-state --state sum --out sum.parquet
  kg export savepoint/ -o keyed-state --out keyed-state/      # one <state>.parquet per state
  kg export savepoint/ -o keyed-state --out keyed-state/ --engine spark   # Spark tasks decode the files
  duckdb -c "SELECT key, value FROM 'sum.parquet' ORDER BY value DESC LIMIT 10"

\b
Columns: key_group, key, namespace (absent for VoidNamespace), user_key (map states), value (a list
state's elements as one list), timestamp (timers), undecoded (raw bytes of an entry that did not
decode). Values are typed from the serializer snapshots (structs for POJOs, Tuples, Rows, Avro, TTL);
Kryo and unknown serializers stay binary, with a note. Rows are read block by block, so memory
does not grow with the state. OUT must not exist; it appears only when complete. --engine spark: one
Spark task per keyed file decodes it; kg writes their batches in file order (the same files).
Exit codes: 0 written, 2 usage (OUT exists, no such operator or state), 3 invalid savepoint,
4 unsupported (no keyed state).
"""


@click.command(epilog=EPILOG)
@click.argument("savepoint", type=click.Path())
@one_operator_option()
@click.option("--state", "-s", metavar="NAME", help="Only this state: OUT is then one Parquet file.")
@click.option("--out", required=True, type=click.Path(), metavar="FILE_OR_DIR", help="Where to write.")
@click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default="local",
    show_default=True,
    help="local: decode in this process; spark: one Spark task per keyed file.",
)
@click.option("--master", metavar="URL", help="Spark master URL (default: embedded local[*]).")
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    savepoint: str,
    operator: str,
    state: str | None,
    out: str,
    engine: str,
    master: str | None,
) -> None:
    """Export keyed state as Parquet: typed key, namespace, user key and value columns."""
    from keygroup_cli.execution.routes.state_data import state_reader
    from keygroup_cli.flink import Savepoint, export_states, find_operator, open_savepoint

    output = output_for(ctx)
    reader = state_reader(engine, master=master)
    with progress(output) as on_progress:
        result = export_states(savepoint, operator, out, state, on_progress, reader)
    found = find_operator(Savepoint.of(open_savepoint(savepoint)), result.operator)
    document = {
        "input": savepoint,
        "output": out,
        "operator": operator_document(found.uid, found.name, found.operator_id),
        "states": [
            {
                "name": s.name,
                "kind": s.kind,
                "file": s.file,
                "rows": s.rows,
                "columns": list(s.columns),
                "notes": list(s.notes),
            }
            for s in result.states
        ],
    }

    label = operator_label(found.uid, found.name, found.operator_id)

    def text(console: Console) -> None:
        for s in result.states:
            line = f"{s.name} ({s.kind}): {format_count(s.rows)} rows -> {s.file}"
            console.print(line, markup=False, highlight=False)
            for note in s.notes:
                console.print(f"  note: {note}", markup=False, highlight=False)
        console.print(
            f"wrote {counted(len(result.states), 'state')} of {label} to {out}",
            markup=False,
            highlight=False,
        )

    output.result("export", document, text)
