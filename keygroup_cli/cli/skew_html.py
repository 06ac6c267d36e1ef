"""``kg inspect --key-groups --html FILE``: one self-contained page of the skew charts and tables.

The page is HTML with inline CSS and inline SVG: no script, no font, image or style sheet from anywhere,
so it opens offline, in a CI artifact viewer or attached to a pull request. Per keyed operator (headed by
its uid, else its name, else its id: ``operator_label``) it shows what the terminal shows: bytes per key
group, coloured by the subtask that owns each now (one colour per subtask, with a legend), bytes per
subtask at the current and at the suggested parallelism, the hottest key groups and the parallelisms
judged. Every chart has axes with byte units; the subtask charts of one operator share one scale, so
equal lengths mean equal bytes. The same input gives the same bytes (no time stamp), so a page can be
compared across runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING

from keygroup_cli.cli.render import counted, format_bytes, format_count

if TYPE_CHECKING:
    from keygroup_cli.assess.sizes import KeyGroupBin, KeyGroupSizes
    from keygroup_cli.cli.render import Output

#: An axis: its end in bytes and its ticks, ``(bytes, label)`` (``byte_axis``).
ByteAxis = tuple[float, list[tuple[float, str]]]

#: Width of every chart's drawing area, in CSS pixels (the SVGs scale down on narrow screens).
CHART_WIDTH = 720
#: Height of the key-group chart's plot area (its axis' top tick is there).
KEY_GROUP_HEIGHT = 160
#: Room left of the key-group chart's plot for its y-axis labels, and under plots for an x-axis.
Y_AXIS_WIDTH, X_AXIS_HEIGHT = 64, 34
#: At most this many columns in the key-group chart; more key groups are drawn in even runs.
MAX_KEY_GROUP_BARS = 360
#: At most this many bars per subtask chart, as in the terminal.
MAX_SUBTASK_BARS = 64
#: Height of one subtask bar and the gap under it.
BAR_HEIGHT, BAR_GAP = 16, 4
#: Room for the labels left of the subtask bars and right of them.
LABEL_WIDTH, VALUE_WIDTH = 64, 88
#: One fill per subtask (Tableau 10; subtask i is ``SUBTASK_FILLS[i % 10]``), in the key-group chart, the
#: subtask bars and the legend. Neighbouring subtasks always differ; past 10 subtasks the colours repeat.
SUBTASK_FILLS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
#: A bar that stands for a run of several subtasks (more than ``MAX_SUBTASK_BARS``).
RUN_FILL = "#b0b0b0"
#: Axis lines and grid lines (no subtask's colour).
AXIS_STROKE, GRID_STROKE = "#666666", "#e2e2e2"
#: Byte units of the axes, as ``format_bytes`` writes them.
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def subtask_fill(subtask: int) -> str:
    """Return the colour of ``subtask`` in every chart and legend of the page."""
    return SUBTASK_FILLS[subtask % len(SUBTASK_FILLS)]


def byte_axis(top: float, ticks: int = 4) -> ByteAxis:
    """Return an axis for values up to ``top`` bytes: its end (>= top) and its ``(bytes, label)`` ticks.

    The ticks are round numbers of one unit (``0``, ``0.5 KiB``, ``1 KiB`` …), about ``ticks`` of them.
    """
    top = max(float(top), 1.0)
    power = 0
    while power < len(_UNITS) - 1 and top >= 1024 ** (power + 1):
        power += 1
    size = 1024**power
    raw = top / size / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if power == 0:
        step = max(1.0, math.ceil(step))
    count = math.ceil(top / size / step - 1e-9)
    marks = [(i * step * size, "0" if i == 0 else f"{i * step:g} {_UNITS[power]}") for i in range(count + 1)]
    return count * step * size, marks


_STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px;
       max-width: 900px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ddd; }
figure { margin: 16px 0; } figcaption { font-weight: 600; margin-bottom: 4px; }
svg.chart { display: block; max-width: 100%; height: auto; background: #fafafa; }
svg.chart text { font: 11px system-ui, sans-serif; fill: #444; }
svg.chart text.axis-title { font-weight: 600; }
ul.legend { list-style: none; padding: 0; margin: 4px 0 6px; display: flex; flex-wrap: wrap; gap: 4px 16px; }
ul.legend li { display: flex; align-items: center; gap: 6px; }
ul.legend span.swatch { display: inline-block; width: 14px; height: 14px; }
p.id { color: #555; margin-top: -4px; } p.id code { user-select: all; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { padding: 2px 10px; border-bottom: 1px solid #eee; text-align: right; }
th { background: #f3f3f3; } td.note, th.note { text-align: left; }
p.meta, p.source { color: #555; }
"""


