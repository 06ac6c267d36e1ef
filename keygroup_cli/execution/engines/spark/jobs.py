"""Running the task model's jobs on Spark: ``SparkExecutor``, and its progress from Spark's status tracker.

- A narrow job (a kg snapshot's parallelism change): one task per new subtask, streaming its read tasks
  (pieces of old files) straight into its file (``pipeline.stream``): a narrow stage, no shuffle, as
  Flink itself intersects key-group ranges.
- A job with a shuffle, through the **shared-store exchange** (``spark.kg.exchange=shared``, the default
  with a local master: kg's scratch directory; ``store``, the default with a cluster master and an
  object-store output: a hidden ``.kg-exchange-<id>`` prefix under ``--out s3://…`` or
  ``spark.kg.exchange.dir``; see ``exchange_mode``): a first Spark job runs the read tasks, each appending
  what it routes (the byte route's parts, or the row route's rows as Arrow IPC) to a spill file of its own
  attempt where every executor reaches it (``engines.spill``) and returning only where it wrote;
  the driver gives each write task of the second Spark job its new subtask's stretches in read-task
  order, and the write task reads them back bucket by bucket. Nothing crosses into the JVM but those
  descriptors. A retried or speculative read attempt writes a file of its own, and only the stretches of
  the attempt Spark reports as successful are used.
- A job with a shuffle through **Spark's shuffle** (``spark.kg.exchange=shuffle``; the default with a
  cluster master and a local output): a map task per read task routes its rows (``pipeline.route``)
  and emits them as Arrow IPC blocks keyed by ``(new subtask, bucket, read task, batch)``;
  ``partitionBy`` sends new subtask *j*'s blocks to partition *j*; each reduce task appends them to one
  spill file on its executor's local disk, then writes its file bucket by bucket, each bucket's blocks
  in input order (``tasks._buckets``, ``pipeline.write``). Blocks, not rows, cross the shuffle, so no
  pandas and no per-row conversion is needed, and no Python-side sort (PySpark's
  ``repartitionAndSortWithinPartitions`` sorts in the Python worker and spills pickles past
  ``spark.python.worker.memory``).
- The byte route (a maxParallelism change of a savepoint, ``KeyedJob.parts``) runs the same stages with
  the parts its map tasks pack (``flink.keyed.entry_parts``) as the shuffle records: plain bytes, no Arrow.
- Copy jobs run on the driver.
- ``--format native``: each write task builds its new subtask's RocksDB database on its executor (rocksdict
  is imported there, by the task); an operator that keeps its maxParallelism is a narrow job.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keygroup_cli.core.errors import ExecutionError, InvalidArgumentError
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.execution.engines.spark.errors import spark_failures
from keygroup_cli.execution.engines.spark.jvm import class_archive_complete
from keygroup_cli.execution.engines.spark.session import spark_context, spark_session
from keygroup_cli.execution.engines.spark.tasks import (
    exchange_write_task,
    partition_of_key,
    route_task,
    spill_task,
    stream_task,
    write_task,
)
from keygroup_cli.execution.engines.spark.workers import kgs_own_workers, require_workers
from keygroup_cli.execution.engines.spill import SpilledTask, subtask_stretches
from keygroup_cli.execution.jobs import model as pipeline
from keygroup_cli.execution.jobs.model import CopyJob, KeyedJob, Progress, W
from keygroup_cli.snapshot.parquet import DEFAULT_BATCH_ROWS
from keygroup_cli.storage.exchange import new_exchange, remove_exchange
from keygroup_cli.storage.locations import is_remote

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession


#: The setting that chooses the byte route's exchange: ``auto``, ``shared``, ``store`` or ``shuffle``.
EXCHANGE_SETTING = "spark.kg.exchange"
#: The setting that names where the exchange goes (an object-store prefix, or a directory every executor
#: mounts at the same path); default: the output's object store, else kg's scratch directory.
EXCHANGE_DIR_SETTING = "spark.kg.exchange.dir"
EXCHANGES = ("auto", "shared", "store", "shuffle")


def exchange_mode(
    sc: SparkContext,
    exchange: str | None = None,
    output: str | None = None,
    directory: str | None = None,
) -> str:
    """Return how the re-key's parts are exchanged: ``shared``, ``store`` or ``shuffle``.

    - ``shared``: spill files in kg's scratch directory (every executor must reach it at the same path);
    - ``store``: spill files under ``directory`` (``spark.kg.exchange.dir``), else under the output's own
      object-store prefix ``output`` (``--out s3://…``), in a hidden ``.kg-exchange-<id>`` prefix removed
      before the commit (``storage.exchange``): no directory is shared, only the store;
    - ``shuffle``: Spark's own shuffle.

    ``exchange`` (or ``spark.kg.exchange``) decides; ``auto`` (the default) is ``store`` where an exchange
    directory is set, else ``shared`` with a local master, whose executors all see the scratch directory;
    with a cluster master ``store`` when the output is on an object store, else ``shuffle``.

    Raises:
        InvalidArgumentError: An unknown exchange (``UNKNOWN_EXCHANGE``); ``store`` with neither an
            exchange directory nor an object-store output (``EXCHANGE_NEEDS_STORE``).
    """
    conf = sc.getConf()
    mode = exchange or conf.get(EXCHANGE_SETTING, "auto") or "auto"
    if mode not in EXCHANGES:
        raise InvalidArgumentError(
            f"unknown {EXCHANGE_SETTING} {mode!r}; expected one of {', '.join(EXCHANGES)}",
            code="UNKNOWN_EXCHANGE",
        )
    directory = directory or conf.get(EXCHANGE_DIR_SETTING, None) or None
    remote_output = output is not None and is_remote(output)
    if mode == "store" and directory is None and output is not None and not remote_output:
        raise InvalidArgumentError(
            f"{EXCHANGE_SETTING}=store needs an object-store output (--out s3://…) or {EXCHANGE_DIR_SETTING}",
            code="EXCHANGE_NEEDS_STORE",
        )
    if mode != "auto":
        return mode
    if directory is not None:
        return "store"
    if sc.master.startswith("local"):
        return "shared"
    return "store" if remote_output else "shuffle"


def _output_root(jobs: Sequence[KeyedJob[Any]]) -> str | None:
    """Return where the jobs' write tasks put their files (one root for all of them), or None."""
    roots = {getattr(w, "root", None) for job in jobs for w in job.writes}
    return roots.pop() if len(roots) == 1 else None


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
        exchange: str | None = None,
        exchange_dir: str | None = None,
    ) -> None:
        self._session = session
        self.context = (
            session.sparkContext
            if session is not None
            else spark_context(master, verbose=verbose, config=config)
        )
        self.batch_rows = batch_rows
        if not kgs_own_workers(self.context):
            # Workers of another interpreter, or on other machines: checked before anything is read.
            require_workers(self.context, master)
        self._exchange_setting = exchange
        #: Where the ``store`` exchange goes: this, else ``spark.kg.exchange.dir``, else the output's prefix.
        self.exchange_dir = exchange_dir or self.context.getConf().get(EXCHANGE_DIR_SETTING, None) or None
        #: How a re-key's parts go from read to write tasks before the output is known: ``shared`` (spill
        #: files in the scratch directory), ``store`` (spill files on a store every executor reaches) or
        #: ``shuffle`` (Spark's shuffle); see ``exchange_mode``. Each ``run`` decides with its output.
        self.exchange = exchange_mode(self.context, exchange, directory=self.exchange_dir)

    @property
    def session(self) -> SparkSession:
        """Return the session this executor was given, or one over its context (built on first use)."""
        if self._session is None:
            self._session = spark_session()
        return self._session

    def read_pieces(self) -> int:
        """Return how many read tasks to cut each old keyed file into: one per core (at most 16).

        As the local engine does (a piece per worker): each file's pieces alone keep every core busy, and
        every task more costs its start, its spill file and its stretch of the write tasks' reads (two per
        core made a 1 GB re-key on two cores 0.2 s slower).
        """
        return max(1, min(16, self.context.defaultParallelism))

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
        to the driver. Copy jobs run on the driver.

        With the shared-store exchange (``exchange_for(jobs)`` is ``shared`` or ``store``) the shuffled
        jobs run as two Spark jobs instead: read tasks append their parts to spill files under ``scratch``
        (which every executor must reach at the same path) or on the object store (``_exchange``) and
        return where they wrote; then write tasks, one per new subtask, read their stretches back, in the
        same job as the other operators' tasks. The spill files are removed before this returns.
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
            # The exchange is removed last: after Spark's jobs were cancelled on a failure or Ctrl-C.
            with self._exchange(together, scratch) as root, watch, spark_failures(sc):
                results = self._collect(sc, together, root)
            for index, job in enumerate(together):
                mine = [(f, rows) for i, f, rows in results if i == index]
                routed = sum(rows for _, rows in mine)
                written[job.operator_id] = pipeline.checked_written(job, routed, [f for f, _ in mine])
            progress.advance(stage, weight)
        if keyed:
            # The session ran a job: the class archive its JVM writes at exit holds what a job loads.
            class_archive_complete()
        return written

    def exchange_for(self, jobs: Sequence[KeyedJob[Any]]) -> str:
        """Return the exchange ``run`` uses for ``jobs``: ``shared``, ``store`` or ``shuffle``."""
        output = _output_root(jobs)
        output = output if output is not None else ""
        return exchange_mode(self.context, self._exchange_setting, output, self.exchange_dir)

    @contextlib.contextmanager
    def _exchange(self, jobs: Sequence[KeyedJob[Any]], scratch: Path) -> Iterator[str | None]:
        """Yield where the read tasks of ``jobs`` spill (None: no exchange, Spark's shuffle or none needed).

        ``shared``: ``scratch/.kg-exchange-<id>``; ``store``: ``.kg-exchange-<id>`` under
        ``spark.kg.exchange.dir``, else under the output's prefix. Created with a writer mark and removed
        afterwards whatever happens (``storage.exchange``); after a success whatever cannot be removed
        is an error, so nothing of it is left inside the output the caller then commits.
        """
        if all(job.feeds is not None for job in jobs):
            yield None
            return
        mode = self.exchange_for(jobs)
        if mode == "shuffle":
            yield None
            return
        if mode == "shared":
            base: str = str(scratch)
        else:
            base = self.exchange_dir or _output_root(jobs) or ""
        where = new_exchange(base)
        try:
            yield where.uri if not where.is_local else where.path
        except BaseException:
            remove_exchange(where)
            raise
        remove_exchange(where, check=True)

    def _collect(
        self, sc: SparkContext, jobs: Sequence[KeyedJob[W]], root: str | None
    ) -> list[tuple[int, W, int]]:
        """Run ``jobs``; return ``(job index, written file, rows read)`` per write task.

        One Spark job, two with an exchange through spill files under ``root`` (its read tasks first).
        """
        narrow = [i for i, job in enumerate(jobs) if job.feeds is not None]
        exchanged = [i for i, job in enumerate(jobs) if job.feeds is None and root is not None]
        shuffled = [i for i, job in enumerate(jobs) if job.feeds is None and i not in exchanged]
        parts = []
        if exchanged:
            assert root is not None
            parts.append(self._exchanged(sc, jobs, exchanged, root))
        if narrow:
            parts.append(self._narrow(sc, jobs, narrow))
        if shuffled:
            parts.append(self._shuffled(sc, jobs, shuffled))
        rdd = parts[0] if len(parts) == 1 else sc.union(parts)
        results: list[tuple[int, W, int]] = rdd.collect()
        return results

    def _exchanged(
        self, sc: SparkContext, jobs: Sequence[KeyedJob[W]], chosen: Sequence[int], root: str
    ) -> Any:
        """Run the read tasks of ``chosen`` (a Spark job) spilling under ``root``; return the write tasks.

        Each read task returns only its file and stretches (``spill.SpilledTask``); Spark returns one result
        per task, that of its successful attempt, so the stretches of a failed or speculative attempt are
        never used. Each write task gets its new subtask's stretches in read-task order.
        """
        reads = [(k, r) for k, i in enumerate(chosen) for r in range(len(jobs[i].reads))]
        spill = functools.partial(spill_task, jobs, tuple(chosen), self.batch_rows, root)
        sc.setJobDescription(f"kg rescale: read tasks spill into the exchange {root}")
        try:
            described = sc.parallelize(reads, max(1, len(reads))).map(spill).collect()
        finally:
            sc.setJobDescription(None)  # type: ignore[arg-type]
        by_job: dict[int, list[tuple[int, SpilledTask]]] = {}
        for k, index, task in described:
            by_job.setdefault(k, []).append((index, task))
        items = []
        for k, i in enumerate(chosen):
            tasks = [task for _index, task in sorted(by_job.get(k, []), key=lambda t: t[0])]
            if len(tasks) != len(jobs[i].reads):
                raise ExecutionError(
                    f"operator {jobs[i].label!r}: {len(tasks)} of {len(jobs[i].reads)} read tasks reported",
                    code="OUTPUT_VERIFICATION_FAILED",
                )
            for j, stretches in enumerate(subtask_stretches(tasks, jobs[i].new_parallelism)):
                items.append((k, j, stretches))
        write = functools.partial(exchange_write_task, jobs, tuple(chosen))
        return sc.parallelize(items, max(1, len(items))).map(write)

    def _narrow(self, sc: SparkContext, jobs: Sequence[KeyedJob[W]], chosen: Sequence[int]) -> Any:
        """One task per new subtask of each job, streaming its read tasks into its file: no shuffle."""
        subtasks = [(i, j) for i in chosen for j in range(jobs[i].new_parallelism)]
        task = functools.partial(stream_task, jobs, self.batch_rows)
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
        mapper = functools.partial(route_task, jobs, tuple(chosen), tuple(first), self.batch_rows)
        reducer = functools.partial(write_task, jobs, tuple(chosen), tuple(first))
        # Tasks go by index: the jobs (every task included) are in the closure already.
        return (
            sc.parallelize(reads, max(1, len(reads)))
            .flatMap(mapper)
            .partitionBy(partitions, partition_of_key)
            .mapPartitionsWithIndex(reducer)
        )


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


__all__ = [
    "EXCHANGES",
    "EXCHANGE_DIR_SETTING",
    "EXCHANGE_SETTING",
    "SparkExecutor",
    "exchange_mode",
]
