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
- The same exchange through an **object store** (a ``s3://`` … prefix, ``storage.exchange``): an attempt
  appends its parts to a file on its executor's local disk, then uploads it in one stream sorted by (new
  subtask, bucket), written order kept within each; the object appears whole when the upload completes (an
  attempt killed before that leaves no object, at most an incomplete multipart upload). A write task's
  stretches of one file and bucket are then contiguous: one ranged read each, a bucket's reads in flight
  together; memory per write task is one bucket, as locally.

``read_stretches`` (``StretchReader``) assembles a bucket for any of them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from keygroup_cli.core.errors import ExecutionError, KgError
from keygroup_cli.execution.jobs import model as pipeline
from keygroup_cli.execution.jobs.model import KeyedJob
from keygroup_cli.storage.locations import is_remote, location
from keygroup_cli.storage.transfer import in_flight, retrying

#: The suffix of a spill file of parts.
PARTS_SUFFIX = ".parts"
#: Ranged reads of one bucket in flight at once from an object store.
READS_IN_FLIGHT = 8
#: The buffer that copies a local spill file into its object-store upload.
_COPY_CHUNK = 8 << 20


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
    with StretchReader() as reader:
        return reader.read(stretches)


class StretchReader:
    """Reads stretches of spill files, local or on an object store, keeping each file open until closed.

    ``read`` returns a bucket's stretches back to back in one buffer. Stretches of one file that follow
    each other are read as one range; on an object store each range is one ranged GET, up to
    ``READS_IN_FLIGHT`` of a bucket at once, retried when the store throttles or fails transiently.
    """

    def __init__(self) -> None:
        self._handles: dict[str, Any] = {}

    def __enter__(self) -> StretchReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every file this reader opened."""
        for fh in self._handles.values():
            with contextlib.suppress(Exception):
                fh.close()
        self._handles.clear()

    def read(self, stretches: Iterable[Stretch]) -> memoryview:
        """Return the bytes of ``stretches`` back to back, in the order given (one buffer, not zeroed).

        Raises:
            ExecutionError: A spill file is missing or shorter than a stretch says (``SPILL_MISSING``).
        """
        ranges: list[list[Any]] = []  # [path, offset, length, at]: contiguous stretches of a file merged
        size = 0
        for s in stretches:
            last = ranges[-1] if ranges else None
            if last is not None and last[0] == s.path and last[1] + last[2] == s.offset:
                last[2] += s.length
            else:
                ranges.append([s.path, s.offset, s.length, size])
            size += s.length
        # Not zeroed (a bytearray is): every byte is read into it next.
        view = memoryview(np.empty(size, dtype=np.uint8))  # type: ignore[arg-type]
        remote = [r for r in ranges if is_remote(r[0])]
        for path, offset, length, at in ranges:
            if not is_remote(path):
                fh = self._local(path)
                fh.seek(offset)
                if fh.readinto(view[at : at + length]) != length:
                    raise _short(path)
        if remote:
            for path in dict.fromkeys(r[0] for r in remote):
                self._remote(path)  # opened here, one at a time: the reads below share the handles

            def fetch(item: list[Any]) -> None:
                path, offset, length, at = item
                data = retrying(lambda: self._handles[path].read_at(length, offset), path)
                if len(data) != length:
                    raise _short(path)
                view[at : at + length] = memoryview(data).cast("B")

            for _ in in_flight(fetch, remote, READS_IN_FLIGHT, ordered=False):
                pass
        return view

    def _local(self, path: str) -> Any:
        fh = self._handles.get(path)
        if fh is None:
            try:
                fh = self._handles[path] = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()
            except FileNotFoundError:
                raise ExecutionError(
                    f"spill file {path} is missing: the exchange directory must be one every "
                    "executor reaches at the same path",
                    code="SPILL_MISSING",
                ) from None
        return fh

    def _remote(self, path: str) -> Any:
        fh = self._handles.get(path)
        if fh is None:
            try:
                fh = self._handles[path] = retrying(location(path).open_input, path)
            except KgError as exc:
                if exc.code != "OBJECT_NOT_FOUND":
                    raise
                raise ExecutionError(
                    f"spill file {path} is missing from the exchange: the exchange prefix must be one "
                    "every executor reaches with the same credentials",
                    code="SPILL_MISSING",
                ) from None
        return fh


def _short(path: str) -> ExecutionError:
    return ExecutionError(
        f"{path}: a spill file is shorter than what was written to it", code="SPILL_MISSING"
    )


def attempt_file(root: str, name: str) -> str:
    """Return a new file name under ``root`` for one attempt of a task: ``name``, then a unique suffix."""
    file = f"{name}-{uuid.uuid4().hex}{PARTS_SUFFIX}"
    return root.rstrip("/") + "/" + file if is_remote(root) else os.path.join(root, file)


def spill_read_task(
    job: KeyedJob[Any],
    index: int,
    batch_rows: int,
    path: str,
    fail_after: Callable[[], None] | None = None,
    local_dir: str | None = None,
) -> SpilledTask:
    """Append read task ``index``'s parts to the new file ``path``; return its stretches and entries.

    A job of the row route (no ``parts``) spills its routed rows instead, each ``(new subtask, bucket)``
    batch as one Arrow IPC stream (what Spark's shuffle carries for it), its rows counting as entries.

    ``path`` on an object store (a URI): the parts go to a file in ``local_dir`` (this executor's own
    disk; default the temp directory) as they come, then up to ``path`` in one upload ordered by (new
    subtask, bucket), and the local file is removed. The object exists only once the upload completed.

    ``fail_after`` (a test's fault) is called after the parts are written (and uploaded), the file closed,
    and (for parts) a byte of its first entry flipped: an attempt that fails there leaves a wrong file
    behind.

    Raises:
        ExecutionError: ``path``'s directory does not exist on this executor (``SPILL_MISSING``).
        InvalidInputError: The read task found its input corrupt.
        KgError: The upload failed for good (the store's one-line error).
    """
    remote = is_remote(path)
    if not remote and not os.path.isdir(os.path.dirname(path)):
        raise ExecutionError(
            f"the exchange directory {os.path.dirname(path)} does not exist on this executor: with a "
            "cluster, use an object-store exchange (--out s3://…, or --conf spark.kg.exchange.dir=s3://…), "
            "a directory every executor mounts at the same path, or --conf spark.kg.exchange=shuffle",
            code="SPILL_MISSING",
        )
    spilled = path
    if remote:
        spilled = os.path.join(
            local_dir or tempfile.gettempdir(), f"kg-spill-{uuid.uuid4().hex}{PARTS_SUFFIX}"
        )
    stretches: list[tuple[int, int, int, int, int]] = []
    entries = 0
    offset = 0
    try:
        with open(spilled, "xb", buffering=0) as out:
            for new_subtask, bucket, part, count in _routed(job, index, batch_rows):
                length = len(part)
                write_all(out, part)
                del part
                stretches.append((new_subtask, bucket, offset, length, count))
                offset += length
                entries += count
        if fail_after is not None and stretches and job.parts:
            # The first byte of the first part's first entry (after its head and columns): a key's byte.
            with open(spilled, "r+b") as out:
                count = int.from_bytes(out.read(4), "little")
                out.seek(8 + 12 * count)
                first = out.read(1)
                out.seek(8 + 12 * count)
                out.write(bytes([first[0] ^ 0xFF]))
        table = np.array(stretches, dtype=np.int64).reshape(-1, 5)
        if remote:
            table = _upload_sorted(spilled, path, table)
    finally:
        if remote:
            with contextlib.suppress(OSError):
                os.unlink(spilled)
    if fail_after is not None:
        fail_after()
    return SpilledTask(path, entries, table)


def _upload_sorted(local: str, target: str, table: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Upload the local spill file ``local`` to ``target`` by (new subtask, bucket); return the new stretches.

    Within a (new subtask, bucket) the parts keep the order they were written in, so a bucket's bytes are
    those of the local exchange. The upload is retried whole from the local file on a transient failure.
    """
    order = np.lexsort((np.arange(len(table)), table[:, 1], table[:, 0]))
    placed = table[order].copy()
    lengths = placed[:, 3]
    placed[:, 2] = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(placed) else lengths
    sources = table[order, 2].tolist()
    destination = location(target)

    def put() -> None:
        # A new buffer per write: the store's upload may keep a reference to what it was given.
        with (
            open(local, "rb", buffering=0) as src,
            destination.fs.open_output_stream(destination.path) as out,
        ):
            for start, length in zip(sources, lengths.tolist(), strict=True):
                src.seek(start)
                while length:
                    chunk = src.read(min(length, _COPY_CHUNK))
                    if not chunk:
                        raise ExecutionError(
                            f"{local}: the local spill file ended early", code="SPILL_MISSING"
                        )
                    out.write(chunk)
                    length -= len(chunk)

    retrying(put, target)
    return placed


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
    with StretchReader() as reader:  # each spill file opened once for all the buckets
        for bucket in pipeline.buckets_for(key_groups, job.new_max_parallelism, job.buckets):
            lo, hi = (int(i) for i in np.searchsorted(buckets, [bucket, bucket + 1]))
            if lo == hi:
                continue
            parts = [
                Stretch(stretches.paths[f], offset, length)
                for f, _bucket, offset, length in stretches.table[lo:hi].tolist()
            ]
            data = reader.read(parts)
            if job.parts:
                yield data
                continue
            tables, at = [], 0
            for s in parts:  # one Arrow IPC stream a stretch
                tables.append(pa.ipc.open_stream(pa.py_buffer(data[at : at + s.length])).read_all())
                at += s.length
            yield pa.concat_tables(tables)


__all__ = [
    "PARTS_SUFFIX",
    "Stretch",
    "SpilledTask",
    "StretchReader",
    "SubtaskStretches",
    "attempt_file",
    "ipc_bytes",
    "read_stretches",
    "stretched_buckets",
    "subtask_stretches",
    "write_all",
    "spill_read_task",
]
