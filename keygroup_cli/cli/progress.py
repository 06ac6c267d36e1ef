"""Rich progress on stderr behind the core's ``on_progress(stage, completed, total)`` callback.

One bar per stage, with thousands separators, a rate and an ETA where the total is known; a stage with no
total (``starting Spark``) shows how long it has been running. The bars are removed when the command ends
(the summary says what happened). A no-op when stderr is not a terminal, and under ``--quiet`` or
``--json``. The core's notices (``logging`` records of the ``keygroup_cli`` logger, e.g. "pyspark is not
installed: using the local engine") are printed on stderr as ``kg: note: ...`` unless ``--quiet``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from rich.text import Text

from keygroup_cli.cli.render import Output
from keygroup_cli.core.progress import OnProgress, no_progress


class CountColumn(ProgressColumn):
    """``1,234,567/2,000,000``: completed and total with thousands separators."""

    def render(self, task: Task) -> Text:
        """Return the count of ``task``."""
        if task.total is None:
            return Text("")
        return Text(f"{int(task.completed):,}/{int(task.total):,}", style="progress.download")


class RateColumn(ProgressColumn):
    """Items per second, once rich has measured a rate."""

    def render(self, task: Task) -> Text:
        """Return the rate of ``task``."""
        speed = task.finished_speed or task.speed
        if speed is None or task.total is None:
            return Text("")
        return Text(f"{speed:,.0f}/s", style="progress.data.speed")


class _NoticeHandler(logging.Handler):
    """Print the core's notices through the stderr console (above any live progress bars)."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(f"kg: note: {record.getMessage()}", markup=False, highlight=False, soft_wrap=True)


@contextmanager
def notices(out: Output) -> Iterator[None]:
    """Print the ``keygroup_cli`` logger's INFO and higher records on stderr while the block runs."""
    root = logging.getLogger()
    # Libraries that log on the root logger (py4j logs a traceback when Ctrl-C interrupts a call) would
    # otherwise make logging print it on stderr: kg says "Interrupted." instead (--debug shows them).
    silence = None if out.debug or root.handlers else logging.NullHandler()
    if silence is not None:
        root.addHandler(silence)
    logger = logging.getLogger("keygroup_cli")
    handler = None if out.quiet else _NoticeHandler(out.stderr)
    previous = logger.level
    if handler is not None:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        if handler is not None:
            logger.removeHandler(handler)
            logger.setLevel(previous)
        if silence is not None:
            root.removeHandler(silence)


def progress_bars(console: Console) -> Progress:
    """Return the bars' layout: counts, rate and times are never cut; the description gives way first.

    Rich would share a narrow terminal out evenly and cut a count short ("196,608/1,951,2…"); here the
    numbers keep their width, the bar shrinks, and a long stage name ends in "…" instead.
    """

    def whole() -> Column:
        return Column(no_wrap=True)

    return Progress(
        TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
        BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=5)),
        CountColumn(table_column=whole()),
        RateColumn(table_column=whole()),
        TimeRemainingColumn(table_column=whole()),
        TimeElapsedColumn(table_column=whole()),
        console=console,
        transient=True,
        expand=True,
    )


@contextmanager
def progress(out: Output) -> Iterator[OnProgress]:
    """Yield an ``on_progress`` callback that draws one bar per stage, or does nothing when disabled.

    Notices of the core are shown on stderr for the duration too (see ``notices``).
    """
    if not out.progress_enabled:
        with notices(out):
            yield no_progress
        return
    bars = progress_bars(out.stderr)
    tasks: dict[str, TaskID] = {}
    shown: dict[str, tuple[int, int | None]] = {}

    def on_progress(stage: str, completed: int, total: int | None) -> None:
        if stage not in tasks:
            tasks[stage] = bars.add_task(stage, total=total)
        last, last_total = shown.get(stage, (0, total))
        # A counter never goes back within a stage (a report from a slower thread arriving late).
        if last_total == total and completed < last:
            return
        shown[stage] = (completed, total)
        bars.update(tasks[stage], completed=completed, total=total)

    with bars, notices(out):
        yield on_progress
