"""What runs inside the Spark engine's tasks, on the executors' Python workers.

Module-level functions, shipped to the workers by reference (``functools.partial`` of them, with the jobs
in the closure): a narrow job's write task (``stream_task``), a shuffled job's route task and write task
(``route_task``, ``write_task``, ``_buckets``), the byte route's read and write tasks of the shared-store
exchange (``spill_task``, ``exchange_write_task``), and the tasks that decode keyed state as data
(``state_task``, ``state_rows``). Each wraps its body in ``naming_kg_errors``.
"""

from __future__ import annotations

import bisect
import gc
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from keygroup_cli.execution.engines.spark.errors import naming_kg_errors
from keygroup_cli.execution.engines.spill import (
    SpilledTask,
    SubtaskStretches,
    attempt_file,
    ipc_bytes,
    spill_read_task,
    stretched_buckets,
)
from keygroup_cli.execution.jobs import model as pipeline
from keygroup_cli.execution.jobs.model import KeyedJob, W
from keygroup_cli.flink import part_entries


def _exempt_loaded() -> None:
    """Exempt what this worker has loaded from Python's cyclic collector (``gc.freeze``), at a task's start.

    pyspark's worker runs a full collection after every task. numpy, pyarrow, numba and kg's modules are
    about 130,000 objects: 50 ms a collection, on every task, where they were imported by a task (a cluster's
    workers; a prestarted daemon freezes its imports before forking). The previous task's garbage was
    collected just before; reference counting frees objects as usual.
    """
    gc.freeze()


def stream_task(jobs: Sequence[KeyedJob[W]], batch_rows: int, subtask: tuple[int, int]) -> tuple[int, W, int]:
    """Write new subtask ``j`` of narrow job ``i`` (``subtask = (i, j)``) from its read tasks."""
    _exempt_loaded()
    index, new_subtask = subtask
    with naming_kg_errors():
        written, rows = pipeline.stream(jobs[index], new_subtask, batch_rows)
    return index, written, rows


def route_task(
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
    _exempt_loaded()
    k, index = read
    job = jobs[chosen[k]]
    with naming_kg_errors():
        if job.parts:
            # The byte route: its parts are the shuffle records as they are.
            packed = pipeline.route_parts(job, job.reads[index], batch_rows)
            for seq, (new_subtask, bucket, part, _entries) in enumerate(packed):
                yield (first[k] + new_subtask, bucket, index, seq), bytes(part)
            return
        routed = pipeline.route(job, job.reads[index], batch_rows)
        for seq, (new_subtask, bucket, rows) in enumerate(routed):
            yield (first[k] + new_subtask, bucket, index, seq), ipc_bytes(rows)


#: A test's fault: with a directory here, the first attempt of read task 0 of each job of the shared-store
#: exchange writes its spill file with a byte of an entry flipped, notes it in that directory, and fails, so
#: Spark retries it (with ``spark.task.maxFailures`` above 1). Read on the executor.
FAIL_FIRST_SPILL = "KG_TEST_FAIL_FIRST_SPILL"


def spill_task(
    jobs: Sequence[KeyedJob[W]],
    chosen: tuple[int, ...],
    batch_rows: int,
    root: str,
    read: tuple[int, int],
) -> tuple[int, int, SpilledTask]:
    """Append one read task's parts to a spill file of this attempt's own under ``root``; describe it.

    ``read = (k, r)``: read task ``r`` of job ``chosen[k]``. The file's name is unique to the attempt, so
    a retried or speculative attempt never writes where another did; the driver uses the stretches of the
    attempt Spark reports as successful (``spill.spill_read_task``). With ``root`` on an object store the
    file is first written on this executor's local disk (Spark's ``SPARK_LOCAL_DIRS``), then uploaded.
    """
    _exempt_loaded()
    from pyspark import TaskContext

    k, index = read
    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    path = attempt_file(root, f"{k:04d}-{index:05d}-a{attempt}")
    fault = os.environ.get(FAIL_FIRST_SPILL)
    fail = None
    if fault and attempt == 0 and index == 0:

        def fail() -> None:
            Path(fault, f"{k}-{index}-a{attempt}").touch()
            raise RuntimeError(f"{FAIL_FIRST_SPILL}: the first attempt of read task {index} fails")

    with naming_kg_errors():
        local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None
        return k, index, spill_read_task(jobs[chosen[k]], index, batch_rows, path, fail, local)


def exchange_write_task(
    jobs: Sequence[KeyedJob[W]],
    chosen: tuple[int, ...],
    item: tuple[int, int, SubtaskStretches],
) -> tuple[int, W, int]:
    """Write new subtask ``j`` of job ``chosen[k]`` from its spilled stretches (``item = (k, j, ...)``).

    Returns the job's index, the file written and the entries its stretches held (which the driver checks
    against what the read tasks routed).
    """
    _exempt_loaded()
    k, new_subtask, stretches = item
    job = jobs[chosen[k]]
    with naming_kg_errors():
        spilled = stretched_buckets(job, new_subtask, stretches)
        if job.parts:
            written = pipeline.write_parts(job, new_subtask, spilled)
        else:
            written = pipeline.write(job, new_subtask, spilled)  # type: ignore[arg-type]
    return chosen[k], written, stretches.entries


def partition_of_key(key: tuple[int, int, int, int]) -> int:
    """Return a shuffle record's partition: its new subtask (see ``route_task``)."""
    return key[0]


def write_task(
    jobs: Sequence[KeyedJob[W]],
    chosen: tuple[int, ...],
    first: tuple[int, ...],
    partition: int,
    records: Iterable[tuple[tuple[int, int, int, int], bytes]],
) -> Iterator[tuple[int, W, int]]:
    """Write shuffle partition ``partition`` (a new subtask of one of the jobs) from its blocks."""
    _exempt_loaded()
    k = bisect.bisect_right(first, partition) - 1
    received = [0]
    with naming_kg_errors():
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


def state_task(
    metadata_path: str, operator_id: str, states: list[str] | None, index: int
) -> Iterator[tuple[int, str, bytes]]:
    """Decode keyed file ``index`` of an operator into typed batches, each as Arrow IPC."""
    _exempt_loaded()
    from keygroup_cli.flink import open_savepoint, state_batches

    with naming_kg_errors():
        savepoint = open_savepoint(metadata_path, contained=False)  # judged by the driver
        wanted = None if states is None else frozenset(states)
        for name, batch in state_batches(savepoint, operator_id, wanted, files=[index]):
            yield index, name, ipc_bytes(pa.Table.from_batches([batch]))


def state_rows(
    metadata_path: str, operator_id: str, state: str, schema: bytes, index: int
) -> Iterator[tuple[Any, ...]]:
    """Keyed file ``index``'s rows of ``state`` as Python tuples of Spark's types (maps as dicts)."""
    _exempt_loaded()
    from keygroup_cli.flink import open_savepoint, state_batches

    target = pa.ipc.read_schema(pa.py_buffer(schema))
    with naming_kg_errors():
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
    "FAIL_FIRST_SPILL",
    "exchange_write_task",
    "partition_of_key",
    "route_task",
    "spill_task",
    "state_rows",
    "state_task",
    "stream_task",
    "write_task",
]
