"""Session fixtures for the Spark standalone cluster suite (marker ``cluster``): one cluster per run.

``spark_cluster`` starts a master and two 1-core workers from pyspark's own scripts
(``tests/cluster/standalone.py``) and stops them at the end of the session, failing if a process is left.
``run_kg`` runs the installed ``kg`` script (beside ``sys.executable``) as a subprocess: a SparkContext
cannot be shared with the test session's own embedded one, and the CLI is what users run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.standalone import StandaloneCluster

KG = Path(sys.executable).parent / "kg"

KgRunner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two workers (1 core, 1 GB each) on 127.0.0.1, all registered; stopped at the end."""
    cluster = StandaloneCluster.start(tmp_path_factory.mktemp("spark-cluster"), workers=2)
    yield cluster
    cluster.stop()


def kg_env() -> dict[str, str]:
    """Return the environment of a kg process: the executors' Python is the venv's, Spark binds 127.0.0.1.

    PATH keeps the test session's decoy ``python3``/``python`` first (tests/conftest.py): executors that
    started "whatever python3 is on PATH" would fail kg's worker probe (exit 6).
    """
    env = dict(os.environ)
    for name in ("KG_ENGINE", "KG_MASTER", "KG_JSON", "KG_QUIET"):
        env.pop(name, None)
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", NO_COLOR="1", COLUMNS="120")
    return env


@pytest.fixture(scope="session")
def run_kg() -> KgRunner:
    """Return ``run(*args, cwd=None) -> CompletedProcess``: the ``kg`` script with ``kg_env()``."""
    if not KG.is_file():
        raise RuntimeError(f"no kg script beside {sys.executable}: pip install -e '.[spark,test]'")

    def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KG), *map(str, args)],
            capture_output=True,
            text=True,
            env=kg_env(),
            cwd=cwd,
            timeout=600,
            check=False,
        )

    return run
