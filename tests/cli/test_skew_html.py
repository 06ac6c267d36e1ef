"""``kg inspect --key-groups`` draws the skew: terminal bars, a text table when piped, and ``--html FILE``.

The page is checked three ways: parsed (HTML by the standard library's parser, every SVG by an XML
parser) for what it must and must not contain; its bars against the core's numbers; and opened in a
real headless Chromium (Qt WebEngine, ``tests/cli/browser_screenshot.py``), whose screenshot must show
what a person reads: one colour per subtask over the area of its key groups and in the legend, subtask
bars whose drawn lengths are in proportion to their bytes across both parallelisms (one scale), axes
with byte units, operators headed by uid or name, and no request leaving the page.
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

from keygroup_cli.assess.sizes import KeyGroupSizes, key_group_bins, key_group_sizes
from keygroup_cli.cli.key_groups_render import render_skew_charts
from keygroup_cli.cli.render import format_bytes
from keygroup_cli.cli.skew_html import (
    BAR_HEIGHT,
    CHART_WIDTH,
    KEY_GROUP_HEIGHT,
    LABEL_WIDTH,
    MAX_KEY_GROUP_BARS,
    SUBTASK_FILLS,
    VALUE_WIDTH,
    byte_axis,
    skew_page,
    subtask_fill,
)
from tests.conftest import FIXTURES

Kg = Callable[..., Any]
SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
BROWSER = Path(__file__).with_name("browser_screenshot.py")
SVG = "{http://www.w3.org/2000/svg}"


def _sizes(uid: str) -> KeyGroupSizes:
    return next(op for op in key_group_sizes(SAVEPOINT).operators if op.label == uid)


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


def _written(tmp_path_factory: pytest.TempPathFactory, *operators: str) -> tuple[Path, str]:
    from click.testing import CliRunner

    from keygroup_cli.cli import run

    out = tmp_path_factory.mktemp("html") / "skew.html"
    chosen = [arg for uid in operators for arg in ("--operator", uid)]
    with CliRunner().isolation() as (_stdout, stderr, _):
        code = run(["inspect", str(SAVEPOINT), "--html", str(out), *chosen])
    assert code == 0, stderr.getvalue().decode()
    return out, stderr.getvalue().decode()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, stderr = _written(tmp_path_factory, "keyed-state")
    # The one line that names the file written, in the verb kg uses for written output.
    assert stderr == f"kg: wrote {out} (key-group skew of 1 keyed operator)\n"
    return out


@pytest.fixture(scope="module")
def full_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, stderr = _written(tmp_path_factory)
    assert stderr == f"kg: wrote {out} (key-group skew of 2 keyed operators)\n"
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


def _values(chart: ET.Element, kind: str) -> list[str]:
    """Return the text of ``chart``'s ``<text>`` elements with every class of ``kind`` (``"tick y"``)."""
    wanted = set(kind.split())
    return [
        t.text or "" for t in chart.findall(f"{SVG}text") if wanted <= set((t.get("class") or "").split())
    ]


