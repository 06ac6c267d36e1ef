"""print_table: numbers whole, only the last column folds, key/value records when a table cannot fit."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.render import counted, format_bytes, format_count, print_table

ID = "9887c2fb29a6e66df7039a0be00a90dd"
PATH = "/savepoints/" + "a-long-directory-name/" * 4 + "_metadata"


def _printed(table: Table, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, no_color=True, highlight=False)
    print_table(console, table)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text
    return text


def _table(*columns: str) -> Table:
    table = Table(title="operators")
    for name in columns:
        table.add_column(name, justify="right", no_wrap=name in ("rows", "bytes"))
    return table


def test_a_table_that_fits_is_a_table() -> None:
    table = _table("operator id", "rows", "bytes")
    table.add_row(ID, "1,088,000", "47,283,009")
    text = _printed(table, 80)
    assert "operator id ┃" in text and f"│ {ID} │ 1,088,000 │ 47,283,009 │" in text


def test_only_the_last_column_folds() -> None:
    table = _table("rows", "bytes", "path")
    table.add_row("1,088,000", "47,283,009", PATH)
    text = _printed(table, 60)
    assert "1,088,000" in text and "47,283,009" in text and "│" in text  # still a table
    pieces = [line.split("│")[3].strip() for line in text.splitlines() if line.startswith("│")]
    assert "".join(pieces) == PATH


def test_an_id_before_other_columns_does_not_fold_into_them() -> None:
    table = _table("operator id", "rows", "bytes")
    table.add_row(ID, "1,088,000", "47,283,009")
    text = _printed(table, 50)
    assert "│" not in text and text.startswith("operators\n")
    assert [line.split() for line in text.splitlines()[1:]] == [
        ["operator", "id", ID],
        ["rows", "1,088,000"],
        ["bytes", "47,283,009"],
    ]


def test_records_fold_a_value_wider_than_the_console() -> None:
    table = _table("path", "rows")
    table.add_row(PATH, "12")
    table.add_row("/short", "1,088,000")
    lines = _printed(table, 40).splitlines()
    assert lines[0] == "operators" and lines[1].startswith("path  /savepoints/")
    # The value column starts after "path" and two spaces; its folded lines join back into the path.
    assert "".join(line[6:].rstrip() for line in lines[1:]) == PATH + "12" + "/short1,088,000"
    assert [line[:4] for line in lines[1:] if line[:4].strip()] == ["path", "rows", "path", "rows"]


def test_a_title_wider_than_the_table_gets_the_whole_width() -> None:
    table = Table(title=f"generated {PATH} (seed 0)")
    table.add_column("rows", no_wrap=True)
    table.add_row("12")
    assert f"generated {PATH} (seed 0)\n" in _printed(table, 200)


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (0, "0 B"),
        (372, "372 B"),
        (1023, "1,023 B"),
        (1024, "1.0 KiB"),
        (58434, "57.1 KiB"),
        (1048524, "1,023.9 KiB"),
        (1048575, "1.0 MiB"),  # 1023.999 KiB rounds up: written in the next unit, never "1024.0 KiB"
        (5 * 2**30, "5.0 GiB"),
        (3 * 2**50, "3.0 PiB"),
        (2**60, "1,024.0 PiB"),
        (372.6, "373 B"),
        (None, "-"),
    ],
)
def test_format_bytes_writes_binary_units_with_one_decimal(n: float | None, shown: str) -> None:
    assert format_bytes(n) == shown


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (0, "0"),
        (999, "999"),
        (1_088_000, "1,088,000"),
        (7.0, "7"),
        (7.5, "7.5"),
        (1234567.25, "1,234,567.2"),
        (None, "-"),
    ],
)
def test_format_count_separates_thousands(n: float | None, shown: str) -> None:
    assert format_count(n) == shown


def test_counted_agrees_with_its_number() -> None:
    assert [counted(n, "operator") for n in (0, 1, 2, 1024)] == [
        "0 operators",
        "1 operator",
        "2 operators",
        "1,024 operators",
    ]
    assert counted(1, "key group") == "1 key group" and counted(3, "entry", "entries") == "3 entries"
