"""``kg inspect --key-groups`` draws the skew: terminal bars, a text table when piped, and ``--html FILE``.

The page is checked three ways: parsed (HTML by the standard library's parser, every SVG by an XML
parser) for what it must and must not contain; its bars against the core's numbers; and opened in a
real headless Chromium (Qt WebEngine, ``tests/cli/browser_screenshot.py``), whose screenshot must show
the charts' colours over the areas their bars cover, with no request leaving the page.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from keygroup_cli.assess.sizes import KeyGroupSizes, key_group_bins, key_group_sizes
from keygroup_cli.cli.key_groups_render import render_skew_charts
from keygroup_cli.cli.render import format_bytes
from keygroup_cli.cli.skew_html import (
    BAR_FILL,
    BAR_HEIGHT,
    CHART_WIDTH,
    LABEL_WIDTH,
    MAX_KEY_GROUP_BARS,
    SUBTASK_FILLS,
    VALUE_WIDTH,
)

Kg = Callable[..., Any]
SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
BROWSER = Path(__file__).with_name("browser_screenshot.py")
SVG = "{http://www.w3.org/2000/svg}"


def _sizes(uid: str) -> KeyGroupSizes:
    return next(op for op in key_group_sizes(SAVEPOINT).operators if op.uid == uid)


class _Page(HTMLParser):
    """Collect the tags, attributes and raw SVG elements of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)
        # Each <svg>…</svg> as written, for the XML parser.
        self.svgs = [
            ET.fromstring("<svg" + part.split("</svg>")[0] + "</svg>") for part in text.split("<svg")[1:]
        ]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from keygroup_cli.cli import run

    out = tmp_path_factory.mktemp("html") / "skew.html"
    with CliRunner().isolation() as (stdout, stderr, _):
        code = run(["inspect", str(SAVEPOINT), "--html", str(out), "--operator", "keyed-state"])
    assert code == 0, stderr.getvalue().decode()
    return out


