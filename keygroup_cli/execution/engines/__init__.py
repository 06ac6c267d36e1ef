"""Executors that run a rescale's jobs: one protocol, a pyarrow engine and a Spark engine.

``get_executor("local" | "spark", **options)`` imports the engine's module only when asked, so metadata
commands never load Spark (or start a JVM). ``choose_engine`` resolves the default: Spark where a master is
set or a session given, else the local engine (``ONE_MACHINE`` says why), with a notice on kg's logger
where pyspark is missing. Every route
compiles its plan into the jobs of ``keygroup_cli.execution.jobs.model`` (a kg snapshot's in
``execution.jobs.snapshot``, a savepoint's in ``execution.jobs.savepoint``); both engines run them with the
same task bodies through one entry, ``Executor.run``, and write byte-identical files. The caller (the route)
owns the staging directory, operator state, verification and the commit.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from keygroup_cli.core.errors import InvalidArgumentError, MissingDependencyError
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.core.workers import usable_cores

# Typed only: every Spark Python worker imports this package on the way to ``spark.daemon``.
if TYPE_CHECKING:
    from collections.abc import Sequence

    from keygroup_cli.execution.jobs.model import CopyJob, KeyedJob, W
    from keygroup_cli.snapshot.model import KeyedFile, OperatorFile

#: ``on_progress(stage, completed, total)``: the core's progress callback (drawn by the CLI, if at all).

ENGINES = ("spark", "local")

#: What installs the Spark engine (pyspark is an optional extra: about 490 MB).
INSTALL_SPARK = (
    "pip install -e '.[spark]' in kg's checkout, or the kg wheel with [spark] "
    "(docs/how-to/install.md#extras), or pip install 'pyspark>=3.5' in kg's environment"
)

log = logging.getLogger("keygroup_cli")


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The engine a rescale runs with, and why (shown in the summary and ``--json``)."""

    name: str
    reason: str


def spark_installed() -> bool:
    """Return whether pyspark can be imported, without importing it (no JVM, no seconds spent)."""
    return importlib.util.find_spec("pyspark") is not None


#: Where a Spark master can be set besides ``--master``: kg's own settings and Spark's environment.
MASTER_ENV = "SPARK_MASTER"


def spark_master(master: str | None, spark_conf: Mapping[str, str] | None) -> str | None:
    """Return the Spark master the user set (``--master``, ``spark.master``, ``SPARK_MASTER``), or None."""
    return master or (spark_conf or {}).get("spark.master") or os.environ.get(MASTER_ENV) or None


#: Why the default on one machine is the local engine (``choose_engine``).
ONE_MACHINE = (
    "default engine: one machine, where the local engine is the faster (Spark local[*] costs as much per "
    "byte, plus about 3 CPU s to start); Spark: --engine spark or a master"
)

#: Keyed bytes to re-key from which Spark ``local[*]`` is the faster on a machine of several cores when the
#: native kernels are off: the local engine's numpy route then runs much of its work holding Python's lock,
#: while Spark's Python workers are processes (docs/performance.md: 1.2x faster at 1 GB, 1.4x at 4 GB).
SPARK_LOCAL_PAYS_OFF_BYTES = 1 << 30


def java_found() -> bool:
    """Return whether a ``java`` is there to start, as ``--engine spark`` checks it, without running it."""
    # Imported here: Spark's Python workers import this package and never start a JVM.
    from keygroup_cli.execution.engines.spark.jvm import require_java

    try:
        require_java()
    except MissingDependencyError:
        return False
    return True


def _spark_local_pays_off(rekey_bytes: int, native_kernels: bool, native_output: bool) -> bool:
    """Return whether Spark ``local[*]`` re-keys ``rekey_bytes`` faster than the local engine here."""
    return (
        (not native_kernels or native_output)
        and rekey_bytes >= SPARK_LOCAL_PAYS_OFF_BYTES
        and usable_cores() >= 2
        and spark_installed()
        and java_found()
    )


