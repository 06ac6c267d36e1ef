"""The Spark engine: the jobs of ``execution.jobs.model``, the local engine's task bodies, run as Spark tasks.

The only module of kg that imports ``pyspark`` (and only inside functions, so that a missing pyspark or
Java becomes a one-line ``MissingDependencyError`` rather than an ImportError or a JVM stack trace).

- A narrow job (a kg snapshot's parallelism change): one task per new subtask, streaming its read tasks
  (pieces of old files) straight into its file (``pipeline.stream``): a narrow stage, no shuffle, as
  Flink itself intersects key-group ranges.
- A job with a shuffle: a map task per read task routes its rows (``pipeline.route``) and emits them as
  Arrow IPC blocks keyed by ``(new subtask, bucket, read task, batch)``; ``partitionBy`` sends new
  subtask *j*'s blocks to partition *j*; each reduce task appends them to one spill file on its
  executor's local disk, then writes its file bucket by bucket, each bucket's blocks in input order
  (``_buckets``, ``pipeline.write``). Blocks, not rows, cross the shuffle, so no pandas and no per-row
  conversion is needed, and no Python-side sort (PySpark's ``repartitionAndSortWithinPartitions`` sorts
  in the Python worker and spills pickles past ``spark.python.worker.memory``).
- The byte route (a maxParallelism change of a savepoint, ``KeyedJob.parts``) runs the same stages with
  the parts its map tasks pack (``flink.keyed.entry_parts``) as the shuffle records: plain bytes, no Arrow.
- Copy jobs run on the driver.
- ``--format native``: each write task builds its new subtask's RocksDB database on its executor (rocksdict
  is imported there, by the task); an operator that keeps its maxParallelism is a narrow job.

Tasks write to the target directory directly, so with a ``--master`` other than local the staging
directory beside DEST must be on a filesystem every executor mounts at the same path, and kg must be
importable on the executors.

Which Python runs the tasks: in local mode kg's own interpreter (``sys.executable``), so a pipx install or
an unactivated venv works whatever ``python3`` is first on PATH. ``spark.pyspark.python`` (``--conf``) and
``PYSPARK_PYTHON`` win when set; on a cluster, where executors have their own Python, Spark's default
applies unless one of them is set. Before any work, one tiny task checks that the workers start and import
kg and its dependencies (``check_workers``), so a broken worker environment is one line and exit 6.
"""

from __future__ import annotations

import atexit
import bisect
import contextlib
import functools
import hashlib
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import keygroup_cli
from keygroup_cli.core.cache import cache_directory
from keygroup_cli.core.errors import (
    ExecutionError,
    InvalidArgumentError,
    InvalidSnapshotError,
    KgError,
    MissingDependencyError,
    UnsupportedFormatError,
    environment_error,
)
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.execution.jobs import model as pipeline
from keygroup_cli.execution.jobs.model import CopyJob, KeyedJob, Progress, W
from keygroup_cli.flink.data.lookup import find_operator
from keygroup_cli.flink.data.tables import BatchReader, keyed_file_count, typed_states
from keygroup_cli.flink.keyed.entry_parts import part_entries
from keygroup_cli.flink.savepoint import Savepoint
from keygroup_cli.snapshot.parquet import DEFAULT_BATCH_ROWS

if TYPE_CHECKING:
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

INSTALL_JAVA = "install Java 17 or newer (e.g. apt-get install openjdk-17-jre-headless) or use --engine local"

log = logging.getLogger("keygroup_cli")

#: Modules a Python worker must import to run kg's tasks.
WORKER_MODULES = (
    "numpy",
    "pyarrow",
    "mmh3",
    "xxhash",
    "keygroup_cli",
    # What the read and write tasks run: imported by the probe, the first task of each executor does not
    # pay for it.
    "keygroup_cli.execution.engines.spark",
)
#: The Python daemon of kg's embedded sessions (``spark.python.daemon.module``).
DAEMON_MODULE = "keygroup_cli.execution.engines.spark_daemon"
#: At most this many probe tasks (one per core the application has: each executor starts its workers).
MAX_PROBES = 1024

