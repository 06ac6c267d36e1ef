"""Progress on stderr: counts with separators, rate and ETA, a 'starting Spark' stage, never backwards."""

from __future__ import annotations

import json
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

SAVEPOINT = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "2.3" / "heap-files-p3-maxp128-long"
#: The stages a local rescale of SAVEPOINT goes through, in order.
RESCALE_STAGES = ["verify input", "read operator state", "copy key groups", "write savepoint"]
#: ``kg: STAGE: COMPLETED/TOTAL [UNIT] in SECONDS s``: one stage's line off a terminal.
STAGE_LINE = re.compile(
    r"^kg: (?P<stage>[^:]+): (?P<done>[\d,]+)/(?P<total>[\d,]+)(?: (?P<unit>[a-z ]+))? in \d+\.\d s$"
)


@pytest.fixture(autouse=True)
def _progress_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's conftest switches progress off for other tests' sake; here it is what is tested."""
    monkeypatch.delenv("KG_PROGRESS", raising=False)


def _kg(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run kg in its own process, stdout and stderr pipes (not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "keygroup_cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or {k: v for k, v in os.environ.items() if k != "KG_PROGRESS"},
        check=False,
    )


def _without_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith(("kg: warning:", "kg: note:"))]


def test_off_a_terminal_each_stage_prints_one_line_with_its_size(tmp_path: Path) -> None:
    done = _kg("rescale", SAVEPOINT, "--to", "2", "--engine", "local", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    lines = _without_warnings(done.stderr)
    matches = [STAGE_LINE.match(line) for line in lines]
    assert all(matches), lines  # no bar, no escape sequence, nothing but stage lines
    stages = [m["stage"] for m in matches if m]
    assert stages == RESCALE_STAGES  # each exactly once, in the order they end
    for m in matches:
        assert m and m["done"] == m["total"] and int(m["total"].replace(",", "")) > 0
    units = {m["stage"]: m["unit"] for m in matches if m}
    assert units["write savepoint"] == "subtasks" and units["copy key groups"] == "keyed operators"
    assert "\x1b" not in done.stderr and "\r" not in done.stderr
    assert "committed" in done.stdout or "wrote" in done.stdout.lower(), done.stdout


def test_with_json_each_stage_line_is_a_json_object_and_stdout_is_one_document(tmp_path: Path) -> None:
    done = _kg("rescale", SAVEPOINT, "--to", "2", "--engine", "local", "--out", tmp_path / "out", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # stdout holds exactly the result document
    assert document["command"] == "rescale" and done.stdout.count("\n") == 1
    records = [json.loads(line) for line in _without_warnings(done.stderr)]
    assert [r["stage"] for r in records] == RESCALE_STAGES
    for r in records:
        assert set(r) == {"stage", "completed", "total", "unit", "seconds"}, r
        assert isinstance(r["completed"], int) and r["completed"] == r["total"] > 0
        assert isinstance(r["seconds"], int | float) and r["seconds"] >= 0
    assert {r["stage"]: r["unit"] for r in records}["read operator state"] == "subtasks"


def test_verify_off_a_terminal_and_its_json_unchanged_by_the_lines() -> None:
    text = _kg("verify", SAVEPOINT)
    assert text.returncode == 0, text.stderr
    [line] = text.stderr.splitlines()
    m = STAGE_LINE.match(line)
    assert m and m["stage"] == "verify" and m["done"] == m["total"] and int(m["total"]) > 0, line
    on = _kg("verify", SAVEPOINT, "--json")
    off = _kg("verify", SAVEPOINT, "--json", env=dict(os.environ, KG_PROGRESS="off"))
    assert on.returncode == off.returncode == 0
    [record] = [json.loads(line) for line in on.stderr.splitlines()]
    assert record["stage"] == "verify" and record["completed"] == record["total"] == int(m["total"])
    assert off.stderr == ""
    assert json.loads(on.stdout) == json.loads(off.stdout), "the stage lines leave stdout's document alone"


@pytest.mark.parametrize("quiet", [["-q"], ["-q", "--json"]])
def test_quiet_prints_no_stage_line(quiet: list[str], tmp_path: Path) -> None:
    # --from 3: the source stays at 1 (moving it is a warning -q does not hide, test_rescale_from_warning).
    done = _kg(
        "rescale",
        SAVEPOINT,
        "--from",
        "3",
        "--to",
        "2",
        "--engine",
        "local",
        "--out",
        tmp_path / "out",
        *quiet,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_a_failed_command_ends_with_its_error_and_prints_no_open_stage(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("taken")
    done = _kg("rescale", SAVEPOINT, "--to", "2", "--engine", "local", "--out", tmp_path / "out")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith("kg: error:"), done.stderr
    assert all(STAGE_LINE.match(line) for line in _without_warnings(done.stderr)[:-1])


def test_stage_lines_end_stages_once_and_close_the_open_ones(capsys: pytest.CaptureFixture[str]) -> None:
    from keygroup_cli.cli.progress import StageLines

    lines = StageLines(as_json=True)
    lines.report("starting Spark", 0, None)
    lines.report("copy", 0, 3)
    lines.report("copy", 2, 3)
    lines.report("copy", 1, 3)  # a slower thread's late report: ignored
    lines.report("copy", 3, 3)
    lines.report("copy", 3, 3)  # the same end again: printed once
    lines.report("copy", 2, 3)  # a slower thread's report arriving after the end: dropped
    lines.report("re-hash keyed state (bytes)", 4096, 4096)
    assert [json.loads(x)["stage"] for x in capsys.readouterr().err.splitlines()] == [
        "copy",
        "re-hash keyed state (bytes)",
    ]
    lines.close()  # the stage with no total is printed when the command ends; "copy" is not reopened
    [spark] = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert spark["stage"] == "starting Spark" and spark["total"] is None and spark["unit"] is None
    lines.report("copy", 0, 5)  # the stage run again, from 0: a second run, a second line
    lines.report("copy", 5, 5)
    [again] = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert (again["completed"], again["total"]) == (5, 5)
    text = StageLines(as_json=False)
    text.report("re-hash keyed state (bytes)", 3 * 1024 * 1024, 3 * 1024 * 1024)
    assert re.fullmatch(
        r"kg: re-hash keyed state \(bytes\): 3\.0 MiB/3\.0 MiB in \d+\.\d s\n", capsys.readouterr().err
    )


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
        [
            sys.executable,
            "-m",
            "keygroup_cli",
            "rescale",
            str(source),
            "--to",
            "4",
            "-m",
            "256",
            "--engine",
            "spark",
        ]
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
    assert "engine spark (--engine spark)" in done.stdout.decode()


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


def test_a_stage_is_timed_from_its_0_or_from_the_end_of_the_one_before(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from keygroup_cli.cli.progress import StageLines

    ticks = iter([100.0, 103.0, 104.0, 110.0, 111.0, 115.0])  # a clock read once per call, in order
    lines = StageLines(as_json=True, clock=lambda: next(ticks))  # the command starts at 100
    lines.report("read", 1, 2)  # 103: first report after one item: timed from 100
    lines.report("read", 2, 2)  # 104: ends after 4 s
    lines.report("write", 0, 1)  # 110: a report of 0: timed from here
    lines.report("write", 1, 1)  # 111: ends after 1 s
    lines.report("spark", 0, None)  # 115: never ends
    assert [(r["stage"], r["seconds"]) for r in map(json.loads, capsys.readouterr().err.splitlines())] == [
        ("read", 4.0),
        ("write", 1.0),
    ]
