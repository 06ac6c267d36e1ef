"""``kg inspect --key-groups --html FILE``: one self-contained page of the skew charts and tables.

The page is HTML with inline CSS and inline SVG: no script, no font, image or style sheet from anywhere,
so it opens offline, in a CI artifact viewer or attached to a pull request. Per keyed operator it shows
what the terminal shows: bytes per key group (coloured by the subtask that owns each now), bytes per
subtask at the current and at the suggested parallelism, the hottest key groups and the parallelisms
judged. The same input gives the same bytes (no time stamp), so a page can be compared across runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING

from keygroup_cli.cli.render import format_bytes, format_count

if TYPE_CHECKING:
    from keygroup_cli.assess.sizes import KeyGroupSizes

#: Width of every chart's drawing area, in CSS pixels (the SVGs scale down on narrow screens).
CHART_WIDTH = 720
#: Height of the key-group chart's bars at their tallest.
KEY_GROUP_HEIGHT = 160
#: At most this many columns in the key-group chart; more key groups are drawn in even runs.
MAX_KEY_GROUP_BARS = 360
#: At most this many bars per subtask chart, as in the terminal.
MAX_SUBTASK_BARS = 64
#: Height of one subtask bar and the gap under it.
BAR_HEIGHT, BAR_GAP = 16, 4
#: Room for the labels left of the subtask bars and right of them.
LABEL_WIDTH, VALUE_WIDTH = 64, 88
#: Fills of alternate subtasks' key groups, and of subtask bars.
SUBTASK_FILLS = ("#1f77b4", "#ff7f0e")
BAR_FILL = "#2ca02c"

_STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 24px;
       max-width: 900px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ddd; }
figure { margin: 16px 0; } figcaption { font-weight: 600; margin-bottom: 4px; }
svg.chart { display: block; max-width: 100%; height: auto; background: #fafafa; }
svg.chart text { font: 11px system-ui, sans-serif; fill: #444; }
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
    head = f'<section class="operator" id="op-{escape(sizes.operator_id)}">\n<h2>{escape(sizes.label)}</h2>'
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
    for p, what in ((current, "current"), (suggested, "suggested")):
        if p == suggested and p == current and what == "suggested":
            continue
        name = "current, suggested" if p == current == suggested else what
        skew = skews.get(p, sizes.skew if p == current else None)
        caption = f"Bytes per subtask at parallelism {p} ({name})" + (
            f", byte skew {skew:.2f}" if skew is not None else ""
        )
        parts.append(_subtask_figure(sizes.subtask_bytes(p), p, what, caption))
    parts.append(_hottest_table(sizes))
    parts.append(_advice_table(sizes))
    parts.append("</section>")
    return "\n".join(parts)


def _key_group_figure(sizes: KeyGroupSizes) -> str:
    from keygroup_cli.assess.sizes import key_group_bins

    bins = key_group_bins(sizes.bytes, MAX_KEY_GROUP_BARS)
    top = max((b.bytes for b in bins), default=0) or 1
    step = CHART_WIDTH / max(1, len(bins))
    height, axis = KEY_GROUP_HEIGHT, 18
    bars = []
    for i, b in enumerate(bins):
        h = b.bytes * height / top
        groups = f"key group {b.start}" if b.start == b.end else f"key groups {b.start}-{b.end}"
        tip = f"{groups}: {format_bytes(b.bytes)}, subtask {sizes.owners[b.start]} at p {sizes.parallelism}"
        bars.append(
            f'<rect class="bar key-group" x="{i * step:.2f}" y="{height - h:.2f}" '
            f'width="{max(step - 0.5, 0.5):.2f}" '
            f'height="{h:.2f}" fill="{SUBTASK_FILLS[sizes.owners[b.start] % 2]}" '
            f'data-key-groups="{b.start}-{b.end}" data-bytes="{b.bytes}"><title>{escape(tip)}</title></rect>'
        )
    per = "one key group a column" if len(bins) == len(sizes.bytes) else "key groups in even runs"
    caption = (
        f"Bytes per key group ({per}), coloured by the subtask that owns it at parallelism "
        f"{sizes.parallelism}; tallest {format_bytes(top)}"
    )
    labels = (
        f'<text x="0" y="{height + 13}">0</text>'
        f'<text x="{CHART_WIDTH}" y="{height + 13}" text-anchor="end">{len(sizes.bytes) - 1}</text>'
    )
    svg = _svg("key-groups", CHART_WIDTH, height + axis, caption, [*bars, labels])
    return f"<figure>\n<figcaption>{escape(caption)}</figcaption>\n{svg}\n</figure>"


def _subtask_figure(values: Sequence[int], parallelism: int, what: str, caption: str) -> str:
    from keygroup_cli.assess.sizes import key_group_bins

    runs = key_group_bins(values, MAX_SUBTASK_BARS)
    top = max((r.bytes for r in runs), default=0) or 1
    room = CHART_WIDTH - LABEL_WIDTH - VALUE_WIDTH
    items = []
    for i, r in enumerate(runs):
        y = i * (BAR_HEIGHT + BAR_GAP)
        w = r.bytes * room / top
        label = f"subtask {r.start}" if r.start == r.end else f"subtasks {r.start}-{r.end}"
        items.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + 12}" text-anchor="end">{escape(label)}</text>'
            f'<rect class="bar subtask" x="{LABEL_WIDTH}" y="{y}" width="{w:.2f}" height="{BAR_HEIGHT}" '
            f'fill="{BAR_FILL}" data-subtasks="{r.start}-{r.end}" data-bytes="{r.bytes}">'
            f"<title>{escape(label)}: {escape(format_bytes(r.bytes))}</title></rect>"
            f'<text x="{LABEL_WIDTH + w + 6:.2f}" y="{y + 12}">{escape(format_bytes(r.bytes))}</text>'
        )
    height = len(runs) * (BAR_HEIGHT + BAR_GAP)
    svg = _svg(f"subtasks {what}", CHART_WIDTH, height, caption, items, parallelism=parallelism)
    return f"<figure>\n<figcaption>{escape(caption)}</figcaption>\n{svg}\n</figure>"


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