#: Console logs of earlier sessions kept in the cache directory (only those of failed runs are kept).
KEPT_LOGS = 5

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
        check_java()
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
    settings = {**SESSION_CONFIG, **_pythonpath_config(), **(config or {})}
    local = (master or ("local" if not submitted else "")).startswith("local")
    if local and worker_python(master, config) == sys.executable:
        # kg's own interpreter runs the workers: their daemon imports pyspark from the installed package,
        # with bytecode, rather than from Spark's zip (``keygroup_cli.execution.engines.spark_daemon``). Another interpreter
        # (PYSPARK_PYTHON, spark.pyspark.python) keeps pyspark's daemon: it may not have kg at all.
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
    console_log = _console_log()
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
    raise MissingDependencyError(_gateway_message(error, console_log), code="SPARK_GATEWAY_FAILED") from None


def _cancel_jobs(context: SparkContext, _signum: int, _frame: Any) -> None:
    """Cancel the context's Spark jobs, then raise ``KeyboardInterrupt`` (a SIGINT handler)."""
    try:
        context.cancelAllJobs()
    finally:
        raise KeyboardInterrupt


def _stop_quietly(context: SparkContext) -> None:
    with contextlib.suppress(Exception):
        context.stop()


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


def check_workers(sc: SparkContext, master: str | None = None) -> None:
    """Run one tiny task per core that starts a Python worker and imports what kg's tasks need.

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
        major, minor = worker_sys.version_info[:2]
        return worker_sys.executable, f"{major}.{minor}", problems

    try:
        count = max(1, min(sc.defaultParallelism, MAX_PROBES))
        answers = sc.parallelize(range(count), count).map(probe).collect()
    except Exception as exc:  # noqa: BLE001 - py4j wraps every worker failure in its own types
        keep_console_log()
        raise MissingDependencyError(
            f"Spark's Python workers ({python}) failed to start: {_worker_cause(exc)}; {_worker_fix(master)}",
            code="SPARK_WORKER_FAILED",
        ) from None
    executable, version, problems = next((a for a in answers if a[2]), answers[0])
    if problems:
        raise MissingDependencyError(
            f"Spark's Python workers ({executable}, Python {version}) cannot import what kg needs "
            f"({'; '.join(problems)}); {_worker_fix(master)}",
            code="SPARK_WORKER_FAILED",
        )


def _worker_cause(exc: BaseException) -> str:
    """Return the one line of a failed Spark job's text that says why (py4j's text is a stack trace)."""
    text = str(exc)
    mismatch = re.search(r"PYTHON_VERSION_MISMATCH\][^\n]*?(\d+\.\d+)[^\n]*?(\d+\.\d+)", text)
    if "PYTHON_VERSION_MISMATCH" in text:
        found = f" (worker {mismatch.group(1)}, driver {mismatch.group(2)})" if mismatch else ""
        return f"their Python version differs from kg's{found}"
    said = re.search(r"Error from python worker:\s*\n\s*([^\n]+)", text)
    code = re.search(r"terminated with code: (-?\d+)", text)
    if said:
        return f"the worker said {said.group(1).strip()!r}" + (f" and exited {code.group(1)}" if code else "")
    for pattern in (
        r"Cannot run program \"[^\"]*\"[^\n]*",
        r"(?:ModuleNotFoundError|ImportError): [^\n]*",
        r"Python worker exited unexpectedly[^\n]*",
        r"\w+(?:Error|Exception): [^\n]*",
    ):
        cause = re.search(pattern, text)
        if cause and "An error occurred while calling" not in cause.group(0):
            return cause.group(0).strip()[:300]
    lines = [line for line in text.strip().splitlines() if "An error occurred while calling" not in line]
    return (lines[0].lstrip(": ") if lines else type(exc).__name__)[:300]


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


_console_logs: dict[str, Path | bool] = {}


def _console_log() -> Path:
    """Return this run's Spark console log under the cache directory; it is removed at exit unless kept.

    Logs of failed runs (``keep_console_log``) stay, the newest ``KEPT_LOGS`` of them.
    """
    directory = cache_directory() / "logs"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for old in sorted(directory.glob("spark-*.log"), key=lambda f: f.stat().st_mtime)[:-KEPT_LOGS]:
            old.unlink(missing_ok=True)
    except OSError:
        directory = Path(os.environ.get("TMPDIR", "/tmp"))
    path = directory / f"spark-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    if not _console_logs:
        atexit.register(_remove_console_log)
    _console_logs.update(path=path, keep=False)
    return path


def keep_console_log() -> Path | None:
    """Keep this run's Spark console log after exit (a failure's message points at it); return it."""
    path = _console_logs.get("path")
    _console_logs["keep"] = True
    return path if isinstance(path, Path) else None


def _remove_console_log() -> None:
    path = _console_logs.get("path")
    if isinstance(path, Path) and not _console_logs.get("keep"):
        with contextlib.suppress(OSError):
            path.unlink()


def check_java() -> None:
    """Raise ``MissingDependencyError`` unless a ``java`` launcher can be found the way Spark looks for it."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        launcher = Path(java_home) / "bin" / "java"
        if not (launcher.is_file() and os.access(launcher, os.X_OK)):
            raise MissingDependencyError(
                f"JAVA_HOME={java_home} has no executable bin/java; point JAVA_HOME at a Java 17+ "
                f"installation or unset it ({INSTALL_JAVA})",
                code="JAVA_HOME_BROKEN",
            )
        return
    if shutil.which("java") is None:
        raise MissingDependencyError(
            f"no java on PATH and JAVA_HOME is not set: --engine spark needs Java; {INSTALL_JAVA}",
            code="JAVA_MISSING",
        )