def skew_page(path: str, format_name: str, operators: Sequence[KeyGroupSizes], version: str) -> str:
    """Return the whole page for the keyed operators of one input (those without sizes say why)."""
    sections = [_section(op) for op in operators]
    body = "\n".join(sections) or "<p>No operator with keyed state.</p>"
    title = f"Key-group skew: {path}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n"
        f'<p class="source">{escape(format_name)}; written by kg {escape(version)} '
        "(<code>kg inspect --key-groups --html</code>)</p>\n"
        f"{body}\n</body>\n</html>\n"
    )


def _section(sizes: KeyGroupSizes) -> str:
    head = (
        f'<section class="operator" id="op-{escape(sizes.operator_id)}">\n<h2>{escape(sizes.label)}</h2>\n'
        f'<p class="id">{_identity(sizes)}</p>'
    )
    if not sizes.available:
        return f"{head}\n<p>{escape(sizes.unavailable_reason or '')}</p>\n</section>"
    current, suggested = sizes.parallelism, sizes.suggested
    meta = (
        f"{format_bytes(sizes.total_bytes)} in {format_count(len(sizes.bytes))} key groups "
        f"({format_count(sizes.non_empty_key_groups)} with data); maxParallelism {sizes.max_parallelism}; "
        f"per key group: min {format_bytes(sizes.min_bytes)}, median {format_bytes(sizes.median_bytes)}, "
        f"max {format_bytes(sizes.max_bytes)}"
    )
    parts = [head, f'<p class="meta">{escape(meta)}</p>', _key_group_figure(sizes)]
    skews = {a.parallelism: a.byte_skew for a in sizes.advice}
    charts = [(current, "current, suggested" if current == suggested else "current")]
    if suggested != current:
        charts.append((suggested, "suggested"))
    # One scale for the subtask charts of an operator: equal lengths are equal bytes, at any parallelism.
    from keygroup_cli.assess.sizes import key_group_bins

    runs = {p: key_group_bins(sizes.subtask_bytes(p), MAX_SUBTASK_BARS) for p, _ in charts}
    scale = byte_axis(max((r.bytes for bins in runs.values() for r in bins), default=0))
    shared = "; one scale for both charts" if len(charts) > 1 else ""
    for p, name in charts:
        skew = skews.get(p, sizes.skew if p == current else None)
        caption = (
            f"Bytes per subtask at parallelism {p} ({name})"
            + (f", byte skew {skew:.2f}" if skew is not None else "")
            + shared
        )
        parts.append(_subtask_figure(runs[p], p, name.split(",")[0], caption, scale))
    parts.append(_hottest_table(sizes))
    parts.append(_advice_table(sizes))
    parts.append("</section>")
    return "\n".join(parts)


def _identity(sizes: KeyGroupSizes) -> str:
    """Return the line under an operator's heading: its uid or name as known, and its full id."""
    known = []
    if sizes.uid is not None:
        known.append(f"uid {escape(sizes.uid)}")
    else:
        known.append("no uid")
    if sizes.name is not None and sizes.name != sizes.uid:
        known.append(f"name {escape(sizes.name)}")
    return "; ".join(known) + f"; operator id <code>{escape(sizes.operator_id)}</code>"


def _legend(parallelism: int) -> str:
    """Return the subtask colours at ``parallelism`` as a list of swatches (HTML, beside the charts)."""
    if parallelism <= len(SUBTASK_FILLS):
        items = [(subtask_fill(i), f"subtask {i}") for i in range(parallelism)]
    else:
        items = []
        for first, fill in enumerate(SUBTASK_FILLS):
            same = list(range(first, parallelism, len(SUBTASK_FILLS)))
            shown = ", ".join(str(i) for i in same[:3]) + (", …" if len(same) > 3 else "")
            items.append((fill, f"subtask {shown}" if len(same) == 1 else f"subtasks {shown}"))
    entries = "".join(
        f'<li><span class="swatch" style="background:{fill}"></span>{escape(text)}</li>'
        for fill, text in items
    )
    return (
        f'<ul class="legend" aria-label="colour of each subtask at parallelism {parallelism}">{entries}</ul>'
    )


