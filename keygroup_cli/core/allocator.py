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
Spark sessions (``spark.daemon``, whose forked workers inherit it). kg's Python API leaves the host
process's allocator alone; a program that rescales large state may call it too, early, knowing that its
threads then share one heap. It does nothing where the C library is not glibc (musl, macOS, Windows), and
nothing when the environment already sets a threshold or the arenas (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_ARENA_MAX`` or ``GLIBC_TUNABLES``): the user's setting stands.

Not enough memory is the environment's answer, not a bug: exit 5 in one line (``NOT_ENOUGH_MEMORY``).
Python says it as a ``MemoryError`` (pyarrow's ``ArrowMemoryError`` is one), an ``OSError`` ``ENOMEM``, a
``RuntimeError`` "can't start new thread" or an ``ImportError`` whose library could not be mapped;
``is_memory_failure`` recognises them all. Native code cannot always say it: RocksDB aborts the process
(SIGABRT) when it cannot start a thread, so ``require_address_space`` refuses, before such a call, what an
address-space limit (``ulimit -v``, ``RLIMIT_AS``) leaves too little room for. ``reserve_headroom`` keeps a
few MiB mapped at start that ``release_headroom`` gives back once memory ran out, so the cleanup that follows
(removing staging: ``opendir`` allocates) has room to run.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import resource
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keygroup_cli.core.errors import ExecutionError

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


#: Address space kept at start for the cleanup after memory ran out (``reserve_headroom``).
HEADROOM = 8 << 20

_headroom: mmap.mmap | None = None

#: What an ``ImportError`` says when the dynamic loader could not map a library: memory, not a missing one.
_LOADER_MEMORY = ("failed to map segment", "cannot allocate memory", "out of memory")


def address_space_limit() -> int | None:
    """Return this process's address-space limit in bytes (``RLIMIT_AS``, ``ulimit -v``); None: unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def address_space_in_use() -> int | None:
    """Return the address space this process maps now (``VmSize``), or None where ``/proc`` does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_memory_failure(exc: BaseException) -> bool:
    """Return whether ``exc`` says memory ran out (see the module's docstring), whatever raised it."""
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return True
    text = str(exc).lower()
    if isinstance(exc, RuntimeError) and "can't start new thread" in text:
        return True
    return isinstance(exc, ImportError) and any(s in text for s in _LOADER_MEMORY)


def not_enough_memory(what: str | None = None) -> ExecutionError:
    """Return the one-line error for memory that ran out (``NOT_ENOUGH_MEMORY``, exit 5).

    It names the address-space limit when one is set (the usual cause), then ``what`` needed the memory.
    """
    from keygroup_cli.core.errors import (
        ExecutionError,  # imported here: this module stays standard-library only
    )

    limit = address_space_limit()
    message = "not enough memory"
    if limit is not None:
        message += f" (address space limit {limit >> 20} MiB: ulimit -v, RLIMIT_AS)"
    if what:
        message += f": {what}"
    return ExecutionError(message, code="NOT_ENOUGH_MEMORY")


def require_address_space(need: int, what: str) -> None:
    """Refuse (exit 5) to start ``what``, native code that aborts where memory runs out, without ``need``.

    Only an address-space limit is checked (physical memory is not what such code fails on); without one,
    or where ``/proc`` does not say what is in use, nothing is refused.

    Raises:
        ExecutionError: ``NOT_ENOUGH_MEMORY``.
    """
    limit = address_space_limit()
    used = address_space_in_use()
    if limit is None or used is None or limit - used >= need:
        return
    left = max(limit - used, 0) >> 20
    raise not_enough_memory(f"{what} needs about {need >> 20} MiB more address space, {left} MiB are left")


def reserve_headroom() -> None:
    """Map ``HEADROOM`` bytes (never touched) for ``release_headroom``, once, under an address-space limit."""
    global _headroom
    if _headroom is not None or address_space_limit() is None:
        return
    try:
        _headroom = mmap.mmap(-1, HEADROOM, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        _headroom = None


def release_headroom() -> None:
    """Give the reserved headroom back (after memory ran out), so the cleanup that follows can allocate."""
    global _headroom
    if _headroom is not None:
        _headroom.close()
        _headroom = None
