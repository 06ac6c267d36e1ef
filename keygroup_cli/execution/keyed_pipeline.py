"""The keyed half of a savepoint rescale as tasks: plan on the driver, read/route and write wherever.

``plan_keyed_jobs`` builds, from ``_metadata`` and the keyed files' headers alone, one ``KeyedJob`` per
keyed operator: its read tasks (key-group ranges of the old files, ``flink.keyed_tasks``), its write tasks
(one per new subtask: range, file name under the output root, header, compression) and what routes rows
between them (key type, new maxParallelism and parallelism). Engines run the same two task bodies:

- ``route``: read a task's rows and give every row its new key group (Java ``hashCode`` → murmur →
  ``% maxP'``; the stored key group is checked on the way), then split them by (new subtask, bucket), a
  bucket being a contiguous range of new key groups (``tasks.bucket_of``);
- ``write``: encode one new subtask's buckets, in ascending order, each stably sorted by key group.

Rows of a new key group keep input order (old subtask, then file order), whatever engine ran the tasks and
however it chunked them, so every engine writes the same bytes. No kg snapshot is written in between.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from keygroup_cli.errors import ExecutionError, InvalidSnapshotError
from keygroup_cli.execution.tasks import bucket_count, bucket_of, sort_bucket, split_by_bucket
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed_tasks import (
    KeyedReadTask,
    KeyedWriteTask,
    WrittenKeyedFile,
    directory_of,
    keyed_header,
    read_keyed_task,
    read_tasks,
    require_stored_key_groups,
    write_keyed_task,
)
from keygroup_cli.flink.metadata.locate import FlinkSnapshot
from keygroup_cli.flink.regroup import keyed_handles
from keygroup_cli.flink.state.keyed_header import KeyedStateHeader
from keygroup_cli.flink.state.keyed_layout import DEFAULT_BATCH_ROWS, KeyedLayout
from keygroup_cli.javahash import hash_codes
from keygroup_cli.keygroups import (
    key_group_range_for_operator_index,
    key_groups_for_hashes,
    operator_indexes_for_key_groups,
)


@dataclass(frozen=True, slots=True)
class KeyedJob:
    """One keyed operator's re-hash: what to read, what to write, and how rows go from one to the other."""

    operator_id: str
    label: str
    key_type: str
    #: Every keyed state of the operator, in the order of the header the new files carry.
    state_names: tuple[str, ...]
    old_max_parallelism: int
    new_max_parallelism: int
    new_parallelism: int
    reads: tuple[KeyedReadTask, ...]
    writes: tuple[KeyedWriteTask, ...]

    @property
    def bytes(self) -> int:
        """Return the bytes of keyed state to read."""
        return sum(r.bytes for r in self.reads)

    @property
    def buckets(self) -> int:
        """Return how many re-hash buckets the new key groups are cut into."""
        return bucket_count(self.new_max_parallelism)


def plan_keyed_jobs(
    savepoint: FlinkSnapshot,
    targets: Mapping[str, tuple[int, int]],
    output_root: str,
    *,
    compression: bool | None = None,
    pieces: int = 1,
    source_root: str | None = None,
) -> list[KeyedJob]:
    """Plan the re-hash of every keyed operator of ``savepoint`` (reads only ``_metadata`` and headers).

    Args:
        savepoint: The input savepoint (canonical keyed files).
        targets: The new parallelism and maxParallelism of every keyed operator, by operator id (the
            plan's: an operator left out of the rescale keeps both).
        output_root: Where write tasks create their files (a local directory or an object-store URI).
        compression: Snappy for the new files; None keeps what the old files used.
        pieces: Cut each old file into up to this many read tasks (more tasks than cores on a cluster).
        source_root: The savepoint directory as executors should open it (default: where it was read).

    Raises:
        InvalidSnapshotError: Subtasks disagree on the key serializer, or no header declares every state.
    """
    root = source_root or str(savepoint.directory)
    jobs = []
    for op in savepoint.metadata.operators:
        handles = sorted(keyed_handles(op), key=lambda h: h.key_group_start)
        if not handles:
            continue
        where = f"{savepoint.metadata_path}: operator {op.label!r}"
        headers = []
        for handle in handles:
            with StreamSource(handle.delegate, directory_of(root)) as src:
                raw, header = keyed_header(src, handle)
                headers.append((raw, header, KeyedLayout.from_header(header, op.max_parallelism, src.source)))
        if len({layout.codec.key_type for _, _, layout in headers}) != 1:
            raise InvalidSnapshotError(
                f"{where}: subtasks disagree on the key serializer", code="FLINK_STATE_INCONSISTENT"
            )
        raw, header, layout = _covering_header(headers, where)
        new_p, new_max = targets.get(op.operator_id, (op.parallelism, op.max_parallelism))
        compressed = header.compressed if compression is None else compression
        reads = [
            task
            for index, handle in enumerate(handles)
            for task in read_tasks(root, handle, op.max_parallelism, index, pieces)
        ]
        writes = [
            KeyedWriteTask(
                output_root,
                str(uuid.uuid4()),
                j,
                raw,
                new_max,
                key_group_range_for_operator_index(new_max, new_p, j),
                compressed,
            )
            for j in range(new_p)
        ]
        jobs.append(
            KeyedJob(
                op.operator_id,
                op.label,
                layout.codec.key_type,
                tuple(s.name for s in layout.states),
                op.max_parallelism,
                new_max,
                new_p,
                tuple(reads),
                tuple(writes),
            )
        )
    return jobs


