"""``kg ranges``: the key-group range of every subtask, or Flink's default maxParallelism."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.options import (
    max_parallelism_option,
    output_options,
    parallelism_option,
    require_bounds,
)
from keygroup_cli.cli.render import format_count, output_for, print_table
from keygroup_cli.core import keygroups

EPILOG = """\b
Examples:
  kg ranges --max-parallelism 128 --parallelism 3
  kg ranges -m 4096 -p 7 --json
  kg ranges --parallelism 100              # maxParallelism defaults as Flink's would (256)
  kg ranges --default-max-parallelism 86   # what Flink picks when none is set
"""


@click.command(epilog=EPILOG)
@max_parallelism_option(required=False, help="maxParallelism (default: Flink's default for --parallelism).")
@parallelism_option("Number of subtasks (1..M).")
@click.option(
    "--default-max-parallelism",
    "default_for",
    type=int,
    metavar="P",
    help="Only print the maxParallelism Flink picks for parallelism P when none is configured.",
)
@output_options
@click.pass_context
def command(
    ctx: click.Context, max_parallelism: int | None, parallelism: int | None, default_for: int | None
) -> None:
    """Show the key-group range of every subtask for a maxParallelism and parallelism."""
    out = output_for(ctx)
    if default_for is not None:
        value = keygroups.default_max_parallelism(default_for)
        out.result(
            "ranges",
            {"parallelism": default_for, "default_max_parallelism": value},
            lambda console: console.print(
                f"Flink's default maxParallelism for parallelism {default_for}: {value}"
            ),
        )
        return
    if parallelism is None:
        raise click.UsageError("Missing option '--parallelism' (or use --default-max-parallelism).")
    defaulted = max_parallelism is None
    if defaulted:
        require_bounds(keygroups.UPPER_BOUND_MAX_PARALLELISM, parallelism)
    max_p = keygroups.default_max_parallelism(parallelism) if max_parallelism is None else max_parallelism
    require_bounds(max_p, parallelism)
    ranges = keygroups.subtask_ranges(max_p, parallelism)
    rows = [
        {"subtask": i, "key_group_start": r.start, "key_group_end": r.end, "key_groups": r.size}
        for i, r in enumerate(ranges)
    ]
    document = {
        "max_parallelism": max_p,
        "max_parallelism_defaulted": defaulted,
        "parallelism": parallelism,
        "key_group_skew": keygroups.skew([r.size for r in ranges]),
        "ranges": rows,
    }

    def text(console: Console) -> None:
        origin = " (Flink's default for this parallelism)" if defaulted else ""
        table = Table(title=f"maxParallelism {max_p}{origin}, parallelism {parallelism}")
        for name in ("subtask", "start", "end", "key groups"):
            table.add_column(name, justify="right", no_wrap=True)
        for row in rows:
            table.add_row(
                str(row["subtask"]),
                str(row["key_group_start"]),
                str(row["key_group_end"]),
                format_count(row["key_groups"]),
            )
        print_table(console, table)
        console.print(
            f"hottest subtask carries {document['key_group_skew']:.2f}x the mean number of key groups"
        )

    out.result("ranges", document, text)
