"""A Python daemon prestarted beside the driver's JVM, for kg's embedded (``local``) sessions.

A Spark job's first Python task waits for Spark's daemon to start and for each forked worker to import
what kg's tasks run: numpy, pyarrow, kg's tasks, pyspark's worker, and for a large re-key numba and the
native kernels' cached code (about 0.7 s of a process's CPU, most of it numba). The JVM only asks for the
daemon once its context is up, about a second after kg launched it, while a second core sits idle.
``PrestartedDaemon.start`` launches ``python -m keygroup_cli.execution.engines.spark.prestart SOCKET`` as
the JVM is launched: it imports all that (``preload``; the kernels once ``want_kernels`` says a re-key that
uses them is coming) and waits; the daemon module the JVM then starts hands it its role
(``spark.daemon.hand_over``), and the workers it forks begin with everything imported. Imports that would
start a thread are kept from it (pyarrow's jemalloc): a fork must not copy threads, and the prestarted
process declines to take over if it runs one.

It ends when kg closes its stdin (kg's exit, or the session's stop) before taking over, after waiting at
most ``WAIT_SECONDS``; once it has taken over, it ends as Spark's daemon does (with its JVM). It ignores
SIGINT, as the JVM does: Ctrl-C is kg's to handle.

Used on Linux where the session runs kg's own interpreter with kg's daemon module, on a machine with at
least two usable cores (on one, preloading would compete with the JVM's start). ``KG_SPARK_PRESTART=0``
turns it off.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from keygroup_cli.core.allocator import keep_freed_memory
from keygroup_cli.core.workers import usable_cores
from keygroup_cli.execution.engines.spark.daemon import PRESTARTED_SOCKET, READ_AT_START, adopt

#: This module, as ``python -m`` runs it.
PRESTART_MODULE = "keygroup_cli.execution.engines.spark.prestart"
#: The switch: ``0`` turns prestarting off.
PRESTART_ENV = "KG_SPARK_PRESTART"
#: How long a prestarted daemon waits to be taken over before it ends on its own.
WAIT_SECONDS = 600.0
#: What kg writes to a prestarted daemon's stdin to have it load the native kernels.
KERNELS = b"k"

#: The prestarted daemons of this process, and whether a re-key that uses the native kernels is coming.
_daemons: list[PrestartedDaemon] = []
_kernels_wanted = [False]
_lock = threading.Lock()


def want_kernels() -> None:
    """Say that a re-key large enough for the native kernels will run: prestarted daemons load them.

    Told to a daemon already started (over its stdin) and to one started later; without it a daemon loads
    only the imports (numba and the kernels cost about 0.5 CPU s, wasted on a small job). Workers load
    the kernels themselves where they were not loaded.
    """
    with _lock:
        _kernels_wanted[0] = True
        daemons = list(_daemons)
    for daemon in daemons:
        daemon.want_kernels()


class PrestartedDaemon:
    """A prestarted daemon process, its socket in a private directory, and its stdin (a pipe from kg)."""

    def __init__(self, process: subprocess.Popen[bytes], directory: Path) -> None:
        self.process = process
        self.directory = directory
        self.socket = str(directory / "daemon")

    @classmethod
    def start(cls, settings: Mapping[str, str], console: IO[bytes] | None = None) -> PrestartedDaemon | None:
        """Prestart a daemon for a session with ``settings``; None where it would not pay or cannot start.

        ``settings``: the session's (its master, its executor environment), a session whose daemon module is
        ``spark.daemon`` (the caller checks). The process gets the
        environment Spark gives its workers where Python reads it at start (``READ_AT_START``,
        ``PYTHONPATH``); ``console`` takes its output until it takes over.
        """
        if os.environ.get(PRESTART_ENV, "").strip() == "0" or not sys.platform.startswith("linux"):
            return None  # off, or where a process's threads and a socket's peer cannot be checked
        if not settings.get("spark.master", "").startswith("local") or usable_cores() < 2:
            return None
        environment = {
            # pyarrow's jemalloc (linked, though its default pool is mimalloc) starts a thread when it
            # loads, which a fork must not copy: without it, pyarrow is preloaded too.
            "JE_ARROW_MALLOC_CONF": "background_thread:false",
            **os.environ,
            **worker_start_environment(settings),
            "PYTHONUNBUFFERED": "YES",
        }
        directory = Path(tempfile.mkdtemp(prefix="kg-daemon-"))  # mode 0700: this user's only
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", PRESTART_MODULE, str(directory / "daemon")],
                stdin=subprocess.PIPE,  # closed by kg (or its exit): the process ends if not taken over
                stdout=subprocess.DEVNULL,
                stderr=console if console is not None else subprocess.DEVNULL,
                env=environment,
                # Ctrl-C is kg's to handle, as for the JVM.
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
            )
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)
            return None
        daemon = cls(process, directory)
        with _lock:
            _daemons.append(daemon)
            wanted = _kernels_wanted[0]
        if wanted:
            daemon.want_kernels()
        return daemon

    def want_kernels(self) -> None:
        """Have the process load the native kernels before it takes over (if it has not yet)."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.process.stdin.write(KERNELS)
                self.process.stdin.flush()

    def close(self) -> None:
        """Let the process end if it has not taken over (it has its own streams otherwise)."""
        with _lock:
            if self in _daemons:
                _daemons.remove(self)
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def worker_start_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """Return what Spark sets in its Python workers' environment that Python reads at start.

    Spark gives every worker ``PYTHONHASHSEED`` (0 unless the executor environment says otherwise) and
    ``OMP_NUM_THREADS`` (the task's cores); ``PYTHONPATH`` is the executor environment's (Spark puts its
    zips in front, which the daemon drops again where they copy the installed pyspark).
    """
    executor = "spark.executorEnv."
    environment = {
        "PYTHONHASHSEED": settings.get(executor + "PYTHONHASHSEED", "0"),
        "OMP_NUM_THREADS": settings.get(executor + "OMP_NUM_THREADS", settings.get("spark.task.cpus", "1")),
    }
    if executor + "PYTHONPATH" in settings:
        environment["PYTHONPATH"] = settings[executor + "PYTHONPATH"]
    return environment