def class_data_sharing_option() -> str:
    """Return the JVM option that maps kg's class-data-sharing archive of Spark's classes, or creates it.

    Loading Spark's classes is about half of a session's start. The first session kg starts writes an
    archive of them when its JVM exits (``-XX:ArchiveClassesAtExit``); later ones map it
    (``-XX:SharedArchiveFile``), which starts the driver about 2 s sooner on two cores. The archive lives
    in ``$KG_CACHE_DIR`` (default ``~/.cache/kg``), one per pyspark version and Java installation, and is
    published only once its writer has finished: ``*.<pid>.partial`` is renamed once process ``pid`` is
    gone and the file has not changed for 30 s. A JVM that cannot use an archive (classpath changed) ignores
    it. ``KG_SPARK_CDS=0`` turns this off; any problem with the cache directory does too (returns "").
    The first run that writes the archive says so on kg's logger (a notice on stderr), once per archive.
    """
    if os.environ.get("KG_SPARK_CDS", "1") == "0":
        return ""
    import pyspark

    cache = cache_directory()
    java = (
        Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        if os.environ.get("JAVA_HOME")
        else shutil.which("java")
    )
    identity = f"{pyspark.__version__}|{Path(java).resolve() if java else ''}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    final = cache / f"spark-{key}.jsa"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for partial in cache.glob(f"spark-{key}.*.partial"):
            pid = int(partial.suffixes[-2].lstrip("."))
            if _finished(pid, partial):
                os.replace(partial, final)
    except (OSError, ValueError):
        return ""
    if final.is_file():
        return f"-XX:SharedArchiveFile={final}"
    announced = cache / f"spark-{key}.announced"
    if not announced.exists():
        # Written once per pyspark version and Java: say so (once), since it takes room in the cache.
        with contextlib.suppress(OSError):
            announced.touch()
        log.info(
            "writing a one-time archive of Spark's classes (about 110 MB) to %s when this run ends, so "
            "later runs start Spark about 2 s sooner; KG_SPARK_CDS=0 turns this off",
            cache,
        )
    return f"-XX:ArchiveClassesAtExit={cache / f'spark-{key}.{os.getpid()}.partial'}"


#: Seconds a finished writer's archive must stay unchanged before it is published.
_SETTLED_SECONDS = 30


def _finished(pid: int, partial: Path) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
        return False  # the writer (or its JVM, dumping at exit) may still be at work
    except ProcessLookupError:
        pass
    except PermissionError:
        return False
    return time.time() - partial.stat().st_mtime > _SETTLED_SECONDS


def _pythonpath_config() -> dict[str, str]:
    # Python workers must import keygroup_cli even when kg runs from a checkout that is not installed.
    root = str(Path(keygroup_cli.__file__).resolve().parent.parent)
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"spark.executorEnv.PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def _gateway_message(exc: Exception, console_log: Path) -> str:
    details = ""
    with contextlib.suppress(OSError):
        details = console_log.read_text(errors="replace")
    if "UnsupportedClassVersionError" in details:
        return f"Spark needs a newer Java than the one found: {INSTALL_JAVA} (details: {console_log})"
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return (
        f"Spark's Java gateway did not start ({type(exc).__name__}: {first}); "
        f"check the Java installation: {INSTALL_JAVA} (details: {console_log})"
    )


