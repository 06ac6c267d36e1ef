"""List the files under a directory and remove chosen ones, never following a link: ``kg gc``'s storage part.

``list_tree(root, tops)`` returns every entry below the top-level folders ``tops`` accepts, with its size and
modification time: a local directory is walked with ``lstat`` (a symbolic link is reported as a link, never
followed, and a linked folder is never entered); an object store is listed with one recursive listing.

``remove_files(root, files)`` deletes the given files, each only if it is still the very file that was
listed (same size and modification time, still a regular file, its directory still inside ``root`` with
every link resolved), then removes the directories that deleting left empty (never ``root`` itself, nor a
top-level folder). Nothing outside ``root`` is ever touched. This module knows no Flink format: which files
to remove is the caller's decision.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.storage.locations import Location, storage_errors

#: What an entry is: a regular file (an object), a symbolic link, or anything else (a fifo, a socket).
FILE, LINK, OTHER = "file", "link", "other"


@dataclass(frozen=True, slots=True)
class StoredFile:
    """One entry below the root: its path relative to the root (``/``-separated), size, mtime and kind."""

    path: str
    size: int
    mtime: float
    kind: str = FILE


@dataclass(frozen=True, slots=True)
class Removal:
    """What ``remove_files`` did: the files removed, those left because they changed, the empty folders."""

    removed: tuple[StoredFile, ...]
    changed: tuple[StoredFile, ...]
    directories: tuple[str, ...]


def list_tree(root: Path | Location, tops: Callable[[str], bool]) -> list[StoredFile]:
    """Return every entry below the top-level folders of ``root`` that ``tops(name)`` accepts, sorted.

    A top-level entry that is itself a link is returned as a link (never entered).
    """
    if isinstance(root, Location) and root.local_path is None:
        return _list_remote(root, tops)
    base = root.local_path if isinstance(root, Location) else root
    assert base is not None
    found: list[StoredFile] = []
    with os.scandir(base) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if tops(entry.name):
                _walk_local(Path(entry.path), entry.name, found)
    return sorted(found, key=lambda f: f.path)


def _walk_local(path: Path, rel: str, found: list[StoredFile]) -> None:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        found.append(StoredFile(rel, info.st_size, info.st_mtime, LINK))
    elif stat.S_ISDIR(info.st_mode):
        with os.scandir(path) as entries:
            for entry in entries:
                _walk_local(Path(entry.path), f"{rel}/{entry.name}", found)
    elif stat.S_ISREG(info.st_mode):
        found.append(StoredFile(rel, info.st_size, info.st_mtime, FILE))
    else:
        found.append(StoredFile(rel, info.st_size, info.st_mtime, OTHER))


def _list_remote(root: Location, tops: Callable[[str], bool]) -> list[StoredFile]:
    import pyarrow.fs as pafs

    with storage_errors(root.uri):
        infos = root.fs.get_file_info(pafs.FileSelector(root.path, recursive=True, allow_not_found=True))
    base = root.path.rstrip("/") + "/"
    found = []
    for info in infos:
        if info.type != pafs.FileType.File or not info.path.startswith(base):
            continue
        rel = info.path[len(base) :]
        if "/" in rel and tops(rel.split("/", 1)[0]):
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            found.append(StoredFile(rel, int(info.size), mtime))
    return sorted(found, key=lambda f: f.path)


def remove_files(
    root: Path | Location,
    files: Iterable[StoredFile],
    *,
    directories: Iterable[str] = (),
    keep: Callable[[str], bool] = lambda _rel: False,
    on_removed: Callable[[StoredFile], None] | None = None,
) -> Removal:
    """Delete ``files`` (listed by ``list_tree`` under ``root``), files first, then emptied directories.

    A file is deleted only if it is still a regular file of the listed size and mtime (an object: the
    listed size and mtime) and its directory, every link resolved, lies inside ``root``; otherwise it is
    left and reported in ``changed``. Then the directories the deletions left empty, and ``directories``
    (relative paths) if empty, are removed bottom up: never ``root``, a link, or a directory ``keep(rel)``
    accepts (local file systems only: object stores have no directories).

    Raises:
        ExecutionError: ``DELETE_FAILED``: the file system refused a deletion (exit 5); what was deleted
            before it is gone, nothing after it was touched.
        ValueError: A path that is absolute or climbs out of ``root`` (a caller's bug, never a user's).
    """
    removed: list[StoredFile] = []
    changed: list[StoredFile] = []
    touched: set[str] = set()
    remote = isinstance(root, Location) and root.local_path is None
    for f in files:
        _check_relative(f.path)
        try:
            done = _remove_remote(root, f) if remote else _remove_local(_local_root(root), f)  # type: ignore[arg-type]
        except OSError as exc:
            raise ExecutionError(
                f"{root}/{f.path}: cannot delete ({exc.strerror or exc}); {len(removed)} files were deleted "
                "before it, nothing else was touched",
                code="DELETE_FAILED",
            ) from None
        if done:
            removed.append(f)
            touched.add(posixpath.dirname(f.path))
            if on_removed is not None:
                on_removed(f)
        else:
            changed.append(f)
    for rel in directories:
        _check_relative(rel)
        touched.add(rel)
    emptied = [] if remote else _remove_empty_directories(_local_root(root), touched, keep)
    return Removal(tuple(removed), tuple(changed), tuple(emptied))


def _local_root(root: Path | Location) -> Path:
    base = root.local_path if isinstance(root, Location) else root
    assert base is not None
    return Path(os.path.realpath(base))


def _check_relative(rel: str) -> None:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a path below the directory: {rel!r}")


def _inside(real_root: Path, directory: str) -> bool:
    real = os.path.realpath(directory)
    return real == str(real_root) or real.startswith(str(real_root) + os.sep)


def _remove_local(real_root: Path, f: StoredFile) -> bool:
    path = real_root.joinpath(*f.path.split("/"))
    if not _inside(real_root, str(path.parent)):
        return False  # a folder on the way became a link that leads out: never followed
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_size != f.size or info.st_mtime != f.mtime:
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _remove_remote(root: Location, f: StoredFile) -> bool:
    import pyarrow.fs as pafs

    target = root / f.path
    with storage_errors(target.uri):
        info = root.fs.get_file_info(target.path)
    if info.type != pafs.FileType.File or int(info.size) != f.size:
        return False
    mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
    if mtime != f.mtime:
        return False
    with storage_errors(target.uri):
        root.fs.delete_file(target.path)
    return True


def _remove_empty_directories(real_root: Path, touched: set[str], keep: Callable[[str], bool]) -> list[str]:
    """Remove the directories in ``touched`` (and their parents) that are now empty, but ``keep``'s."""
    removed = []
    candidates: set[str] = set()
    for rel in touched:
        while rel:
            candidates.add(rel)
            rel = posixpath.dirname(rel)
    for rel in sorted(candidates, key=lambda r: (r.count("/"), r), reverse=True):
        path = real_root.joinpath(*rel.split("/"))
        if keep(rel) or not _inside(real_root, str(path.parent)) or os.path.islink(path):
            continue
        try:
            os.rmdir(path)  # only an empty directory
        except OSError:
            continue
        removed.append(rel)
    return removed


__all__ = ["FILE", "LINK", "OTHER", "Removal", "StoredFile", "list_tree", "remove_files"]
