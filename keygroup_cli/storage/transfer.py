"""Many files, many round trips: bounded concurrency with retries, and the metadata-last commit.

``in_flight(function, items, capacity, ordered)`` is the pattern of Flink's async I/O operator: at most
``capacity`` requests are in flight; results come back in input order (``ordered=True``) or as they
complete. Each request is retried with exponential backoff when the store throttles or answers 5xx (a
missing object or a refusal is final at once).

``download`` and ``upload`` move a set of files between a ``Location`` and a local directory with it.
``commit_upload`` is the object-store commit: every state file first, each checked (size) after it is
written, then the one commit file (``_metadata`` of a savepoint, ``_manifest.json`` of a kg snapshot)
last. Until that file exists the target is not a savepoint (Flink's own rule: a checkpoint without
``_metadata`` does not exist). A target that already holds any object is refused before anything is
written; on failure or Ctrl-C the objects written so far are deleted where possible.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from keygroup_cli.core.errors import ExecutionError, InvalidArgumentError, KgError
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.storage.locations import Location
from keygroup_cli.storage.writer import Writer

T = TypeVar("T")
R = TypeVar("R")

#: Requests in flight at once (reads and uploads); small files make round trips the cost, not bandwidth.
DEFAULT_CAPACITY = 16
#: Attempts per request before a retryable failure is final.
ATTEMPTS = 5
_TRANSIENT = ("slowdown", "throttl", "503", "500", "502", "504", "timeout", "timed out", "connection reset")


def retrying(function: Callable[[], R], what: str, attempts: int = ATTEMPTS, base: float = 0.2) -> R:
    """Call ``function``; on a transient store error (throttling, 5xx, timeouts) retry with backoff.

    Raises:
        KgError: A final failure (the function's own ``KgError``, unchanged).
    """
    for attempt in range(1, attempts + 1):
        try:
            return function()
        except KgError as exc:
            transient = any(word in exc.message.lower() for word in _TRANSIENT)
            if not transient or attempt == attempts:
                raise
        except OSError as exc:
            transient = any(word in str(exc).lower() for word in _TRANSIENT)
            if not transient or attempt == attempts:
                raise ExecutionError(f"{what}: {exc}", code="STORAGE_REQUEST_FAILED") from None
        time.sleep(base * 2 ** (attempt - 1) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def in_flight(
    function: Callable[[T], R], items: Iterable[T], capacity: int = DEFAULT_CAPACITY, *, ordered: bool = True
) -> Iterator[R]:
    """Yield ``function(item)`` for every item with at most ``capacity`` calls in flight.

    With ``ordered`` results come in input order (a slow request holds back later results, as Flink's
    ordered async wait does); without it, as they complete. The first failure cancels what has not
    started and is raised.
    """
    queue: deque[concurrent.futures.Future[R]] = deque()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, capacity)) as pool:
        try:
            for item in items:
                queue.append(pool.submit(function, item))
                if len(queue) >= capacity:
                    yield from _drain(queue, ordered, until=capacity - 1)
            yield from _drain(queue, ordered, until=0)
        except BaseException:
            for future in queue:
                future.cancel()
            raise


def _drain(queue: deque[concurrent.futures.Future[R]], ordered: bool, until: int) -> Iterator[R]:
    while len(queue) > until:
        if ordered:
            yield queue.popleft().result()
        else:
            done, _ = concurrent.futures.wait(queue, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                queue.remove(future)
                yield future.result()


def download(
    source: Location,
    files: Sequence[str],
    target: Path,
    on_progress: OnProgress | None = None,
    capacity: int = DEFAULT_CAPACITY,
) -> int:
    """Copy ``files`` (paths relative to ``source``) into the local directory ``target``; return bytes."""
    report = on_progress or no_progress
    total = 0
    report("download", 0, len(files))

    def fetch(name: str) -> int:
        return retrying(lambda: (source / name).download_to(target / name), f"{source / name}")

    for done, size in enumerate(in_flight(fetch, files, capacity, ordered=False), 1):
        total += size
        report("download", done, len(files))
    return total


#: The object kg writes first into an upload target and removes after the commit: who is writing it.
WRITER_MARK = ".kg-writer"


def require_empty(target: Location, commit_file: str | None = None) -> None:
    """Refuse a target that holds any object (or file) already; nothing has been written yet.

    One exception: the remains of kg's own upload to this target that never committed (a writer mark, no
    ``commit_file``) whose writer is provably gone (same host, process gone) are deleted first, so a
    rerun after a crash succeeds. Anything else is refused.

    Raises:
        InvalidArgumentError: ``DESTINATION_EXISTS``.
    """
    if commit_file is not None:
        incomplete = incomplete_upload(target, commit_file)
        if incomplete is not None and incomplete.gone():
            remove_upload(target)
    # Files only: object-store "directory" markers (empty keys ending in /) hold nothing.
    if target.is_file() or (target.is_dir() and target.walk_files()):
        incomplete = incomplete_upload(target, commit_file) if commit_file else None
        hint = (
            f"; it holds an upload kg never committed, by {incomplete.describe()}, which may still run: "
            "`kg clean` removes it once that writer is gone (--force: now)"
            if incomplete is not None
            else ""
        )
        raise InvalidArgumentError(
            f"destination exists: {target} holds objects already (kg never overwrites; choose a new "
            f"prefix or remove it){hint}",
            code="DESTINATION_EXISTS",
        )


def incomplete_upload(target: Location, commit_file: str) -> Writer | None:
    """Return the writer of an upload kg started at ``target`` and never committed, or None."""
    mark = target / WRITER_MARK
    if not mark.is_file() or (target / commit_file).is_file():
        return None
    return Writer.from_json(mark.read_bytes())


def remove_upload(target: Location) -> int:
    """Delete every object under ``target`` (kg's uncommitted upload); return how many."""
    names = [name for name, _size in target.walk_files()]
    # The mark goes last: an interrupted removal is still recognised as kg's.
    for name in sorted(names, key=lambda n: n == WRITER_MARK):
        (target / name).delete()
    # pyarrow keeps empty "directory" markers where files were: remove those too.
    with contextlib.suppress(KgError, OSError):
        target.fs.delete_dir(target.path)
    return len(names)


def mark_writer(target: Location) -> None:
    """Write the writer mark at ``target``: objects written there before a commit are then kg's."""
    retrying(lambda: (target / WRITER_MARK).write_bytes(Writer.me().to_json().encode()), str(target))


def commit_upload(
    local: Path,
    target: Location,
    commit_file: str,
    on_progress: OnProgress | None = None,
    capacity: int = DEFAULT_CAPACITY,
    *,
    written_elsewhere: Sequence[str] = (),
    before_commit: Callable[[], None] | None = None,
) -> list[str]:
    """Upload the finished local directory ``local`` to ``target``, ``commit_file`` last; return the names.

    State files go up ``capacity`` at a time; each is checked (its size on the store) once written. Then
    ``before_commit`` runs (a deep check of what is now on the store), and only then is ``commit_file``
    written, and checked. On any failure (Ctrl-C included) every object this call wrote is deleted where
    possible, the commit file first if it was written, the writer mark last, and the error raised.

    ``written_elsewhere`` names objects already at ``target`` that belong to this output (state files that
    Spark tasks wrote there directly, under the writer mark of ``mark_writer``): they are removed with
    the rest on failure.

    Raises:
        ExecutionError: An upload or a check failed (``UPLOAD_FAILED``, ``UPLOAD_VERIFICATION_FAILED``).
    """
    report = on_progress or no_progress
    names = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    if commit_file not in names:
        raise ExecutionError(f"{local}: no {commit_file} to commit", code="UPLOAD_FAILED")
    state_files = [n for n in names if n != commit_file]
    written: list[str] = list(written_elsewhere)
    lock = threading.Lock()

    def put(name: str) -> str:
        # Recorded before the upload starts: a request cut short may still leave the object behind.
        with lock:
            written.append(name)
        _upload_checked(local / name, target / name)
        return name

    report("upload", 0, len(names))
    try:
        # Who is writing, first: a crash leaves objects that the next run (or kg clean) can tell apart.
        with lock:
            written.append(WRITER_MARK)
        mark_writer(target)
        for done, _name in enumerate(in_flight(put, state_files, capacity, ordered=False), 1):
            report("upload", done, len(names))
        if before_commit is not None:
            before_commit()
        put(commit_file)
        report("upload", len(names), len(names))
    except BaseException:
        _delete_quietly(target, written, commit_file)
        raise
    # Committed: the mark is no longer needed (a crash right here leaves it inside a valid snapshot).
    with contextlib.suppress(KgError, OSError):
        (target / WRITER_MARK).delete()
    return names


def _upload_checked(source: Path, destination: Location) -> None:
    """Upload the local file ``source`` to ``destination``, then check the size the store reports.

    Raises:
        ExecutionError: The store holds another size than was written (``UPLOAD_VERIFICATION_FAILED``).
        KgError: The upload or the size request failed for good (see ``retrying``).
    """
    retrying(lambda: destination.upload_from(source), str(destination))
    stored = retrying(destination.size, str(destination))
    if stored != source.stat().st_size:
        raise ExecutionError(
            f"{destination}: {stored} bytes stored, {source.stat().st_size} written",
            code="UPLOAD_VERIFICATION_FAILED",
        )


def remove_written(target: Location, names: Sequence[str]) -> None:
    """Delete the objects ``names`` at ``target`` where possible, then the writer mark (a failed write)."""
    _delete_quietly(target, [*names, WRITER_MARK], "")


def _delete_quietly(target: Location, written: list[str], commit_file: str) -> None:
    # The commit file goes first: once it is gone the rest is unreachable garbage, never a savepoint;
    # the writer mark goes last, so a removal cut short is still recognisable as kg's.
    for name in sorted(written, key=lambda n: (n != commit_file, n == WRITER_MARK)):
        try:
            (target / name).delete()
        except (KgError, OSError):
            continue


__all__ = [
    "DEFAULT_CAPACITY",
    "WRITER_MARK",
    "commit_upload",
    "download",
    "in_flight",
    "incomplete_upload",
    "remove_upload",
    "require_empty",
    "retrying",
]
