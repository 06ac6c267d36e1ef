"""``kg diff``: do two kg snapshots or Flink savepoints hold the same logical state, whatever the layout?"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from keygroup_cli.assess.summary import operator_label
from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import format_count, operator_document, output_for, print_table
from keygroup_cli.core.errors import ExitCode

if TYPE_CHECKING:
    from keygroup_cli.snapshot.diff import OperatorDiff, SnapshotDiff

EPILOG = """\b
Examples:
  kg diff snap/ rescaled/
  kg diff savepoint-1a2b/ savepoint-p8/            # Flink savepoints: before and after kg rescale
  kg diff savepoint-1a2b/ state.kg/                # a savepoint and a kg snapshot
  kg diff before/ after/ --json | jq '.operators[] | select(.same | not)'
  kg rescale sp/ --from 3 --to 8 --out r8/ && kg diff -q sp/ r8/ && echo "nothing lost"

\b
A and B are kg snapshots, Flink savepoints or retained checkpoints, local or on an object store; a
savepoint is decoded into a kg snapshot in a scratch directory ($KG_SCRATCH_DIR, else the temp
directory) that is removed afterwards. Keyed state is compared as a multiset of (state, key,
namespace, user_key, value, timestamp) rows, timers included; split operator state as a multiset of
elements, union state as a set of elements, broadcast state as the set of distinct per-subtask maps.
Parallelism, maxParallelism, key groups, files, compression and row order are layout, not state, and an
operator with no keyed row and no operator-state element on either side never differs (a savepoint
lists every operator of the job). With -q nothing is printed: the exit code is the answer.
Exit codes: 0 same, 1 different, 3 invalid input, 4 unsupported format or layout.
"""


@click.command(epilog=EPILOG)
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@output_options
@click.pass_context
def command(ctx: click.Context, a: str, b: str) -> None:
    """Compare the logical state of A and B (kg snapshots or Flink savepoints)."""
    from keygroup_cli.convert.inputs import diff_inputs

    out = output_for(ctx)
    with progress(out) as on_progress:
        result = diff_inputs(a, b, on_progress=on_progress)
    document = _document(result, a, b)
    if out.json or not out.quiet:
        # -q: the exit code alone answers (`kg diff -q A B && ...`), as `cmp -s` does.
        out.result("diff", document, lambda console: _text(console, result, (a, b)))
    if not result.same:
        ctx.exit(ExitCode.CHECK_FAILED)


def _label(op: OperatorDiff) -> str:
    return operator_label(op.uid, op.name, op.operator_id)


def _document(result: SnapshotDiff, a: str, b: str) -> dict[str, Any]:
    """Return ``kg diff --json``'s document; ``a`` and ``b`` as the user typed them."""
    return {
        "input_a": a,
        "input_b": b,
        "same": result.same,
        "operators": [
            {
                **operator_document(op.uid, op.name, op.operator_id),
                "presence": op.presence,
                "has_state": op.holds_state,
                "same": op.same,
                "notes": list(op.notes),
                "states": [
                    {
                        "name": s.state,
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


def _text(console: Console, result: SnapshotDiff, typed: tuple[str, str]) -> None:
    """Print the differences (a table of states that differ, and notes), or "same logical state"."""
    table = Table(title=f"{typed[0]} vs {typed[1]}")
    for name in ("operator", "state", "kind", "rows A", "rows B", "only in A", "only in B"):
        numbers = name.startswith(("rows", "only"))
        table.add_column(name, justify="right" if numbers else "left", no_wrap=numbers)
    for op in result.operators:
        if not op.holds_state:
            continue  # a savepoint lists every operator of the job; no state is no difference
        if op.presence != "both":
            table.add_row(_label(op), "-", f"operator {op.presence.replace('_', ' ')}", "", "", "", "")
        for s in op.states:
            if not s.same or not op.comparable:
                values = (s.rows_a, s.rows_b, s.only_in_a, s.only_in_b)
                table.add_row(_label(op), s.state, s.kind, *map(format_count, values))
    for op in result.operators:
        for note in op.notes if op.holds_state else ():
            console.print(f"{_label(op)}: {note}", markup=False, highlight=False)
    if result.same:
        console.print("same logical state", markup=False)
    else:
        print_table(console, table)
        console.print("different", markup=False)