def test_the_page_is_one_self_contained_file(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    parsed = _Page(text)
    tags = {tag for tag, _ in parsed.tags}
    assert {"html", "head", "style", "body", "section", "figure", "svg", "rect", "table"} <= tags
    # Nothing to fetch or run: no script, no external style sheet, image, frame or font.
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    for _tag, attrs in parsed.tags:
        assert not any(k.startswith("on") for k in attrs), attrs
        for name in ("src", "href"):
            assert attrs.get(name) is None, attrs
    assert "url(" not in text and "@import" not in text
    assert [a.get("xmlns") for t, a in parsed.tags if t == "svg"] == ["http://www.w3.org/2000/svg"] * 3
    assert page.stat().st_mode & 0o044, "the page is readable by others, as a report to share"


def test_the_charts_draw_the_cores_numbers(page: Path) -> None:
    sizes = _sizes("keyed-state")
    key_groups, current, suggested = _Page(page.read_text(encoding="utf-8")).svgs
    assert key_groups.get("class") == "chart key-groups"
    bars = key_groups.findall(f"{SVG}rect")
    bins = key_group_bins(sizes.bytes, MAX_KEY_GROUP_BARS)
    assert len(bars) == len(bins) == 128  # one column per key group
    assert [int(b.get("data-bytes", "")) for b in bars] == list(sizes.bytes)
    assert [b.get("fill") for b in bars] == [SUBTASK_FILLS[sizes.owners[kg] % 2] for kg in range(128)]
    tallest = max(float(b.get("height", "")) for b in bars)
    assert tallest == pytest.approx(160) and sizes.bytes[max(range(128), key=lambda k: sizes.bytes[k])] > 0
    for chart, p in ((current, sizes.parallelism), (suggested, sizes.suggested)):
        assert chart.get("data-parallelism") == str(p)
        rects = chart.findall(f"{SVG}rect")
        assert [int(r.get("data-bytes", "")) for r in rects] == list(sizes.subtask_bytes(p))
        assert [r.get("data-subtasks") for r in rects] == [f"{i}-{i}" for i in range(p)]
        texts = [t.text for t in chart.findall(f"{SVG}text")]
        assert [format_bytes(b) for b in sizes.subtask_bytes(p)] == texts[1::2]
    assert sizes.suggested != sizes.parallelism  # the fixture shows both charts


def test_the_page_renders_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    sizes = _sizes("keyed-state")
    shot = tmp_path / "skew.png"
    colours = [*SUBTASK_FILLS, BAR_FILL]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QT")}
    done = subprocess.run(
        [sys.executable, str(BROWSER), str(page), str(shot), "1000", "1600", *colours],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["loaded"] is True
    assert report["requests"] == []  # nothing fetched: the page is all there is
    assert shot.stat().st_size > 10_000, "a screenshot of the page was written"
    charts = report["charts"]
    assert [c["classes"] for c in charts] == [
        "chart key-groups",
        "chart subtasks current",
        "chart subtasks suggested",
    ]
    for chart in charts:
        # Laid out at the size the SVG asks for, inside the screenshot.
        assert chart["width"] == CHART_WIDTH and chart["y"] + chart["height"] <= 1600, chart
    blue, orange, green = (charts[0]["pixels"][c] for c in colours)
    # The key-group bars: each subtask's colour covers about the area of its bars (edges antialias).
    step = CHART_WIDTH / 128
    area = [0.0, 0.0]
    for kg, b in enumerate(sizes.bytes):
        area[sizes.owners[kg] % 2] += (step - 0.5) * b * 160 / max(sizes.bytes)
    assert blue == pytest.approx(area[0], rel=0.15) and orange == pytest.approx(area[1], rel=0.15)
    assert green == 0
    room = CHART_WIDTH - LABEL_WIDTH - VALUE_WIDTH
    for chart, p in zip(charts[1:], (sizes.parallelism, sizes.suggested), strict=True):
        loads = sizes.subtask_bytes(p)
        expected = sum(b * room / max(loads) for b in loads) * BAR_HEIGHT
        assert chart["pixels"][BAR_FILL] == pytest.approx(expected, rel=0.05), (p, chart)
        assert chart["pixels"][SUBTASK_FILLS[0]] == chart["pixels"][SUBTASK_FILLS[1]] == 0


def test_html_implies_key_groups_and_keeps_stdout(kg: Kg, tmp_path: Path) -> None:
    doc = kg("inspect", SAVEPOINT, "--html", tmp_path / "a.html", "--json").json()
    assert [op["uid"] for op in doc["operators"] if "key_group_sizes" in op] == ["keyed-state"] or any(
        "key_group_sizes" in op for op in doc["operators"]
    )
    text = kg("inspect", SAVEPOINT, "--html", tmp_path / "b.html").stdout
    assert text == kg("inspect", SAVEPOINT, "--key-groups").stdout
    first = (tmp_path / "a.html").read_bytes()
    assert first == (tmp_path / "b.html").read_bytes(), "the same input gives the same page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "b.html"]  # no temporary left


@pytest.mark.parametrize("where", ["missing-dir/skew.html", "file/skew.html"])
def test_an_unwritable_html_file_is_one_line_exit_2(kg: Kg, tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("x")
    result = kg("inspect", SAVEPOINT, "--html", tmp_path / where)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(
        f"kg: error: --html {tmp_path / where}"
    )


def _drawn(sizes: KeyGroupSizes, *, terminal: bool, table: str = "rich") -> str:
    from keygroup_cli.cli.render import ResultConsole

    console = ResultConsole(file=io.StringIO(), width=80, force_terminal=terminal, no_color=True)
    console.table_style = table
    render_skew_charts(console, sizes)
    return console.file.getvalue()  # type: ignore[attr-defined,no-any-return]


def test_a_terminal_gets_columns_and_bars() -> None:
    sizes = _sizes("keyed-state")
    lines = _drawn(sizes, terminal=True).splitlines()
    assert lines[0] == "    bytes per key group, coloured by subtask at p 3 (current):"
    columns = lines[1][4:]
    assert len(columns) == 74 and set(columns) <= set(" ▁▂▃▄▅▆▇█") and "█" in columns
    assert lines[2] == "    bytes per subtask at p 3 (current):"
    bars = lines[3:6]
    loads = sizes.subtask_bytes(3)
    for i, line in enumerate(bars):
        assert line.startswith(f"    {i} █") and line.endswith(format_bytes(loads[i]))
    widest = max(range(3), key=lambda i: loads[i])
    # The largest subtask fills the room: 80 columns less 6 of margin, the label, the size and 4 spaces.
    assert bars[widest].count("█") == 80 - 6 - len("0") - len(format_bytes(loads[widest])) - 4
    assert lines[6] == f"    bytes per subtask at p {sizes.suggested} (suggested):"
    assert len(lines) == 7 + sizes.suggested


def test_piped_or_plain_it_is_a_table_of_the_same_numbers() -> None:
    sizes = _sizes("keyed-state")
    for terminal, table in ((False, "rich"), (True, "plain"), (False, "tsv")):
        text = _drawn(sizes, terminal=terminal, table=table)
        assert not set("█▁▂▃▄▅▆▇") & set(text)
    tsv = _drawn(sizes, terminal=False, table="tsv").splitlines()
    assert tsv[0] == "subtask\tbytes at p 3 (current)\tbytes at p 2 (suggested)"
    now, then = sizes.subtask_bytes(3), sizes.subtask_bytes(2)
    assert tsv[1:] == [
        f"0\t{format_bytes(now[0])}\t{format_bytes(then[0])}",
        f"1\t{format_bytes(now[1])}\t{format_bytes(then[1])}",
        f"2\t{format_bytes(now[2])}\t",
    ]