def test_the_charts_draw_the_cores_numbers(page: Path) -> None:
    sizes = _sizes("keyed-state")
    key_groups, current, suggested = _Page(page.read_text(encoding="utf-8")).svgs
    assert key_groups.get("class") == "chart key-groups"
    bars = key_groups.findall(f"{SVG}rect")
    bins = key_group_bins(sizes.bytes, MAX_KEY_GROUP_BARS)
    assert len(bars) == len(bins) == 128  # one column per key group
    assert [int(b.get("data-bytes", "")) for b in bars] == list(sizes.bytes)
    # One colour per subtask: each key group in its owner's colour, and the 3 owners' colours differ.
    assert [b.get("fill") for b in bars] == [subtask_fill(sizes.owners[kg]) for kg in range(128)]
    assert len({subtask_fill(i) for i in range(3)}) == 3
    # The bars stand on a y-axis in bytes whose top tick is the chart's scale (>= the tallest bar).
    scale = int(key_groups.get("data-scale", ""))
    assert scale >= max(sizes.bytes) and (scale, _values(key_groups, "tick y")[-1]) == (2048, "2 KiB")
    for bar in bars:
        assert float(bar.get("height", "")) == pytest.approx(
            int(bar.get("data-bytes", "")) * KEY_GROUP_HEIGHT / scale, abs=0.01
        )
    assert _values(key_groups, "tick x")[0] == "0" and _values(key_groups, "tick x")[-1] == "127"
    assert {"key group", "bytes per key group"} <= {t.text for t in key_groups.findall(f"{SVG}text")}
    # Both subtask charts on one scale: the larger maximum sets it, so 20.7 KiB is drawn shorter than 30.5.
    assert current.get("data-scale") == suggested.get("data-scale") == str(byte_axis(31232)[0]) == "40960"
    room = CHART_WIDTH - LABEL_WIDTH - VALUE_WIDTH
    for chart, p in ((current, sizes.parallelism), (suggested, sizes.suggested)):
        assert chart.get("data-parallelism") == str(p)
        rects = chart.findall(f"{SVG}rect")
        assert [int(r.get("data-bytes", "")) for r in rects] == list(sizes.subtask_bytes(p))
        assert [r.get("data-subtasks") for r in rects] == [f"{i}-{i}" for i in range(p)]
        assert [r.get("fill") for r in rects] == [subtask_fill(i) for i in range(p)]
        widths = [float(r.get("width", "")) for r in rects]
        assert widths == [pytest.approx(b * room / 40960, abs=0.01) for b in sizes.subtask_bytes(p)]
        assert _values(chart, "value") == [format_bytes(b) for b in sizes.subtask_bytes(p)]
        assert _values(chart, "tick x") == ["0", "10 KiB", "20 KiB", "30 KiB", "40 KiB"]
        assert "bytes per subtask" in {t.text for t in chart.findall(f"{SVG}text")}
    assert (sizes.parallelism, sizes.suggested) == (3, 2)  # the fixture shows both charts
    assert [format_bytes(max(sizes.subtask_bytes(p))) for p in (3, 2)] == ["20.7 KiB", "30.5 KiB"]


def test_operators_are_headed_by_uid_else_name_else_id(full_page: Path) -> None:
    text = full_page.read_text(encoding="utf-8")
    assert "<h2>count-no-uid</h2>" in text and "<h2>keyed-state</h2>" in text  # no uid: its name
    assert "no uid; name count-no-uid; operator id <code>9887c2fb29a6e66df7039a0be00a90dd</code>" in text
    assert "uid keyed-state; operator id <code>826c38023c4272520855c3219fef4f3f</code>" in text
    from dataclasses import replace

    nameless = replace(_sizes("keyed-state"), uid=None, name=None)
    alone = skew_page("sp", "flink-savepoint", [nameless], "0")
    assert f"<h2>{nameless.operator_id}</h2>" in alone and "no uid; operator id" in alone


@pytest.mark.parametrize("parallelism", [1, 3, 10, 11, 64])
def test_the_legend_names_each_subtasks_colour(parallelism: int) -> None:
    from keygroup_cli.cli.skew_html import _legend

    legend = _legend(parallelism)
    entries = [part.split("</span>")[1].split("</li>")[0] for part in legend.split("<li>")[1:]]
    fills = [part.split("background:")[1].split('"')[0] for part in legend.split("<li>")[1:]]
    assert len(set(fills)) == len(fills) == min(parallelism, len(SUBTASK_FILLS))
    if parallelism <= len(SUBTASK_FILLS):
        assert entries == [f"subtask {i}" for i in range(parallelism)]
    else:
        assert entries[0].startswith("subtasks 0, 10") and entries[1].startswith(
            "subtasks 1, 11" if parallelism > 11 else "subtask 1"
        )
    # Neighbouring subtasks always differ, however many there are.
    assert all(subtask_fill(i) != subtask_fill(i + 1) for i in range(parallelism))


