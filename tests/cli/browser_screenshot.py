"""Open an HTML file in a real headless Chromium (Qt WebEngine) and report what it rendered.

Run as ``python browser_screenshot.py PAGE PNG WIDTH HEIGHT COLOR...``: loads PAGE from disk, waits
for the load, asks the page where each ``svg.chart`` and legend was laid out, takes a screenshot to PNG
and prints one JSON object on stdout:

- ``loaded``: the load succeeded;
- ``requests``: every URL the page asked for other than PAGE itself (a self-contained page asks none);
- ``charts``: per ``svg.chart`` (document order) its classes, its box in the screenshot, the text of
  its ``<text>`` elements (ticks, axis titles, labels), how many pixels inside that box have each colour
  of COLOR... (exact RGB matches, ``#rrggbb``: ``pixels``) and the longest horizontal run of each such
  colour (``runs``, in pixels: a horizontal bar's drawn length);
- ``legends``: per ``ul.legend`` its entries: the text, and the colour of the screenshot's pixel at the
  middle of the entry's swatch (``#rrggbb``);
- ``headings``: the text of every ``h2``.

Qt WebEngine embeds Chromium (its ``QtWebEngineProcess`` is Chromium's renderer, shipped in the
``pyside6-webengine`` wheel of the ``test`` extra); ``QT_QPA_PLATFORM=offscreen`` runs it without a
display. The test starts this in its own process: a Qt application is one per process.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# As root (CI) Chromium's sandbox cannot start; no GPU here. Nothing is fetched: the page is local.
os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")
os.environ.setdefault(
    "QTWEBENGINE_CHROMIUM_FLAGS",
    "--disable-gpu --no-sandbox --disable-background-networking --disable-component-update",
)

from PySide6.QtCore import QSize, QTimer, QUrl  # noqa: E402
from PySide6.QtGui import QColor  # noqa: E402
from PySide6.QtWebEngineCore import QWebEngineUrlRequestInterceptor  # noqa: E402
from PySide6.QtWebEngineWidgets import QWebEngineView  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

#: Where each chart and legend swatch was laid out, in CSS pixels of the viewport, and the text they show
#: (the test's own script, not the page's).
_BOXES = """
JSON.stringify({
  charts: Array.from(document.querySelectorAll('svg.chart')).map(function (svg) {
    var r = svg.getBoundingClientRect();
    return {classes: svg.getAttribute('class'), x: r.left, y: r.top, width: r.width, height: r.height,
            texts: Array.from(svg.querySelectorAll('text')).map(function (t) { return t.textContent; })};
  }),
  legends: Array.from(document.querySelectorAll('ul.legend')).map(function (ul) {
    return Array.from(ul.querySelectorAll('li')).map(function (li) {
      var s = li.querySelector('.swatch').getBoundingClientRect();
      return {text: li.textContent, x: s.left + s.width / 2, y: s.top + s.height / 2};
    });
  }),
  headings: Array.from(document.querySelectorAll('h2')).map(function (h) { return h.textContent; })
})
"""


class _Requests(QWebEngineUrlRequestInterceptor):
    """Record every URL the page requests."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def interceptRequest(self, info):  # noqa: N802, ANN001, ANN201 - Qt's name and signature
        self.urls.append(info.requestUrl().toString())


def main() -> int:
    page_path, png, width, height, colors = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
        sys.argv[5:],
    )
    app = QApplication([sys.argv[0]])
    view = QWebEngineView()
    view.resize(QSize(width, height))
    requests = _Requests()
    view.page().profile().setUrlRequestInterceptor(requests)
    url = QUrl.fromLocalFile(os.path.abspath(page_path))
    result: dict[str, object] = {"loaded": False, "requests": [], "charts": [], "legends": [], "headings": []}

    def measured(boxes: str | None) -> None:
        # One more frame after layout, so the screenshot holds what was measured.
        QTimer.singleShot(300, lambda: shoot(json.loads(boxes) if boxes else {}))

    def shoot(layout: dict[str, list[dict[str, object]]]) -> None:
        image = view.grab().toImage()
        image.save(png)
        wanted = {QColor(c).rgb() & 0xFFFFFF: c.lower() for c in colors}
        for box in layout.get("charts", []):
            counts = dict.fromkeys(wanted.values(), 0)
            runs = dict.fromkeys(wanted.values(), 0)
            x0, y0 = max(0, int(box["x"])), max(0, int(box["y"]))  # type: ignore[call-overload]
            x1 = min(image.width(), int(box["x"] + box["width"]))  # type: ignore[operator]
            y1 = min(image.height(), int(box["y"] + box["height"]))  # type: ignore[operator]
            for y in range(y0, y1):
                run_colour, run = None, 0
                for x in range(x0, x1):
                    name = wanted.get(image.pixel(x, y) & 0xFFFFFF)
                    if name is not None:
                        counts[name] += 1
                    run = run + 1 if name is not None and name == run_colour else 1
                    run_colour = name
                    if name is not None and run > runs[name]:
                        runs[name] = run
            result["charts"].append({**box, "pixels": counts, "runs": runs})  # type: ignore[attr-defined]
        for legend in layout.get("legends", []):
            entries = []
            for entry in legend:
                x, y = int(entry["x"]), int(entry["y"])  # type: ignore[call-overload]
                inside = 0 <= x < image.width() and 0 <= y < image.height()
                colour = f"#{image.pixel(x, y) & 0xFFFFFF:06x}" if inside else None
                entries.append({"text": entry["text"], "colour": colour})
            result["legends"].append(entries)  # type: ignore[attr-defined]
        result["headings"] = layout.get("headings", [])
        result["requests"] = [u for u in requests.urls if u != url.toString()]
        app.quit()

    def loaded(ok: bool) -> None:
        result["loaded"] = ok
        view.page().runJavaScript(_BOXES, 0, measured)

    view.loadFinished.connect(loaded)
    view.load(url)
    view.show()
    QTimer.singleShot(60_000, app.quit)  # never hang a test run
    app.exec()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
