"""Text of ``kg inspect --key-groups``: bytes per key group and the parallelisms that balance them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.render import format_bytes, format_count, print_table

if TYPE_CHECKING:
    from keygroup_cli.key_group_sizes import KeyGroupSizes

_SOURCES = {
    "key-group-offsets": "exact: from the key-group offsets, bytes as stored",
    "manifest-estimate": "estimated: file bytes shared out by rows per key group",
}

#: Rows of parallelisms that are even by key-group count shown next to the best ones.
_EVEN_ROWS = 6


def render_key_group_sizes(console: Console, sizes: KeyGroupSizes) -> None:
    """Print one operator's key-group sizes, its current spread and the byte-weighted advice."""
    from keygroup_cli.key_group_sizes import DEFAULT_TOP

    if not sizes.available:
        console.print(f"  {sizes.unavailable_reason}", markup=False)
        return
    groups, with_data = format_count(len(sizes.bytes)), format_count(sizes.non_empty_key_groups)
    console.print(
        f"  key-group bytes: {format_bytes(sizes.total_bytes)} in {groups} key groups "
        f"({with_data} with data); files {format_bytes(sizes.stored_bytes)}"
    )
    console.print(f"    {_SOURCES.get(sizes.source or '', sizes.source)}", markup=False)
    console.print(
        f"    per key group: min {format_bytes(sizes.min_bytes)}, median {format_bytes(sizes.median_bytes)}, "
        f"max {format_bytes(sizes.max_bytes)}"
    )
    hot = Table(box=None, padding=(0, 1))
    for name in ("hottest key group", "bytes", "share", "subtask"):
        hot.add_column(name, justify="right", no_wrap=True)
    for kg, size, subtask in sizes.hottest(DEFAULT_TOP):
        hot.add_row(str(kg), format_bytes(size), f"{size / sizes.total_bytes:.1%}", str(subtask))
    if hot.row_count:
        print_table(console, hot, indent=3)
    loads = [s.bytes for s in sizes.subtasks]
    largest = max(range(len(loads)), key=lambda i: (loads[i], -i))
    console.print(
        f"    at parallelism {sizes.parallelism} subtasks hold {format_bytes(min(loads))} to "
        f"{format_bytes(max(loads))} (largest: subtask {largest})"
    )
    best = sizes.best(DEFAULT_TOP)
    notes: dict[int, list[str]] = {sizes.parallelism: ["current"]}
    for advice in best:
        notes.setdefault(advice.parallelism, []).append("best")
    # Parallelisms even by key-group count, for contrast; the few nearest the current one (JSON has all).
    evens = [a.parallelism for a in sizes.advice if a.key_group_skew == 1.0]
    for p in sorted(evens, key=lambda p: (abs(p - sizes.parallelism), p))[:_EVEN_ROWS]:
        notes.setdefault(p, []).append("even key groups")
    table = Table(box=None, padding=(0, 1))
    for name in ("p", "byte skew", "key-group skew", "largest subtask"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("note", overflow="fold")
    by_p = {a.parallelism: a for a in sizes.advice}
    for p in sorted(notes):
        found = by_p.get(p)
        if found is None:  # the current parallelism, outside the range judged
            row = (f"{sizes.skew:.2f}", f"{sizes.key_group_skew:.2f}", format_bytes(max(loads)))
        else:
            row = (f"{found.byte_skew:.2f}", f"{found.key_group_skew:.2f}", format_bytes(found.max_bytes))
        table.add_row(str(p), *row, ", ".join(notes[p]))
    print_table(console, table, indent=2)
    lo, hi = sizes.advice[0].parallelism, sizes.advice[-1].parallelism
    ranked = ", ".join(f"{a.parallelism} ({a.byte_skew:.2f})" for a in best)
    console.print(f"    best (most even by bytes) in {lo}-{hi}: {ranked}", soft_wrap=True)
