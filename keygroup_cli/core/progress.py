"""Progress: the one callback type every long step reports through, and its two helpers.

A step reports ``(stage, completed, total)``: the name of what it is doing, how much of it is done and how
much there is (None while unknown). The CLI draws bars from these; the library never prints.
"""

from __future__ import annotations

from collections.abc import Callable

#: ``report(stage, completed, total)``; ``total`` is None while unknown.
OnProgress = Callable[[str, int, "int | None"], None]


def no_progress(_stage: str, _completed: int, _total: int | None) -> None:
    """Report nothing: the default of every ``on_progress`` argument."""
    return None


def staged(report: OnProgress, name: str) -> OnProgress:
    """Return ``report`` with every step it is given renamed ``name``."""

    def renamed(_stage: str, completed: int, total: int | None) -> None:
        report(name, completed, total)

    return renamed


__all__ = ["OnProgress", "no_progress", "staged"]
