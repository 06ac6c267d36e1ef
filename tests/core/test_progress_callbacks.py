"""The one progress callback: what ``no_progress`` and ``staged`` do with the steps they are given."""

from __future__ import annotations

from keygroup_cli.core.progress import OnProgress, no_progress, staged


def test_no_progress_takes_any_step_and_returns_nothing():
    assert no_progress("copy", 3, None) is None
    assert no_progress("copy", 3, 10) is None


def test_staged_renames_every_step_and_keeps_the_counts():
    seen: list[tuple[str, int, int | None]] = []
    report: OnProgress = lambda stage, done, total: seen.append((stage, done, total))  # noqa: E731
    renamed = staged(report, "rescale")
    renamed("read", 1, 4)
    renamed("write", 4, None)
    assert seen == [("rescale", 1, 4), ("rescale", 4, None)]


def test_staged_twice_keeps_the_outer_name():
    seen: list[str] = []
    inner = staged(staged(lambda stage, _d, _t: seen.append(stage), "outer"), "inner")
    inner("x", 0, 0)
    assert seen == ["outer"]
