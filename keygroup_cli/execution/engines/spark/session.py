"""Finding or starting the Spark engine's SparkContext and SparkSession, with kg's settings.

The JVM starts in a thread of its own so that Ctrl-C interrupts the wait, never the start (``_launch``);
a context kg started is stopped when kg exits. Under ``spark-submit`` the submitted JVM and its settings
are used.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from keygroup_cli.core.errors import MissingDependencyError
from keygroup_cli.execution.engines.spark.jvm import (
    class_data_sharing_option,
    gateway_message,
    keep_console_log,
    new_console_log,
    require_java,
)
from keygroup_cli.execution.engines.spark.workers import pythonpath_config, worker_python

if TYPE_CHECKING:
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession


#: The Python daemon of kg's embedded sessions (``spark.python.daemon.module``).
DAEMON_MODULE = "keygroup_cli.execution.engines.spark.daemon"


#: Settings of a session kg creates itself (an existing session is used as it is).
SESSION_CONFIG = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A rescale is one short job; dynamic allocation and speculation would only add latency.
    "spark.speculation": "false",
    # The driver JVM only schedules tasks and moves shuffle blocks (Python workers do the work): the C1
    # compiler alone and the serial collector start it markedly faster on small machines.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def require_pyspark() -> None:
    """Fail with one line when pyspark cannot be imported.

    Raises:
        MissingDependencyError: ``PYSPARK_MISSING``.
    """
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "pyspark is not installed: pip install 'pyspark>=3.5' (or use --engine local)",
            code="PYSPARK_MISSING",
        ) from None


def spark_session(
    master: str | None = None, *, verbose: bool = False, config: dict[str, str] | None = None
) -> SparkSession:
    """Return the active SparkSession, or one over ``spark_context`` (started on demand).

    For DataFrames (``kg.read_state(..., engine="spark")``); a rescale or an export needs only the context,
    and building a session costs Spark SQL's start (about 6 s on two cores).

    Raises:
        MissingDependencyError: As ``spark_context``.
    """
    require_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    from pyspark import SparkContext

    with _STARTING:  # a context another thread is starting is used once it is whole
        if SparkContext._active_spark_context is not None:
            # A session started on another thread (the active session is per thread): use it.
            return SparkSession.builder.getOrCreate()
    return SparkSession(spark_context(master, verbose=verbose, config=config))


#: Held while kg starts a SparkContext. pyspark makes a context the active one before initializing it
#: (``_ensure_initialized`` runs before ``_do_init``), so without it a caller on another thread would take a
#: half-made context: in a process that goes on after a failed run (kg's Python API, tests), a
#: ``PendingExecutor`` thread may still be starting one.
_STARTING = threading.RLock()


def spark_context(
    master: str | None = None, *, verbose: bool = False, config: dict[str, str] | None = None
) -> SparkContext:
    """Return the active SparkContext, or start one (embedded ``local[*]`` unless ``master`` is given).

    Without ``verbose`` the JVM's console output (log4j start-up lines, warnings) goes to a log file under
    ``$KG_CACHE_DIR/logs`` (removed at exit unless the run failed) and Spark's log level is ERROR. In local
    mode the Python workers run kg's own interpreter unless ``spark.pyspark.python`` or ``PYSPARK_PYTHON``
    says otherwise.

    Raises:
        MissingDependencyError: pyspark is not installed, Java is missing or JAVA_HOME is broken, or the
            Java gateway does not start (``JAVA_MISSING``, ``JAVA_HOME_BROKEN``, ``PYSPARK_MISSING``,
            ``SPARK_GATEWAY_FAILED``).
    """
    require_pyspark()
    from pyspark import SparkContext

    with _STARTING:
        active = SparkContext._active_spark_context
        if active is not None:
            return active
        require_java()
        context = _launch(_session_conf(master, config), verbose)
        python = worker_python(context.master, config)
        if python is not None:
            # The interpreter every Python worker is started with (pickled into each task's function).
            context.pythonExec = python
        # A context kg started is stopped when kg exits: the application ends FINISHED on a cluster
        # manager and its event log is complete (no ``.inprogress``).
        atexit.register(_stop_quietly, context)
        context.setLogLevel("WARN" if verbose else "ERROR")
        return context


def _session_conf(master: str | None, config: dict[str, str] | None) -> SparkConf:
    """Return the settings of a session kg starts: kg's, then the caller's ``config`` (which win)."""
    from pyspark import SparkConf

    # Under spark-submit the JVM is already running with spark-submit's --master, --name and
    # spark-defaults.conf (PySpark's PythonRunner hands its gateway over in PYSPARK_GATEWAY_PORT): those win
    # unless kg's own --master is given. Otherwise kg's session is embedded (local[*]) by default.
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    conf = SparkConf()
    if master or not submitted:
        conf.setMaster(master or "local[*]")
    if not submitted:
        conf.setAppName("kg rescale")
    for key, value in session_settings(master, config, submitted=submitted).items():
        conf.set(key, value)
    return conf


def session_settings(
    master: str | None, config: dict[str, str] | None, *, submitted: bool = False
) -> dict[str, str]:
    """Return the settings kg gives a session it starts: its own, then the caller's ``config`` (which win)."""
    settings = {**SESSION_CONFIG, **pythonpath_config(), **(config or {})}
    local = (master or ("local" if not submitted else "")).startswith("local")
    if local and worker_python(master, config) == sys.executable:
        # kg's own interpreter runs the workers: their daemon imports pyspark from the installed package,
        # with bytecode, rather than from Spark's zip (``spark.daemon``). Another interpreter (PYSPARK_PYTHON,
        # spark.pyspark.python) keeps pyspark's daemon: it may not have kg at all.
        settings.setdefault("spark.python.daemon.module", DAEMON_MODULE)
    sharing = class_data_sharing_option()
    if sharing and "spark.driver.extraJavaOptions" not in (config or {}):
        settings["spark.driver.extraJavaOptions"] = f"{settings['spark.driver.extraJavaOptions']} {sharing}"
    return settings