def _key_group_figure(sizes: KeyGroupSizes) -> str:
    from keygroup_cli.assess.sizes import key_group_bins

    bins = key_group_bins(sizes.bytes, MAX_KEY_GROUP_BARS)
    tallest = max((b.bytes for b in bins), default=0)
    end, marks = byte_axis(tallest)
    left, top_pad, right_pad = Y_AXIS_WIDTH, 8, 12
    plot_width = CHART_WIDTH - left - right_pad
    height = KEY_GROUP_HEIGHT
    base = top_pad + height
    step = plot_width / max(1, len(bins))
    items = []
    for value, label in marks:  # the y-axis: grid lines behind the bars, labels left of them
        y = base - value * height / end
        items.append(
            f'<line class="grid" x1="{left}" y1="{y:.2f}" x2="{left + plot_width}" y2="{y:.2f}" '
            f'stroke="{GRID_STROKE}"/>'
            f'<text class="tick y" x="{left - 6}" y="{y + 4:.2f}" text-anchor="end">{escape(label)}</text>'
        )
    for i, b in enumerate(bins):
        h = b.bytes * height / end
        groups = f"key group {b.start}" if b.start == b.end else f"key groups {b.start}-{b.end}"
        owner = sizes.owners[b.start]
        tip = f"{groups}: {format_bytes(b.bytes)}, subtask {owner} at p {sizes.parallelism}"
        items.append(
            f'<rect class="bar key-group" x="{left + i * step:.2f}" y="{base - h:.2f}" '
            f'width="{max(step - 0.5, 0.5):.2f}" '
            f'height="{h:.2f}" fill="{subtask_fill(owner)}" data-subtask="{owner}" '
            f'data-key-groups="{b.start}-{b.end}" data-bytes="{b.bytes}"><title>{escape(tip)}</title></rect>'
        )
    count = len(sizes.bytes)
    items.append(
        _line("axis", left, top_pad, left, base, AXIS_STROKE)
        + _line("axis", left, base, left + plot_width, base, AXIS_STROKE)
    )
    for group in _key_group_ticks(count):
        x = left + plot_width * (group + 0.5) / max(1, count)
        items.append(
            _line("axis", x, base, x, base + 4, AXIS_STROKE)
            + f'<text class="tick x" x="{x:.2f}" y="{base + 15}" text-anchor="middle">{group}</text>'
        )
    items.append(
        f'<text class="axis-title x" x="{left + plot_width / 2:.2f}" y="{base + 30}" text-anchor="middle">'
        "key group</text>"
        f'<text class="axis-title y" x="12" y="{base - height / 2:.2f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {base - height / 2:.2f})">bytes per key group</text>'
    )
    per = "one key group a column" if len(bins) == count else "key groups in even runs"
    caption = (
        f"Bytes per key group ({per}), coloured by the subtask that owns it at parallelism "
        f"{sizes.parallelism}; tallest {format_bytes(tallest)}"
    )
    svg = _svg("key-groups", CHART_WIDTH, base + X_AXIS_HEIGHT, caption, items, scale=int(end))
    legend = _legend(sizes.parallelism)
    return f"<figure>\n<figcaption>{escape(caption)}</figcaption>\n{legend}\n{svg}\n</figure>"


def _key_group_ticks(count: int, ticks: int = 8) -> list[int]:
    """Return the key groups the x-axis names: 0, round numbers, and the last one."""
    if count <= 1:
        return [0]
    raw = (count - 1) / ticks
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = max(1, int(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)))
    marks = list(range(0, count, step))
    if count - 1 - marks[-1] < step / 2:
        marks.pop()
    return [*marks, count - 1] if marks else [0, count - 1]


def _subtask_figure(
    runs: Sequence[KeyGroupBin], parallelism: int, what: str, caption: str, scale: ByteAxis
) -> str:
    end, marks = scale
    room = CHART_WIDTH - LABEL_WIDTH - VALUE_WIDTH
    rows = len(runs) * (BAR_HEIGHT + BAR_GAP)
    items = []
    for value, label in marks:  # grid lines behind the bars, the byte axis under them
        x = LABEL_WIDTH + value * room / end
        items.append(
            _line("grid", x, 0, x, rows, GRID_STROKE)
            + _line("axis", x, rows, x, rows + 4, AXIS_STROKE)
            + f'<text class="tick x" x="{x:.2f}" y="{rows + 15}" text-anchor="middle">{escape(label)}</text>'
        )
    for i, r in enumerate(runs):
        y = i * (BAR_HEIGHT + BAR_GAP)
        w = r.bytes * room / end
        label = f"subtask {r.start}" if r.start == r.end else f"subtasks {r.start}-{r.end}"
        fill = subtask_fill(r.start) if r.start == r.end else RUN_FILL
        items.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + 12}" text-anchor="end">{escape(label)}</text>'
            f'<rect class="bar subtask" x="{LABEL_WIDTH}" y="{y}" width="{w:.2f}" height="{BAR_HEIGHT}" '
            f'fill="{fill}" data-subtasks="{r.start}-{r.end}" data-bytes="{r.bytes}">'
            f"<title>{escape(label)}: {escape(format_bytes(r.bytes))}</title></rect>"
            f'<text class="value" x="{LABEL_WIDTH + w + 6:.2f}" y="{y + 12}">'
            f"{escape(format_bytes(r.bytes))}</text>"
        )
    items.append(
        f'<line class="axis" x1="{LABEL_WIDTH}" y1="{rows}" x2="{LABEL_WIDTH + room}" y2="{rows}" '
        f'stroke="{AXIS_STROKE}"/>'
        f'<text class="axis-title x" x="{LABEL_WIDTH + room / 2:.2f}" y="{rows + 30}" text-anchor="middle">'
        "bytes per subtask</text>"
    )
    svg = _svg(
        f"subtasks {what}",
        CHART_WIDTH,
        rows + X_AXIS_HEIGHT,
        caption,
        items,
        parallelism=parallelism,
        scale=int(end),
    )
    return f"<figure>\n<figcaption>{escape(caption)}</figcaption>\n{svg}\n</figure>"