def choose_engine(
    engine: str | EngineChoice | None,
    *,
    master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    session: Any = None,
    rekey_bytes: int = 0,
    native_kernels: bool = True,
    native_output: bool = False,
) -> EngineChoice:
    """Resolve ``engine`` (``spark``, ``local``, or None for the default) to the engine that will run.

    The default is the fastest correct engine for where kg runs. With a Spark master set (``master``,
    ``spark.master`` in ``spark_conf``, ``SPARK_MASTER``) or a SparkSession given, that is Spark: the work
    goes to the cluster. On one machine it is the local engine (``ONE_MACHINE``): it uses every core too,
    Spark ``local[*]``'s tasks cost what the local engine costs per byte (0.89-1.19x at 1 and 4 GB), and its
    start (a JVM, Python workers) adds about 3 CPU seconds (docs/performance.md). The exceptions: a re-key of
    at least ``SPARK_LOCAL_PAYS_OFF_BYTES`` (``rekey_bytes``) without the native kernels (``native_kernels``)
    or written as RocksDB databases (``native_output``), on several cores, with pyspark and Java there. Both
    are work in Python that holds its lock (the numpy route; building the databases), which the local
    engine's threads share and Spark ``local[*]``'s worker processes do not. A missing pyspark is announced
    once on the ``keygroup_cli`` logger.

    Raises:
        InvalidArgumentError: An unknown engine name.
        MissingDependencyError: Spark was asked for, or a master set, and pyspark is not installed
            (``PYSPARK_MISSING``).
    """
    if isinstance(engine, EngineChoice):
        return engine
    if engine is None or engine == "auto":
        chosen = spark_master(master, spark_conf)
        if session is not None:
            return EngineChoice("spark", "default engine: a SparkSession was given")
        if chosen is not None:
            _require_pyspark(f"a Spark master ({chosen}) is set, which")
            return EngineChoice("spark", f"default engine: a Spark master is set ({chosen})")
        if not spark_installed():
            log.info("pyspark is not installed: using the local engine (for Spark: %s)", INSTALL_SPARK)
            return EngineChoice("local", "default engine; pyspark is not installed")
        if _spark_local_pays_off(rekey_bytes, native_kernels, native_output):
            size = f"{rekey_bytes / (1 << 30):.1f} GiB"
            why = (
                f"a NATIVE output of {size}, whose RocksDB databases Spark local[*] builds on every core"
                if native_output
                else f"a re-key of {size} without the native kernels, where Spark local[*] runs kg's Python "
                "on every core"
            )
            reason = f"default engine: {why} and is the faster; --engine local to keep it"
            return EngineChoice("spark", reason)
        return EngineChoice("local", ONE_MACHINE)
    if engine not in ENGINES:
        raise unknown_engine_error(engine)
    if engine == "spark":
        _require_pyspark("--engine spark")
    return EngineChoice(engine, f"--engine {engine}")


def unknown_engine_error(name: object) -> InvalidArgumentError:
    """Return the refusal of an engine name kg does not have (``UNKNOWN_ENGINE``, exit 2)."""
    return InvalidArgumentError(
        f"unknown engine {name!r}; expected one of {', '.join(ENGINES)}", code="UNKNOWN_ENGINE"
    )


def _require_pyspark(what: str) -> None:
    if not spark_installed():
        raise MissingDependencyError(
            f"{what} needs pyspark, which is not installed: {INSTALL_SPARK}; or use --engine local",
            code="PYSPARK_MISSING",
        )


@dataclass(frozen=True, slots=True)
class WrittenOperator:
    """The files an executor wrote (or copied) for one operator, as manifest entries."""

    operator_id: str
    keyed_files: tuple[KeyedFile, ...]
    operator_files: tuple[OperatorFile, ...]


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """What an executor wrote into the target directory, per operator in plan order."""

    engine: str
    operators: tuple[WrittenOperator, ...]

    def operator(self, operator_id: str) -> WrittenOperator:
        """Return the files written for ``operator_id``."""
        return next(o for o in self.operators if o.operator_id == operator_id)


class Executor(Protocol):
    """Runs the jobs of a rescale (``execution.jobs.model``): reads old state, writes the new keyed files.

    The executor never touches the input and writes no metadata or manifest.
    """

    name: str

    def run(
        self,
        jobs: Sequence[KeyedJob[W] | CopyJob],
        scratch: Path,
        on_progress: OnProgress | None = None,
    ) -> dict[str, list[W]]:
        """Run ``jobs``; return each keyed job's written files by operator id, in subtask order.

        ``scratch`` is a local directory the engine may spill into (what it puts there it removes).

        Raises:
            ExecutionError: A task failed or rows were lost on the way.
            InvalidInputError: A read task found its input corrupt.
        """
        ...

    def read_pieces(self) -> int:
        """Return how many read tasks to cut each old keyed file into (more where tasks run in parallel)."""
        ...


#: The options of ``get_executor`` that the Spark engine takes.
SPARK_OPTIONS = ("master", "session", "verbose", "batch_rows", "config")


def get_executor(name: str, **options: Any) -> Executor:
    """Return the executor called ``name`` (``local`` or ``spark``), importing it on demand.

    Args:
        name: The engine.
        **options: Engine options: for ``spark`` ``master``, ``session``, ``verbose``, ``config`` (Spark
            settings, e.g. ``spark.pyspark.python``); for ``local`` ``batch_rows`` and ``workers``.

    Raises:
        InvalidArgumentError: An unknown engine.
        MissingDependencyError: Spark or Java is missing or broken (``spark`` only).
    """
    if name == "local":
        from keygroup_cli.execution.engines.local import LocalExecutor

        return LocalExecutor(**_known(options, ("batch_rows", "workers")))
    if name == "spark":
        choose_engine("spark")  # a one-line error naming the pip command when pyspark is missing
        from keygroup_cli.execution.engines.spark import SparkExecutor

        return SparkExecutor(**_known(options, SPARK_OPTIONS))
    raise unknown_engine_error(name)


