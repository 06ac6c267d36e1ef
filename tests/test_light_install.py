"""The light install: a wheel built with ``python -m build``, installed without pyspark, does the CI gate.

pyspark (about 490 MB) is kg's optional extra ``[spark]``. Without it ``check``, ``inspect``,
``ranges``, ``key``, ``plan``, ``advise`` and ``rescale --engine local`` work; the default engine is local
with one line on stderr saying so; ``--engine spark`` exits 6 naming the pip command that fixes it. This
builds the real wheel, installs it into a new venv (its dependencies from the package index, as a user's
pip would), and runs the installed ``kg`` with decoy interpreters first on PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import DECOY_MARK, FIXTURES, ROOT, write_decoys

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
SNAPSHOT = FIXTURES / "snapshots" / "valid"


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Build the wheel, install it without extras into a new venv; return its ``kg`` and an env."""
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = dist.glob("keygroup_cli-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "keygroup_cli/py.typed" in names and "keygroup_cli/cli/commands/check.py" in names
    assert not any(n.startswith(("tests/", "fixtures/")) for n in names)

    home = tmp_path_factory.mktemp("light")
    # A venv without pip of its own, filled by the test venv's pip (``--python``) without compiling
    # bytecode: what is installed is the same, at a third of the CPU (pip's seeding and compiling of
    # numpy and pyarrow was two thirds of it); Python compiles what kg imports on first use.
    venv.EnvBuilder(with_pip=False).create(home / "venv")
    python = home / "venv" / "bin" / "python"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-compile",
            "--disable-pip-version-check",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    decoy = write_decoys(home / "decoy")
    env = {k: v for k, v in os.environ.items() if k in {"HOME", "LANG", "TMPDIR", "USER", "JAVA_HOME"}}
    # KG_PROGRESS=off: the stage lines off a terminal are tests/cli/test_progress.py's.
    env.update(PATH=os.pathsep.join([str(decoy), "/usr/bin", "/bin"]), COLUMNS="100", KG_PROGRESS="off")
    return home / "venv" / "bin" / "kg", env


def _kg(light: tuple[Path, dict[str, str]], *args: str | Path) -> subprocess.CompletedProcess[str]:
    kg, env = light
    return subprocess.run(
        [str(kg), *map(str, args)], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_pyspark_is_not_installed(light: tuple[Path, dict[str, str]]) -> None:
    python = light[0].parent / "python"
    done = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('pyspark') is None)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "True"


@pytest.mark.parametrize(
    "args",
    [
        ("ranges", "-m", "128", "-p", "3"),
        ("key", "user-42", "-m", "128", "-p", "4"),
        ("plan", "--from", "3", "--to", "4", "-m", "128"),
        ("advise", "-m", "128", "--min", "2", "--max", "8"),
        ("inspect", SAVEPOINT),
        ("check", SAVEPOINT, "--parallelism", "4"),
    ],
    ids=lambda a: a[0] if isinstance(a, tuple) else None,
)
def test_metadata_commands_work_without_pyspark(light: tuple[Path, dict[str, str]], args: tuple) -> None:
    done = _kg(light, *args, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["command"] == args[0]
    assert DECOY_MARK not in done.stderr


def test_default_engine_is_local_with_one_line_saying_so(
    light: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    out = tmp_path / "savepoint-m1024"
    done = _kg(light, "rescale", SAVEPOINT, "--from", "3", "--to", "4", "-m", "1024", "--out", out, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["engine"] == "local" and "pyspark is not installed" in doc["engine_reason"]
    notes = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and "pyspark is not installed" in notes[0]
    assert "pip install -e '.[spark]'" in notes[0]
    gate = _kg(light, "check", out, "--parallelism", "4", "--max-parallelism", "1024")
    assert gate.returncode == 0, gate.stdout + gate.stderr


def test_explicit_local_engine_rescales_a_snapshot_quietly(
    light: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    done = _kg(
        light, "rescale", SNAPSHOT, "--to", "4", "--out", tmp_path / "r", "--engine", "local", "--json"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["engine_reason"] == "--engine local"
    # Only kg's own line: the snapshot's operators run at 3 and 2 and no --from was given.
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("kg: warning: without --from or --operator every operator is rescaled")
    assert _kg(light, "verify", tmp_path / "r").returncode == 0


def test_engine_spark_without_pyspark_exits_6_with_the_pip_command(
    light: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    done = _kg(light, "rescale", SNAPSHOT, "--to", "4", "--out", tmp_path / "r", "--engine", "spark")
    assert done.returncode == 6
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install -e '.[spark]'" in done.stderr and "Traceback" not in done.stderr
    assert "the kg wheel with [spark] (docs/how-to/install.md#extras)" in done.stderr
    assert not (tmp_path / "r").exists()
    # The environment variable default behaves the same.
    kg, env = light
    via_env = subprocess.run(
        [str(kg), "rescale", str(SNAPSHOT), "--to", "4", "--out", str(tmp_path / "r2"), "--json"],
        env=dict(env, KG_ENGINE="spark"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert via_env.returncode == 6
    assert json.loads(via_env.stdout)["error"]["code"] == "PYSPARK_MISSING"