class SparkExecutor:
    """Rescale with PySpark: on an existing session, or one started on demand."""

    name = "spark"

    def __init__(
        self,
        master: str | None = None,
        session: SparkSession | None = None,
        verbose: bool = False,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        config: dict[str, str] | None = None,
    ) -> None:
        self._session = session
        self.context = (
            session.sparkContext
            if session is not None
            else spark_context(master, verbose=verbose, config=config)
        )
        self.batch_rows = batch_rows
        check_workers(self.context, master)

    @property
    def session(self) -> SparkSession:
        """Return the session this executor was given, or one over its context (built on first use)."""
        if self._session is None:
            self._session = spark_session()
        return self._session

    def read_pieces(self) -> int:
        """Return how many read tasks to cut each old keyed file into: enough to keep every core busy."""
        return max(1, min(16, 2 * self.context.defaultParallelism))

    def run(
        self,
        jobs: Sequence[KeyedJob[W] | CopyJob],
        scratch: Path,
        on_progress: OnProgress | None = None,
    ) -> dict[str, list[W]]:
        """Run the keyed jobs of each progress stage as one Spark job; return the written files by operator.

        One Spark job, not one per operator: a job's fixed costs (scheduling two stages, a shuffle, Python
        workers picking up new closures) come once, and every operator's tasks share the cores. Narrow
        jobs are one stage of write tasks; shuffled ones a stage of route tasks, a shuffle by (job, new
        subtask) and a stage of write tasks; both kinds go in one job as a union. Read tasks open their
        input and write tasks create their files themselves, on the executors (a local path every
        executor mounts, or an object store they reach); only the written files' descriptors come back
        to the driver. Copy jobs run on the driver. ``scratch`` is not used: Spark's shuffle is the spill.
        """
        progress = Progress(jobs, on_progress)
        sc = self.context
        written: dict[str, list[W]] = {}
        for job in jobs:
            if isinstance(job, CopyJob):
                progress.begin(job.stage)
                job.copy()
                progress.advance(job.stage, job.weight)
        keyed = [job for job in jobs if not isinstance(job, CopyJob)]
        for stage in dict.fromkeys(job.stage for job in keyed):
            together = [job for job in keyed if job.stage == stage]
            weight = sum(job.weight for job in together)
            progress.begin(stage)
            watch = _TaskProgress(
                sc,
                stage,
                progress.totals[stage],
                on_progress or no_progress,
                start=progress.done[stage],
                share=weight,
            )
            with watch, _spark_failures(sc):
                results = self._collect(sc, together)
            for index, job in enumerate(together):
                mine = [(f, rows) for i, f, rows in results if i == index]
                routed = sum(rows for _, rows in mine)
                written[job.operator_id] = pipeline.check_counts(job, routed, [f for f, _ in mine])
            progress.advance(stage, weight)
        return written

    def _collect(self, sc: SparkContext, jobs: Sequence[KeyedJob[W]]) -> list[tuple[int, W, int]]:
        """Run ``jobs`` as one Spark job; return ``(job index, written file, rows read)`` per write task."""
        narrow = [i for i, job in enumerate(jobs) if job.feeds is not None]
        shuffled = [i for i, job in enumerate(jobs) if job.feeds is None]
        parts = []
        if narrow:
            parts.append(self._narrow(sc, jobs, narrow))
        if shuffled:
            parts.append(self._shuffled(sc, jobs, shuffled))
        rdd = parts[0] if len(parts) == 1 else sc.union(parts)
        results: list[tuple[int, W, int]] = rdd.collect()
        return results

    def _narrow(self, sc: SparkContext, jobs: Sequence[KeyedJob[W]], chosen: Sequence[int]) -> Any:
        """One task per new subtask of each job, streaming its read tasks into its file: no shuffle."""
        subtasks = [(i, j) for i in chosen for j in range(jobs[i].new_parallelism)]
        task = functools.partial(_stream_task, jobs, self.batch_rows)
        return sc.parallelize(subtasks, len(subtasks)).map(task)

    def _shuffled(self, sc: SparkContext, jobs: Sequence[KeyedJob[W]], chosen: Sequence[int]) -> Any:
        """Route tasks, a shuffle by (job, new subtask), write tasks (see the module docstring).

        The shuffle's partitions are the jobs' new subtasks one after the other: job ``chosen[k]``'s
        subtask ``j`` is partition ``first[k] + j``.
        """
        first, partitions = [], 0
        for i in chosen:
            first.append(partitions)
            partitions += jobs[i].new_parallelism
        reads = [(k, r) for k, i in enumerate(chosen) for r in range(len(jobs[i].reads))]
        mapper = functools.partial(_route_task, jobs, tuple(chosen), tuple(first), self.batch_rows)
        reducer = functools.partial(_write_task, jobs, tuple(chosen), tuple(first))
        # Tasks go by index: the jobs (every task included) are in the closure already.
        return (
            sc.parallelize(reads, max(1, len(reads)))
            .flatMap(mapper)
            .partitionBy(partitions, _partition_of_key)
            .mapPartitionsWithIndex(reducer)
        )


