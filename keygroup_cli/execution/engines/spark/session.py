"""Finding or starting the Spark engine's SparkContext and SparkSession, with kg's settings.

The JVM starts in a thread of its own so that Ctrl-C interrupts the wait, never the start (``_launch``);
a context kg started is stopped when kg exits. Under ``spark-submit`` the submitted JVM and its settings
are used. An embedded session's Python daemon is prestarted as its JVM is launched (``spark.prestart``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keygroup_cli.core.errors import MissingDependencyError
from keygroup_cli.execution.engines.spark.jvm import (
    class_data_sharing_option,
    direct_launch,
    forget_launch,
    gateway_message,
    keep_console_log,
    launch_command,
    learn_launch,
    logging_option,
    new_console_log,
    require_java,
)
from keygroup_cli.execution.engines.spark.prestart import PRESTARTED_SOCKET, PrestartedDaemon
from keygroup_cli.execution.engines.spark.workers import pythonpath_config, worker_python

if TYPE_CHECKING:
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession


#: The Python daemon of kg's embedded sessions (``spark.python.daemon.module``).
DAEMON_MODULE = "keygroup_cli.execution.engines.spark.daemon"


#: Settings of a session kg creates itself (an existing session is used as it is). Spark's UI is off with
#: a local master (its Jetty server is part of the start, and nobody watches a one-machine run) and on
#: with any other (``session_settings``); ``--conf spark.ui.enabled=...`` decides either way.
SESSION_CONFIG = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A rescale is one short job; dynamic allocation and speculation would only add latency.
    "spark.speculation": "false",
    # The driver JVM only schedules tasks and moves shuffle blocks (Python workers do the work): the C1
    # compiler alone (one thread of it), the serial collector and no performance-data file start it
    # markedly faster on small machines.
    "spark.driver.extraJavaOptions": (
        "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC -XX:-UsePerfData"
    ),
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
        conf = _session_conf(master, config)
        prestarted = _prestart(conf)
        try:
            context = _launch(conf, verbose)
        except BaseException:
            if prestarted is not None:
                prestarted.close()
            raise
        python = worker_python(context.master, config)
        if python is not None:
            # The interpreter every Python worker is started with (pickled into each task's function).
            context.pythonExec = python
        # A context kg started is stopped when kg exits: the application ends FINISHED on a cluster
        # manager and its event log is complete (no ``.inprogress``).
        atexit.register(_stop_quietly, context)
        context.setLogLevel("WARN" if verbose else "ERROR")
        return context


def _prestart(conf: SparkConf) -> PrestartedDaemon | None:
    """Prestart the Python daemon of a local session that runs kg's (``spark.prestart``); None: not here.

    Its socket goes into the workers' environment, where kg's daemon module finds it. It is closed at
    exit (it ends then if nothing took it over).
    """
    settings = dict(conf.getAll())
    if settings.get("spark.python.daemon.module") != DAEMON_MODULE:
        return None
    prestarted = PrestartedDaemon.start(settings)
    if prestarted is not None:
        conf.set(f"spark.executorEnv.{PRESTARTED_SOCKET}", prestarted.socket)
        atexit.register(prestarted.close)
    return prestarted


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
    if not local and "spark.ui.enabled" not in (config or {}):
        del settings["spark.ui.enabled"]  # a cluster keeps Spark's UI (its default: on)
    if local and worker_python(master, config) == sys.executable:
        # kg's own interpreter runs the workers: their daemon imports pyspark from the installed package,
        # with bytecode, rather than from Spark's zip (``spark.daemon``). Another interpreter (PYSPARK_PYTHON,
        # spark.pyspark.python) keeps pyspark's daemon: it may not have kg at all.
        settings.setdefault("spark.python.daemon.module", DAEMON_MODULE)
    if "spark.driver.extraJavaOptions" not in (config or {}):
        # kg's driver options, unless the caller gives their own: the class archive, then log4j's setup.
        for option in (class_data_sharing_option(), logging_option(settings)):
            if option:
                settings["spark.driver.extraJavaOptions"] += f" {option}"
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

        try:
            # The JVM (and the Python workers it forks) write their console output to the log for the
            # whole session; handing it to the JVM's Popen, rather than redirecting our own descriptors,
            # keeps stdout clean for --json and stderr for kg's progress even while the JVM starts.
            with open(console_log, "ab") as jvm_console:
                gateway = _gateway(
                    conf, None if verbose else {"stdout": jvm_console, "stderr": jvm_console}, console_log
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


def _gateway(conf: SparkConf, popen_kwargs: dict[str, Any] | None, console_log: Path) -> Any:
    """Start the driver JVM and connect to its Py4J gateway: directly where kg may, else via spark-submit.

    Directly (``jvm.direct_launch``): the command Spark's launcher printed for an earlier session,
    started here, without spark-submit's shell, Python and launcher JVM. A direct start that fails is
    forgotten and retried through spark-submit, whose command is learnt (``jvm.learn_launch``) when kg
    may start it directly next time.
    """
    from pyspark.java_gateway import launch_gateway

    settings = dict(conf.getAll())
    direct = direct_launch(settings)
    launch = launch_command(settings) if direct else None
    if launch is not None:
        try:
            return _connect(*launch, popen_kwargs)
        except Exception:  # noqa: BLE001 - spark-submit below starts it, or says why it cannot
            forget_launch()
    learn = direct and popen_kwargs is not None  # spark-class prints the command: into the log only
    if learn:
        os.environ["SPARK_PRINT_LAUNCH_COMMAND"] = "1"
    try:
        gateway = launch_gateway(conf, popen_kwargs=popen_kwargs)  # type: ignore[no-untyped-call]
    finally:
        if learn:
            os.environ.pop("SPARK_PRINT_LAUNCH_COMMAND", None)
    if learn:
        learn_launch(console_log, settings)
    return gateway


def _connect(command: list[str], environment: dict[str, str], popen_kwargs: dict[str, Any] | None) -> Any:
    """Start the driver JVM with ``command`` and connect to its gateway, as pyspark's ``launch_gateway``.

    Raises:
        RuntimeError: The JVM exited before it wrote its gateway's port.
    """
    import shutil
    import subprocess
    import tempfile
    import time

    from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
    from py4j.java_gateway import GatewayParameters, JavaGateway
    from pyspark.java_gateway import java_import
    from pyspark.serializers import UTF8Deserializer, read_int

    directory = tempfile.mkdtemp(prefix="kg-spark-")
    try:
        info = os.path.join(directory, "gateway")
        environment = {**environment, "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": info}
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,  # the JVM ends when this pipe closes, i.e. when kg exits
            env=environment,
            # Ctrl-C is kg's to handle: not sent to the JVM (as pyspark's own launch does).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
            **(popen_kwargs or {}),
        )
        while process.poll() is None and not os.path.isfile(info):
            time.sleep(0.02)
        if not os.path.isfile(info):
            raise RuntimeError(f"the Java gateway exited ({process.returncode}) before sending its port")
        with open(info, "rb") as connection:
            port = read_int(connection)
            secret = UTF8Deserializer().loads(connection)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    gateway: Any
    if os.environ.get("PYSPARK_PIN_THREAD", "true").lower() == "true":
        gateway = ClientServer(
            java_parameters=JavaParameters(port=port, auth_token=secret, auto_convert=True),
            python_parameters=PythonParameters(port=0, eager_load=False),
        )
    else:
        gateway = JavaGateway(
            gateway_parameters=GatewayParameters(port=port, auth_token=secret, auto_convert=True)
        )
    gateway.proc = process
    for name in _GATEWAY_IMPORTS:
        java_import(gateway.jvm, name)
    return gateway


#: The JVM classes pyspark's ``launch_gateway`` imports into a new gateway's view.
_GATEWAY_IMPORTS = (
    "org.apache.spark.SparkConf",
    "org.apache.spark.api.java.*",
    "org.apache.spark.api.python.*",
    "org.apache.spark.ml.python.*",
    "org.apache.spark.mllib.api.python.*",
    "org.apache.spark.resource.*",
    "org.apache.spark.sql.Encoders",
    "org.apache.spark.sql.OnSuccessCall",
    "org.apache.spark.sql.functions",
    "org.apache.spark.sql.classic.*",
    "org.apache.spark.sql.api.python.*",
    "org.apache.spark.sql.hive.*",
    "scala.Tuple2",
)


def _cancel_jobs(context: SparkContext, _signum: int, _frame: Any) -> None:
    """Cancel the context's Spark jobs, then raise ``KeyboardInterrupt`` (a SIGINT handler)."""
    try:
        context.cancelAllJobs()
    finally:
        raise KeyboardInterrupt


def _stop_quietly(context: SparkContext) -> None:
    """Stop the context kg started, at exit: the JVM's side, not the accumulator server's.

    pyspark's ``stop`` ends with the accumulator server's ``shutdown``, which waits for its handler's
    one-second poll: about 0.8 s of every run's wall. The process is exiting, and the server's thread is
    a daemon: only the JVM's side is stopped (the application ends FINISHED, its event log is complete).
    """
    server = getattr(context, "_accumulatorServer", None)
    if server is not None and isinstance(server.server_address, tuple):
        # A TCP server (the default): nothing of it outlives the process. A Unix-socket one is shut down
        # by ``stop`` as usual, which removes its socket file.
        context._accumulatorServer = None  # type: ignore[assignment]
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
