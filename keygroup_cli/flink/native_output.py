"""Turn the canonical keyed files of a staged savepoint into NATIVE ones (``kg rescale --format native``).

Called between the writer and the seal (``flink.commit``): every ``KeyGroupsSavepointStateHandle`` whose file
is in the staging directory becomes the ``IncrementalRemoteKeyedStateHandle`` of a RocksDB database built
from it (``flink.layouts.native``), the canonical file is removed, and the savepoint's properties say
``NATIVE`` (``SavepointFormatType``). Operator state stays as it is: NATIVE and canonical savepoints store it
the same way. One output serves both Flink 2.x keyed backends that take NATIVE state: RocksDB and ForSt
restore the same files (their NATIVE savepoints are the same bytes; tests/flink/test_native.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.layouts.native import build_native_handle
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, OperatorState

#: ``SavepointFormatType`` as Java serialization writes the enum constant's name (a short length, the bytes).
_CANONICAL = b"\x00\x09CANONICAL"
_NATIVE = b"\x00\x06NATIVE"


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
        UnsupportedFormatError: The binding cannot build a database.
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
    properties = metadata.properties_bytes
    if properties is not None:
        properties = properties.replace(_CANONICAL, _NATIVE)
    return replace(metadata, operators=tuple(operators), properties_bytes=properties, properties=None)


__all__ = ["to_native"]