# -- Task bodies (module level: shipped to Python workers by reference) ---------------------------------


#: Marks a kg error raised inside a task, so the driver re-raises it as what it was (see _spark_failures).
_TASK_ERROR = "kg-task-error"
_TASK_ERRORS: dict[str, type[KgError]] = {
    cls.__name__: cls
    for cls in (
        InvalidSnapshotError,
        UnsupportedFormatError,
        InvalidArgumentError,
        ExecutionError,
        # A NATIVE write task imports rocksdict on its executor: a worker without it is exit 6 there too.
        MissingDependencyError,
    )
}


@contextlib.contextmanager
def _naming_kg_errors() -> Iterator[None]:
    """Turn a kg error inside a task into one Spark passes on with its class, code and message.

    A read task that finds a corrupt block raises ``InvalidSnapshotError``; Spark reports any task failure
    as a py4j error carrying the worker's traceback, from which ``_spark_failures`` recovers the original
    (exit 3 for a corrupt input, not 5 for "a task failed").
    """
    try:
        yield
    except KgError as exc:
        raise RuntimeError(f"{_TASK_ERROR}:{type(exc).__name__}:{exc.code}:{exc.message}") from None
    except OSError as exc:
        # No space or another refusal of the executor's file system: exit 5 with its one line, not
        # "a Spark task failed" with the worker's traceback.
        known = environment_error(exc)
        if known is None:
            raise
        raise RuntimeError(f"{_TASK_ERROR}:{type(known).__name__}:{known.code}:{known.message}") from None


def _stream_task(
    jobs: Sequence[KeyedJob[W]], batch_rows: int, subtask: tuple[int, int]
) -> tuple[int, W, int]:
    """Write new subtask ``j`` of narrow job ``i`` (``subtask = (i, j)``) from its read tasks."""
    index, new_subtask = subtask
    with _naming_kg_errors():
        written, rows = pipeline.stream(jobs[index], new_subtask, batch_rows)
    return index, written, rows


def _route_task(
    jobs: Sequence[KeyedJob[W]],
    chosen: tuple[int, ...],
    first: tuple[int, ...],
    batch_rows: int,
    read: tuple[int, int],
) -> Iterator[tuple[tuple[int, int, int, int], bytes]]:
    """Read one task's rows and emit them re-keyed, one Arrow IPC block per (new subtask, bucket, batch).

    ``read = (k, r)``: read task ``r`` of job ``chosen[k]``; its rows for new subtask ``j`` go to shuffle
    partition ``first[k] + j``.
    """
    k, index = read
    job = jobs[chosen[k]]
    with _naming_kg_errors():
        if job.parts:
            # The byte route: its parts are the shuffle records as they are.
            packed = pipeline.route_parts(job, job.reads[index], batch_rows)
            for seq, (new_subtask, bucket, part, _entries) in enumerate(packed):
                yield (first[k] + new_subtask, bucket, index, seq), bytes(part)
            return
        routed = pipeline.route(job, job.reads[index], batch_rows)
        for seq, (new_subtask, bucket, rows) in enumerate(routed):
            yield (first[k] + new_subtask, bucket, index, seq), _ipc_bytes(rows)


