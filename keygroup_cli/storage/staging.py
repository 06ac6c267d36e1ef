"""Write outputs into a staging directory beside DEST and commit them with one atomic rename.

``staged_directory(dest)`` yields ``DEST.parent/.DEST.name.kg-staging-<pid>-<random>``; when the block
ends normally everything in it is fsynced and the directory is renamed to DEST (atomic on one
filesystem). On any exception, KeyboardInterrupt included, the staging directory is removed and DEST
stays absent. ``scratch_directory(dest)`` is the same for intermediate files (``…-work``), always removed.

A process killed with SIGKILL cannot clean up, so every staging and scratch directory carries a writer
mark (``.kg-writer``: host, pid and that process's start time). ``stale_staging(dest)`` finds the ones
whose writer is provably gone (same host, and no process with that pid and start time), and every write
to DEST removes them first, before it checks whether DEST exists; ``kg clean DEST`` does the same on
demand. A staging directory of another host, or of a process still running, is never touched.

Each file's fsync may start as soon as the file is finished (``flush_soon``, on a background thread), so
the disk flushes it while the next one is computed; the commit waits for those, raises their errors, and
still fsyncs everything before the rename.

The commit knows no format: a kg snapshot (``snapshot.writer``) and a Flink savepoint are both staged here.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from keygroup_cli.core.allocator import release_headroom
from keygroup_cli.core.errors import InvalidArgumentError, destination_error, environment_error
from keygroup_cli.storage import background
from keygroup_cli.storage.locations import is_remote
from keygroup_cli.storage.writer import Writer, pid_exists

_STAGING_MARK = ".kg-staging-"
#: The suffix of a scratch directory's name (a staging directory's, for intermediate files).
_SCRATCH_SUFFIX = "-work"
# The staging directories this process will commit, and the early flushes started in each.
_early: dict[Path, list[Future[None]]] = {}
_early_lock = threading.Lock()
#: The file in every staging directory that says who writes it.
WRITER_MARK = ".kg-writer"


def staging_prefix(dest: Path) -> str:
    """Return the name prefix of staging directories for ``dest`` (hidden, next to it)."""
    return f".{dest.name}{_STAGING_MARK}"


@dataclass(frozen=True, slots=True)
class StaleStaging:
    """A staging or scratch directory beside a destination, and its writer (None: no mark)."""

    path: Path
    writer: Writer | None
    removable: bool


def stale_staging(dest: Path | str) -> list[StaleStaging]:
    """Return kg's staging and scratch directories beside ``dest`` that this process does not own.

    ``removable`` says whether the writer is provably gone (same host, and its pid gone or reused). A
    directory without a writer mark (left by a kg version before marks) is removable once its pid is gone.
    """
    dest = Path(dest)
    prefix = staging_prefix(dest)
    try:
        entries = sorted(dest.parent.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.name.startswith(prefix) or entry.is_symlink() or not entry.is_dir():
            continue
        writer = _read_writer(entry)
        if writer is None:
            match = re.match(r"(\d+)-", entry.name[len(prefix) :])
            if not match:
                continue
            pid = int(match.group(1))
            if pid == os.getpid():
                continue
            found.append(StaleStaging(entry, None, not pid_exists(pid)))
        elif not writer.is_me():
            found.append(StaleStaging(entry, writer, writer.gone()))
    return found


def remove_stale_staging(dest: Path | str) -> list[Path]:
    """Remove the staging directories beside ``dest`` whose writer is provably gone; return them."""
    removed = []
    for stale in stale_staging(dest):
        if stale.removable:
            shutil.rmtree(stale.path, ignore_errors=True)
            removed.append(stale.path)
    return removed


@contextmanager
def staged_directory(dest: Path | str) -> Iterator[Path]:
    """Yield an empty staging directory beside ``dest``; rename it to ``dest`` when the block succeeds.

    Stale staging of ``dest`` (writer provably gone) is removed first, even when ``dest`` exists.

    Raises:
        InvalidArgumentError: ``dest`` already exists (``DESTINATION_EXISTS``), checked before anything is
            written and again just before the rename.
    """
    dest = Path(dest)
    if dest.parent.is_dir():
        remove_stale_staging(dest)
    require_absent(dest)
    staging = _new_staging(dest, "")
    with _early_lock:
        _early[Path(os.path.abspath(staging))] = []
    try:
        yield staging
        (staging / WRITER_MARK).unlink(missing_ok=True)
        background.settle(_early_flushes(staging))
        _fsync_tree(staging)
        require_absent(dest)
        os.rename(staging, dest)
        fsync_directory(dest.parent)
    except BaseException as exc:
        background.abandon(_early_flushes(staging))
        _remove_tree(staging)
        _refuse_environment(exc, dest)
        raise
    finally:
        with _early_lock:
            _early.pop(Path(os.path.abspath(staging)), None)


def flush_soon(path: Path) -> None:
    """Start flushing a finished file to disk now, if it lies in a staging directory being committed.

    In the process that commits it, the commit waits for the flush (raising its error) and still fsyncs
    every file; starting early lets the disk work while the next file is computed. In another process (a
    Spark worker writing into the driver's staging directory) the flush is started and not waited for:
    the driver's commit fsyncs the file anyway, and finds little left to write rather than all of the
    job's output at once. A scratch file (``…-work``) is never flushed.
    """
    parents = Path(os.path.abspath(path)).parents
    with _early_lock:
        for root, futures in _early.items():
            if root in parents:
                futures.append(background.submit(background.fsync_file, path, True))
                return
    if any(_STAGING_MARK in p.name and not p.name.endswith(_SCRATCH_SUFFIX) for p in parents):
        background.submit(_flush_quietly, path)


def _flush_quietly(path: Path) -> None:
    # Best effort: the committing process's own fsync decides durability and raises what fails.
    with suppress(OSError):
        background.fsync_file(path, missing_ok=True)


def _early_flushes(staging: Path) -> list[Future[None]]:
    root = Path(os.path.abspath(staging))
    with _early_lock:
        futures = _early.get(root, [])
        if root in _early:
            _early[root] = []
        return futures


@contextmanager
def scratch_directory(dest: Path | str) -> Iterator[Path]:
    """Yield an empty working directory beside ``dest`` for intermediate files; always removed after.

    It is named and marked like a staging directory of ``dest`` (with a ``-work`` suffix), so one left
    behind by a killed process is removed by the next write to ``dest`` (or ``kg clean``).
    """
    dest = Path(dest)
    remove_stale_staging(dest)
    scratch = _new_staging(dest, _SCRATCH_SUFFIX)
    try:
        yield scratch
    except OSError as exc:
        _remove_tree(scratch)
        _refuse_environment(exc, dest)
        raise
    finally:
        _remove_tree(scratch)


def _remove_tree(path: Path) -> None:
    """Remove a staging or scratch directory, once more with the headroom kept for it if that failed.

    Where memory ran out, ``opendir`` cannot allocate: ``core.allocator.release_headroom`` gives back what the
    ``kg`` process kept for this.
    """
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        release_headroom()
        shutil.rmtree(path, ignore_errors=True)


def _refuse_environment(exc: BaseException, dest: Path) -> None:
    """Raise the one-line error for a write to ``dest`` the file system refused (no space, read-only …)."""
    refused = environment_error(exc, dest) if isinstance(exc, OSError) else None
    if refused is not None:
        raise refused from exc


def _make_parent(dest: Path) -> None:
    """Create DEST's parent directories, or say in one line why the file system refuses."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise destination_error(dest, exc) from None


def _new_staging(dest: Path, suffix: str) -> Path:
    """Create a marked staging directory beside ``dest`` (its parents too); refusals name ``dest``."""
    _make_parent(dest)
    staging = dest.parent / f"{staging_prefix(dest)}{os.getpid()}-{secrets.token_hex(4)}{suffix}"
    try:
        staging.mkdir()
    except OSError as exc:
        raise destination_error(dest, exc) from None
    try:
        (staging / WRITER_MARK).write_text(Writer.me().to_json(dest=str(dest)))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def _read_writer(directory: Path) -> Writer | None:
    try:
        return Writer.from_json((directory / WRITER_MARK).read_text())
    except OSError:
        return None


def require_outside_input(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Refuse a destination that is the input, inside it, or contains it (the input is never modified).

    Local paths only (links resolved); object-store prefixes are compared as text.

    Raises:
        InvalidArgumentError: ``DESTINATION_INSIDE_INPUT``.
    """
    if is_remote(source) != is_remote(dest):
        return
    if is_remote(source):
        a, b = str(source).rstrip("/") + "/", str(dest).rstrip("/") + "/"
        inside = b.startswith(a) or a.startswith(b)
    else:
        src = Path(source).resolve()
        if src.is_file():
            src = src.parent  # a _metadata or _manifest.json file names its directory
        dst = Path(dest).resolve()
        inside = dst == src or src in dst.parents or dst in src.parents
    if inside:
        raise InvalidArgumentError(
            f"destination {dest} is the input {source}, inside it or around it; kg never writes into its "
            "input: choose a path outside it",
            code="DESTINATION_INSIDE_INPUT",
        )


def require_absent(dest: Path) -> None:
    """Refuse an existing ``dest`` (a path, or a link even to nothing): kg never overwrites.

    Raises:
        InvalidArgumentError: ``DESTINATION_EXISTS``.
    """
    if dest.exists() or dest.is_symlink():
        raise InvalidArgumentError(
            f"destination exists: {dest} (kg never overwrites; choose a new path or remove it)",
            code="DESTINATION_EXISTS",
        )


def _fsync_tree(root: Path) -> None:
    # Data first, then directory entries bottom-up, so the rename publishes only durable content.
    for directory, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            background.fsync_file(os.path.join(directory, name))
        fsync_directory(Path(directory))


def fsync_directory(directory: Path) -> None:
    """Flush a directory entry to disk so a rename inside it survives a crash (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = [
    "WRITER_MARK",
    "StaleStaging",
    "flush_soon",
    "fsync_directory",
    "require_absent",
    "require_outside_input",
    "remove_stale_staging",
    "scratch_directory",
    "stale_staging",
    "staged_directory",
    "staging_prefix",
]
