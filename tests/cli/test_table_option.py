"""``--table rich|plain|tsv`` (env ``KG_TABLE``): every table kg prints, boxed, aligned or tab-separated."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from keygroup_cli.cli.render import ResultConsole, print_table, table_lines

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "2.3"
SAVEPOINT = FLINK / "heap-files-p3-maxp10-long"
UIDS = FLINK / "uid-heap-canonical-p3"

Kg = Callable[..., Any]

RANGES_TSV = """\
subtask\tstart\tend\tkey groups
0\t0\t3\t4
1\t4\t6\t3
2\t7\t9\t3
hottest subtask carries 1.20x the mean number of key groups
"""

RANGES_PLAIN = """\
maxParallelism 10, parallelism 3
subtask  start  end  key groups
      0      0    3           4
      1      4    6           3
      2      7    9           3
hottest subtask carries 1.20x the mean number of key groups
"""

PLAN_TSV = """\
from\tto\tkey groups\truns
0\t0 (stays)\t3\t0-2
0\t1\t1\t3
1\t1 (stays)\t1\t4
1\t2\t2\t5-6
2\t2 (stays)\t1\t7
2\t3\t2\t8-9
5 of 10 key groups change subtask (50.0%); key groups per subtask skew (max/mean): 1.20 -> 1.20
"""

PLAN_PLAIN = """\
maxParallelism 10: parallelism 3 -> 4
from         to  key groups  runs
   0  0 (stays)           3  0-2
   0          1           1  3
   1  1 (stays)           1  4
   1          2           2  5-6
   2  2 (stays)           1  7
   2          3           2  8-9
5 of 10 key groups change subtask (50.0%); key groups per subtask skew (max/mean): 1.20 -> 1.20
"""

ADVISE_TSV = """\
parallelism\tmin\tmax\tskew (max/mean)\tverdict
2\t6\t6\t1.00\teven
3\t4\t4\t1.00\teven
4\t3\t3\t1.00\teven
5\t2\t3\t1.25\thottest subtask +25%
Even parallelisms in range: 2, 3, 4
"""

ADVISE_PLAIN = """\
maxParallelism 12: key groups per subtask
parallelism  min  max  skew (max/mean)  verdict
          2    6    6             1.00  even
          3    4    4             1.00  even
          4    3    3             1.00  even
          5    2    3             1.25  hottest subtask +25%
Even parallelisms in range: 2, 3, 4
"""

KEY_PLAIN = """\
string keys, maxParallelism 128
key         hash code  key group  subtask
a                  97         81        1
c d             96231        109        2
tab\\there  -986752764         87        2
"""

KEY_TSV = """\
key\thash_code\tkey_group\tsubtask
a\t97\t81\t1
c d\t96231\t109\t2
tab\\there\t-986752764\t87\t2
"""

INSPECT_TSV_HEAD = f"""\
Input\t{SAVEPOINT}
Format\tflink-savepoint (Savepoint, CANONICAL)
Checkpoint id\t1
Flink metadata version\t6
Operators\t10 operators, 5 with state
operator\tp\tmaxP\tkeyed\top state\tfiles\toperator id
op-state\t3\t10\t0 B\t4.2 KiB\t3\t5bcd88bb93ab9e5694f5fb26d5804aba
opstate-discard: Writer\t3\t10\t0 B\t0 B\t0\t2347f36ff1745eec91f8e8be61c232f0
sink-counter\t3\t10\t0 B\t0 B\t0\t0ee20ec6c83284b6772f8c80c1096c00
count-no-uid\t3\t10\t8.1 KiB\t0 B\t3\t9887c2fb29a6e66df7039a0be00a90dd
main-sink-ü / main sink 😀: Writer\t3\t10\t0 B\t0 B\t0\t3c8c56da7ea4ffa8396163f9e9abeb73
bcast-filter\t1\t10\t0 B\t0 B\t0\tca9e3d04bb515af7ab9002b1346bf49c
async-wait\t3\t10\t0 B\t1.3 KiB\t3\t0deda8214bb86ca899ac64bff9a17164
keyed-state\t3\t10\t61.5 KiB\t0 B\t3\t826c38023c4272520855c3219fef4f3f
kg-source / Source: kg-source\t1\t10\t0 B\t234 B\t1\td117407ec4c413854550d93f2eec0477
drop-filler\t1\t10\t0 B\t0 B\t0\t4ddb67c3e047329fe3765cfda82b75be

op-state (operator state)
"""

INSPECT_PLAIN_HEAD = """\
Operators
operator                         p  maxP    keyed  op state  files  operator id
keyed-string                     3    10  5.9 KiB       0 B      3  72109e4753cd9f8017460adae3d9ed0f
uid-source / Source: uid-source  1   128      0 B     265 B      1  41662e3ebed44e3b3f2d47c1a552a07b
long-drop                        3   128      0 B       0 B      0  03b8102c9c8fb643a1bf3e8ae9e4810d
keyed-long                       3   128  6.4 KiB       0 B      3  9ffc9079ae46c8da2062fcba248ae73c
string-drop                      3    10      0 B       0 B      0  d11edcd2fe7e1cba064c61c7c54d9b56
long-sink / Sink: long-sink      3   128      0 B       0 B      0  1905a51ba7fb880f2374cdb5df6e6f5e
string-sink / Sink: string-sink  3    10      0 B       0 B      0  fcea4a81665a134c5f0d810d541a59e9
"""

SUBTASKS_PLAIN = """\
subtask  key groups  non-empty    keyed  op state  rows
      0         0-3          4  2.2 KiB       0 B     -
      1         4-6          3  1.7 KiB       0 B     -
      2         7-9          3  2.0 KiB       0 B     -
