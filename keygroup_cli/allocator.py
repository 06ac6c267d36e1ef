"""The C allocator's thresholds in kg's own processes: freed buffers are kept for reuse, not faulted in again.

kg's byte route allocates a few buffers of 1-16 MiB per batch and per bucket (windows, parts, framed
blocks) and frees them a moment later. glibc serves such sizes with ``mmap`` and gives them back with
``munmap`` (its dynamic threshold only ever rises to the size last freed, and it trims the heap's top
above twice that), so each new buffer is fresh memory: one page fault and a zeroed page per 4 KiB.
Rescaling a 1 GB savepoint took about 250,000 such faults, about 0.8 s of system CPU on one worker.

``keep_freed_memory`` fixes the two thresholds: allocations below ``MMAP_THRESHOLD`` come from the heap,
and up to ``TRIM_THRESHOLD`` of free memory stays at the heap's top, so the next batch reuses pages that
are already mapped. It also keeps every thread on one heap (``ARENA_MAX``): with a heap per worker thread,
each would keep its own freed buffers, which another worker cannot reuse (two workers then peaked 5-25 MiB
higher). kg's allocations are few and large, so the threads hardly ever wait for each other's malloc.
kg's peak memory stays as it was: the same buffers, reused.

It is called by the processes kg owns: the ``kg`` command (``cli.main``) and the Python workers of kg's
Spark sessions (``spark_daemon``, whose forked workers inherit it). kg's Python API leaves the host
process's allocator alone; a program that rescales large state may call it too, early, knowing that its
threads then share one heap. It does nothing where the C library is not glibc (musl, macOS, Windows), and
nothing when the environment already sets a threshold or the arenas (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_ARENA_MAX`` or ``GLIBC_TUNABLES``): the user's setting stands.
"""

from __future__ import annotations

import ctypes
import os

#: Allocations below this come from the heap (glibc's own ceiling for its dynamic threshold on 64-bit).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the heap's top kept mapped for the next allocations.
TRIM_THRESHOLD = 64 << 20

#: One heap for every thread: what one worker frees, the next allocation of any worker reuses.
ARENA_MAX = 1

# mallopt(3) parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: The environment's own say on the allocator, honoured as it is.
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc's thresholds and arenas for kg's buffers, once per process; return whether they are set.

    False where the C library is not glibc, where the environment sets one of them itself
    (``USER_SETTINGS``), or where ``mallopt`` refuses a value.
    """
    global _done
    if _done is None:
        _done = _set_thresholds()
    return _done


def _set_thresholds() -> bool:
    if any(os.environ.get(name) for name in USER_SETTINGS):
        return False
    if not _glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success.
    settings = (
        (_M_ARENA_MAX, ARENA_MAX),
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    )
    return all(mallopt(parameter, value) == 1 for parameter, value in settings)


def _glibc() -> bool:
    """Return whether this process runs on glibc (``confstr`` names it; musl and others do not)."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):  # no confstr, or a name this platform does not know
        return False
    return version is not None and version.startswith("glibc ")
