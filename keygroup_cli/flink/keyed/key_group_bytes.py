"""Bytes per key group of a Flink savepoint / checkpoint, from ``_metadata`` offsets and file sizes only.

A ``KeyGroupsStateHandle`` (canonical savepoints, heap checkpoints) records one offset per key group in its
stream; a key group's block ends where the next block begins, or at the end of the stream (see
``handles.key_group_extents``). So the size of every key group follows from the offsets and the size of
the stream: the length of inline (``ByteStreamStateHandle``) data, ``stat`` of a file, or the recorded
range of a file segment. No state byte is read and nothing here imports pyarrow.

RocksDB NATIVE savepoints and incremental checkpoints (``IncrementalRemoteKeyedStateHandle``) and changelog
handles carry no per-key-group offsets, so their operators come back marked unavailable with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.io.stream_handles import (
    ByteStreamHandle,
    EmptySegmentFileHandle,
    FileHandle,
    KeyGroupsHandle,
    SegmentFileHandle,
    StreamHandle,
    key_group_extents,
)
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.reader import OperatorState
from keygroup_cli.storage.locations import Location

#: Why an operator's key-group sizes are unknown, by stable code (the JSON ``unavailable_code``).
UNAVAILABLE_REASONS = {
    "NATIVE_FORMAT": (
        "per-key-group sizes unavailable: RocksDB NATIVE / incremental state has no key-group offsets; "
        "take a canonical savepoint (flink savepoint --type canonical)"
    ),
    "CHANGELOG_STATE": (
        "per-key-group sizes unavailable: changelog state-backend handles have no key-group offsets; "
        "take a canonical savepoint (flink savepoint --type canonical)"
    ),
}


@dataclass(frozen=True, slots=True)
class HandleKeyGroupBytes:
    """One subtask's keyed handle: the bytes of each key group of its range, and its stream's size."""

    subtask: int
    key_group_start: int
    #: Bytes per key group of the handle's range, in key-group order (0: no data).
    bytes: tuple[int, ...]
    #: Size of the whole stream: the key-group blocks plus the state header before the first block.
    stream_bytes: int
    #: Where the stream is: the state file, or ``inline`` for data kept inside ``_metadata``.
    source: str

    @property
    def key_group_end(self) -> int:
        """Return the last key group of the range."""
        return self.key_group_start + len(self.bytes) - 1

    @property
    def data_bytes(self) -> int:
        """Return the bytes of all key-group blocks."""
        return sum(self.bytes)

    @property
    def header_bytes(self) -> int:
        """Return the bytes before the first key-group block (the serialization proxy)."""
        return self.stream_bytes - self.data_bytes


@dataclass(frozen=True, slots=True)
class OperatorKeyGroupBytes:
    """One keyed operator's key-group bytes per subtask handle, or why they cannot be known."""

    operator_id: str
    uid: str | None
    name: str | None
    parallelism: int
    max_parallelism: int
    handles: tuple[HandleKeyGroupBytes, ...]
    #: A key of ``UNAVAILABLE_REASONS`` when the operator's handles carry no offsets, else None.
    unavailable_code: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """Return the uid if there is one, else the operator id."""
        return self.uid or self.operator_id

    @property
    def available(self) -> bool:
        """Return whether the per-key-group sizes are known."""
        return self.unavailable_code is None

    @property
    def unavailable_reason(self) -> str | None:
        """Return the sentence explaining why the sizes are unknown."""
        return None if self.unavailable_code is None else UNAVAILABLE_REASONS[self.unavailable_code]


