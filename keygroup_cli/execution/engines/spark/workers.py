"""Spark's Python workers: the interpreter they run, the path they import kg from, and the probe.

Which Python runs the tasks: in local mode kg's own interpreter (``sys.executable``), so a pipx install or
an unactivated venv works whatever ``python3`` is first on PATH. ``spark.pyspark.python`` (``--conf``) and
``PYSPARK_PYTHON`` win when set; on a cluster, where executors have their own Python, Spark's default
applies unless one of them is set. Before any work, one tiny task per core checks that the workers start
and import kg and its dependencies (``require_workers``), so a broken worker environment is one line and
exit 6.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import keygroup_cli
from keygroup_cli.core.errors import MissingDependencyError
from keygroup_cli.execution.engines.spark.errors import worker_cause
from keygroup_cli.execution.engines.spark.jvm import class_archive_complete, keep_console_log

if TYPE_CHECKING:
    from pyspark import SparkContext


#: Modules a Python worker must import to run kg's tasks.
WORKER_MODULES = (
    "numpy",
    "pyarrow",
    "mmh3",
    "xxhash",
    "keygroup_cli",
    # What the read and write tasks run, and the task classes their closures hold (unpickling one imports
    # its module: about 0.1 s for all three): imported by the probe or the prestarted daemon, the first
    # task of each worker does not pay for it.
    "keygroup_cli.execution.engines.spark.tasks",
    "keygroup_cli.execution.jobs.savepoint",
    "keygroup_cli.execution.jobs.snapshot",
    "keygroup_cli.execution.jobs.state_edit",
)


#: At most this many probe tasks (one per core the application has: each executor starts its workers).
MAX_PROBES = 1024


def worker_python(master: str | None, config: dict[str, str] | None = None) -> str | None:
    """Return the interpreter kg starts Spark's Python workers with, or None to leave Spark's choice.

    ``spark.pyspark.python`` in ``config`` wins, then ``PYSPARK_PYTHON`` (Spark reads it itself: None);
    otherwise, in local mode, kg's own interpreter, so the workers import exactly the packages kg does.
    On a cluster the executors have their own Python, so Spark's default stays (None).
    """
    configured = (config or {}).get("spark.pyspark.python")
    if configured:
        return configured
    if os.environ.get("PYSPARK_PYTHON"):
        return None
    if (master is None or master.startswith("local")) and sys.executable:
        return sys.executable
    return None


def kgs_own_workers(sc: SparkContext) -> bool:
    """Return whether ``sc``'s Python workers are kg's own interpreter on this machine (a local master).

    They then import kg from the driver's own path with the driver's packages: ``require_workers`` has
    nothing to find, and its job (about 0.2 s of a local run) is skipped; the first task starts them.
    """
    return sc.master.startswith("local") and sc.pythonExec == sys.executable


def require_workers(sc: SparkContext, master: str | None = None) -> None:
    """Run one tiny task per core: it starts a Python worker, imports what kg's tasks need, loads kernels.

    One per core, so that every executor starts its Python workers and imports kg here, all at once,
    rather than in its first read task (on a cluster, a fixed cost per executor that would otherwise
    come after the previous executor's).

    A worker that cannot start (no such interpreter, a decoy on PATH), runs another Python version than
    the driver, or cannot import kg or one of its dependencies fails here, before anything is read or
    written, as one line naming the interpreter and the fix.

    Raises:
        MissingDependencyError: ``SPARK_WORKER_FAILED``.
    """
    python = sc.pythonExec
    modules = WORKER_MODULES

    def probe(_index: int) -> tuple[str, str, list[str]]:
        # Defined in a function so that cloudpickle ships it by value: unpickling it imports nothing.
        import importlib
        import sys as worker_sys

        problems = []
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - each failure is reported as a cause
                problems.append(f"{type(exc).__name__}: {exc}")
        if not problems:
            # numba and the kernels' cached code (about 0.5 s): here, at once on every executor, rather
            # than in each one's first read task. Optional: without numba the tasks run the Python code.
            try:
                importlib.import_module("keygroup_cli.flink").warm_kernels()
            except Exception:  # noqa: BLE001, S110 - the first task loads them, or runs without them
                pass
        major, minor = worker_sys.version_info[:2]
        return worker_sys.executable, f"{major}.{minor}", problems

    try:
        count = max(1, min(sc.defaultParallelism, MAX_PROBES))
        answers = sc.parallelize(range(count), count).map(probe).collect()
    except Exception as exc:  # noqa: BLE001 - py4j wraps every worker failure in its own types
        keep_console_log()
        raise MissingDependencyError(
            f"Spark's Python workers ({python}) failed to start: {worker_cause(exc)}; {_worker_fix(master)}",
            code="SPARK_WORKER_FAILED",
        ) from None
    executable, version, problems = next((a for a in answers if a[2]), answers[0])
    # The session ran a job: the class archive its JVM writes at exit holds what a job loads.
    class_archive_complete()
    if problems:
        raise MissingDependencyError(
            f"Spark's Python workers ({executable}, Python {version}) cannot import what kg needs "
            f"({'; '.join(problems)}); {_worker_fix(master)}",
            code="SPARK_WORKER_FAILED",
        )


def _worker_fix(master: str | None) -> str:
    if master is None or master.startswith("local"):
        return (
            "set PYSPARK_PYTHON (or --conf spark.pyspark.python=...) to a Python that has kg installed, "
            f"or unset it to use kg's own ({sys.executable})"
        )
    return (
        "install kg on the executors (the kg wheel with [spark], docs/how-to/install.md#extras) and point "
        "--conf spark.pyspark.python=... (or PYSPARK_PYTHON) at that Python"
    )


def pythonpath_config() -> dict[str, str]:
    """Return the workers' ``PYTHONPATH``: kg's own root first, so a checkout that is not installed works."""
    root = str(Path(keygroup_cli.__file__).resolve().parent.parent)
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"spark.executorEnv.PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


__all__ = [
    "MAX_PROBES",
    "kgs_own_workers",
    "WORKER_MODULES",
    "require_workers",
    "pythonpath_config",
    "worker_python",
]
