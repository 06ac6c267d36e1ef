"""Text of ``kg inspect --key-groups``: bytes per key group and the parallelisms that balance them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from keygroup_cli.cli.render import format_bytes, format_count, print_table, table_style

if TYPE_CHECKING:
    from keygroup_cli.assess.sizes import KeyGroupSizes

_SOURCES = {
    "key-group-offsets": "exact: from the key-group offsets, bytes as stored",
    "manifest-estimate": "estimated: file bytes shared out by rows per key group",
}

#: Rows of parallelisms that are even by key-group count shown next to the best ones.
_EVEN_ROWS = 6

#: Eight heights of a column of the key-group chart, lowest first (a non-empty key group is never blank).
_LEVELS = "▁▂▃▄▅▆▇█"
#: Eighths of a character cell, for the ends of the per-subtask bars.
_EIGHTHS = " ▏▎▍▌▋▊▉"
#: At most this many bars per subtask chart; more subtasks are drawn in even runs, as key groups are.
_MAX_SUBTASK_BARS = 64
#: Colours of alternate subtasks' key groups in the key-group chart (where a subtask's range ends).
_SUBTASK_STYLES = ("cyan", "magenta")


def render_key_group_sizes(console: Console, sizes: KeyGroupSizes) -> None:
    """Print one operator's key-group sizes, its current spread and the byte-weighted advice."""
    from keygroup_cli.assess.sizes import DEFAULT_TOP

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
    console.print(f"    best (most even by bytes) in {lo}-{hi}: {ranked}")
    render_skew_charts(console, sizes)


def render_skew_charts(console: Console, sizes: KeyGroupSizes) -> None:
    """Draw bytes per key group and per subtask at the current and the suggested parallelism.

    On a terminal under ``--table rich``: a column per key group (or per run of key groups), coloured by
    the subtask that owns it now, and a bar per subtask. Piped, or under ``--table plain|tsv``, the same
    per-subtask numbers as a table instead (the key groups are in ``--json`` and ``--html``).
    """
    current, suggested = sizes.parallelism, sizes.suggested
    loads = {current: sizes.subtask_bytes(current), suggested: sizes.subtask_bytes(suggested)}
    names = {current: f"p {current} (current)", suggested: f"p {suggested} (suggested)"}
    if current == suggested:
        names[current] = f"p {current} (current, suggested)"
    if not console.is_terminal or table_style(console) != "rich":
        table = Table(box=None, padding=(0, 1))
        table.add_column("subtask", justify="right", no_wrap=True)
        for p in loads:
            table.add_column(f"bytes at {names[p]}", justify="right", no_wrap=True)
        for i in range(max(len(v) for v in loads.values())):
            table.add_row(str(i), *(format_bytes(v[i]) if i < len(v) else "" for v in loads.values()))
        print_table(console, table, indent=3)
        return
    width = max(16, console.width - 6)
    lines = [Text(f"    bytes per key group, coloured by subtask at {names[current]}:")]
    lines.append(Text("    ").append_text(_key_group_columns(sizes, width)))
    for p, values in loads.items():
        lines.append(Text(f"    bytes per subtask at {names[p]}:"))
        lines.extend(_subtask_bars(values, width))
    for line in lines:
        console.print(line, highlight=False)


def _key_group_columns(sizes: KeyGroupSizes, width: int) -> Text:
    from keygroup_cli.assess.sizes import key_group_bins

    bins = key_group_bins(sizes.bytes, width)
    top = max((b.bytes for b in bins), default=0)
    text = Text()
    for b in bins:
        level = 0 if not b.bytes or not top else 1 + min(7, b.bytes * 8 // (top + 1))
        char = " " if level == 0 else _LEVELS[level - 1]
        text.append(char, style=_SUBTASK_STYLES[sizes.owners[b.start] % 2])
    return text


def _subtask_bars(values: tuple[int, ...], width: int) -> list[Text]:
    from keygroup_cli.assess.sizes import key_group_bins

    # Many subtasks are drawn in even runs (their bytes summed), labelled with the run's first and last.
    runs = key_group_bins(values, _MAX_SUBTASK_BARS)
    labels = [str(r.start) if r.start == r.end else f"{r.start}-{r.end}" for r in runs]
    sizes = [format_bytes(r.bytes) for r in runs]
    label_w, size_w = max(map(len, labels)), max(map(len, sizes))
    room = max(4, width - label_w - size_w - 4)
    top = max((r.bytes for r in runs), default=0) or 1
    lines = []
    for label, size, r in zip(labels, sizes, runs, strict=True):
        eighths = r.bytes * room * 8 // top
        bar = "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")
        line = Text(f"    {label:>{label_w}} ")
        line.append(f"{bar:<{room}}", style="green")
        line.append(f" {size:>{size_w}}")
        lines.append(line)
    return lines
