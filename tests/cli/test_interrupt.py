"""Ctrl-C at any moment of a run: exit 130 with one line, DEST absent, nothing left behind.

kg runs as a user runs it in a terminal: in its own process group (the shell's foreground job), its
stderr a pseudo-terminal so that its progress is drawn, and SIGINT sent to the whole group, as a
terminal's Ctrl-C is. Each test sends it once a named stage is on screen, or once a process of Spark's
start (the JVM, the Python daemon) exists: no sleeps.

kg is started with SIGINT at its default, as by an interactive shell, and with SIGINT ignored, as by a
non-interactive shell's background job or a runner's subshell. Python keeps an ignored SIGINT: before
``keygroup_cli.cli.main`` took SIGINT for the whole run, Ctrl-C there was ignored everywhere but in
Spark's task phase, and a rescale interrupted while Spark started went on, committed DEST and exited 0.

Afterwards, no process kg started (the JVM, Spark's Python daemon and workers) is left: each test marks
kg's environment with a token every descendant inherits and waits until no process carries it.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.execution.snapshots import generate

#: How long a run may take to reach the awaited point, or its processes to end: a bound, never a pace.
PATIENCE = 300.0
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TOKEN_VARIABLE = "KG_INTERRUPT_TEST_TOKEN"


class TerminalRun:
    """``kg ARGS`` in its own process group with stderr on a pseudo-terminal, read as it is drawn."""

    def __init__(self, args: Sequence[object], cwd: Path, *, sigint: signal.Handlers) -> None:
        self.token = uuid.uuid4().hex
        env = {**os.environ, TOKEN_VARIABLE: self.token, "COLUMNS": "200", "TERM": "xterm"}
        for name in ("NO_COLOR", "KG_QUIET", "KG_JSON"):
            env.pop(name, None)
        master, terminal = pty.openpty()
        self.stdout = (cwd / f"stdout-{self.token}").open("w+b")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keygroup_cli", *map(str, args)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.stdout,
            stderr=terminal,
            start_new_session=True,
            # The disposition a shell gives its job: SIG_DFL (interactive), SIG_IGN (a background job).
            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
        )
        os.close(terminal)
        self._master = master
        self._drawn = bytearray()
        self._changed = threading.Condition()
        # Read all the time, so that a full terminal buffer never holds kg up.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every writer of the terminal has gone
                chunk = b""
            with self._changed:
                self._drawn += chunk
                self._changed.notify_all()
            if not chunk:
                return

    def screen(self) -> str:
        """Return what kg has drawn on stderr so far, without terminal escapes."""
        with self._changed:
            raw = bytes(self._drawn)
        return ANSI.sub("", raw.decode(errors="replace")).replace("\r", "\n")

    def wait_until(self, what: str, reached: Callable[[], bool]) -> None:
        """Return once ``reached()``; fail if kg ends first (or takes longer than ``PATIENCE``)."""
        deadline = time.monotonic() + PATIENCE
        with self._changed:
            while not reached():
                ended = self.proc.poll()
                assert ended is None, f"kg ended ({ended}) before {what}:\n{self.screen()}"
                assert time.monotonic() < deadline, f"no {what} after {PATIENCE:.0f} s:\n{self.screen()}"
                # Woken by new output; the timeout only re-checks conditions that are not output.
                self._changed.wait(0.05)

    def wait_for_stage(self, stage: str) -> None:
        """Return once ``stage`` is on screen (a progress bar's label)."""
        self.wait_until(f"stage {stage!r}", lambda: stage in self.screen())

    def wait_for_process(self, pattern: str) -> None:
        """Return once a process kg started has a command line matching ``pattern``."""
        self.wait_until(f"process {pattern!r}", lambda: any(re.search(pattern, c) for c in self.processes()))

    def processes(self) -> list[str]:
        """Return the command lines of the live processes that carry this run's token (kg's descendants)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.proc.pid:
                continue
            try:
                environment = (entry / "environ").read_bytes().split(b"\0")
                if f"{TOKEN_VARIABLE}={self.token}".encode() not in environment:
                    continue
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if state != "Z":
                found.append(command)
        return found

    def ctrl_c(self) -> None:
        """Send SIGINT to kg's process group, as a terminal's Ctrl-C does to its foreground job."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def finish(self) -> tuple[int, str]:
        """Wait for kg and every process it started to end; return its exit code and its stderr."""
        code = self.proc.wait(timeout=PATIENCE)
        self._reader.join(timeout=PATIENCE)
        os.close(self._master)
        self.stdout.close()
        deadline = time.monotonic() + PATIENCE
        # The JVM ends when its stdin (a pipe from kg) closes; Spark's daemon and workers end with it.
        while left := self.processes():
            assert time.monotonic() < deadline, f"still running after kg ended: {left}"
            time.sleep(0.1)
        return code, self.screen()


def assert_interrupted(code: int, screen: str, dest: Path) -> None:
    """Exit 130, one error line and no traceback, DEST absent and no staging directory beside it."""
    assert code == 130, screen
    errors = [line.strip() for line in screen.splitlines() if "kg: error" in line]
    assert errors == ["kg: error: Interrupted."], screen
    assert screen.rstrip().endswith("kg: error: Interrupted."), screen
    assert "Traceback" not in screen and "py4j" not in screen, screen
    assert not dest.exists()
    assert not [p.name for p in dest.parent.iterdir() if ".kg-staging-" in p.name]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kg snapshot whose rescale to maxParallelism 512 runs Spark tasks for seconds."""
    source = tmp_path_factory.mktemp("interrupt") / "in"
    return generate(source, ("events", "long", 250_000, 4, 128), row_group_rows=20_000)


def _rescale(source: Path, dest: Path) -> list[object]:
    return ["rescale", source, "--to", "6", "-m", "512", "--out", dest, "--engine", "spark"]


#: Where Spark's start is when Ctrl-C comes: its stage just drawn (the JVM being launched), the JVM
#: running (the gateway starting), Spark's Python daemon running (the worker probe).
SPARK_START = {
    "stage drawn": lambda run: run.wait_for_stage("starting Spark"),
    "jvm running": lambda run: run.wait_for_process(r"java .*org\.apache\.spark\.deploy\.SparkSubmit"),
    "python daemon running": lambda run: run.wait_for_process(r"-m keygroup_cli\S*\.spark\.daemon"),
}


@pytest.mark.spark
@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
@pytest.mark.parametrize("moment", list(SPARK_START))
def test_ctrl_c_while_spark_starts(
    snapshot: Path, tmp_path: Path, moment: str, sigint: signal.Handlers
) -> None:
    dest = tmp_path / "out"
    run = TerminalRun(_rescale(snapshot, dest), tmp_path, sigint=sigint)
    SPARK_START[moment](run)
    run.ctrl_c()
    code, screen = run.finish()
    assert_interrupted(code, screen, dest)


@pytest.mark.spark
@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
def test_ctrl_c_while_spark_tasks_run(snapshot: Path, tmp_path: Path, sigint: signal.Handlers) -> None:
    dest = tmp_path / "out"
    run = TerminalRun(_rescale(snapshot, dest), tmp_path, sigint=sigint)
    # kg has staged DEST: the input is verified and Spark's job runs (or is about to).
    run.wait_until("a staging directory", lambda: any(".kg-staging-" in p.name for p in tmp_path.iterdir()))
    run.ctrl_c()
    code, screen = run.finish()
    assert_interrupted(code, screen, dest)


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A canonical savepoint written by Flink 2.3 (``BenchSavepointGen``): 300,000 keys, about 27 MB."""
    from tests.restore.harness import JVM_FLAGS, _tool_env, build_classpath

    out = tmp_path_factory.mktemp("interrupt-savepoint") / "savepoint"
    proc = subprocess.run(
        ["java", *JVM_FLAGS, "-cp", build_classpath(), "kg.fixtures.BenchSavepointGen", str(out),
         "--keys", "300000", "--parallelism", "2", "--key-type", "long"],
        capture_output=True, text=True, env=_tool_env(), timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


#: A writer, what it writes (DEST is ``{dest}``) and the stage on screen when Ctrl-C comes: each stage is
#: seconds long on the savepoint above (or on a million generated keys).
WRITERS = {
    "convert": (["convert", "{source}", "--out", "{dest}"], "convert"),
    "migrate": (["migrate", "{source}", "--rename", "bench-keyed=x", "--out", "{dest}"], "copy state files"),
    "export": (["export", "{source}", "-o", "bench-keyed", "--out", "{dest}"], "export"),
    "compact": (
        ["compact", "{source}", "-o", "bench-keyed", "--drop-where", "key < 1000", "--out", "{dest}"],
        "rewrite keyed state",
    ),
}


@pytest.mark.flink
@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
@pytest.mark.parametrize("command", list(WRITERS))
def test_ctrl_c_while_a_savepoint_is_written(
    savepoint: Path, tmp_path: Path, command: str, sigint: signal.Handlers
) -> None:
    dest = tmp_path / "out"
    args, stage = WRITERS[command]
    run = TerminalRun([a.format(source=savepoint, dest=dest) for a in args], tmp_path, sigint=sigint)
    run.wait_for_stage(stage)
    run.ctrl_c()
    code, screen = run.finish()
    assert_interrupted(code, screen, dest)


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
def test_ctrl_c_while_generate_writes(tmp_path: Path, sigint: signal.Handlers) -> None:
    dest = tmp_path / "out"
    run = TerminalRun(["generate", dest, "-o", "events:long:800000:4:128"], tmp_path, sigint=sigint)
    run.wait_for_stage("generate")
    run.ctrl_c()
    code, screen = run.finish()
    assert_interrupted(code, screen, dest)


#: ``kg export --engine spark`` starts Spark on kg's main thread before it draws anything: Ctrl-C while
#: the JVM starts, then while Spark's tasks decode the state.
EXPORT_ON_SPARK = {
    "jvm running": lambda run: run.wait_for_process(r"java .*org\.apache\.spark\.deploy\.SparkSubmit"),
    "tasks running": lambda run: run.wait_for_stage("export"),
}


@pytest.mark.flink
@pytest.mark.spark
@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
@pytest.mark.parametrize("moment", list(EXPORT_ON_SPARK))
def test_ctrl_c_while_export_runs_on_spark(
    savepoint: Path, tmp_path: Path, moment: str, sigint: signal.Handlers
) -> None:
    dest = tmp_path / "out"
    args = ["export", savepoint, "-o", "bench-keyed", "--out", dest, "--engine", "spark"]
    run = TerminalRun(args, tmp_path, sigint=sigint)
    EXPORT_ON_SPARK[moment](run)
    run.ctrl_c()
    code, screen = run.finish()
    assert_interrupted(code, screen, dest)