def preload() -> None:
    """Import what every worker imports."""
    import pyspark.daemon  # noqa: F401
    import pyspark.worker  # noqa: F401

    from keygroup_cli.execution.engines.spark.workers import WORKER_MODULES

    for name in WORKER_MODULES:
        importlib.import_module(name)


def preload_kernels() -> None:
    """Load numba and the native kernels' cached code (a re-key large enough to use them is coming)."""
    from keygroup_cli.flink import warm_kernels

    warm_kernels()


def main() -> None:
    """The prestarted process: preload, then wait for the daemon module to connect, or for kg to go.

    A byte ``KERNELS`` on stdin (``PrestartedDaemon.want_kernels``) loads the native kernels meanwhile.
    """
    gc.disable()  # imports only, no garbage: collections would cost 0.1 CPU s (``serve`` enables it)
    where = sys.argv[1]
    started = {name: os.environ.get(name) for name in READ_AT_START}
    keep_freed_memory()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(where)
    listener.listen(1)
    with contextlib.suppress(Exception):  # a failed preload only costs the workers their own imports
        preload()
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    poller.register(0, select.POLLIN)
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        events = dict(poller.poll(max(0, int((deadline - time.monotonic()) * 1000))))
        if listener.fileno() in events:
            break
        if 0 not in events:
            return  # nobody came in time
        asked = os.read(0, 64)
        if not asked:
            return  # kg closed stdin (or ended)
        if KERNELS in asked:
            with contextlib.suppress(Exception):  # without them, the first tasks load them
                preload_kernels()
    with contextlib.suppress(OSError):
        os.unlink(where)
    adopt(listener, started)


__all__ = [
    "KERNELS",
    "PRESTARTED_SOCKET",
    "PRESTART_ENV",
    "PRESTART_MODULE",
    "PrestartedDaemon",
    "preload",
    "preload_kernels",
    "want_kernels",
]


if __name__ == "__main__":
    main()