"""

BOX = set("┏┓┗┛━┃│─┡┩╇┳┻┼└┘┌┐")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("ranges", "-m", "10", "-p", "3", "--table", "tsv"), RANGES_TSV),
        (("--table", "plain", "ranges", "-m", "10", "-p", "3"), RANGES_PLAIN),
        (("plan", "--from", "3", "--to", "4", "-m", "10", "--table", "tsv"), PLAN_TSV),
        (("plan", "--from", "3", "--to", "4", "-m", "10", "--table", "plain"), PLAN_PLAIN),
        (("advise", "-m", "12", "--min", "2", "--max", "5", "--table", "tsv"), ADVISE_TSV),
        (("advise", "-m", "12", "--min", "2", "--max", "5", "--table", "plain"), ADVISE_PLAIN),
        (("key", "a", "c d", "tab\there", "-m", "128", "-p", "3", "--table", "plain"), KEY_PLAIN),
        (("key", "a", "c d", "tab\there", "-m", "128", "-p", "3", "--table", "tsv"), KEY_TSV),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_tables_of_pure_math_commands(kg: Kg, args: tuple[str, ...], expected: str) -> None:
    result = kg(*args)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == expected
    assert result.stderr == ""


def test_key_tsv_is_the_same_for_two_keys_as_for_a_file_of_sixty(kg: Kg, tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"user-{i}\n" for i in range(60)))
    many = kg("key", "--keys-file", keys, "-m", "128", "-p", "3").stdout.splitlines()
    two = kg("key", "user-0", "user-1", "-m", "128", "-p", "3", "--table", "tsv").stdout.splitlines()
    assert two == many[:3]
    plain = kg("key", "--keys-file", keys, "-m", "128", "-p", "3", "--table", "plain").stdout.splitlines()
    assert len(plain) == 62 and plain[1].split() == ["key", "hash", "code", "key", "group", "subtask"]
    assert [line.split() for line in plain[2:]] == [line.split("\t") for line in many[1:]]


def test_inspect_tsv(kg: Kg) -> None:
    result = kg("inspect", SAVEPOINT, "--table", "tsv")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(INSPECT_TSV_HEAD)
    assert not BOX & set(result.stdout)


def test_inspect_plain_puts_uid_and_name_on_one_line(kg: Kg) -> None:
    result = kg("inspect", UIDS, "--subtasks", "--table", "plain")
    assert result.exit_code == 0, result.stderr
    head = result.stdout.split("\n\n")[0]
    grid, table = head.split("\nOperators\n")
    assert grid.splitlines()[1] == "Format                  flink-savepoint (Savepoint, CANONICAL)"
    assert "Operators\n" + table + "\n" == INSPECT_PLAIN_HEAD
    assert SUBTASKS_PLAIN in result.stdout
    assert not BOX & set(result.stdout)


def test_check_lists_findings_as_a_table(kg: Kg) -> None:
    args = ("check", UIDS, "-p", "4", "-m", "128")
    findings = kg(*args, "--json").json()["findings"]
    tsv = kg(*args, "--table", "tsv")
    assert tsv.exit_code == 1
    lines = tsv.stdout.splitlines()
    assert lines[0] == "severity\tcode\tsubject\tmessage"
    rows = [line.split("\t") for line in lines[1:-1]]
    assert rows == [[f["severity"], f["code"], f["subject"], f["message"]] for f in findings]
    assert [r[:3] for r in rows] == [
        ["error", "MAX_PARALLELISM_MISMATCH", "keyed-string"],
        ["error", "MAX_PARALLELISM_MISMATCH", "string-drop"],
        ["error", "MAX_PARALLELISM_MISMATCH", "string-sink"],
    ]
    assert lines[-1] == "FAILED: 7 operators, 3 with state checked at parallelism 4; 3 errors, 0 warnings"
    plain = kg(*args, "--table", "plain").stdout.splitlines()
    assert plain[0].split() == ["severity", "code", "subject", "message"]
    assert plain[1].startswith("error     MAX_PARALLELISM_MISMATCH  keyed-string  ")
    assert plain[-1] == lines[-1]


def test_check_without_findings_prints_the_header(kg: Kg, tmp_path: Path) -> None:
    operators = kg("inspect", UIDS, "--json").json()["operators"]
    (tmp_path / "uids.txt").write_text("".join(f"{op['uid'] or op['operator_id']}\n" for op in operators))
    result = kg("check", UIDS, "-p", "3", "--job-uids", tmp_path / "uids.txt", "--table", "tsv")
    assert result.exit_code == 0, result.stdout
    assert result.stdout == (
        "severity\tcode\tsubject\tmessage\nOK: 7 operators, 3 with state checked at parallelism 3; 0 errors, "
        "0 warnings\n"
    )


def test_rich_stays_the_default_off_a_terminal(kg: Kg) -> None:
    result = kg("ranges", "-m", "10", "-p", "3")
    assert "┃ subtask ┃" in result.stdout
    assert kg("--table", "rich", "ranges", "-m", "10", "-p", "3").stdout == result.stdout


def test_kg_table_sets_the_default_and_the_command_line_wins(kg: Kg, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_TABLE", "tsv")
    assert kg("ranges", "-m", "10", "-p", "3").stdout == RANGES_TSV
    # A root --table is not undone by KG_TABLE read again for the command-level option.
    assert kg("--table", "plain", "ranges", "-m", "10", "-p", "3").stdout == RANGES_PLAIN
    assert kg("--table", "rich", "ranges", "-m", "10", "-p", "3", "--table", "plain").stdout == RANGES_PLAIN


def test_json_is_unaffected(kg: Kg) -> None:
    plain = kg("ranges", "-m", "10", "-p", "3", "--json")
    for style in ("plain", "tsv"):
        assert kg("--table", style, "ranges", "-m", "10", "-p", "3", "--json").stdout == plain.stdout
    keys = kg("key", "a", "b", "-m", "128", "--json", "--table", "tsv")
    assert keys.json()["keys"][0] == {"key": "a", "hash_code": 97, "key_group": 81}


def test_an_unknown_style_is_a_usage_error(kg: Kg, monkeypatch: pytest.MonkeyPatch) -> None:
    result = kg("ranges", "-m", "10", "-p", "3", "--table", "csv")
    assert result.exit_code == 2 and result.stdout == ""
    assert "Invalid value for '--table'" in result.stderr
    assert "'csv' is not one of 'rich', 'plain', 'tsv'." in result.stderr
    monkeypatch.setenv("KG_TABLE", "csv")
    assert kg("ranges", "-m", "10", "-p", "3").exit_code == 2


def test_every_command_that_prints_a_table_accepts_the_option(kg: Kg) -> None:
    for command in ("advise", "check", "diff", "doctor", "generate", "inspect", "key", "plan", "ranges"):
        assert "--table [rich|plain|tsv]" in kg(command, "--help").stdout, command


# -- render: table_lines and print_table ---------------------------------------------------------------


def _printed(style: str, table: Table, indent: int = 0) -> str:
    console = ResultConsole(file=io.StringIO(), width=20, no_color=True)
    console.table_style = style
    print_table(console, table, indent=indent)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _table() -> Table:
    table = Table(title="a [bold]title[/bold]")
    table.add_column("name")
    table.add_column("rows", justify="right")
    table.add_row("[italic]x[/italic]", "1,088,000")
    table.add_row("line\nbreak", "7")
    return table


def test_plain_and_tsv_strip_markup_and_escape_line_breaks_whatever_the_width() -> None:
    assert _printed("tsv", _table()) == "name\trows\nx\t1,088,000\nline\\nbreak\t7\n"
    assert _printed("plain", _table(), indent=2) == (
        "  a title\n  name              rows\n  x            1,088,000\n  line\\nbreak          7\n"
    )


def test_a_grid_has_no_header_line() -> None:
    grid = Table.grid()
    grid.add_column()
    grid.add_column()
    grid.add_row("[bold]Path[/bold]", "a\tb")
    assert _printed("tsv", grid) == "Path\ta\\tb\n"


def test_table_lines_align_wide_characters_by_cells() -> None:
    lines = table_lines("plain", ["k", "n"], [["😀", "1"], ["ab", "22"]], ["left", "right"])
    assert lines == ["k    n", "😀   1", "ab  22"]


def test_a_console_that_is_not_kgs_prints_rich_tables() -> None:
    console = Console(file=io.StringIO(), width=40, no_color=True)
    print_table(console, _table())
    assert "┃ name" in console.file.getvalue()  # type: ignore[attr-defined]


def test_plan_snapshot_tsv_names_the_operator_above_its_move_table(kg: Kg) -> None:
    # A tab-separated table has no title: each operator's heading is a line of its own above its rows,
    # as plain prints it (there as the table's title).
    tsv = kg("plan", UIDS, "--to", "4", "--table", "tsv", "--subtasks")
    assert tsv.exit_code == 0, tsv.stderr
    lines = tsv.stdout.splitlines()
    headings = [lines[i - 1] for i, line in enumerate(lines) if line.startswith("from\tto\tkey groups")]
    assert headings == [
        "keyed-string: parallelism 3 -> 4, maxParallelism 10 (key groups move between subtasks)",
        "keyed-long: parallelism 3 -> 4, maxParallelism 128 (key groups move between subtasks)",
    ]
    plain = kg("plan", UIDS, "--to", "4", "--table", "plain", "--subtasks").stdout.splitlines()
    assert [plain[plain.index(h) + 1].split()[:3] for h in headings] == [["from", "to", "key"]] * 2
