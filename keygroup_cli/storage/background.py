"""File-system work that need not hold up the caller: flushing a finished file, removing spent scratch.

A rescale writes its output, then fsyncs it all at the commit; the byte route also writes a spill as
large as the state, and removes it at the end. Both cost time in the kernel that the data's own work does
not wait on: the disk flushes one file while the next is computed, and freeing a spent spill file's pages
overlaps the next bucket. ``submit`` runs such a call on a few background threads of this process (the
calls release Python's lock), and the caller keeps the future to wait on before it relies on the result.

Nothing here decides durability: ``staging`` starts a file's fsync early (``flush_soon``) and still
fsyncs every file at the commit, after waiting for the early ones and raising their errors.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as _wait
from pathlib import Path
from typing import Any

#: Background threads: one may wait on a disk flush while the other frees a spent file.
THREADS = 2

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid = -1


def submit(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """Run ``fn(*args)`` on a background thread of this process; return its future."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():  # a forked child has no threads: start its own
            _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="kg-background")
            _pool_pid = os.getpid()
        return _pool.submit(fn, *args)


def fsync_file(path: Path | str, missing_ok: bool = False) -> None:
    """Flush ``path``'s data to disk; with ``missing_ok``, a file removed meanwhile has nothing to flush."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_files(paths: Iterable[Path]) -> None:
    """Remove ``paths``; one already gone is fine."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def settle(futures: Iterable[Future[Any]]) -> None:
    """Wait for ``futures``; raise the first one's error, if any failed."""
    done, _ = _wait(list(futures))
    for future in done:
        error = future.exception()
        if error is not None:
            raise error


def abandon(futures: Iterable[Future[Any]]) -> None:
    """Cancel ``futures`` not started and wait for the rest, ignoring their errors (the work is dropped)."""
    pending = [f for f in futures if not f.cancel()]
    _wait(pending)


__all__ = ["THREADS", "abandon", "fsync_file", "remove_files", "settle", "submit"]
