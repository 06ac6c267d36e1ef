"""Ctrl-C during a Spark run: exit 130 with one line, no py4j traceback, nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.execution.snapshots import generate

pytestmark = pytest.mark.spark


def test_ctrl_c_while_spark_tasks_run(tmp_path: Path) -> None:
    source = generate(tmp_path / "in", ("events", "long", 250_000, 4, 128), row_group_rows=20_000)
    dest = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "keygroup_cli", "rescale", str(source), "--to", "6", "-m", "512",
         "--out", str(dest), "--engine", "spark"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A terminal's Ctrl-C reaches a process whose SIGINT is at its default, as in a shell.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    # Wait until the engine writes into its staging directory: the Spark job is running.
    deadline = time.monotonic() + 120
    while not any(".kg-staging-" in p.name for p in tmp_path.iterdir()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends to the foreground group
    stdout, stderr = proc.communicate(timeout=120)
    text = stderr.decode()
    assert proc.returncode == 130, text
    assert [line for line in text.splitlines() if line.strip()] == ["kg: error: Interrupted."], text
    assert "Traceback" not in text and "py4j" not in text
    assert not dest.exists()
    assert not any(".kg-staging-" in p.name for p in tmp_path.iterdir())
