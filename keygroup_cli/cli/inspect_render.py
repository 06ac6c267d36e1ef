"""``kg inspect``'s text: the snapshot, a table of its operators, and each stateful operator's states."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from keygroup_cli.assess.summary import (
    InputSummary,
    OperatorSummary,
    count_operators,
    key_group_histogram,
)
from keygroup_cli.cli.key_groups_render import render_key_group_sizes
from keygroup_cli.cli.render import (
    counted,
    format_bytes,
    format_count,
    operators_counted,
    print_grid,
    print_table,
    short_ids,
    shorten_ids,
    table_style,
)
from keygroup_cli.flink import ROW_DATA_SERIALIZER_SNAPSHOT, RowFields

if TYPE_CHECKING:
    from keygroup_cli.assess.sizes import KeyGroupSizes
    from keygroup_cli.flink import KafkaSinkState, KafkaSourceState


def print_summary(
    console: Console,
    summary: InputSummary,
    subtasks: bool,
    sizes: dict[str, KeyGroupSizes],
    kafka: list[KafkaSourceState | KafkaSinkState],
    typed: str | None = None,
) -> None:
    """Print what ``kg inspect`` shows: the snapshot, its operators, each stateful one's states and sizes.

    ``typed`` is the input as the user typed it (the path that was read by default).
    """
    _print_header(console, summary, typed)
    # Ids as git shortens hashes: a prefix of at least 7 hex characters unique in the input (--json: whole).
    # Plain and tab-separated tables, for scripts, keep them whole.
    short = short_ids(op.operator_id for op in summary.operators) if table_style(console) == "rich" else {}
    _print_operators(console, summary, short)
    for op in summary.operators:
        if not op.has_state:
            continue
        _operator_text(console, op, subtasks, short)
        if op.operator_id in sizes:
            render_key_group_sizes(console, sizes[op.operator_id])
    if kafka:
        from keygroup_cli.cli.connectors_render import print_connectors

        print_connectors(console, kafka, {op.operator_id: op.name for op in summary.operators})


def _print_header(console: Console, summary: InputSummary, typed: str | None) -> None:
    """Print the input, its format, checkpoint id, metadata version and operators counted."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    kind = ", ".join(x for x in (summary.snapshot_type, summary.format_type) if x)
    rows = [
        ("Input", str(summary.path) if typed is None else typed),
        ("Format", summary.format + (f" ({kind})" if kind else "")),
    ]
    rows.append(("Checkpoint id", str(summary.checkpoint_id)))
    if summary.metadata_version is not None:
        rows.append(("Flink metadata version", str(summary.metadata_version)))
    total, with_state = count_operators(summary.operators, lambda op: op.has_state)
    rows.append(("Operators", operators_counted(total, with_state)))
    for key, value in rows:
        grid.add_row(f"[bold]{key}[/bold]", value)
    print_grid(console, grid)


def _print_operators(console: Console, summary: InputSummary, short: dict[str, str]) -> None:
    """Print the table of every operator: its label (and name beneath), sizes and (shortened) id."""
    table = Table(title="Operators")
    # One "operator" column (uid, and the name beneath when it differs), and the id last, where it may fold,
    # keep the table within 80 columns.
    table.add_column("operator")
    for name in ("p", "maxP", "keyed", "op state", "files"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("operator id")
    # Plain and tab-separated rows are one line each: "uid / name" there.
    beneath = "\n  " if table_style(console) == "rich" else " / "
    for op in summary.operators:
        label = shorten_ids(op.label, short)
        if op.uid and op.name and op.name != op.uid:
            label += f"{beneath}{op.name}"
        table.add_row(
            label,
            str(op.parallelism),
            str(op.max_parallelism),
            format_bytes(op.keyed_bytes),
            format_bytes(op.operator_state_bytes),
            format_count(op.files),
            short.get(op.operator_id, op.operator_id),
        )
    print_table(console, table)


def _operator_text(console: Console, op: OperatorSummary, subtasks: bool, short: dict[str, str]) -> None:
    key = f", key {op.key_serializer}" if op.key_serializer else ""
    snapshot = op.key_serializer_snapshot
    if snapshot is not None and snapshot.class_name == ROW_DATA_SERIALIZER_SNAPSHOT:
        # A SQL job's key: its fields' SQL types say what to give kg get --key.
        key = f", SQL key {RowFields.of(snapshot).type_name}"
    operator_id = short.get(op.operator_id, op.operator_id)
    title = op.label if op.uid else shorten_ids(op.label, short)
    if not op.uid and op.label != op.operator_id:
        title += f" [{operator_id}]"
    kind = op.handle_kind or ("keyed state" if op.keyed_bytes else "operator state")
    if op.has_channel_state and not (op.handle_kind or op.keyed_bytes or op.operator_state_bytes):
        kind = "channel state"
    console.print(f"\n{title} ({kind}{key})", markup=False, style="bold")
    if op.has_channel_state:
        inputs, outputs = format_bytes(op.input_channel_bytes), format_bytes(op.result_subpartition_bytes)
        console.print(
            f"  in-flight data (unaligned checkpoint): input channels {inputs}, result subpartitions "
            f"{outputs} ({counted(op.channel_state_handles, 'handle')})",
            markup=False,
        )
    if op.states is None:
        console.print("  states: not read")
    for s in op.states or ():
        extra = f" ({counted(s.elements, 'element')})" if s.elements is not None else ""
        unknown = " (unknown serializer)" if not s.known_serializer else ""
        console.print(f"  {s.name}: {s.kind}{extra} {s.serializer or ''}{unknown}".rstrip(), markup=False)
    histogram = key_group_histogram(op)
    if histogram is not None:
        hot = ", ".join(f"{kg} ({format_count(rows)})" for kg, rows in histogram.hottest)
        console.print(
            f"  rows per key group: min {format_count(histogram.min_rows)}, median "
            f"{format_count(histogram.median_rows)}, max {format_count(histogram.max_rows)}; "
            f"hottest: {hot or '-'}"
        )
    if subtasks:
        table = Table(box=None, padding=(0, 1))
        for name in ("subtask", "key groups", "non-empty", "keyed", "op state", "rows"):
            table.add_column(name, justify="right", no_wrap=True)
        for t in op.subtasks:
            groups = "-" if t.key_group_start is None else f"{t.key_group_start}-{t.key_group_end}"
            table.add_row(
                str(t.subtask),
                groups,
                format_count(t.non_empty_key_groups),
                format_bytes(t.keyed_bytes),
                format_bytes(t.operator_state_bytes),
                format_count(t.rows),
            )
        print_table(console, table)
