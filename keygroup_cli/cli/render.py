"""Text (rich) and JSON rendering, on the right stream.

Results go to stdout; progress, warnings and errors go to stderr. Under ``--json`` stdout carries exactly
one JSON document: ``{"schema_version": 3, "command": ..., ...result}`` or, on failure,
``{"schema_version": 3, "command": ..., "error": {"code": ..., "message": ...}}``.

Numbers are written one way everywhere: counts (rows, files, key groups, operators) by
:func:`format_count`, with thousands separators; sizes by :func:`format_bytes`, in binary units (``372 B``,
``57.1 KiB``, ``1.2 GiB``). Settings and indexes a user types back (parallelism, maxParallelism, a key
group, a subtask, a checkpoint id) are written bare, so they can be pasted into an option.

Every table a command prints goes through :func:`print_table`, which honours ``--table``: ``rich`` (boxes,
the default), ``plain`` (aligned columns, spaces only) or ``tsv`` (a header line and tab-separated rows).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import click
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.errors import MarkupError
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

C = TypeVar("C", bound=Console)

#: Version of the JSON documents kg prints; bumped only with a **Breaking:** changelog entry.
SCHEMA_VERSION = 3

#: Width of output that is not a terminal (a file, a pipe) when COLUMNS is unset: lines are never wrapped,
#: so ``grep``/``cut`` see every path and number whole. Rich would otherwise assume 80 columns.
PIPE_WIDTH = 100_000

#: Narrowest a table's last column may fold to (ids, paths) before the table switches to key/value records.
FOLD_FLOOR = 16

#: How tables are printed (``--table``): rich boxes, aligned columns with spaces, or tab-separated values.
TABLE_STYLES = ("rich", "plain", "tsv")

#: Characters a plain or tab-separated cell writes escaped, so that a row is always one line (as ``kg key``).
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})

#: Between two columns of a plain table.
_PLAIN_GAP = "  "


#: Units of :func:`format_bytes`: powers of 1024, as ``ls -h`` and Flink's web UI count.
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_count(n: float | None) -> str:
    """Return a count with thousands separators (``1,088,000``); a fractional one (a median) to 0.1.

    ``None`` (unknown, e.g. rows of keyed state that was not decoded) is ``-``.
    """
    if n is None:
        return "-"
    if isinstance(n, int) or float(n).is_integer():
        return f"{int(n):,}"
    return f"{n:,.1f}"


def format_bytes(n: float | None) -> str:
    """Return a size in bytes as ``372 B``, ``57.1 KiB``, ``3.4 MiB`` … ``PiB`` (one decimal above bytes).

    A value that would round to 1024.0 of a unit is written in the next one (``1.0 MiB``, never
    ``1024.0 KiB``). ``None`` (unknown) is ``-``.
    """
    if n is None:
        return "-"
    if abs(n) < 1024:
        return f"{n:,.0f} B"
    value = n / 1024
    for unit in _BYTE_UNITS[1:-1]:
        if abs(round(value, 1)) < 1024:
            return f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} {_BYTE_UNITS[-1]}"


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """Return ``n`` and the noun that agrees with it: ``1 operator``, ``1,024 operators``."""
    return f"{format_count(n)} {singular if n == 1 else (plural or singular + 's')}"


def operators_counted(operators: int, with_state: int) -> str:
    """Return how every command counts operators in its text: ``10 operators, 5 with state``.

    JSON says the same as ``operators`` and ``operators_with_state`` (``assess.summary.count_operators``).
    """
    return f"{counted(operators, 'operator')}, {format_count(with_state)} with state"


def operator_document(uid: str | None, name: str | None, operator_id: str) -> dict[str, Any]:
    """Return the ``operator`` object of every JSON document: ``{"uid", "name", "operator_id"}``.

    The entries of an ``operators`` list start with the same three fields.
    """
    return {"uid": uid, "name": name, "operator_id": operator_id}


#: A Flink operator id (or any 32-hex id) as text shows it: :func:`shorten_ids` abbreviates it.
HEX_ID = re.compile(r"(?<![0-9a-fA-F])[0-9a-fA-F]{32}(?![0-9a-fA-F])")

#: Fewest hex characters of a shortened id, as ``git`` abbreviates a hash.
SHORT_ID = 7


def short_ids(ids: Iterable[str]) -> dict[str, str]:
    """Return each 32-hex id's shortest prefix of one common length (at least 7) unique among ``ids``.

    As ``git`` abbreviates hashes: text output shows the prefix, ``--json`` the full id.
    """
    unique = sorted({i for i in ids if HEX_ID.fullmatch(i)})
    length = SHORT_ID
    while length < 32 and len({i[:length] for i in unique}) < len(unique):
        length += 1
    return {i: i[:length] for i in unique}


def shorten_ids(text: str, ids: Iterable[str] = ()) -> str:
    """Return ``text`` with every 32-hex id in it shortened (:func:`short_ids` over ``ids`` and its own)."""
    found = HEX_ID.findall(text)
    if not found:
        return text
    short = short_ids([*ids, *found])
    return HEX_ID.sub(lambda m: short[m[0]], text)


class ResultConsole(Console):
    """The stdout console: a rich ``Console`` that also knows how tables are to be printed (``--table``)."""

    table_style = "rich"


class Output:
    """Where and how a command's result, warnings and errors are written."""

    def __init__(
        self,
        *,
        json: bool = False,
        quiet: bool = False,
        debug: bool = False,
        no_color: bool = False,
        table: str = "rich",
    ):
        self.json = json
        self.quiet = quiet
        self.debug = debug
        self.no_color = no_color or "NO_COLOR" in os.environ
        self.table = table
        self._stdout: ResultConsole | None = None
        self._stderr: Console | None = None

    @property
    def stdout(self) -> Console:
        """Return the rich console on stdout (results); its tables are printed as ``--table`` says."""
        if self._stdout is None:
            self._stdout = self._console(sys.stdout, ResultConsole)
        # A command-level --table may be parsed after the console exists.
        self._stdout.table_style = self.table
        return self._stdout

    @property
    def stderr(self) -> Console:
        """Return the rich console on stderr (progress, warnings, errors)."""
        if self._stderr is None:
            self._stderr = self._console(sys.stderr, Console)
        return self._stderr

    def _console(self, stream: Any, kind: type[C]) -> C:
        width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
        if width is None and not _isatty(stream):
            width = PIPE_WIDTH
        return kind(
            file=stream,
            no_color=self.no_color,
            highlight=False,
            soft_wrap=False,
            width=width,
            emoji=False,
        )

    @property
    def progress_enabled(self) -> bool:
        """Return whether progress bars may be drawn (stderr is a terminal, not quiet, not JSON)."""
        return not (self.quiet or self.json) and sys.stderr.isatty()

    def result(self, command: str, document: Mapping[str, Any], text: Callable[[Console], None]) -> None:
        """Emit a command's result: the JSON document under ``--json``, else ``text(stdout_console)``."""
        if self.json:
            self.emit_json({"schema_version": SCHEMA_VERSION, "command": command, **document})
        else:
            text(self.stdout)

    def emit_json(self, document: Mapping[str, Any]) -> None:
        """Write one JSON document to stdout."""
        sys.stdout.write(json.dumps(document, ensure_ascii=False, allow_nan=False))
        sys.stdout.write("\n")
        sys.stdout.flush()

    def warn(self, message: str, *, even_quiet: bool = False) -> None:
        """Write a one-line warning to stderr unless quiet.

        ``even_quiet``: also under ``-q``, for a warning about what is (or would be) written that the
        options given do not say (a rescale that also moves operators not at the common parallelism).
        """
        if even_quiet or not self.quiet:
            # One line whatever the terminal width, like errors: a pipe or a log keeps it whole.
            self.stderr.print(f"kg: warning: {message}", markup=False, highlight=False, soft_wrap=True)

    def failure(self, code: str, message: str, *, command: str | None) -> None:
        """Report a failure: one line on stderr, and the JSON error document under ``--json``."""
        # A library's exception text can hold line breaks (pyarrow's thrift errors do): one line, always.
        message = " ".join(message.split())
        sys.stderr.write(f"kg: error: {message}\n")
        sys.stderr.flush()
        if self.json:
            self.emit_json(
                {
                    "schema_version": SCHEMA_VERSION,
                    "command": command,
                    "error": {"code": code, "message": message},
                }
            )


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def table_style(console: Console) -> str:
    """Return how ``console`` prints tables: ``rich``, ``plain`` or ``tsv`` (``--table``; rich elsewhere)."""
    return console.table_style if isinstance(console, ResultConsole) else "rich"


