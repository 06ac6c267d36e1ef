"""Resolve a state handle to the file that holds its bytes, and read its first bytes.

The file may be beside ``_metadata``, at an absolute path, or on an object store.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from keygroup_cli.errors import InvalidSnapshotError, UnsupportedFormatError
from keygroup_cli.flink.io.stream_handles import (
    ByteStreamHandle,
    EmptySegmentFileHandle,
    FileHandle,
    KeyGroupsHandle,
    RelativeFileHandle,
    SegmentFileHandle,
    StreamHandle,
)
from keygroup_cli.storage.locations import Location, is_remote, location


def local_path(handle: StreamHandle, directory: Path | Location) -> Path | Location | None:
    """Return the file holding a handle's data, or None for inline / empty handles.

    Absolute ``file:`` paths that no longer exist (a checkpoint copied elsewhere) fall back to the file of
    the same name beside ``_metadata``, or under the job's ``shared/`` directory. The same fallback applies
    first to an object-store path (``s3p://…``) when a copy is there; otherwise that path is read where it is
    (a ``Location``).
    """
    if isinstance(handle, RelativeFileHandle):
        relative = PurePosixPath(handle.relative_path)
        if not relative.parts or relative.is_absolute() or ".." in relative.parts:
            raise _outside(f"{directory}: state file {handle.relative_path!r} leads outside the savepoint")
        path = directory / handle.relative_path
        if isinstance(path, Path) and path.exists() and not _inside(path, Path(directory)):
            raise _outside(f"{path}: a link that leads outside the savepoint ({path.resolve()})")
        return path
    if isinstance(handle, (FileHandle, SegmentFileHandle)):
        return _resolve_absolute(handle.path, directory)
    if isinstance(handle, KeyGroupsHandle) and handle.delegate is not None:
        return local_path(handle.delegate, directory)
    return None


def _resolve_absolute(uri: str, directory: Path | Location) -> Path | Location:
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        if not is_remote(uri):
            raise UnsupportedFormatError(
                f"{uri}: state on a file system kg does not know ({parsed.scheme}://)",
                code="REMOTE_STATE_FILE",
            )
        name = PurePosixPath(parsed.path)
        for copy in (directory / name.name, directory.parent / name.parent.name / name.name):
            if copy.exists():
                return copy
        return location(uri)
    if isinstance(directory, Location) and not directory.is_local:
        raise UnsupportedFormatError(
            f"{uri}: a local path in the _metadata of {directory}, which is on an object store",
            code="REMOTE_STATE_FILE",
        )
    path = Path(unquote(parsed.path))
    roots = _state_roots(directory if isinstance(directory, Path) else Path(directory))
    if path.exists() and any(_inside(path, root) for root in roots):
        return path
    for candidate in (
        directory / path.name,
        directory.parent / path.parent.name / path.name,
        *_under_job(path, directory),
    ):
        if isinstance(candidate, Path) and candidate.exists() and any(_inside(candidate, r) for r in roots):
            return candidate
    if path.exists():
        raise _outside(
            f"{uri}: state outside the checkpoint's own directories ({directory.parent}); to read it "
            f"there, name its root in {STATE_ROOTS_ENV} (paths separated by {os.pathsep!r})"
        )
    return path


def _under_job(path: Path, directory: Path | Location) -> list[Path | Location]:
    """Return where ``path`` is in this copy of the job's checkpoint directory, if it names that directory.

    The part of ``path`` after the job's directory name (``<job id>/dstl/<job id>/dstl/<file>`` for the
    changelog backend's files) is taken from the job directory the checkpoint was found in.
    """
    job = directory.parent
    if not isinstance(job, Path) or job.name not in path.parts[:-1]:
        return []
    return [job.joinpath(*path.parts[path.parts.index(job.name) + 1 :])]


#: Extra directories (``os.pathsep``-separated) whose files a checkpoint's absolute handles may name.
STATE_ROOTS_ENV = "KG_STATE_ROOTS"


def _state_roots(directory: Path) -> list[Path]:
    """Return where a checkpoint's absolute state paths may lead.

    Its own directory, the job's checkpoint root (``shared/``, ``taskowned/``), the roots the user
    names in ``KG_STATE_ROOTS``, and for a view kg wrote of a checkpoint (``view_directory``) the roots
    of that checkpoint.
    """
    extra = [Path(p) for p in os.environ.get(STATE_ROOTS_ENV, "").split(os.pathsep) if p]
    inherited = getattr(directory, "trusted_roots", ())
    return [directory, directory.parent, *inherited, *extra]


class ViewDirectory(type(Path())):  # type: ignore[misc]
    """The directory of a view kg wrote of a checkpoint: its absolute handles name the checkpoint's files.

    It carries the roots it may read (``trusted_roots``) itself, so the trust lives with the view and
    nowhere else (no registry in the process).
    """

    trusted_roots: tuple[Path, ...] = ()


def view_directory(view: Path, origin: Path | Location) -> Path:
    """Return ``view`` as a directory that may read where ``origin`` may read (see ``ViewDirectory``)."""
    directory = ViewDirectory(view)
    if isinstance(origin, Path):
        directory.trusted_roots = tuple(r.resolve() for r in _state_roots(origin))
    return directory


def _inside(path: Path, root: Path) -> bool:
    """Return whether ``path``, links resolved, lies under ``root`` (links resolved)."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return False
    return True


def _outside(message: str) -> InvalidSnapshotError:
    return InvalidSnapshotError(message, code="STATE_FILE_OUTSIDE")


#: Prefixes of object-store state files already read, by (URI, start, length): one command's own cache.
PrefixCache = dict[tuple[str, int, int], bytes]


def read_stream_prefix(
    handle: StreamHandle | None, directory: Path | Location, limit: int, cache: PrefixCache | None = None
) -> bytes:
    """Return up to ``limit`` bytes from the start of a handle's data, with one bounded read.

    On an object store that is one ranged request, kept in ``cache`` when one is given (a command that
    fetches headers concurrently first, then reads them in order).

    Raises:
        InvalidSnapshotError: The state file is missing or unreadable.
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
        except InvalidSnapshotError as exc:
            if exc.code != "OBJECT_NOT_FOUND":
                raise
            raise InvalidSnapshotError(f"{path}: state file is missing", code="STATE_FILE_MISSING") from None
        if cache is not None:
            cache[key] = data
        return data
    try:
        with open(path, "rb") as fh:
            actual = os.fstat(fh.fileno()).st_size
            if isinstance(handle, FileHandle | RelativeFileHandle) and actual != handle.size:
                # Flink records every state file's size in its handle: another size is another file.
                raise InvalidSnapshotError(
                    f"{path}: state file has {actual} bytes, its handle records {handle.size}",
                    code="STATE_FILE_SIZE_MISMATCH",
                )
            if start:
                fh.seek(start)
            return fh.read(limit)
    except FileNotFoundError:
        raise InvalidSnapshotError(f"{path}: state file is missing", code="STATE_FILE_MISSING") from None
    except OSError as exc:
        raise InvalidSnapshotError(
            f"{path}: cannot read state file: {exc.strerror}", code="STATE_FILE_UNREADABLE"
        ) from None