def operator_key_group_bytes(op: OperatorState, directory: Path | Location) -> OperatorKeyGroupBytes:
    """Return the bytes per key group of one operator's managed keyed state.

    Args:
        op: An operator of the parsed ``_metadata`` (with keyed state).
        directory: The directory of ``_metadata``; relative handles resolve against it.

    Raises:
        InvalidInputError: A state file is missing, or an offset lies beyond its stream.
    """
    handles = []
    warnings: list[str] = []
    unavailable = None
    for sub in op.subtasks:
        keyed = sub.managed_keyed_state
        if keyed is None:
            continue
        if isinstance(keyed, IncrementalKeyedHandle):
            unavailable = "NATIVE_FORMAT"
            continue
        if not isinstance(keyed, KeyGroupsHandle):
            unavailable = unavailable or "CHANGELOG_STATE"
            continue
        if keyed.key_group_end >= op.max_parallelism:
            raise InvalidInputError(
                f"operator {op.label!r} subtask {sub.index}: key groups {keyed.key_group_start}-"
                f"{keyed.key_group_end} exceed maxParallelism {op.max_parallelism}",
                code="KEY_GROUP_RANGE_MISMATCH",
            )
        size, source, warning = _stream_bytes(keyed.delegate, directory)
        if warning:
            warnings.append(warning)
        handles.append(
            HandleKeyGroupBytes(
                sub.index, keyed.key_group_start, _bytes_of(keyed, size, source), size, source
            )
        )
    return OperatorKeyGroupBytes(
        operator_id=op.operator_id,
        uid=op.uid,
        name=op.name,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
        handles=() if unavailable else tuple(handles),
        unavailable_code=unavailable,
        warnings=tuple(warnings),
    )


def _bytes_of(handle: KeyGroupsHandle, size: int, source: str) -> tuple[int, ...]:
    """Return the bytes of every key group of the handle's range (0 where the offset is 0)."""
    out = [0] * handle.num_key_groups
    for group, start, end in key_group_extents(handle, size):
        # An offset at or past the end of the stream means a truncated file or a corrupt _metadata.
        if start >= end:
            raise InvalidInputError(
                f"{source}: key group {group} starts at offset {start}, but its block ends at {end} "
                f"(stream of {size} bytes); the state file is truncated or _metadata is corrupt",
                code="FLINK_STATE_CORRUPT",
            )
        out[group - handle.key_group_start] = end - start
    return tuple(out)


def _stream_bytes(handle: StreamHandle | None, directory: Path | Location) -> tuple[int, str, str | None]:
    """Return ``(size, source, warning)`` of a keyed handle's stream, using ``stat`` for files.

    Raises:
        InvalidInputError: The state file is missing or cannot be stat'ed.
    """
    if handle is None or isinstance(handle, EmptySegmentFileHandle):
        return 0, "empty", None
    if isinstance(handle, ByteStreamHandle):
        return len(handle.data), "inline", None
    if isinstance(handle, KeyGroupsHandle):
        # A key-groups handle never nests another one in real metadata; sizing its delegate is still right.
        return _stream_bytes(handle.delegate, directory)
    try:
        path = local_path(handle, directory)
    except UnsupportedFormatError as exc:
        if exc.code != "REMOTE_STATE_FILE" or not isinstance(handle, (FileHandle, SegmentFileHandle)):
            raise
        # A remote file cannot be stat'ed; the size _metadata recorded for it is the next best truth.
        return handle.size, handle.path, f"{handle.path}: remote state file, size taken from _metadata"
    assert path is not None  # only inline and empty handles have no local path
    try:
        actual = path.size() if isinstance(path, Location) else os.stat(path).st_size
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: state file is missing", code="STATE_FILE_MISSING") from None
    except OSError as exc:
        raise InvalidInputError(
            f"{path}: cannot stat state file: {exc.strerror}", code="STATE_FILE_UNREADABLE"
        ) from None
    if isinstance(handle, SegmentFileHandle):
        # A file-merging segment is the byte range [start_pos, start_pos + size) of a shared file.
        if handle.start_pos + handle.size > actual:
            raise InvalidInputError(
                f"{path}: file has {actual} bytes, shorter than the segment "
                f"[{handle.start_pos}, {handle.start_pos + handle.size}) _metadata names",
                code="STATE_FILE_TRUNCATED",
            )
        return handle.size, str(path), None
    warning = None
    if actual != handle.size:
        warning = f"{path}: file has {actual} bytes, _metadata recorded {handle.size}; sizes use the file"
    return actual, str(path), warning
