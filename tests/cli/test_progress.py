"""Progress on stderr: counts with separators, rate and ETA, a 'starting Spark' stage, never backwards."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.progress import Progress

from keygroup_cli.cli import progress as progress_module
from keygroup_cli.cli.progress import CountColumn, progress
from keygroup_cli.cli.render import Output
from tests.execution.snapshots import generate


def test_counts_have_thousands_separators():
    bars = Progress()
    task = bars.add_task("keyed rows", total=2_000_000, completed=1_234_567)
    assert CountColumn().render(bars.tasks[task]).plain == "1,234,567/2,000,000"


def test_a_counter_never_goes_back_within_a_stage(monkeypatch):
    updates: list[tuple[int, int | None]] = []
    original = Progress.update

    def record(self, task_id, *, completed=None, total=None, **kwargs):
        updates.append((completed, total))
        return original(self, task_id, completed=completed, total=total, **kwargs)

    monkeypatch.setattr(progress_module.Progress, "update", record)
    monkeypatch.setattr(Output, "progress_enabled", property(lambda self: True))
    with progress(Output()) as on_progress:
        on_progress("rows", 0, 100)
        on_progress("rows", 60, 100)
        on_progress("rows", 30, 100)  # a late report from a polling thread
        on_progress("rows", 100, 100)
    assert updates == [(0, 100), (60, 100), (100, 100)]


@pytest.mark.spark
def test_a_terminal_sees_starting_spark_counts_and_rate(tmp_path: Path):
    source = generate(tmp_path / "in", ("counter", "long", 20_000, 3, 128))
    main, secondary = pty.openpty()
    env = dict(os.environ, COLUMNS="120", TERM="xterm")
    env.pop("NO_COLOR", None)
    chunks: list[bytes] = []

    def drain() -> None:
        # Read the terminal while kg runs: a full pty buffer would block its progress output.
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    done = subprocess.run(
        [sys.executable, "-m", "keygroup_cli", "rescale", str(source), "--to", "4", "-m", "256"]
        + ["--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=secondary,
        env=env,
        timeout=300,
        check=False,
    )
    os.close(secondary)
    reader.join(10)
    os.close(main)
    raw = b"".join(chunks).decode(errors="replace")
    terminal = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert done.returncode == 0, terminal
    assert "starting Spark" in terminal
    assert "verify input" in terminal
    assert "/s" in terminal  # a rate once rich has measured one
    assert re.search(r"\b\d{1,3}(,\d{3})+/\d{1,3}(,\d{3})+\b", terminal), terminal[-2000:]
    # The bars are removed when the command ends: the last thing written erases lines (transient).
    assert raw.rstrip().endswith("\x1b[2K"), raw[-200:]
    assert "engine spark (default engine)" in done.stdout.decode()


@pytest.mark.parametrize("width", [60, 80, 120])
def test_a_narrow_terminal_never_cuts_a_count(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from keygroup_cli.cli.progress import progress_bars

    # A terminal of that width: under TERM=dumb (an editor's shell, some CI runners) rich takes every
    # terminal to be 80 columns wide, whatever width it is given.
    monkeypatch.setenv("TERM", "xterm-256color")
    console = Console(file=io.StringIO(), width=width, force_terminal=True, no_color=True)
    bars = progress_bars(console)
    task = bars.add_task("reading keyed state (operator sessions-keyed-by-user-id)", total=1_951_234)
    bars.update(task, completed=196_608)
    console.print(bars.make_tasks_table(bars.tasks))
    line = console.file.getvalue().rstrip("\n")  # type: ignore[attr-defined]
    assert "196,608/1,951,234" in line and line.startswith("reading") and len(line) <= width