@pytest.mark.parametrize(
    ("top", "end", "labels"),
    [
        (0, 1, ["0", "1 B"]),
        (160, 200, ["0", "50 B", "100 B", "150 B", "200 B"]),
        (2904, 3072, ["0", "1 KiB", "2 KiB", "3 KiB"]),
        (31232, 40960, ["0", "10 KiB", "20 KiB", "30 KiB", "40 KiB"]),
        (5 * 1024**3 + 1, 6 * 1024**3, ["0", "2 GiB", "4 GiB", "6 GiB"]),
    ],
)
def test_a_byte_axis_ends_on_a_round_tick_above_the_largest_value(
    top: int, end: int, labels: list[str]
) -> None:
    got_end, marks = byte_axis(top)
    assert got_end == end >= top and [label for _, label in marks] == labels
    assert marks[-1][0] == end


def test_the_page_renders_in_headless_chromium(full_page: Path, tmp_path: Path) -> None:
    operators = [_sizes("count-no-uid"), _sizes("keyed-state")]
    shot = tmp_path / "skew.png"
    colours = [subtask_fill(i) for i in range(3)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QT")}
    done = subprocess.run(
        [sys.executable, str(BROWSER), str(full_page), str(shot), "1000", "2600", *colours],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["loaded"] is True
    assert report["requests"] == []  # nothing fetched: the page is all there is
    assert shot.stat().st_size > 10_000, "a screenshot of the page was written"
    # Headed by uid, else name: the uid-less operator by its name, not its hex id.
    assert report["headings"] == ["count-no-uid", "keyed-state"]
    charts = report["charts"]
    assert [c["classes"] for c in charts] == [
        "chart key-groups",
        "chart subtasks current",
        "chart subtasks suggested",
    ] * 2
    for chart in charts:
        # Laid out at the size the SVG asks for, inside the screenshot.
        assert chart["width"] == CHART_WIDTH and chart["y"] + chart["height"] <= 2600, chart
    room = CHART_WIDTH - LABEL_WIDTH - VALUE_WIDTH
    for sizes, (key_groups, current, suggested), legend in zip(
        operators, (charts[:3], charts[3:]), report["legends"], strict=True
    ):
        # A legend whose swatches show, on screen, the colour of each subtask: three different ones.
        assert [e["text"] for e in legend] == ["subtask 0", "subtask 1", "subtask 2"]
        assert [e["colour"] for e in legend] == colours and len(set(colours)) == 3
        # Each subtask's colour covers about the area of its key groups' bars (edges antialias).
        step = (CHART_WIDTH - 64 - 12) / 128
        scale = byte_axis(max(sizes.bytes))[0]
        area = [0.0, 0.0, 0.0]
        for kg, b in enumerate(sizes.bytes):
            area[sizes.owners[kg]] += (step - 0.5) * b * KEY_GROUP_HEIGHT / scale
        for i in range(3):
            assert key_groups["pixels"][colours[i]] == pytest.approx(area[i], rel=0.15), (i, key_groups)
        # Axes with units, as the browser lays them out.
        assert {"key group", "bytes per key group"} <= set(key_groups["texts"])
        assert sum(t.endswith((" B", " KiB")) for t in key_groups["texts"]) >= 3, key_groups["texts"]
        # The subtask bars' lengths, measured in the screenshot, follow one scale across both charts.
        top = byte_axis(max(max(sizes.subtask_bytes(p)) for p in (3, 2)))[0]
        for chart, p in ((current, 3), (suggested, 2)):
            assert "bytes per subtask" in chart["texts"]
            assert sum(t.endswith(" KiB") for t in chart["texts"]) >= 4, chart["texts"]
            for i, b in enumerate(sizes.subtask_bytes(p)):
                assert chart["runs"][colours[i]] == pytest.approx(b * room / top, abs=2), (p, i, chart)
                assert chart["pixels"][colours[i]] == pytest.approx(b * room / top * BAR_HEIGHT, rel=0.05)
            assert all(chart["pixels"][c] == 0 for c in colours[p:])
        longest = [max(c["runs"].values()) for c in (current, suggested)]
        ratio = max(sizes.subtask_bytes(2)) / max(sizes.subtask_bytes(3))
        assert longest[1] / longest[0] == pytest.approx(ratio, rel=0.02) and ratio > 1.4, longest


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
