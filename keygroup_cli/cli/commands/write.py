"""``kg write``: change one keyed state of a savepoint from Parquet or Arrow data; a new savepoint."""

from __future__ import annotations

import click

from keygroup_cli.cli.options import one_operator_option, output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import output_for
from keygroup_cli.cli.state_edit_render import Instant, render_state_edit, state_edit_document

EPILOG = """\b
Examples:
  kg export sp/ -o keyed-state --state sum --out sum.parquet       # the state as data
  duckdb -c "COPY (SELECT key_group, key, 0::BIGINT AS value, undecoded FROM 'sum.parquet'
             WHERE key LIKE 'bad-%') TO 'fix.parquet'"             # edit it with any tool
  kg write sp/ -o keyed-state --state sum --mode upsert --data fix.parquet --out sp-fixed/
  kg write sp/ -o keyed-state --state sum --mode delete --data poisoned-keys.parquet --out sp-clean/
  kg write sp/ -o dedup --state seen --mode replace --data bootstrap.arrow --out sp-boot/ --dry-run
  kg write sp/ -o counter -s n --mode upsert --data d.parquet --out sp-2/ -m 1024 --engine spark
  kg write sp/ -o sessions -s last --mode upsert --data d.parquet --out o/ --ttl-timestamp 2026-11-29T00:00Z

\b
--data: Parquet, or an Arrow IPC file or stream, with the columns kg export writes for the state: key,
namespace (absent for VoidNamespace), user_key (map states), value (a list state's elements as one
list; a TTL state's {value, ttl_last_access}) or timestamp (timers); key_group is ignored (recomputed:
each key lands in the key group Flink computes at the savepoint's maxParallelism) and undecoded bytes
are written back unchanged. Modes: upsert sets the given entries (value and list states: key and
namespace; map states: key, namespace and user key; timers: added); delete removes every entry of the
given keys (narrowed by namespace, user_key or timestamp where the data has those columns); replace
makes the state exactly the data. --ttl-timestamp stamps every written TTL entry (default: the data's
ttl_last_access, else now). The new savepoint keeps the checkpoint id; every other state and operator
is copied and checked. -m M rescales the operator's maxParallelism in the same pass (every key
re-hashed; refused like kg rescale -m where Flink could not restore it, e.g. CHAIN_AMBIGUOUS).
--engine spark runs the same tasks on Spark. --dry-run prints the plan the run executes (rows per
key group written, deleted, kept) and writes nothing. Types kg cannot encode (Kryo, unknown
serializers) are refused per column.
Exit codes: 0 written, 2 usage (OUT exists, no such operator or state, data not in the export's shape,
a value that does not fit its type), 3 invalid savepoint, 4 unsupported (a type kg cannot encode),
5 execution failed (nothing committed).
"""


@click.command(epilog=EPILOG)
@click.argument("savepoint", type=click.Path())
@one_operator_option()
@click.option("--state", "-s", required=True, metavar="NAME", help="The keyed state to change.")
@click.option("--mode", required=True, type=click.Choice(["upsert", "delete", "replace"]), help="How.")
@click.option("--data", required=True, metavar="FILE", help="Parquet or Arrow rows in kg export's shape.")
@click.option("--out", required=True, type=click.Path(), metavar="DEST", help="The new savepoint (absent).")
@click.option("--ttl-timestamp", type=Instant(), help="Last-access time of written TTL entries (ms or ISO).")
@click.option("--max-parallelism", "-m", type=click.IntRange(1, 32768), help="Also rescale maxParallelism.")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True)
@click.option("--master", metavar="URL", help="Spark master URL (default: embedded local[*]).")
@click.option("--dry-run", is_flag=True, help="Print the plan (rows per key group); write nothing.")
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    savepoint: str,
    operator: str,
    state: str,
    mode: str,
    data: str,
    out: str,
    ttl_timestamp: int | None,
    max_parallelism: int | None,
    engine: str,
    master: str | None,
    dry_run: bool,
) -> None:
    """Write a keyed state from data (upsert, delete or replace): a new savepoint, committed atomically."""
    from keygroup_cli.execution.routes.state_edit import write_state

    output = output_for(ctx)
    with progress(output) as on_progress:
        result = write_state(
            savepoint,
            out,
            operator,
            state,
            mode,
            data,
            ttl_timestamp=ttl_timestamp,
            new_max_parallelism=max_parallelism,
            engine=engine,
            master=master,
            dry_run=dry_run,
            on_progress=on_progress,
        )
    output.result("write", state_edit_document(result, savepoint), lambda c: render_state_edit(c, result))
