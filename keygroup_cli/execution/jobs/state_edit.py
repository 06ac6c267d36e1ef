"""``kg write`` and ``kg compact`` compiled into the task model of ``execution.jobs.model``.

One ``KeyedJob`` per edited operator: its read tasks are ``FlinkEditedRead``s, key-group ranges of the old
keyed files that carry their part of the edit (``flink.write.edit.KeyedEdit``, sliced to the range) and
yield the edited rows; under a new maxParallelism they re-key them (Java ``hashCode`` → murmur →
``% maxP'``) and the engine shuffles them to the new subtasks. Its write tasks are ``FlinkKeyedWrite``s, one
per new subtask. An edit pickles, so the Spark engine runs these tasks on its executors as the local engine
runs them here: a write can go with a rescale of maxParallelism in the same pass, on either engine.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from keygroup_cli.core.javahash import hash_codes
from keygroup_cli.core.keygroups import KeyGroupRange, key_group_range_for_operator_index
from keygroup_cli.execution.jobs.model import KeyedJob, Rows, rekeyed
from keygroup_cli.execution.jobs.savepoint import STAGE, FlinkKeyedRead, FlinkKeyedWrite
from keygroup_cli.flink import (
    KeyedEdit,
    KeyedReadTask,
    KeyedStream,
    OperatorState,
    WrittenKeyedFile,
    edited_batches,
    header_codecs,
    read_keyed_task,
    read_tasks,
)


@dataclass(frozen=True, slots=True)
class FlinkEditedRead(FlinkKeyedRead):
    """A key-group range of one keyed file with its part of an edit: yields the edited rows."""

    edit: KeyedEdit | None = None

    @classmethod
    def edited(cls, task: KeyedReadTask, edit: KeyedEdit) -> FlinkEditedRead:
        """Return ``task`` carrying ``edit`` (already sliced to the task's key groups)."""
        return cls(**{f.name: getattr(task, f.name) for f in fields(task)}, edit=edit)

    def read(self, job: KeyedJob[Any], batch_rows: int) -> Iterator[Rows]:
        """Yield the range's rows, edited, with their new key group under a new maxParallelism.

        Raises:
            InvalidInputError: A block ``kg verify`` rejects, or a key stored in the wrong key group.
        """
        rows: Iterator[Any] = read_keyed_task(self, job.state_names, batch_rows)
        if self.edit is not None:
            assert self.header is not None
            codecs = header_codecs(self.header, f"{self.root}/{self.handle.delegate}")
            rows = edited_batches(rows, self.edit, codecs, job.key_type, job.state_names)
        for table in rows:
            if job.rehash:
                table = rekeyed(table, hash_codes(table.column("key"), job.key_type), job.new_max_parallelism)
            yield table


def plan_edit_job(
    op: OperatorState,
    streams: list[KeyedStream],
    chosen: KeyedStream,
    edit: KeyedEdit,
    root: str,
    output_root: str,
    new_max_parallelism: int,
    slice_edit: Any,
    *,
    pieces: int = 1,
    min_piece_bytes: int = 0,
) -> KeyedJob[WrittenKeyedFile]:
    """Return the job that rewrites ``op``'s keyed files with ``edit``, at ``new_max_parallelism``.

    ``streams`` are the operator's keyed files in key-group order, ``chosen`` the one whose header declares
    every state (the new files carry it); ``slice_edit(edit, key_groups)`` cuts the edit to a read task's
    range (``flink.write.edit.edit_in_range``). The job keeps the operator's parallelism.
    """
    reads = []
    for index, stream in enumerate(streams):
        for task in read_tasks(
            root, stream.handle, op.max_parallelism, index, pieces, stream.raw_header, min_piece_bytes
        ):
            span = KeyGroupRange(task.key_groups.start, task.key_groups.end)
            reads.append(FlinkEditedRead.edited(task, slice_edit(edit, span)))
    names = tuple(s.name for s in chosen.layout.states)
    writes = [
        FlinkKeyedWrite(
            output_root,
            str(uuid.uuid4()),
            j,
            chosen.raw_header,
            new_max_parallelism,
            key_group_range_for_operator_index(new_max_parallelism, op.parallelism, j),
            chosen.header.compressed,
        )
        for j in range(op.parallelism)
    ]
    return KeyedJob(
        op.operator_id,
        op.label,
        chosen.layout.codec.key_type,
        names,
        op.max_parallelism,
        new_max_parallelism,
        op.parallelism,
        tuple(reads),
        tuple(writes),
        STAGE,
    )


__all__ = ["FlinkEditedRead", "plan_edit_job"]
