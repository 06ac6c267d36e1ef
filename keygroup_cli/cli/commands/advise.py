"""``kg advise``: which parallelisms spread the key groups evenly, and how skewed the others are."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.options import max_parallelism_option, output_options, require_bounds
from keygroup_cli.cli.render import format_count, output_for, print_table
from keygroup_cli.planning import plan as planning

EPILOG = """\b
Examples:
  kg advise --max-parallelism 128 --min 2 --max 100
  kg advise -m 128 --min 90 --max 110 --json
  kg advise -m 4096 --min 1 --max 64 --all

With maxParallelism 128 and parallelism 100, 28 subtasks own two key groups and 72 own one: the hottest
carries 1.56x the mean. Parallelisms that divide maxParallelism are perfectly even.
"""


@click.command(epilog=EPILOG)
@max_parallelism_option(required=True)
@click.option(
    "--min", "minimum", type=int, default=1, show_default=True, help="Smallest parallelism considered."
)
@click.option("--max", "maximum", type=int, help="Largest parallelism considered [default: maxParallelism].")
@click.option(
    "--all", "show_all", is_flag=True, help="List every parallelism, not only the even ones and a sample."
)
@output_options
@click.pass_context
def command(
    ctx: click.Context, max_parallelism: int, minimum: int, maximum: int | None, show_all: bool
) -> None:
    """Advise a parallelism: even spreads of key groups, and the skew of the others."""
    out = output_for(ctx)
    require_bounds(max_parallelism, minimum, parallelism_option="--min")
    if maximum is not None:
        require_bounds(max_parallelism, maximum, parallelism_option="--max")
    advice = planning.advise_parallelism(max_parallelism, minimum, maximum)
    even = [a.parallelism for a in advice if a.even]
    document = {
        "max_parallelism": max_parallelism,
        "min": advice[0].parallelism,
        "max": advice[-1].parallelism,
        "even_parallelisms": even,
        "parallelisms": [
            {
                "parallelism": a.parallelism,
                "key_group_skew": round(a.skew, 6),
                "max_key_groups": a.max_load,
                "min_key_groups": a.min_load,
                "even": a.even,
            }
            for a in advice
        ],
    }

    def text(console: Console) -> None:
        shown = advice if show_all else _worth_showing(advice)
        table = Table(title=f"maxParallelism {max_parallelism}: key groups per subtask")
        for name in ("parallelism", "min", "max", "skew (max/mean)"):
            table.add_column(name, justify="right", no_wrap=True)
        table.add_column("verdict")
        for a in shown:
            verdict = "even" if a.even else f"hottest subtask +{(a.skew - 1):.0%}"
            loads = (format_count(a.min_load), format_count(a.max_load))
            table.add_row(str(a.parallelism), *loads, f"{a.skew:.2f}", verdict)
        print_table(console, table)
        console.print(f"Even parallelisms in range: {', '.join(map(str, even)) or 'none'}")
        if not show_all and len(shown) < len(advice):
            console.print(f"({format_count(len(advice) - len(shown))} more; --all lists every parallelism)")

    out.result("advise", document, text)


def _worth_showing(advice: tuple[planning.ParallelismAdvice, ...]) -> list[planning.ParallelismAdvice]:
    """Return the even parallelisms with their neighbours, the five least skewed, and the range's ends."""
    keep: set[int] = set()
    for i, a in enumerate(advice):
        if a.even:
            keep.update(j for j in (i - 1, i, i + 1) if 0 <= j < len(advice))
    keep.update(sorted(range(len(advice)), key=lambda i: (advice[i].skew, i))[:5])
    keep.update({0, len(advice) - 1})
    return [advice[i] for i in sorted(keep)][:40]
