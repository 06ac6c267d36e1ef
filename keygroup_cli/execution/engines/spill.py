"""The byte route's spill files, which both engines exchange parts through: plain bytes and stretches.

A read task of a ``parts`` job (``execution.jobs.model.route_parts``) yields parts per ``(new subtask,
bucket)``; an engine appends them, as they come, to spill files and notes each *stretch*: which file, from
which offset, how many bytes. A write task reads its bucket back as its stretches in read-task order (and,
within a read task, in the order they were yielded), so the bytes it frames do not depend on which worker,
thread or executor ran which read task, nor on how many attempts it took.

- The local engine keeps a file per (worker thread, new subtask, bucket) (``engines.local``) and removes a
  bucket's files once it is written.
- The Spark engine's shared-store exchange (``engines.spark.jobs``) has each read-task *attempt* append all
  its parts to one file of its own (``spill_read_task``), named uniquely for the attempt, in a directory
  every executor reaches; the task returns only its stretches, and the driver hands each write task the
  stretches of its new subtask from the attempts Spark reported as successful. A failed or speculative
  attempt's file is never named in what the driver uses, so it cannot reach the output.

``read_stretches`` assembles a bucket for either.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.execution.jobs import model as pipeline
from keygroup_cli.execution.jobs.model import KeyedJob

#: The suffix of a spill file of parts.
PARTS_SUFFIX = ".parts"


@dataclass(frozen=True, slots=True)
class Stretch:
    """Bytes a read task wrote for one (new subtask, bucket): ``length`` bytes of ``path`` at ``offset``."""

    path: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class SpilledTask:
    """What a read task of the shared-store exchange returns: its file, entries and stretches, nothing more.

    ``stretches`` is an int64 array of rows ``(new subtask, bucket, offset, length, entries)`` in the order
    the parts were written (compact: it pickles as its bytes).
    """

    path: str
    entries: int
    stretches: npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class SubtaskStretches:
    """What a write task of the shared-store exchange gets: the stretches of its new subtask.

    ``table`` is an int64 array of rows ``(file, bucket, offset, length)``, ``file`` an index into
    ``paths``, sorted by bucket and, within a bucket, in read-task order; ``entries`` is what they hold.
    """

    paths: tuple[str, ...]
    table: npt.NDArray[np.int64]
    entries: int


def write_all(out: BinaryIO, data: bytes | memoryview) -> None:
    """Write all of ``data`` to an unbuffered file (a raw write may take less than it is given)."""
    view = memoryview(data)
    while view:
        written = out.write(view)
        view = view[written or 0 :]


def read_stretches(stretches: Iterable[Stretch]) -> memoryview:
    """Return the bytes of ``stretches`` back to back, in the order given (one buffer, not zeroed).

    Raises:
        ExecutionError: A spill file is missing or shorter than a stretch says (``SPILL_MISSING``).
    """
    stretches = list(stretches)
    size = sum(s.length for s in stretches)
    # Not zeroed (a bytearray is): every byte is read into it next.
    view = memoryview(np.empty(size, dtype=np.uint8))  # type: ignore[arg-type]
    at = 0
    handles: dict[str, Any] = {}
    try:
        for s in stretches:
            fh = handles.get(s.path)
            if fh is None:
                try:
                    fh = handles[s.path] = open(s.path, "rb", buffering=0)  # noqa: SIM115 - closed below
                except FileNotFoundError:
                    raise ExecutionError(
                        f"spill file {s.path} is missing: the exchange directory must be one every "
                        "executor reaches at the same path",
                        code="SPILL_MISSING",
                    ) from None
            fh.seek(s.offset)
            if fh.readinto(view[at : at + s.length]) != s.length:
                raise ExecutionError(
                    f"{s.path}: a spill file is shorter than what was written to it", code="SPILL_MISSING"
                )
            at += s.length
    finally:
        for fh in handles.values():
            fh.close()
    return view


def attempt_file(root: str, name: str) -> str:
    """Return a new file name under ``root`` for one attempt of a task: ``name``, then a unique suffix."""
    return os.path.join(root, f"{name}-{uuid.uuid4().hex}{PARTS_SUFFIX}")


def spill_read_task(
    job: KeyedJob[Any],
    index: int,
    batch_rows: int,
    path: str,
    fail_after: Callable[[], None] | None = None,
) -> SpilledTask:
    """Append read task ``index``'s parts to the new file ``path``; return its stretches and entries.

    A job of the row route (no ``parts``) spills its routed rows instead, each ``(new subtask, bucket)``
    batch as one Arrow IPC stream (what Spark's shuffle carries for it), its rows counting as entries.

    ``fail_after`` (a test's fault) is called after the parts are written, the file closed, and (for
    parts) a byte of its first entry flipped: an attempt that fails there leaves a wrong file behind.

    Raises:
        ExecutionError: ``path``'s directory does not exist on this executor (``SPILL_MISSING``).
        InvalidInputError: The read task found its input corrupt.
    """
    if not os.path.isdir(os.path.dirname(path)):
        raise ExecutionError(
            f"the exchange directory {os.path.dirname(path)} does not exist on this executor: with a "
            "cluster, DEST's directory must be on a filesystem every executor mounts at the same path, "
            "or use --conf spark.kg.exchange=shuffle",
            code="SPILL_MISSING",
        )
    stretches: list[tuple[int, int, int, int, int]] = []
    entries = 0
    offset = 0
    with open(path, "xb", buffering=0) as out:
        for new_subtask, bucket, part, count in _routed(job, index, batch_rows):
            length = len(part)
            write_all(out, part)
            del part
            stretches.append((new_subtask, bucket, offset, length, count))
            offset += length
            entries += count
    if fail_after is not None:
        if stretches and job.parts:
            # The first byte of the first part's first entry (after its head and columns): a key's byte.
            with open(path, "r+b") as out:
                count = int.from_bytes(out.read(4), "little")
                out.seek(8 + 12 * count)
                first = out.read(1)
                out.seek(8 + 12 * count)
                out.write(bytes([first[0] ^ 0xFF]))
        fail_after()
    return SpilledTask(path, entries, np.array(stretches, dtype=np.int64).reshape(-1, 5))


def _routed(
    job: KeyedJob[Any], index: int, batch_rows: int
) -> Iterator[tuple[int, int, bytes | memoryview, int]]:
    """Yield read task ``index``'s ``(new subtask, bucket, bytes, entries)``: parts, or rows as Arrow IPC."""
    if job.parts:
        yield from pipeline.route_parts(job, job.reads[index], batch_rows)
        return
    for new_subtask, bucket, rows in pipeline.route(job, job.reads[index], batch_rows):
        yield new_subtask, bucket, ipc_bytes(rows), rows.num_rows


def ipc_bytes(rows: pa.Table) -> bytes:
    """Return ``rows`` as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def subtask_stretches(tasks: Sequence[SpilledTask], new_parallelism: int) -> list[SubtaskStretches]:
    """Return the stretches of each new subtask: by bucket, each bucket's in ``tasks``'s order."""
    empty = np.empty((0, 6), dtype=np.int64)
    rows = np.concatenate(
        [empty]
        + [
            np.column_stack([np.full(len(t.stretches), i, dtype=np.int64), t.stretches])
            for i, t in enumerate(tasks)
            if len(t.stretches)
        ]
    )  # (file, subtask, bucket, offset, length, entries), in read-task order, then as written
    rows = rows[np.lexsort((np.arange(len(rows)), rows[:, 2], rows[:, 1]))]
    bounds = np.searchsorted(rows[:, 1], np.arange(new_parallelism + 1))
    out = []
    for j in range(new_parallelism):
        mine = rows[bounds[j] : bounds[j + 1]]
        files = np.unique(mine[:, 0])
        table = np.column_stack([np.searchsorted(files, mine[:, 0]), mine[:, 2:5]]).astype(np.int64)
        paths = tuple(tasks[int(f)].path for f in files)
        out.append(SubtaskStretches(paths, table.reshape(-1, 4), int(mine[:, 5].sum())))
    return out


def stretched_buckets(
    job: KeyedJob[Any], new_subtask: int, stretches: SubtaskStretches
) -> Iterator[memoryview | pa.Table]:
    """Yield new subtask ``new_subtask``'s buckets that hold entries, ascending, each read when reached.

    A bucket of parts is their bytes back to back; one of rows (the row route) their table, in order.
    """
    key_groups = job.writes[new_subtask].key_groups
    buckets = stretches.table[:, 1]
    for bucket in pipeline.buckets_for(key_groups, job.new_max_parallelism, job.buckets):
        lo, hi = (int(i) for i in np.searchsorted(buckets, [bucket, bucket + 1]))
        if lo == hi:
            continue
        parts = [
            Stretch(stretches.paths[f], offset, length)
            for f, _bucket, offset, length in stretches.table[lo:hi].tolist()
        ]
        if job.parts:
            yield read_stretches(parts)
        else:
            yield pa.concat_tables(
                pa.ipc.open_stream(pa.py_buffer(read_stretches([s]))).read_all() for s in parts
            )


__all__ = [
    "PARTS_SUFFIX",
    "Stretch",
    "SpilledTask",
    "SubtaskStretches",
    "attempt_file",
    "ipc_bytes",
    "read_stretches",
    "stretched_buckets",
    "subtask_stretches",
    "write_all",
    "spill_read_task",
]