def print_table(console: Console, table: Table, indent: int = 0) -> None:
    """Print ``table`` as ``--table`` says, never cutting a cell.

    Under ``plain`` and ``tsv`` the table is :func:`table_lines` of its cells. Under ``rich`` columns with
    ``no_wrap`` (numbers) are never narrowed; other columns wrap between words, and only the last one may
    fold a word (an id, a path) over lines, never narrower than :data:`FOLD_FLOOR`. When the table cannot
    fit so, its rows are printed one ``header  value`` line per cell instead, the value folding. No cell
    ever ends in "…". A title wider than the table is printed above it, so it wraps at the console's width.
    ``indent`` shifts the layout right (not under ``tsv``).
    """
    style = table_style(console)
    if style != "rich":
        columns = table.columns
        headers = [_plain_text(console, c.header) for c in columns] if table.show_header else None
        cells = [[_plain_text(console, cell) for cell in column.cells] for column in columns]
        rows = [list(row) for row in zip(*cells, strict=True)]
        title = None if table.title is None else _plain_text(console, table.title)
        lines = table_lines(style, headers, rows, [c.justify for c in columns], title=title, indent=indent)
        write_lines(console, lines)
        return
    available = console.width - indent
    fits = _narrow_to(console, table, available)
    shown = table if fits else vertical(table)
    if fits and isinstance(table.title, str):
        width = min(Measurement.get(console, console.options, table).maximum, available)
        if cell_len(table.title) > width:
            # Rich wraps a title within the table's width; a long one (a path) gets the console's instead.
            console.print(Text(table.title, style="italic"))
            table.title = None
    console.print(Padding(shown, (0, 0, 0, indent), expand=False) if indent else shown)


