"""Rich progress on stderr behind the core's ``on_progress(stage, completed, total)`` callback.

A no-op when stderr is not a terminal, and under ``--quiet`` or ``--json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from keygroup_cli.cli.render import Output

OnProgress = Callable[[str, int, "int | None"], None]


def _ignore(_stage: str, _completed: int, _total: int | None) -> None:
    return None


@contextmanager
def progress(out: Output) -> Iterator[OnProgress]:
    """Yield an ``on_progress`` callback that draws one bar per stage, or does nothing when disabled."""
    if not out.progress_enabled:
        yield _ignore
        return
    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out.stderr,
        transient=False,
    )
    tasks: dict[str, TaskID] = {}

    def on_progress(stage: str, completed: int, total: int | None) -> None:
        if stage not in tasks:
            tasks[stage] = bars.add_task(stage, total=total)
        bars.update(tasks[stage], completed=completed, total=total)

    with bars:
        yield on_progress