class PendingExecutor:
    """An executor being created in a background thread, so a Spark session starts while kg reads input.

    Starting the JVM takes seconds and mostly waits on another process; decoding a savepoint or
    checksumming the input meanwhile hides most of it. ``result()`` waits for it and raises what creating
    it raised (e.g. ``MissingDependencyError``). The thread is a daemon: if kg fails first, it exits
    without waiting, and the JVM ends with it (it stops when its stdin, a pipe from kg, closes).

    With ``on_progress``, a Spark start is a stage of its own (``starting Spark``), reported from the
    caller's thread: begun here, finished in ``result()``.
    """

    STAGE = "starting Spark"

    #: The executor ``start_early`` began, with its name and options, until one ``claim`` takes it.
    _early: tuple[str, dict[str, Any], PendingExecutor] | None = None
    _early_lock = threading.Lock()

    def __init__(self, name: str, on_progress: OnProgress | None = None, **options: Any) -> None:
        self._executor: Executor | None = None
        self._error: BaseException | None = None
        self._report: OnProgress | None = None
        self._watch(name, on_progress)
        self._thread = threading.Thread(target=self._create, args=(name, options), daemon=True)
        self._thread.start()

    def _watch(self, name: str, on_progress: OnProgress | None) -> None:
        self._report = on_progress if name == "spark" else None
        if self._report is not None:
            self._report(self.STAGE, 0, None)

    @classmethod
    def claim(cls, name: str, on_progress: OnProgress | None = None, **options: Any) -> PendingExecutor:
        """Return the executor ``start_early`` began for ``name`` with these ``options``, else a new one."""
        with cls._early_lock:
            early, cls._early = cls._early, None
        if (
            early is not None
            and early[0] == name
            and _known(early[1], SPARK_OPTIONS) == _known(options, SPARK_OPTIONS)
        ):
            early[2]._watch(name, on_progress)
            return early[2]
        return cls(name, on_progress, **options)

    def _create(self, name: str, options: dict[str, Any]) -> None:
        try:
            self._executor = get_executor(name, **options)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of result()
            self._error = exc

    def result(self) -> Executor:
        """Wait for the executor and return it.

        Raises:
            KgError: Whatever ``get_executor`` raised.
        """
        # A timed join keeps the waiting thread responsive to Ctrl-C (a bare join() would not be).
        while self._thread.is_alive():
            self._thread.join(0.2)
        if self._error is not None:
            raise self._error
        assert self._executor is not None
        if self._report is not None:
            self._report(self.STAGE, 1, 1)
            self._report = None
        return self._executor


def start_early(
    engine: str | EngineChoice | None,
    *,
    rekey: bool,
    master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    **options: Any,
) -> bool:
    """Begin Spark's start now, before the input is opened, where the run will use Spark whatever it holds.

    That is a re-key (``rekey``: a new maxParallelism or a NATIVE output; a parallelism change alone copies
    key groups as bytes without any engine) with ``--engine spark`` or a master set. The JVM then starts
    while kg imports its routes and opens the input (about 0.2 s sooner); the route's
    ``PendingExecutor.claim`` takes it when its options match, and a start nobody claims ends with kg.
    ``options``: as ``get_executor``'s. Return whether a start began.
    """
    if not rekey or isinstance(engine, EngineChoice) or options.get("session") is not None:
        return False
    if engine != "spark" and not (engine in (None, "auto") and spark_master(master, spark_conf)):
        return False
    if not spark_installed():
        return False  # the route says so, in one line
    settings = {**options, "master": master, "config": spark_conf}
    pending = PendingExecutor("spark", None, **settings)
    with PendingExecutor._early_lock:
        PendingExecutor._early = ("spark", settings, pending)
    return True


#: Keyed bytes to re-key from which Spark's prestarted workers load the native kernels before the job.
PRELOAD_KERNELS_BYTES = 64 << 20


def expect_rekey(engine: str, rekey_bytes: int, native_kernels: bool) -> None:
    """Tell the engine starting for a run that it will re-key ``rekey_bytes`` (``native_kernels``: with them).

    Spark's prestarted Python daemon (``spark.prestart``) then loads numba and the kernels while the JVM
    starts, for a re-key large enough to use them; a smaller one leaves them to the tasks that need them.
    """
    if engine == "spark" and native_kernels and rekey_bytes >= PRELOAD_KERNELS_BYTES:
        # Imported here: Spark's Python workers import this package and never start a daemon.
        from keygroup_cli.execution.engines.spark.prestart import want_kernels

        want_kernels()


def _known(options: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    # Options meant for the other engine are ignored, so callers can pass one set for either.
    return {k: v for k, v in options.items() if k in names and v is not None}


__all__ = [
    "ENGINES",
    "INSTALL_SPARK",
    "MASTER_ENV",
    "ONE_MACHINE",
    "PRELOAD_KERNELS_BYTES",
    "SPARK_LOCAL_PAYS_OFF_BYTES",
    "EngineChoice",
    "ExecutionResult",
    "Executor",
    "PendingExecutor",
    "WrittenOperator",
    "choose_engine",
    "expect_rekey",
    "get_executor",
    "java_found",
    "spark_installed",
    "spark_master",
    "start_early",
    "unknown_engine_error",
]
