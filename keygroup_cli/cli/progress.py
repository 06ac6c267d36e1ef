"""Rich progress on stderr behind the core's ``on_progress(stage, completed, total)`` callback.

On a terminal: one bar per stage, with thousands separators, a rate and an ETA where the total is known;
a stage with no total (``starting Spark``) shows how long it has been running. The bars are removed when
the command ends (the summary says what happened).

Off a terminal (CI, a pipe, a log file) there are no bars: each stage prints one line on stderr when it
ends, with its size and its wall time (``kg: verify input: 12/12 files in 0.4 s``); under ``--json`` that
line is a JSON object (``{"stage": ..., "completed": ..., "total": ..., "unit": ..., "seconds": ...}``),
so a CI log stays parseable. A stage ends when it reports ``completed == total``; one still open when
the command ends (no total, or stopped short) is printed then, if the command succeeded. ``--quiet``
prints none (nor bars); ``KG_PROGRESS=off`` prints no stage line and keeps the warnings (the bars on a
terminal stay).

The core's notices (``logging`` records of the ``keygroup_cli`` logger, e.g. "pyspark is not installed:
using the local engine") are printed on stderr as ``kg: note: ...`` unless ``--quiet``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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

from keygroup_cli.cli.render import Output, format_bytes
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


def switched_off() -> bool:
    """Return whether ``KG_PROGRESS=off`` (``0``, ``no``, ``none``) asks for no stage line off a terminal."""
    return os.environ.get("KG_PROGRESS", "").strip().lower() in ("off", "0", "no", "none")


@contextmanager
def progress(out: Output) -> Iterator[OnProgress]:
    """Yield an ``on_progress`` callback that draws one bar per stage, or does nothing when disabled.

    Off a terminal (or under ``--json``) it prints one line per stage as it ends instead (``StageLines``).
    Notices of the core are shown on stderr for the duration too (see ``notices``).
    """
    if out.quiet or (not out.progress_enabled and switched_off()):
        with notices(out):
            yield no_progress
        return
    if not out.progress_enabled:
        lines = StageLines(as_json=out.json)
        with notices(out):
            yield lines.report
        # Only after a success: a failed command's one-line error is the last word.
        lines.close()
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


#: The unit of a stage's counts where the stage's name does not say it (``... (bytes)`` does).
STAGE_UNITS = {
    "download": "files",
    "upload": "files",
    "copy state files": "files",
    "copy key groups": "keyed operators",
    "read operator state": "subtasks",
    "reading state headers": "subtasks",
    "write savepoint": "subtasks",
    "generate": "subtasks",
    "diff": "operators",
}


def stage_unit(stage: str) -> str | None:
    """Return the unit of ``stage``'s counts: ``bytes`` for a ``... (bytes)`` stage, else ``STAGE_UNITS``."""
    if stage.endswith("(bytes)"):
        return "bytes"
    return STAGE_UNITS.get(stage)


class StageLines:
    """``on_progress`` off a terminal: one line on stderr per stage when it ends, no bars.

    A stage ends when it reports ``completed == total`` (a known total). It starts at its first report if
    that is 0, else when the stage before it ended (or the command started): a step that reports only
    once it has done something is timed from when it could start. After a stage ended, a report of it
    from 0, or with another total, is a second run that prints again; any other is a late report from a
    slower thread and is dropped. Reports may come from several threads.
    """

    def __init__(self, *, as_json: bool, clock: Any = time.monotonic) -> None:
        self.as_json = as_json
        self.clock = clock
        self.lock = threading.Lock()
        #: Open stages: name -> [start, completed, total], in the order they started.
        self.open: dict[str, list[Any]] = {}
        #: Stages that ended, with the total they ended at (to tell a late report from a new run).
        self.ended: dict[str, int | None] = {}
        #: When the last stage ended (or the command started).
        self.mark = clock()

    def report(self, stage: str, completed: int, total: int | None) -> None:
        """Record one report of ``stage``; print its line if this ends it."""
        with self.lock:
            now = self.clock()
            state = self.open.get(stage)
            if state is None:
                if stage in self.ended and completed != 0 and total == self.ended[stage]:
                    return  # a late report of a stage already printed (another thread's)
                state = self.open[stage] = [now if completed == 0 else self.mark, completed, total]
            elif completed >= state[1] or total != state[2]:
                state[1], state[2] = completed, total
            if state[2] is not None and state[1] >= state[2]:
                del self.open[stage]
                self.ended[stage] = state[2]
                self.mark = now
                self._print(stage, state[1], state[2], now - state[0])

    def close(self) -> None:
        """Print the stages still open (no total, or stopped short), as the command ends."""
        with self.lock:
            now = self.clock()
            for stage, (start, completed, total) in list(self.open.items()):
                self._print(stage, completed, total, now - start)
            self.open.clear()

    def _print(self, stage: str, completed: int, total: int | None, seconds: float) -> None:
        seconds = max(0.0, seconds)
        unit = stage_unit(stage)
        if self.as_json:
            line = json.dumps(
                {
                    "stage": stage,
                    "completed": completed,
                    "total": total,
                    "unit": unit,
                    "seconds": round(seconds, 3),
                },
                ensure_ascii=False,
            )
        else:
            line = f"kg: {stage}: {_size(completed, total, unit)} in {seconds:.1f} s"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _size(completed: int, total: int | None, unit: str | None) -> str:
    """Return ``12/12 files``, ``3.1 MiB/3.1 MiB`` or ``5`` (no total): how big a stage was."""
    if unit == "bytes":
        return (
            format_bytes(completed) if total is None else f"{format_bytes(completed)}/{format_bytes(total)}"
        )
    count = f"{completed:,}" if total is None else f"{completed:,}/{total:,}"
    return f"{count} {unit}" if unit else count
