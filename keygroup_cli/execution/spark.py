"""The Spark engine: the same plan and the same writer as the local engine, run as Spark tasks.

The only module of kg that imports ``pyspark`` (and only inside functions, so that a missing pyspark or
Java becomes a one-line ``MissingDependencyError`` rather than an ImportError or a JVM stack trace).

- Parallelism change: one task per new subtask. A new subtask's key groups are a contiguous union of
  pieces of old files, so each task streams its pieces straight into its file (``tasks.write_moved_subtask``,
  the local engine's code): a narrow stage, no shuffle, as Flink itself intersects key-group ranges.
- maxParallelism change: a map task per (old file, row group) re-hashes its rows and emits them as Arrow IPC
  blocks keyed by ``(new subtask, bucket, old file, row group)``; ``repartitionAndSortWithinPartitions``
  sends new subtask *j*'s blocks to partition *j* in input order; each reduce task writes its file bucket
  by bucket (``tasks.write_rehashed_subtask``). Blocks, not rows, cross the shuffle, so no pandas and no
  per-row conversion is needed.
- Operator state (small) and files that stay as they are are handled on the driver.

Tasks write to the target directory directly, so with a ``--master`` other than local the staging
directory beside DEST must be on a filesystem every executor mounts at the same path, and kg must be
importable on the executors.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import keygroup_cli
from keygroup_cli.errors import MissingDependencyError
from keygroup_cli.execution import ExecutionResult, OnProgress, WrittenOperator, tasks
from keygroup_cli.planning import OperatorPlan, RescalePlan
from keygroup_cli.snapshot.model import KeyedFile, Operator, Snapshot
from keygroup_cli.snapshot.parquet import DEFAULT_BATCH_ROWS

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

INSTALL_JAVA = "install Java 17 or newer (e.g. apt-get install openjdk-17-jre-headless) or use --engine local"

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


def spark_session(
    master: str | None = None, *, verbose: bool = False, config: dict[str, str] | None = None
) -> SparkSession:
    """Return the active SparkSession, or start one (embedded ``local[*]`` unless ``master`` is given).

    Without ``verbose`` the JVM's console output (log4j start-up lines, warnings) goes to a log file in the
    temp directory and Spark's log level is ERROR.

    Raises:
        MissingDependencyError: pyspark is not installed, Java is missing or JAVA_HOME is broken, or the
            Java gateway does not start (``JAVA_MISSING``, ``JAVA_HOME_BROKEN``, ``PYSPARK_MISSING``,
            ``SPARK_GATEWAY_FAILED``).
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise MissingDependencyError(
            "pyspark is not installed: pip install 'pyspark>=3.5' (or use --engine local)",
            code="PYSPARK_MISSING",
        ) from None
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if SparkContext._active_spark_context is not None:
        # A session started on another thread (the active session is per thread): use it.
        return SparkSession.builder.getOrCreate()
    check_java()

    conf = SparkConf().setMaster(master or "local[*]").setAppName("kg rescale")
    settings = {**SESSION_CONFIG, **_pythonpath_config(), **(config or {})}
    sharing = class_data_sharing_option()
    if sharing and "spark.driver.extraJavaOptions" not in (config or {}):
        settings["spark.driver.extraJavaOptions"] = f"{settings['spark.driver.extraJavaOptions']} {sharing}"
    for key, value in settings.items():
        conf.set(key, value)
    log = Path(tempfile.gettempdir()) / f"kg-spark-{os.getpid()}.log"
    try:
        # The JVM (and the Python workers it forks) write their console output to the log for the whole
        # session; handing it to the JVM's Popen, rather than redirecting our own descriptors, keeps
        # stdout clean for --json and stderr for kg's progress even while the JVM starts in a thread.
        with open(log, "ab") as jvm_console:
            gateway = launch_gateway(  # type: ignore[no-untyped-call]
                conf, popen_kwargs=None if verbose else {"stdout": jvm_console, "stderr": jvm_console}
            )
        session = SparkSession(SparkContext(conf=conf, gateway=gateway))
    except MissingDependencyError:
        raise
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark raise many types; all mean "no gateway"
        raise MissingDependencyError(_gateway_message(exc, log), code="SPARK_GATEWAY_FAILED") from None
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return session


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
    """
    if os.environ.get("KG_SPARK_CDS", "1") == "0":
        return ""
    import pyspark

    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    cache = Path(os.environ.get("KG_CACHE_DIR") or Path(home) / "kg")
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


def _gateway_message(exc: Exception, log: Path) -> str:
    details = ""
    with contextlib.suppress(OSError):
        details = log.read_text(errors="replace")
    if "UnsupportedClassVersionError" in details:
        return f"Spark needs a newer Java than the one found: {INSTALL_JAVA} (details: {log})"
    return (
        f"Spark's Java gateway did not start ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
        f"check the Java installation: {INSTALL_JAVA} (details: {log})"
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
    ) -> None:
        self.session = session if session is not None else spark_session(master, verbose=verbose)
        self.batch_rows = batch_rows

    def run(
        self, plan: RescalePlan, source: Snapshot, target: Path, on_progress: OnProgress | None = None
    ) -> ExecutionResult:
        """Write every state file of the rescaled snapshot into ``target`` with Spark tasks."""
        report = on_progress or _ignore
        sc = self.session.sparkContext
        written = []
        for op_plan in plan.operators:
            op = source.manifest.operator(op_plan.operator_id)
            assert op is not None
            if not op_plan.rescaled:
                tasks.copy_files(source, target, (*op.keyed_files, *op.operator_files))
                written.append(WrittenOperator(op.operator_id, op.keyed_files, op.operator_files))
                continue
            stage = f"{op_plan.label}: keyed rows"
            report(stage, 0, op_plan.keyed_rows)
            keyed: tuple[KeyedFile, ...]
            if op_plan.keyed_mode == "none":
                keyed = ()
            elif op_plan.keyed_mode == "copy":
                tasks.copy_files(source, target, op.keyed_files)
                keyed = op.keyed_files
            else:
                with _TaskProgress(sc, stage, op_plan.keyed_rows, report):
                    if op_plan.keyed_mode == "move":
                        files = self._move(sc, source, op, op_plan, target)
                    else:
                        files = self._rehash(sc, source, op, op_plan, target)
                keyed = tuple(f for f in files if f is not None)
            report(stage, op_plan.keyed_rows, op_plan.keyed_rows)
            operator_files = tasks.write_operator_state(source, op, op_plan, target)
            written.append(WrittenOperator(op.operator_id, keyed, operator_files))
        return ExecutionResult(self.name, tuple(written))

    def _move(
        self, sc: SparkContext, source: Snapshot, op: Operator, plan: OperatorPlan, target: Path
    ) -> list[KeyedFile | None]:
        task = functools.partial(_move_task, source, op, plan, str(target), self.batch_rows)
        files: list[KeyedFile | None] = (
            sc.parallelize(range(plan.new_parallelism), plan.new_parallelism).map(task).collect()
        )
        return files

    def _rehash(
        self, sc: SparkContext, source: Snapshot, op: Operator, plan: OperatorPlan, target: Path
    ) -> list[KeyedFile | None]:
        units = [
            (index, f, row_group)
            for index, f in enumerate(sorted(op.keyed_files, key=lambda f: f.subtask))
            for row_group in range(pq.ParquetFile(source.resolve(f.path)).metadata.num_row_groups)
        ]
        mapper = functools.partial(_rehash_map, source, op, plan)
        reducer = functools.partial(_rehash_reduce, op, plan, str(target))
        files: list[KeyedFile | None] = (
            sc.parallelize(units, max(1, len(units)))
            .flatMap(mapper)
            .repartitionAndSortWithinPartitions(plan.new_parallelism, _new_subtask_of_key)
            .mapPartitionsWithIndex(reducer)
            .collect()
        )
        return files


def _ignore(_stage: str, _completed: int, _total: int | None) -> None:
    return None


# -- Task bodies (module level: shipped to Python workers by reference) ---------------------------------


def _move_task(
    source: Snapshot, op: Operator, plan: OperatorPlan, target: str, batch_rows: int, new_subtask: int
) -> KeyedFile | None:
    return tasks.write_moved_subtask(source, op, plan, new_subtask, Path(target), batch_rows=batch_rows)


def _rehash_map(
    source: Snapshot, op: Operator, plan: OperatorPlan, unit: tuple[int, KeyedFile, int]
) -> Iterator[tuple[tuple[int, int, int, int], bytes]]:
    index, old, row_group = unit
    table = pq.ParquetFile(source.resolve(old.path)).read_row_group(row_group)
    table, buckets = tasks.rehash_batch(table, op, plan)
    groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int32)
    count = tasks.bucket_count(plan.new_max_parallelism)
    # One block per (new subtask, bucket): a bucket can straddle two new subtasks.
    composite = tasks.new_subtasks_of(groups, plan).astype(np.int64) * count + buckets
    for key, rows in tasks.split_by_bucket(table, composite):
        new_subtask, bucket = divmod(key, count)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows)
        yield (new_subtask, bucket, index, row_group), sink.getvalue().to_pybytes()


def _new_subtask_of_key(key: tuple[int, int, int, int]) -> int:
    return key[0]


def _rehash_reduce(
    op: Operator,
    plan: OperatorPlan,
    target: str,
    new_subtask: int,
    records: Iterable[tuple[tuple[int, int, int, int], bytes]],
) -> Iterator[KeyedFile | None]:
    def buckets() -> Iterator[pa.Table]:
        current: int | None = None
        blocks: list[pa.Table] = []
        for (_subtask, bucket, _index, _row_group), block in records:
            if bucket != current and blocks:
                yield pa.concat_tables(blocks)
                blocks = []
            current = bucket
            blocks.append(pa.ipc.open_stream(block).read_all())
        if blocks:
            yield pa.concat_tables(blocks)

    yield tasks.write_rehashed_subtask(op, plan, new_subtask, Path(target), buckets())


class _TaskProgress:
    """Report a Spark job's finished tasks as a share of ``total`` rows, polled in a daemon thread."""

    def __init__(self, sc: SparkContext, stage: str, total: int, report: OnProgress) -> None:
        self.sc, self.stage, self.total, self.report = sc, stage, total, report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _TaskProgress:
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._stop.wait(0.25):
            done = tasks_total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    tasks_total += info.numTasks
            if tasks_total:
                with contextlib.suppress(Exception):
                    self.report(self.stage, self.total * done // tasks_total, self.total)


__all__ = ["SESSION_CONFIG", "SparkExecutor", "check_java", "spark_session"]
