"""Stream handles: where the bytes of one state stream are, as ``_metadata`` records them.

Inline in ``_metadata`` (``ByteStreamHandle``), a file (``FileHandle``, ``RelativeFileHandle``), a segment of
a shared file (``SegmentFileHandle``), nothing (``EmptySegmentFileHandle``), or any of those with one
offset per key group (``KeyGroupsHandle``). The byte I/O opens them (``paths``, ``stream_source``); the
``_metadata`` reader and writer (``flink.metadata.handles``) (de)serialize them with every other handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class ByteStreamHandle:
    """Tag 1, ``ByteStreamStateHandle``: state stored inline in ``_metadata``."""

    handle_name: str
    data: bytes

    @property
    def size(self) -> int:
        """Return the number of state bytes."""
        return len(self.data)


@dataclass(frozen=True, slots=True)
class FileHandle:
    """Tag 2, ``FileStateHandle``: an absolute Flink path (``file:/…``, ``s3://…``)."""

    path: str
    size: int


@dataclass(frozen=True, slots=True)
class RelativeFileHandle:
    """Tag 6, ``RelativeFileStateHandle``: a file beside ``_metadata``."""

    relative_path: str
    size: int


@dataclass(frozen=True, slots=True)
class SegmentFileHandle:
    """Tag 15, ``SegmentFileStateHandle``: the byte range ``[start_pos, start_pos+size)`` of a shared file."""

    start_pos: int
    size: int
    scope: int
    path: str
    logical_file_id: str


@dataclass(frozen=True, slots=True)
class EmptySegmentFileHandle:
    """Tag 16, ``EmptySegmentFileStateHandle``: no bytes at all."""

    @property
    def size(self) -> int:
        """Return 0."""
        return 0


@dataclass(frozen=True, slots=True)
class KeyGroupsHandle:
    """Tags 3, 7 and 12: a stream with one offset per key group (``KeyGroupsStateHandle``).

    Tag 7 (``KeyGroupsSavepointStateHandle``) is the canonical savepoint layout; 12 adds a handle id and
    is the heap checkpoint layout; 3 is the legacy form without an id. An offset of 0 means "no data".
    """

    tag: int
    key_group_start: int
    offsets: tuple[int, ...]
    delegate: StreamHandle | None
    handle_id: str | None = None

    @property
    def key_group_end(self) -> int:
        """Return the last key group (``start - 1`` for the empty range)."""
        return self.key_group_start + len(self.offsets) - 1

    @property
    def num_key_groups(self) -> int:
        """Return the number of key groups in the range."""
        return len(self.offsets)

    @property
    def size(self) -> int:
        """Return the size of the delegate stream."""
        return stream_size(self.delegate)


StreamHandle: TypeAlias = (
    ByteStreamHandle
    | FileHandle
    | RelativeFileHandle
    | SegmentFileHandle
    | EmptySegmentFileHandle
    | KeyGroupsHandle
)


def stream_size(handle: StreamHandle | None) -> int:
    """Return the state size of a stream handle (0 for none)."""
    return 0 if handle is None else handle.size


def key_group_extents(handle: KeyGroupsHandle, size: int) -> list[tuple[int, int, int]]:
    """Return ``(key_group, start, end)`` of every non-empty key group, in file order.

    A block ends where the next block (in file order) begins, or at the end of the stream. Pure offset
    math (no I/O, no pyarrow), so metadata-only commands can size key groups without the decoder.
    """
    present = sorted((off, handle.key_group_start + i) for i, off in enumerate(handle.offsets) if off != 0)
    out = []
    for j, (off, group) in enumerate(present):
        end = present[j + 1][0] if j + 1 < len(present) else size
        out.append((group, off, end))
    return out


__all__ = [
    "ByteStreamHandle",
    "EmptySegmentFileHandle",
    "FileHandle",
    "KeyGroupsHandle",
    "RelativeFileHandle",
    "SegmentFileHandle",
    "StreamHandle",
    "key_group_extents",
    "stream_size",
]
