"""Worker threads: how many a process uses, and a map over them that keeps its input's order.

kg's heavy per-entry loops (the numba kernels), its file reads and writes and numpy's sorts release
Python's lock, so threads of one process run them on several cores at once, with no second interpreter,
no second import of kg or numba and no data copied between processes. The local engine's byte route and
the key-group copy use them (``execution.engines.local``, ``flink.write.regroup``).

How many: ``KG_WORKERS`` if set, else the cores this process may run on, at most ``DEFAULT_MAX``. A caller
may pass its own number (``kg rescale --workers``). ``1`` runs everything in the caller's thread, as kg
did before it had workers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from keygroup_cli.core.errors import ExecutionError, InvalidArgumentError

#: The environment's say on the number of workers.
WORKERS_ENV = "KG_WORKERS"
#: The default's ceiling: more threads than this gain little on the work the engine gives them.
DEFAULT_MAX = 4
#: Open files left for everything but a worker's spill files (``workers_within_open_files``).
FD_RESERVE = 64

T = TypeVar("T")
R = TypeVar("R")


def worker_count(requested: int | None = None) -> int:
    """Return how many workers to use: ``requested``, else ``$KG_WORKERS``, else the usable cores (at most 4).

    Raises:
        InvalidArgumentError: ``requested`` or ``$KG_WORKERS`` is not a whole number of at least 1.
    """
    if requested is not None:
        return _at_least_one(requested, "--workers")
    value = os.environ.get(WORKERS_ENV, "").strip()
    if value:
        try:
            number = int(value)
        except ValueError:
            raise InvalidArgumentError(
                f"{WORKERS_ENV}={value!r} is not a number of workers (a whole number, at least 1)",
                code="INVALID_WORKERS",
            ) from None
        return _at_least_one(number, WORKERS_ENV)
    return max(1, min(DEFAULT_MAX, usable_cores()))


def _at_least_one(number: int, name: str) -> int:
    if number < 1:
        raise InvalidArgumentError(f"{name} must be at least 1 (got {number})", code="INVALID_WORKERS")
    return number


def usable_cores() -> int:
    """Return the CPUs this process may run on (its affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def workers_within_open_files(per_worker: int, workers: int) -> int:
    """Return how many of ``workers`` may each keep ``per_worker`` files open at once (at least 1).

    Where the soft limit on open files (``ulimit -n``) is lower than they need, it is raised toward the
    hard limit first, as the JVM does at its start: macOS shells default to 256 and many Linux ones to
    1024, while a re-key's worker keeps a spill file open per (new subtask, bucket), up to about 260.
    ``FD_RESERVE`` descriptors stay free for everything else (inputs, outputs, libraries).

    Raises:
        ExecutionError: ``OPEN_FILES_LIMIT`` (exit 5): the limit cannot be raised far enough for one worker.
    """
    try:
        import resource
    except ImportError:  # no such limit to read (Windows)
        return workers
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = per_worker * workers + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        for target in (want, 10240):  # macOS refuses more than its per-process maximum (OPEN_MAX)
            if hard != resource.RLIM_INFINITY:
                target = min(target, hard)
            if target <= soft:
                continue
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (ValueError, OSError):
                continue
            soft = target
            break
    if soft == resource.RLIM_INFINITY:
        return workers
    fit = min(workers, (soft - FD_RESERVE) // max(per_worker, 1))
    if fit < 1:
        ceiling = "unlimited" if hard == resource.RLIM_INFINITY else hard
        raise ExecutionError(
            f"this rescale keeps {per_worker} spill files open, and the open-file limit is {soft} "
            f"(ulimit -n; hard limit {ceiling}): raise it to at least {per_worker + FD_RESERVE}; "
            "nothing was written",
            code="OPEN_FILES_LIMIT",
        )
    return fit


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], workers: int, stop: threading.Event | None = None
) -> Iterator[R]:
    """Yield ``fn(item)`` for every item, in the items' order, computed by up to ``workers`` threads.

    With one worker (or one item) everything runs in the caller's thread. When a call fails, the calls
    not yet started are cancelled and its error is raised here once the calls already running have ended
    (the earliest item's error if several failed). At most ``2 * workers`` calls run or wait ahead of the
    result being yielded, so a slow consumer bounds the work (and memory) in flight.

    ``stop`` is set when the map ends before its last result (an error, Ctrl-C, a consumer that stops):
    calls that check it can return early instead of being waited for.
    """
    pending = list(items)
    if workers <= 1 or len(pending) <= 1:
        for item in pending:
            yield fn(item)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kg-worker") as pool:
        live: dict[int, Future[R]] = {}
        submitted = 0
        try:
            for index in range(len(pending)):
                while submitted < len(pending) and submitted < index + 2 * workers:
                    live[submitted] = pool.submit(fn, pending[submitted])
                    submitted += 1
                while not live[index].done():
                    # Wake when this item's call or any other still running ends (a failure ends all).
                    running = [f for f in live.values() if not f.done()]
                    wait(running, return_when=FIRST_COMPLETED)
                    _raise_first_failure(live)
                _raise_first_failure(live)
                yield live.pop(index).result()
        finally:
            for future in live.values():
                future.cancel()
            if stop is not None and live:
                stop.set()


def _raise_first_failure(live: dict[int, Future[R]]) -> None:
    """Raise the error of the earliest item whose call has failed, if any has (cancelling the rest)."""
    for index in sorted(live):
        future = live[index]
        if future.done() and not future.cancelled() and future.exception() is not None:
            for other in live.values():
                other.cancel()
            error = future.exception()
            assert error is not None
            raise error


__all__ = [
    "DEFAULT_MAX",
    "FD_RESERVE",
    "WORKERS_ENV",
    "ordered_map",
    "usable_cores",
    "worker_count",
    "workers_within_open_files",
]
