"""``kg compact``: drop expired TTL entries, keys by a predicate, or early timers; a new savepoint."""

from __future__ import annotations

import click

from keygroup_cli.cli.options import operator_option, output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import output_for
from keygroup_cli.cli.state_edit_render import Duration, Instant, render_state_edit, state_edit_document

EPILOG = """\b
Examples:
  kg compact sp/ --out sp-small/ --expired-ttl 7d                  # as Flink's TTL cleanup would now
  kg compact sp/ --out sp-small/ --expired-ttl 12h --now 2026-11-29T00:00:00Z -o sessions
  kg compact sp/ --out sp-2/ --drop-where "key LIKE 'test-%'"
  kg compact sp/ --out sp-2/ --keep-where "key IN FILE 'active-keys.txt'" -o dedup --state seen
  kg compact sp/ --out sp-2/ --drop-where "key >= 10 AND key < 20" --dry-run
  kg compact sp/ --out sp-2/ --timers-before 2026-01-01T00:00:00Z

\b
--expired-ttl TTL drops the entries whose last access + TTL <= --now (default: now), as Flink's
TtlUtils.expired decides; Flink does not store the time-to-live in the savepoint, so give the job's
StateTtlConfig TTL. A list keeps its unexpired elements. --drop-where drops, --keep-where keeps only,
the entries of the keys a predicate on the decoded key selects: key = 'a', key <> 3, key < 10,
key BETWEEN 1 AND 9, key LIKE 'abc%', key IN ('a', 'b'), key IN FILE 'keys.txt' (one key a line, or a
Parquet/Arrow file with a key column), key IS NULL, key.field for struct keys, combined with AND, OR,
NOT and parentheses; parsed, never evaluated. --timers-before T drops event- and processing-time
timers before T. Without -o every keyed operator, without --state every state, is compacted. The
report lists removed entries and their bytes per operator and state, and the keyed bytes saved per
operator. --dry-run prints it and writes nothing. --engine spark runs the same tasks on Spark.
Exit codes: 0 written, 2 usage (OUT exists, no rule, a predicate that does not parse), 3 invalid
savepoint, 4 unsupported, 5 execution failed (nothing committed).
"""


@click.command(epilog=EPILOG)
@click.argument("savepoint", type=click.Path())
@click.option("--out", required=True, type=click.Path(), metavar="DEST", help="The new savepoint (absent).")
@click.option("--expired-ttl", type=Duration(), metavar="TTL", help="Drop entries whose TTL expired.")
@click.option("--now", type=Instant(), help="The time TTL expiry is judged at (default: now).")
@click.option("--drop-where", metavar="EXPR", help="Drop the entries of keys this predicate selects.")
@click.option("--keep-where", metavar="EXPR", help="Keep only the entries of keys this predicate selects.")
@click.option("--timers-before", type=Instant(), help="Drop timers before this time (ms or ISO 8601).")
@operator_option()
@click.option("--state", "-s", "states", multiple=True, metavar="NAME", help="Only this state.")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True)
@click.option("--master", metavar="URL", help="Spark master URL (default: embedded local[*]).")
@click.option("--dry-run", is_flag=True, help="Print what would be removed; write nothing.")
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    savepoint: str,
    out: str,
    expired_ttl: int | None,
    now: int | None,
    drop_where: str | None,
    keep_where: str | None,
    timers_before: int | None,
    operators: tuple[str, ...],
    states: tuple[str, ...],
    engine: str,
    master: str | None,
    dry_run: bool,
) -> None:
    """Compact keyed state by rule (TTL, key predicate, timers): a new savepoint, committed atomically."""
    from keygroup_cli.execution.routes.state_edit import compact_state

    if drop_where is not None and keep_where is not None:
        raise click.UsageError("give --drop-where or --keep-where, not both")
    if now is not None and expired_ttl is None:
        raise click.UsageError("--now applies to --expired-ttl")
    output = output_for(ctx)
    with progress(output) as on_progress:
        result = compact_state(
            savepoint,
            out,
            operators=operators or None,
            states=states or None,
            ttl_ms=expired_ttl,
            now_ms=now,
            where=keep_where if keep_where is not None else drop_where,
            keep_where=keep_where is not None,
            timers_before=timers_before,
            engine=engine,
            master=master,
            dry_run=dry_run,
            on_progress=on_progress,
        )
    output.result("compact", state_edit_document(result, savepoint), lambda c: render_state_edit(c, result))
