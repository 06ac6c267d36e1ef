"""``kg diff``: do two kg snapshots hold the same logical state, whatever their parallelism?"""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import output_for, print_table
from keygroup_cli.errors import ExitCode

EPILOG = """\b
Examples:
  kg diff snap/ rescaled/
  kg diff before/ after/ --json | jq '.operators[] | select(.same | not)'
  kg rescale snap/ --to 8 --out r8/ && kg diff -q snap/ r8/ && echo "nothing lost"

\b
Keyed state is compared as a multiset of (state, key, namespace, user_key, value,
timestamp) rows; split operator state as a multiset of elements, union state as a set
of elements, broadcast state as the set of distinct per-subtask maps. Parallelism,
maxParallelism, files and row order are layout, not state.
Exit codes: 0 same, 1 different, 3 invalid snapshot, 4 unsupported format version.
"""


@click.command(epilog=EPILOG)
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@output_options
@click.pass_context
def command(ctx: click.Context, a: str, b: str) -> None:
    """Compare the logical state of snapshots A and B."""
    from keygroup_cli.snapshot.diff import diff_snapshots

    out = output_for(ctx)
    with progress(out) as on_progress:
        result = diff_snapshots(a, b, on_progress=on_progress)
    document = {
        "a": result.a,
        "b": result.b,
        "same": result.same,
        "operators": [
            {
                "operator": op.label,
                "operator_id": op.operator_id,
                "presence": op.presence,
                "same": op.same,
                "notes": list(op.notes),
                "states": [
                    {
                        "state": s.state,
                        "kind": s.kind,
                        "rows_a": s.rows_a,
                        "rows_b": s.rows_b,
                        "only_in_a": s.only_in_a,
                        "only_in_b": s.only_in_b,
                    }
                    for s in op.states
                ],
            }
            for op in result.operators
        ],
    }

    def text(console: Console) -> None:
        table = Table(title=f"{result.a} vs {result.b}")
        for name in ("operator", "state", "kind", "rows A", "rows B", "only in A", "only in B"):
            numbers = name.startswith(("rows", "only"))
            table.add_column(name, justify="right" if numbers else "left", no_wrap=numbers)
        for op in result.operators:
            if op.presence != "both":
                table.add_row(op.label, "-", f"operator {op.presence.replace('_', ' ')}", "", "", "", "")
            for s in op.states:
                if not s.same or not op.comparable:
                    values = (s.rows_a, s.rows_b, s.only_in_a, s.only_in_b)
                    table.add_row(op.label, s.state, s.kind, *(str(v) for v in values))
        for op in result.operators:
            for note in op.notes:
                console.print(f"{op.label}: {note}", markup=False, highlight=False, soft_wrap=True)
        if result.same:
            console.print("same logical state", markup=False)
        else:
            print_table(console, table)
            console.print("different", markup=False)

    out.result("diff", document, text)
    if not result.same:
        ctx.exit(ExitCode.CHECK_FAILED)