def print_grid(console: Console, grid: Table) -> None:
    """Print a key/value ``Table.grid``: as rich lays it out, or as header-less rows under plain and tsv."""
    if table_style(console) == "rich":
        console.print(grid)
    else:
        print_table(console, grid)


def table_lines(
    style: str,
    headers: list[str] | None,
    rows: list[list[str]],
    justify: list[str],
    *,
    title: str | None = None,
    indent: int = 0,
) -> list[str]:
    r"""Return the lines of a ``plain`` or ``tsv`` table (``headers`` None: no header line, as a grid).

    ``tsv``: the header line and one line per row, cells joined by tabs; no title, padding or indent.
    ``plain``: the title (if any), then every column padded to its widest cell with spaces, right-aligned
    where ``justify`` says so, two spaces between columns, no trailing spaces. In both a cell's backslash,
    tab and line breaks are written ``\\``, ``\t``, ``\n``, ``\r``, so every row is one line.
    """
    table = [[cell.translate(_ESCAPES) for cell in row] for row in ([headers] if headers else []) + rows]
    if style == "tsv":
        return ["\t".join(row) for row in table]
    widths = [max((cell_len(row[i]) for row in table), default=0) for i in range(len(justify))]
    margin = " " * indent
    lines = [margin + title] if title else []
    for row in table:
        padded = [_pad(cell, width, how) for cell, width, how in zip(row, widths, justify, strict=True)]
        lines.append((margin + _PLAIN_GAP.join(padded)).rstrip())
    return lines


def _pad(cell: str, width: int, justify: str) -> str:
    gap = width - cell_len(cell)
    if justify == "right":
        return " " * gap + cell
    if justify == "center":
        return " " * (gap // 2) + cell + " " * (gap - gap // 2)
    return cell + " " * gap


def write_lines(console: Console, lines: list[str]) -> None:
    """Write ``lines`` to ``console``'s stream as they are: rich would expand tabs and wrap long lines."""
    if lines:
        console.file.write("\n".join(lines) + "\n")
        console.file.flush()


def _plain_text(console: Console, cell: object) -> str:
    """Return the text a table cell shows, without markup or styles (a ``str`` cell is markup, as in rich)."""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        try:
            return console.render_str(cell).plain
        except MarkupError:
            return cell
    return "" if cell is None else str(cell)


def vertical(table: Table) -> RenderableType:
    """Return ``table``'s rows as key/value records (header, then value; empty cells left out)."""
    records = Table.grid(padding=(0, 2))
    records.add_column(overflow="fold", style="bold")
    records.add_column(overflow="fold")
    cells = [list(column.cells) for column in table.columns]
    for row in range(table.row_count):
        if row:
            records.add_row("", "")
        for column, column_cells in zip(table.columns, cells, strict=True):
            value = column_cells[row]
            if value != "":
                records.add_row(column.header, value)
    if not table.title:
        return records
    title = Text(table.title, style="italic") if isinstance(table.title, str) else table.title
    return Group(title, records)


def _narrow_to(console: Console, table: Table, width: int) -> bool:
    """Cap the wrapping columns' widths so that ``table`` fits ``width`` whole; False when it cannot.

    Rich would narrow the widest columns first, folding an id while a name beside it could still wrap
    between words; here the columns before the last give up their slack first, then the last one folds.
    """
    options = console.options.update_width(PIPE_WIDTH)
    widest: list[int] = []
    least: list[int] = []
    last = len(table.columns) - 1
    for index, column in enumerate(table.columns):
        cells = [column.header, *column.cells] if table.show_header else list(column.cells)
        sizes = [Measurement.get(console, options, cell) for cell in cells] or [Measurement(0, 0)]
        widest.append(max(m.maximum for m in sizes))
        longest_word = max(m.minimum for m in sizes)
        if column.no_wrap:
            least.append(widest[-1])
        else:
            column.overflow = "fold"
            # Before the last column a folded word would interleave with the rest of its row.
            least.append(longest_word if index < last else min(longest_word, FOLD_FLOOR))
    # Padding and borders: what the table measures beyond its cells at full width.
    overhead = Measurement.get(console, options, table).maximum - sum(widest)
    excess = sum(widest) + overhead - width
    if sum(least) + overhead > width:
        return False
    for index, column in enumerate(table.columns):
        take = min(excess, widest[index] - least[index])
        if take > 0:
            column.max_width = widest[index] - take
            excess -= take
    return True


def output_for(ctx: click.Context) -> Output:
    """Return the Output the root group stored, honouring a command-level ``--json``."""
    out = ctx.find_object(Output)
    if out is None:
        out = Output()
        ctx.obj = out
    return out