def _covering_header(
    headers: list[tuple[bytes, KeyedStateHeader, KeyedLayout]], where: str
) -> tuple[bytes, KeyedStateHeader, KeyedLayout]:
    """Return the first header (old subtask order) that declares every state any old file holds."""
    needed = {s.name for _, _, layout in headers for s in layout.states}
    for entry in headers:
        if needed <= {s.name for s in entry[2].states}:
            return entry
    raise InvalidSnapshotError(
        f"{where}: no keyed-state header declares all of {sorted(needed)}", code="FLINK_STATE_UNKNOWN"
    )


def route(
    job: KeyedJob, task: KeyedReadTask, batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[tuple[int, int, pa.Table]]:
    """Yield ``(new subtask, bucket, rows)`` for the rows of ``task``, re-keyed for the new maxParallelism.

    Within one yield rows keep their input order; yields come batch by batch, buckets ascending.

    Raises:
        InvalidSnapshotError: A key stored in a key group Flink would not assign it to.
    """
    count = job.buckets
    rehash = job.new_max_parallelism != job.old_max_parallelism
    for batch in read_keyed_task(task, job.state_names, batch_rows, check=not rehash):
        table = pa.Table.from_batches([batch])
        if rehash:
            codes = hash_codes(table.column("key"), job.key_type)
            require_stored_key_groups(table, key_groups_for_hashes(codes, job.old_max_parallelism), task.root)
            groups = key_groups_for_hashes(codes, job.new_max_parallelism)
            table = table.set_column(0, table.schema.field(0), pa.array(groups, type=pa.int32()))
        else:
            groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int32)
        subtasks = operator_indexes_for_key_groups(groups, job.new_max_parallelism, job.new_parallelism)
        composite = subtasks.astype(np.int64) * count + bucket_of(groups, job.new_max_parallelism)
        for key, rows in split_by_bucket(table, composite):
            new_subtask, bucket = divmod(key, count)
            yield new_subtask, bucket, rows


def write(job: KeyedJob, new_subtask: int, buckets: Iterable[pa.Table]) -> WrittenKeyedFile:
    """Write new subtask ``new_subtask``'s file from its buckets (ascending; rows in input order in each)."""
    task = job.writes[new_subtask]
    return write_keyed_task(task, (sort_bucket(b, task.key_groups) for b in buckets))


def check_counts(
    job: KeyedJob, rows_read: int, written: Iterable[WrittenKeyedFile]
) -> list[WrittenKeyedFile]:
    """Return the written files in subtask order after checking that every row read was written once.

    Raises:
        ExecutionError: A write task is missing or rows were lost or duplicated on the way.
    """
    files = sorted(written, key=lambda f: f.subtask)
    if [f.subtask for f in files] != list(range(job.new_parallelism)):
        raise ExecutionError(
            f"operator {job.label!r}: write tasks returned subtasks {[f.subtask for f in files]}",
            code="OUTPUT_VERIFICATION_FAILED",
        )
    rows_written = sum(f.rows for f in files)
    if rows_written != rows_read:
        raise ExecutionError(
            f"operator {job.label!r}: {rows_read} keyed entries read, {rows_written} written",
            code="OUTPUT_VERIFICATION_FAILED",
        )
    return files


__all__ = ["KeyedJob", "check_counts", "plan_keyed_jobs", "route", "write"]