def _launch(conf: SparkConf, verbose: bool) -> SparkContext:
    """Start the JVM (its console into this run's log unless ``verbose``) and a SparkContext on it.

    The start runs in a thread of its own, waited for here, so that Ctrl-C interrupts the wait, never the
    start: pyspark's ``launch_gateway``, interrupted, removes the directory its JVM is about to write its
    connection file into, and that JVM then never reaches the loop that ends it when its stdin (a pipe
    from kg) closes: it would run on after kg, orphaned. Left alone, the start either completes or is cut
    off when kg exits, and the JVM ends with kg either way (an unfinished start leaves pyspark's connection
    directory, one small file, under ``$TMPDIR``).

    Raises:
        MissingDependencyError: The Java gateway does not start (``SPARK_GATEWAY_FAILED``).
    """
    console_log = new_console_log()
    outcome: dict[str, Any] = {}

    def start() -> None:
        from pyspark import SparkContext
        from pyspark.java_gateway import launch_gateway

        try:
            # The JVM (and the Python workers it forks) write their console output to the log for the
            # whole session; handing it to the JVM's Popen, rather than redirecting our own descriptors,
            # keeps stdout clean for --json and stderr for kg's progress even while the JVM starts.
            with open(console_log, "ab") as jvm_console:
                gateway = launch_gateway(  # type: ignore[no-untyped-call]
                    conf, popen_kwargs=None if verbose else {"stdout": jvm_console, "stderr": jvm_console}
                )
            outcome["context"] = SparkContext(conf=conf, gateway=gateway)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread below
            outcome["error"] = exc

    starter = threading.Thread(target=start, name="kg-spark-start", daemon=True)
    starter.start()
    # A timed join keeps the waiting thread responsive to Ctrl-C (a bare join() would not be).
    while starter.is_alive():
        starter.join(0.2)
    error = outcome.get("error")
    if error is None:
        context: SparkContext = outcome["context"]
        if threading.current_thread() is threading.main_thread():
            # What pyspark does for a context made on the main thread: Ctrl-C cancels Spark's jobs too.
            signal.signal(signal.SIGINT, functools.partial(_cancel_jobs, context))
        return context
    if isinstance(error, MissingDependencyError) or not isinstance(error, Exception):
        raise error
    # py4j/pyspark raise many types; all mean "no gateway".
    keep_console_log()
    raise MissingDependencyError(gateway_message(error, console_log), code="SPARK_GATEWAY_FAILED") from None


def _cancel_jobs(context: SparkContext, _signum: int, _frame: Any) -> None:
    """Cancel the context's Spark jobs, then raise ``KeyboardInterrupt`` (a SIGINT handler)."""
    try:
        context.cancelAllJobs()
    finally:
        raise KeyboardInterrupt


def _stop_quietly(context: SparkContext) -> None:
    with contextlib.suppress(Exception):
        context.stop()


__all__ = [
    "DAEMON_MODULE",
    "SESSION_CONFIG",
    "require_pyspark",
    "session_settings",
    "spark_context",
    "spark_session",
]
