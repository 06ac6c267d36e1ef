"""Keyed state as the RocksDB databases of a NATIVE savepoint (``--format native``).

Two ways, one database builder (``flink.layouts.native``):

- ``write_native_task``: the body of a rescale's NATIVE write task (``execution.jobs.savepoint``). One task
  per new subtask encodes the subtask's canonical keyed file, builds its database from it, removes the file
  and returns the ``IncrementalRemoteKeyedStateHandle`` (``WrittenDatabase``). Engines run these tasks where
  they run any write task (Spark executors included: the binding is imported in the task).
- ``to_native``: on the driver, between the writer and the seal (``flink.write.commit``), every
  ``KeyGroupsSavepointStateHandle`` whose file is in the staging directory becomes a database
  (``kg convert --to-flink --format native`` of a kg snapshot).

Either way the savepoint's properties then say ``NATIVE`` (``SavepointFormatType``, ``as_native``). Operator
state stays as it is: NATIVE and canonical savepoints store it the same way. One output serves both Flink 2.x
keyed backends that take NATIVE state: RocksDB and ForSt restore the same files (their NATIVE savepoints are
the same bytes; tests/restore/test_native.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from keygroup_cli.core.errors import UnsupportedFormatError
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.keyed.encode import BlockSource
from keygroup_cli.flink.layouts.native import build_native_handle
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, OperatorState
from keygroup_cli.flink.write.keyed_tasks import KeyedWriteTask, write_keyed_task
from keygroup_cli.storage.locations import is_remote

#: ``SavepointFormatType`` as Java serialization writes the enum constant's name (a short length, the bytes).
_CANONICAL = b"\x00\x09CANONICAL"
_NATIVE = b"\x00\x06NATIVE"


@dataclass(frozen=True, slots=True)
class WrittenDatabase:
    """What a NATIVE write task wrote: one new subtask's RocksDB database and its metadata stream."""

    subtask: int
    handle: IncrementalKeyedHandle
    #: Bytes of the database files and the metadata stream.
    size: int
    #: Entries written (every column family's), as the canonical write counted them.
    rows: int
    key_groups_with_data: int


def write_native_task(
    task: KeyedWriteTask,
    batches: Iterable[pa.RecordBatch | pa.Table],
    checkpoint_id: int,
    encoding: type[BlockSource[Any]] | None = None,
) -> WrittenDatabase:
    """Write new subtask ``task.subtask``'s keyed state as a RocksDB database under ``task.root``.

    The rows (or entry batches, ``encoding``) are encoded into the canonical keyed file ``root/name`` first
    (``keyed_tasks.write_keyed_task``: every block checked as it is encoded), the database is built from it
    and the file removed: only the database's files (UUID names) and its metadata stream stay.

    Raises:
        InvalidInputError: As ``write_keyed_task``.
        MissingDependencyError: ``rocksdict`` is not installed where the task runs.
        UnsupportedFormatError: The binding refuses what it is asked to write, or ``root`` is not a local
            directory.
        OSError: No space left, RocksDB's own writes included (``ENOSPC``): the staging directory that
            holds ``root`` is removed and the commit says so in one line (``NO_SPACE_LEFT``, exit 5).
        ExecutionError: Not enough memory for RocksDB (``NOT_ENOUGH_MEMORY``, exit 5).
    """
    if is_remote(task.root):
        raise UnsupportedFormatError(
            "--format native builds its databases in a local staging directory", code="ROCKSDB_UNWRITABLE"
        )
    written = write_keyed_task(task, batches, encoding)
    root = Path(task.root)
    canonical = root / task.name
    try:
        handle = build_native_handle(
            canonical,
            written.handle.key_group_start,
            written.handle.offsets,
            root,
            checkpoint_id=checkpoint_id,
        )
    finally:
        canonical.unlink(missing_ok=True)
    return WrittenDatabase(task.subtask, handle, handle.size, written.rows, written.key_groups_with_data)


def as_native(metadata: CheckpointMetadata) -> CheckpointMetadata:
    """Return ``metadata`` with properties that say ``NATIVE`` (its keyed handles are databases already)."""
    properties = metadata.properties_bytes
    if properties is not None:
        properties = properties.replace(_CANONICAL, _NATIVE)
    return replace(metadata, properties_bytes=properties, properties=None)


def to_native(
    staging: Path, metadata: CheckpointMetadata, on_subtask: Callable[[int, int], None] | None = None
) -> CheckpointMetadata:
    """Rewrite every keyed handle of the savepoint staged in ``staging`` as a RocksDB database; return it.

    Args:
        staging: The staging directory holding the canonical keyed files (they are replaced).
        metadata: What the writer wrote.
        on_subtask: ``on_subtask(done, total)`` after each database.

    Raises:
        MissingDependencyError: ``rocksdict`` (the ``[rocksdb]`` extra) is not installed.
        UnsupportedFormatError: The binding refuses what it is asked to write.
        OSError: No space left, RocksDB's own writes included (as ``write_native_task``).
        ExecutionError: Not enough memory for RocksDB.
    """
    total = sum(
        isinstance(s.managed_keyed_state, KeyGroupsHandle) for op in metadata.operators for s in op.subtasks
    )
    done = 0
    operators: list[OperatorState] = []
    for op in metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, KeyGroupsHandle):
                assert isinstance(keyed.delegate, RelativeFileHandle), (
                    "kg writes keyed files beside _metadata"
                )
                canonical = staging / keyed.delegate.relative_path
                native = build_native_handle(
                    canonical,
                    keyed.key_group_start,
                    keyed.offsets,
                    staging,
                    checkpoint_id=metadata.checkpoint_id,
                )
                canonical.unlink()
                sub = replace(sub, managed_keyed_state=native)
                done += 1
                if on_subtask is not None:
                    on_subtask(done, total)
            subtasks.append(sub)
        operators.append(replace(op, subtasks=tuple(subtasks)))
    return as_native(replace(metadata, operators=tuple(operators)))


__all__ = ["WrittenDatabase", "as_native", "to_native", "write_native_task"]
