"""The Spark engine: the jobs of ``execution.jobs.model``, the local engine's task bodies, run as Spark tasks.

The only package of kg that imports ``pyspark`` (and only inside functions, so that a missing pyspark or
Java becomes a one-line ``MissingDependencyError`` rather than an ImportError or a JVM stack trace).

By concern:

- ``session``: finding or starting the SparkContext and SparkSession, kg's settings, the thread-based
  start and Ctrl-C while it runs;
- ``jvm``: finding Java, the class-data-sharing archive of Spark's classes, the JVM's console log;
- ``workers``: the Python the workers run, the path they import kg from, the probe that checks them;
- ``jobs``: ``SparkExecutor``, which runs the task model's read, shuffle and write jobs;
- ``tasks``: what runs inside Spark tasks, on the workers;
- ``errors``: a task's kg error, a failed Spark job and py4j's errors mapped to ``KgError``;
- ``data``: keyed state as data (``kg export --engine spark``, ``kg.read_state(engine="spark")``);
- ``daemon``: the Python daemon of kg's embedded sessions (``spark.python.daemon.module``);
- ``prestart``: that daemon prestarted beside the JVM, its imports done while the JVM starts.

Tasks write to the target directly, so with a ``--master`` other than local a local DEST's staging
directory must be on a filesystem every executor mounts at the same path (an object-store DEST needs
none), and kg must be importable on the executors. A re-key's shuffle goes through spill files in kg's
scratch directory with a local master (the shared-store exchange, ``engines.spill``); with a cluster one,
through the object store under an ``s3://`` DEST (or ``spark.kg.exchange.dir``), else through Spark's
shuffle unless ``spark.kg.exchange=shared`` says its executors reach the scratch directory too
(``jobs.exchange_mode``).

The names below are loaded on first access (module ``__getattr__``): every Spark Python worker imports
``spark.daemon``, which must not pull in pyarrow, numpy or the task model through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keygroup_cli.execution.engines.spark.data import state_dataframe, state_reader
    from keygroup_cli.execution.engines.spark.jobs import SparkExecutor
    from keygroup_cli.execution.engines.spark.jvm import (
        INSTALL_JAVA,
        cache_directory,
        class_data_sharing_option,
        keep_console_log,
        require_java,
    )
    from keygroup_cli.execution.engines.spark.session import (
        DAEMON_MODULE,
        SESSION_CONFIG,
        require_pyspark,
        session_settings,
        spark_context,
        spark_session,
    )
    from keygroup_cli.execution.engines.spark.workers import WORKER_MODULES, require_workers, worker_python

#: Public name → the module of this package that defines it, imported on first access.
_LAZY = {
    "DAEMON_MODULE": "keygroup_cli.execution.engines.spark.session",
    "SESSION_CONFIG": "keygroup_cli.execution.engines.spark.session",
    "require_pyspark": "keygroup_cli.execution.engines.spark.session",
    "session_settings": "keygroup_cli.execution.engines.spark.session",
    "spark_context": "keygroup_cli.execution.engines.spark.session",
    "spark_session": "keygroup_cli.execution.engines.spark.session",
    "INSTALL_JAVA": "keygroup_cli.execution.engines.spark.jvm",
    "cache_directory": "keygroup_cli.execution.engines.spark.jvm",
    "require_java": "keygroup_cli.execution.engines.spark.jvm",
    "class_data_sharing_option": "keygroup_cli.execution.engines.spark.jvm",
    "keep_console_log": "keygroup_cli.execution.engines.spark.jvm",
    "WORKER_MODULES": "keygroup_cli.execution.engines.spark.workers",
    "require_workers": "keygroup_cli.execution.engines.spark.workers",
    "worker_python": "keygroup_cli.execution.engines.spark.workers",
    "SparkExecutor": "keygroup_cli.execution.engines.spark.jobs",
    "state_dataframe": "keygroup_cli.execution.engines.spark.data",
    "state_reader": "keygroup_cli.execution.engines.spark.data",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "DAEMON_MODULE",
    "INSTALL_JAVA",
    "SESSION_CONFIG",
    "SparkExecutor",
    "WORKER_MODULES",
    "cache_directory",
    "require_java",
    "require_workers",
    "class_data_sharing_option",
    "keep_console_log",
    "require_pyspark",
    "session_settings",
    "spark_context",
    "spark_session",
    "state_dataframe",
    "state_reader",
    "worker_python",
]
