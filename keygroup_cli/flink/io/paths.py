"""Resolve a state handle to the file that holds its bytes, and read its first bytes.

The file may be beside ``_metadata``, at an absolute path, or on an object store.
"""

from __future__ import annotations

import os
from pathlib import Path

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.io.stream_handles import (
    ByteStreamHandle,
    EmptySegmentFileHandle,
    FileHandle,
    KeyGroupsHandle,
    RelativeFileHandle,
    SegmentFileHandle,
    StreamHandle,
)
from keygroup_cli.storage.containment import (
    STATE_ROOTS_ENV,
    RootedDirectory,
    Roots,
    contain,
    rooted_directory,
)
from keygroup_cli.storage.locations import Location

__all__ = [
    "STATE_ROOTS_ENV",
    "PrefixCache",
    "ViewDirectory",
    "handle_reference",
    "local_path",
    "read_stream_prefix",
    "view_directory",
]


def local_path(
    handle: StreamHandle, directory: Path | Location, *, roots: Roots | None = None
) -> Path | Location | None:
    """Return the file holding a handle's data, or None for inline / empty handles.

    Every file reference goes through ``storage.containment.contain``: it is normalized and refused
    (``STATE_FILE_OUTSIDE``) unless it lies inside the input's roots (``roots``: ``input_roots(directory)``
    computed once by a caller that resolves many handles). Absolute ``file:`` paths that no longer exist (a
    checkpoint copied elsewhere) fall back to the file of the same name beside ``_metadata``, or under the
    job's ``shared/`` directory, inside those roots. The same fallback applies first to an object-store
    path (``s3p://…``) when a copy is there; otherwise that path is read where it is (a ``Location``) if
    it lies under the input's prefix or one named in ``KG_STATE_ROOTS``.
    """
    reference = handle_reference(handle)
    if reference is None:
        return None
    return contain(reference[0], directory, relative=reference[1], roots=roots)


def handle_reference(handle: StreamHandle | None) -> tuple[str, bool] | None:
    """Return the file reference a handle holds and whether it is relative, or None (inline, empty)."""
    if isinstance(handle, RelativeFileHandle):
        return handle.relative_path, True
    if isinstance(handle, (FileHandle, SegmentFileHandle)):
        return handle.path, False
    if isinstance(handle, KeyGroupsHandle) and handle.delegate is not None:
        return handle_reference(handle.delegate)
    return None


#: The directory of a view kg wrote of a checkpoint: its absolute handles name the checkpoint's files.
ViewDirectory = RootedDirectory


def view_directory(view: Path, origin: Path | Location) -> Path:
    """Return ``view`` as a directory that may read where ``origin`` may (``containment.RootedDirectory``)."""
    return rooted_directory(view, origin)


#: Prefixes of object-store state files already read, by (URI, start, length): one command's own cache.
PrefixCache = dict[tuple[str, int, int], bytes]


def read_stream_prefix(
    handle: StreamHandle | None, directory: Path | Location, limit: int, cache: PrefixCache | None = None
) -> bytes:
    """Return up to ``limit`` bytes from the start of a handle's data, with one bounded read.

    On an object store that is one ranged request, kept in ``cache`` when one is given (a command that
    fetches headers concurrently first, then reads them in order).

    Raises:
        InvalidInputError: The state file is missing or unreadable.
        UnsupportedFormatError: The state lives on a file system kg does not know.
    """
    if handle is None or isinstance(handle, EmptySegmentFileHandle) or limit <= 0:
        # A limit computed from corrupt offsets may be negative: no read (a slice would count from the end).
        return b""
    if isinstance(handle, ByteStreamHandle):
        return handle.data[:limit]
    path = local_path(handle, directory)
    if path is None:
        return b""
    start = handle.start_pos if isinstance(handle, SegmentFileHandle) else 0
    if isinstance(handle, SegmentFileHandle):
        limit = min(limit, handle.size)
    if isinstance(path, Location):
        key = (path.uri, start, limit)
        if cache is not None and key in cache:
            return cache[key]
        try:
            data = path.read_range(start, limit)
        except InvalidInputError as exc:
            if exc.code != "OBJECT_NOT_FOUND":
                raise
            raise InvalidInputError(f"{path}: state file is missing", code="STATE_FILE_MISSING") from None
        if cache is not None:
            cache[key] = data
        return data
    try:
        with open(path, "rb") as fh:
            actual = os.fstat(fh.fileno()).st_size
            if isinstance(handle, FileHandle | RelativeFileHandle) and actual != handle.size:
                # Flink records every state file's size in its handle: another size is another file.
                raise InvalidInputError(
                    f"{path}: state file has {actual} bytes, its handle records {handle.size}",
                    code="STATE_FILE_SIZE_MISMATCH",
                )
            if start:
                fh.seek(start)
            return fh.read(limit)
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: state file is missing", code="STATE_FILE_MISSING") from None
    except OSError as exc:
        raise InvalidInputError(
            f"{path}: cannot read state file: {exc.strerror}", code="STATE_FILE_UNREADABLE"
        ) from None
