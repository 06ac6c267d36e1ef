"""Shared fixtures: run kg in-process with stdout/stderr kept apart, and the golden vectors."""

from __future__ import annotations

import ast
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import run

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# Off a terminal kg prints one line per stage on stderr (cli/progress.py); the tests of other output turn
# those lines off, in process and in every kg they start (bars on a pty stay). tests/cli/test_progress.py
# turns them back on.
os.environ.setdefault("KG_PROGRESS", "off")


@dataclass(frozen=True)
class KgResult:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def kg(monkeypatch: pytest.MonkeyPatch) -> Callable[..., KgResult]:
    """Return ``invoke(*args, input=None)`` running ``kg`` through its real error boundary."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")

    def invoke(*args: str, input: str | bytes | None = None) -> KgResult:
        runner = CliRunner()
        with runner.isolation(input=input) as (out, err, _):
            code = run([str(a) for a in args])
        return KgResult(code, out.getvalue().decode(), err.getvalue().decode())

    return invoke


@pytest.fixture(scope="session")
def key_vectors() -> list[dict[str, Any]]:
    """Return the Flink-generated key → hashCode → key group → operator index vectors."""
    with gzip.open(FIXTURES / "vectors" / "keys.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="session")
def range_vectors() -> dict[str, Any]:
    """Return the Flink-generated subtask ranges and default maxParallelism values."""
    with gzip.open(FIXTURES / "vectors" / "ranges.json.gz", "rt", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


#: What a decoy interpreter prints: a test or code path that ran "whatever python3 is on PATH".
DECOY_MARK = "kg test decoy"


def write_decoys(directory: Path) -> Path:
    """Write ``python3`` and ``python`` scripts into ``directory`` that fail loudly (exit 97)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("python3", "python"):
        script = directory / name
        script.write_text(f'#!/bin/sh\necho "{DECOY_MARK}: {name} from PATH was run ($0 $*)" >&2\nexit 97\n')
        script.chmod(0o755)
    return directory


def _compile_kg() -> None:
    """Write kg's bytecode once, before the suite starts its hundreds of kg processes.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (as on the machines this suite runs on), Python never caches the
    modules it compiles, so every kg process, Spark worker and Flink-fixture helper compiled kg's ~80 modules
    again (about 0.4 s of CPU each). ``compileall`` writes the cache regardless; processes only read it.
    """
    import compileall

    compileall.compile_dir(str(ROOT / "keygroup_cli"), quiet=2)


def _warm_native_kernels(config: pytest.Config) -> None:
    """Compile the native kernels into numba's cache in the background, while the workers start.

    On a fresh machine the first process to call a kernel compiles it (about 30 s of CPU for the byte
    route's); workers that reach the kernels at the same moment would each compile them. One real rescale
    on the kernels (the byte route: the fused walk, the sort, copies, framing and checks) fills the cache
    first. It only warms a cache:
    whatever it does, a test that needs a kernel compiles it itself if it is not there. Nothing to do
    without workers: one process compiles once anyway. (Whether the cache already holds this checkout's
    kernels is numba's to know: its cache directories are named by a hash of the source's location.)
    """
    if not getattr(config.option, "numprocesses", None):
        return
    source = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-string"
    scratch = tempfile.mkdtemp(prefix="kg-warm-")
    script = (
        "import shutil, sys\n"
        "from keygroup_cli.cli import main\n"
        "try:\n"
        f"    main(['rescale', {str(source)!r}, '--from', '3', '--to', '4', '-m', '256', '--engine', 'local',"
        f" '--out', {scratch + '/out'!r}, '-q'])\n"
        "finally:\n"
        f"    shutil.rmtree({scratch!r}, ignore_errors=True)\n"
    )
    subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "KG_NATIVE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist), before any worker
        _compile_kg()
        _warm_native_kernels(config)
    # The whole suite runs with decoy interpreters first on PATH (.ci/run puts its own there too), so a
    # code path or test that relies on PATH's python3 instead of kg's own interpreter fails everywhere,
    # not only on machines whose system Python lacks kg's dependencies.
    if not os.environ.get("KG_TEST_DECOY_PATH"):
        decoy = write_decoys(Path(tempfile.mkdtemp(prefix="kg-decoy-")))
        os.environ["KG_TEST_DECOY_PATH"] = str(decoy)
        os.environ["PATH"] = os.pathsep.join([str(decoy), os.environ.get("PATH", "")])


def _modules_using_spark() -> frozenset[str]:
    """Return the test modules (paths from the repository root) with a function that takes ``spark``."""
    found = set()
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                a.arg == "spark" for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
            ):
                found.add(path.relative_to(ROOT).as_posix())
                break
    return frozenset(found)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores (``--maxprocesses`` still caps it).

    A quarter of the suite's wall is spent waiting (Flink jobs starting and being cancelled, Spark's
    scheduler, subprocesses and servers starting): on two cores two workers left the CPUs about 70 % busy.
    """
    return (os.cpu_count() or 1) + 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Schedule whole modules on the workers (``-n``, see pyproject), and every SparkSession module on one.

    A module runs whole on one worker, so its module-scoped fixtures (a JVM batch of restores, a cluster)
    are built once; every module that takes the ``spark`` fixture runs on the same worker, so the run
    keeps one SparkSession. (xdist's own ``--dist loadgroup`` marks do not reach the scheduler under
    pytest 9, so the grouping is done here.)
    """
    from xdist.scheduler import LoadScopeScheduling

    spark_modules = _modules_using_spark()

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "spark" if module in spark_modules else module

    return ModuleScheduling(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="Rewrite generated files (docs/reference/cli.md, fixtures/golden/) instead of comparing.",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def spark() -> Any:
    """Return the one SparkSession of the test run (local[2], UI off), stopped at the end."""
    from keygroup_cli.execution.engines.spark import spark_session

    session = spark_session("local[2]", config={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