def _ipc_bytes(rows: pa.Table) -> bytes:
    """Return ``core.schema`` as one Arrow IPC stream: the shuffle record (see ``_buckets``)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _partition_of_key(key: tuple[int, int, int, int]) -> int:
    return key[0]


def _write_task(
    jobs: Sequence[KeyedJob[W]],
    chosen: tuple[int, ...],
    first: tuple[int, ...],
    partition: int,
    records: Iterable[tuple[tuple[int, int, int, int], bytes]],
) -> Iterator[tuple[int, W, int]]:
    """Write shuffle partition ``partition`` (a new subtask of one of the jobs) from its blocks."""
    k = bisect.bisect_right(first, partition) - 1
    received = [0]
    with _naming_kg_errors():
        job, new_subtask = jobs[chosen[k]], partition - first[k]
        if job.parts:
            written = pipeline.write_parts(job, new_subtask, _buckets(records, received, parts=True))
        else:
            written = pipeline.write(job, new_subtask, _buckets(records, received))
    yield chosen[k], written, received[0]


def _buckets(
    records: Iterable[tuple[tuple[int, int, int, int], bytes]],
    received: list[int] | None = None,
    *,
    parts: bool = False,
) -> Iterator[Any]:
    """Yield a shuffle partition's Arrow IPC blocks bucket by bucket, each bucket's in input order.

    Keys are ``(subtask, bucket, input, sequence)``; the shuffle delivers them in any order. Every block is
    appended to one spill file on the executor's local disk (Spark's ``SPARK_LOCAL_DIRS``, else the temp
    directory) as it arrives, with an index of where it went; then each bucket's blocks are read back in
    ``(input, sequence)`` order. Memory: one bucket. ``received[0]`` counts the rows read. With ``parts``
    (the byte route) the records are parts, and each bucket comes as its parts' bytes back to back.
    """
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None
    with tempfile.TemporaryDirectory(prefix="kg-reduce-", dir=local) as spill_dir:
        spill = Path(spill_dir) / "blocks"
        where: dict[int, list[tuple[int, int, int, int]]] = {}
        offset = 0
        with spill.open("wb") as out:
            for (_subtask, bucket, order, seq), block in records:
                out.write(block)
                where.setdefault(bucket, []).append((order, seq, offset, len(block)))
                offset += len(block)
        with spill.open("rb") as spilled:
            for bucket in sorted(where):
                if parts:
                    # The byte route: the bucket's parts back to back (``entry_parts.frame_bucket``).
                    chunks = []
                    for _order, _seq, start, size in sorted(where[bucket]):
                        spilled.seek(start)
                        chunks.append(spilled.read(size))
                        if received is not None:
                            received[0] += part_entries(chunks[-1])
                    yield b"".join(chunks)
                    continue
                tables = []
                for _order, _seq, start, size in sorted(where[bucket]):
                    spilled.seek(start)
                    table = pa.ipc.open_stream(spilled.read(size)).read_all()
                    if received is not None:
                        received[0] += table.num_rows
                    tables.append(table)
                yield pa.concat_tables(tables)


@contextlib.contextmanager
def _spark_failures(sc: SparkContext) -> Iterator[None]:
    """Cancel Spark's jobs on Ctrl-C; turn a failed Spark job into one line (``ExecutionError``).

    A Ctrl-C that reaches py4j in the middle of a call comes back as a py4j error ("Answer from Java side
    is empty"), not as ``KeyboardInterrupt``: a SIGINT handler notes it, so it is reported as what it was.

    A Ctrl-C that comes while this thread runs a finalizer is dropped by Python ("Exception ignored in"):
    py4j frees Java objects from weakref callbacks, which block on the gateway, so it does come there, and
    the run would go on to commit. Such a ``KeyboardInterrupt`` is kept quiet and raised once the block
    ends.
    """
    interrupted = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    previous_hook = sys.unraisablehook

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.set()
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    def on_unraisable(unraisable: Any) -> None:
        if not (interrupted.is_set() and issubclass(unraisable.exc_type, KeyboardInterrupt)):
            previous_hook(unraisable)

    watching = threading.current_thread() is threading.main_thread()
    if watching:
        signal.signal(signal.SIGINT, on_sigint)
        sys.unraisablehook = on_unraisable
    try:
        yield
        if interrupted.is_set():
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            sc.cancelAllJobs()
        raise
    except (ExecutionError, MissingDependencyError):
        raise
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark wrap task failures in many types
        if interrupted.is_set():
            raise KeyboardInterrupt from None
        named = re.search(rf"{_TASK_ERROR}:(\w+):(\w+):([^\n]*)", str(exc))
        kind = _TASK_ERRORS.get(named.group(1)) if named else None
        if named and kind is not None:
            # A kg error inside a task (a corrupt block, say) is reported as what it was.
            raise kind(named.group(3), code=named.group(2)) from None
        console_log = keep_console_log()
        raise ExecutionError(
            f"a Spark task failed: {_worker_cause(exc)} (details: {console_log or 'rerun with --verbose'})",
            code="SPARK_TASK_FAILED",
        ) from exc
    finally:
        if watching:
            signal.signal(signal.SIGINT, previous)
            sys.unraisablehook = previous_hook


class _TaskProgress:
    """Report a Spark job group's finished tasks as a share of ``total`` rows, polled in a daemon thread.

    Every stage of every job in the group counts (a re-hash runs a map and a reduce stage), so the counter
    only ever grows within the stage kg shows.
    """

    def __init__(
        self,
        sc: SparkContext,
        stage: str,
        total: int,
        report: OnProgress,
        *,
        start: int = 0,
        share: int | None = None,
    ) -> None:
        self.sc, self.stage, self.total, self.report = sc, stage, total, report
        #: This job group counts from ``start`` to ``start + share`` of ``total`` (default: all of it).
        self.start, self.share = start, total if share is None else share
        self.group = f"kg-{os.getpid()}-{id(self)}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._shown = 0

    def __enter__(self) -> _TaskProgress:
        self.sc.setJobGroup(self.group, f"kg rescale: {self.stage}")
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(Exception):
            self.sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    def _poll(self) -> None:
        try:
            tracker = self.sc.statusTracker()
        except Exception:  # noqa: BLE001 - Ctrl-C broke the gateway's connections: nothing to report
            return
        while not self._stop.wait(0.25):
            with contextlib.suppress(Exception):
                done = tasks_total = 0
                for job_id in tracker.getJobIdsForGroup(self.group):
                    job = tracker.getJobInfo(job_id)
                    for stage_id in job.stageIds if job is not None else ():
                        info = tracker.getStageInfo(stage_id)
                        if info is not None:
                            done += info.numCompletedTasks
                            tasks_total += info.numTasks
                if tasks_total:
                    value = self.start + self.share * done // tasks_total
                    if value > self._shown:
                        self._shown = value
                        self.report(self.stage, value, self.total)


# -- Keyed state as data: kg export --engine spark, kg.read_state(engine="spark") ----------------------------


def state_reader(sc: SparkContext) -> BatchReader:
    """Return a ``state_tables.BatchReader`` whose Spark tasks decode an operator's keyed files.

    One task per keyed file decodes it (``state_batches``) and emits its typed batches as Arrow IPC; the
    driver takes them partition by partition, in file order (``toLocalIterator``), so what it writes is
    what the local engine writes, with the decoding spread over the executors and memory bounded by one
    file's batches.
    """

    def read(
        savepoint: Savepoint, operator: str, states: frozenset[str] | None, on_progress: OnProgress | None
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        op_id = find_operator(savepoint, operator).operator_id
        count = keyed_file_count(savepoint, operator)
        wanted = None if states is None else sorted(states)
        task = functools.partial(_state_task, _metadata_file(savepoint), op_id, wanted)
        done = 0
        with _spark_failures(sc):
            rdd = sc.parallelize(range(count), max(1, count)).flatMap(task)
            for index, name, data in rdd.toLocalIterator(prefetchPartitions=False):
                if on_progress is not None and index > done:
                    done = index
                    on_progress("export", done, count)
                for batch in pa.ipc.open_stream(data).read_all().to_batches():
                    yield name, batch
        if on_progress is not None:
            on_progress("export", count, count)

    return read


def _metadata_file(savepoint: Savepoint) -> str:
    """Return the ``_metadata`` tasks open: a canonical rewrite (``canonical_view``) has none until written.

    The rewrite is a scratch directory of kg's own; its ``_metadata`` names the rewritten keyed files and,
    by absolute paths, the original's other files.
    """
    from keygroup_cli.flink.metadata.writer import write_metadata

    path = str(savepoint.metadata_path)
    if not os.path.exists(path):
        Path(path).write_bytes(write_metadata(savepoint.metadata))
    return path


def _state_task(
    metadata_path: str, operator_id: str, states: list[str] | None, index: int
) -> Iterator[tuple[int, str, bytes]]:
    """Decode keyed file ``index`` of an operator into typed batches, each as Arrow IPC."""
    from keygroup_cli.flink.data.tables import state_batches
    from keygroup_cli.flink.savepoint import open_savepoint

    with _naming_kg_errors():
        savepoint = open_savepoint(metadata_path, contained=False)  # judged by the driver
        wanted = None if states is None else frozenset(states)
        for name, batch in state_batches(savepoint, operator_id, wanted, files=[index]):
            yield index, name, _ipc_bytes(pa.Table.from_batches([batch]))


def state_dataframe(session: SparkSession, source: str | os.PathLike[str], operator: str, state: str) -> Any:
    """Return one keyed state as a Spark DataFrame, read by Spark tasks (one per keyed file), no files.

    The columns are ``read_state``'s; Spark holds timestamps in microseconds, so a finer one (a SQL
    ``TIMESTAMP(9)`` field, say) is truncated to them. A NATIVE savepoint or a checkpoint's own layout is
    rewritten as key groups first, into a scratch directory kept until this process exits (the DataFrame
    reads it whenever it is computed).

    Raises:
        InvalidArgumentError: No such operator or state.
        UnsupportedFormatError: The operator holds no keyed state, or a layout kg reads only locally.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    from keygroup_cli.flink.layouts.heap import canonical_view, needs_canonical_view
    from keygroup_cli.flink.savepoint import open_savepoint

    savepoint = open_savepoint(source)
    if needs_canonical_view(savepoint):
        scratch = tempfile.mkdtemp(prefix="kg-state-")
        atexit.register(shutil.rmtree, scratch, True)
        view = canonical_view(savepoint, Path(scratch) / "canonical")
        savepoint = open_savepoint(_metadata_file(Savepoint.rewritten(view, savepoint)), contained=False)
    typed = next((t for t in typed_states(savepoint, operator) if t.name == state), None)
    if typed is None:
        known = ", ".join(t.name for t in typed_states(savepoint, operator))
        raise InvalidArgumentError(
            f"operator {operator!r} has no state {state!r} (states: {known})", code="STATE_NOT_FOUND"
        )
    target = _spark_arrow_schema(typed.schema)
    op_id = find_operator(savepoint, operator).operator_id
    count = keyed_file_count(savepoint, operator)
    rows = functools.partial(
        _state_rows, _metadata_file(savepoint), op_id, state, target.serialize().to_pybytes()
    )
    # Rows, not Arrow batches: mapInArrow would need pandas, which kg does not install.
    rdd = session.sparkContext.parallelize(range(count), max(1, count)).flatMap(rows)
    return session.createDataFrame(rdd, from_arrow_schema(target), verifySchema=False)