def _line(kind: str, x1: float, y1: float, x2: float, y2: float, stroke: str) -> str:
    """Return one SVG line (an axis, a tick or a grid line)."""
    return f'<line class="{kind}" x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" stroke="{stroke}"/>'


def _svg(kind: str, width: float, height: float, label: str, items: Iterable[str], **data: int) -> str:
    extra = "".join(f' data-{k}="{v}"' for k, v in data.items())
    return (
        f'<svg class="chart {kind}" xmlns="http://www.w3.org/2000/svg" role="img" '
        'shape-rendering="crispEdges" '
        f'aria-label="{escape(label)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"{extra}>' + "".join(items) + "</svg>"
    )


def _hottest_table(sizes: KeyGroupSizes) -> str:
    from keygroup_cli.assess.sizes import DEFAULT_TOP

    rows = "".join(
        f"<tr><td>{kg}</td><td>{escape(format_bytes(b))}</td><td>{b / sizes.total_bytes:.1%}</td>"
        f"<td>{s}</td></tr>"
        for kg, b, s in sizes.hottest(DEFAULT_TOP)
    )
    return (
        '<table class="hottest"><caption>Hottest key groups</caption>'
        "<tr><th>key group</th><th>bytes</th><th>share</th><th>subtask now</th></tr>"
        f"{rows}</table>"
    )


def _advice_table(sizes: KeyGroupSizes) -> str:
    best = {a.parallelism for a in sizes.best()}
    rows = []
    for a in sizes.advice:
        notes = [
            n
            for n, on in (("current", a.parallelism == sizes.parallelism), ("best", a.parallelism in best))
            if on
        ]
        if a.key_group_skew == 1.0:
            notes.append("even key groups")
        rows.append(
            f"<tr><td>{a.parallelism}</td><td>{a.byte_skew:.2f}</td><td>{a.key_group_skew:.2f}</td>"
            f"<td>{escape(format_bytes(a.max_bytes))}</td>"
            f'<td class="note">{escape(", ".join(notes))}</td></tr>'
        )
    return (
        '<table class="advice">'
        "<caption>Parallelisms judged (byte skew: largest subtask over the mean)</caption>"
        "<tr><th>p</th><th>byte skew</th><th>key-group skew</th><th>largest subtask</th>"
        '<th class="note">note</th></tr>' + "".join(rows) + "</table>"
    )


def write_page(file: str, page: str) -> None:
    """Write ``page`` to ``file`` whole (a temporary file beside it, then renamed), or fail in one line.

    Raises:
        InvalidArgumentError: ``DESTINATION_NOT_WRITABLE`` (exit 2) when the file system refuses ``file``.
        ExecutionError: ``NO_SPACE_LEFT`` (exit 5) when it fills up; nothing is left behind.
    """
    import errno
    import os
    import tempfile

    from keygroup_cli.core.errors import InvalidArgumentError, environment_error

    target = os.path.abspath(file)
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=".kg-html-", dir=os.path.dirname(target))
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(page)
        # mkstemp creates the file 0600; the page is a report to share, so the usual umask applies.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, target)
        temporary = None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise environment_error(exc, file) or exc from None
        name = errno.errorcode.get(exc.errno or -1, type(exc).__name__)
        raise InvalidArgumentError(
            f"--html {file}: cannot write it: {exc.strerror or exc} ({name})", code="DESTINATION_NOT_WRITABLE"
        ) from None
    finally:
        if temporary is not None:
            os.unlink(temporary)


def report_written(out: Output, file: str, operators: int) -> None:
    """Say on stderr which file the page went to (``kg: wrote skew.html (...)``), unless ``--quiet``."""
    if not out.quiet:
        out.stderr.print(
            f"kg: wrote {file} (key-group skew of {counted(operators, 'keyed operator')})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