def _spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with every timestamp in microseconds (Spark's unit), however deep."""

    def conform(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", t.tz)
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(conform(f.type)) for f in t])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(t.value_field.with_type(conform(t.value_type)))
        if pa.types.is_map(t):
            return pa.map_(conform(t.key_type), conform(t.item_type))
        return t

    return pa.schema([f.with_type(conform(f.type)) for f in schema])


def _state_rows(
    metadata_path: str, operator_id: str, state: str, schema: bytes, index: int
) -> Iterator[tuple[Any, ...]]:
    """Keyed file ``index``'s rows of ``state`` as Python tuples of Spark's types (maps as dicts)."""
    from keygroup_cli.flink.data.tables import state_batches
    from keygroup_cli.flink.savepoint import open_savepoint

    target = pa.ipc.read_schema(pa.py_buffer(schema))
    with _naming_kg_errors():
        savepoint = open_savepoint(metadata_path, contained=False)  # judged by the driver
        for _, batch in state_batches(savepoint, operator_id, frozenset({state}), files=[index]):
            table = pa.Table.from_batches([batch]).cast(target, safe=False)
            columns = [
                [_spark_value(f.type, v) for v in c.to_pylist()]
                for f, c in zip(target, table.columns, strict=True)
            ]
            yield from zip(*columns, strict=True)


def _spark_value(arrow: pa.DataType, value: Any) -> Any:
    """Return a value of ``to_pylist`` as Spark takes it: a map's ``[(k, v)]`` as a dict, however deep."""
    if value is None:
        return None
    if pa.types.is_map(arrow):
        return {_spark_value(arrow.key_type, k): _spark_value(arrow.item_type, v) for k, v in value}
    if pa.types.is_struct(arrow):
        return {f.name: _spark_value(f.type, value[f.name]) for f in arrow}
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return [_spark_value(arrow.value_type, v) for v in value]
    return value


__all__ = [
    "SESSION_CONFIG",
    "SparkExecutor",
    "cache_directory",
    "check_java",
    "check_workers",
    "keep_console_log",
    "session_settings",
    "spark_context",
    "spark_session",
    "state_dataframe",
    "state_reader",
    "worker_python",
]
