"""A Python daemon prestarted beside the driver's JVM, for kg's embedded (``local``) sessions.

A Spark job's first Python task waits for Spark's daemon to start and for each forked worker to import
what kg's tasks run: numpy, pyarrow, kg's tasks, pyspark's worker, numba and the native kernels' cached
code (about 0.7 s of a process's CPU, most of it numba). The JVM only asks for the daemon once its context
is up, about a second after kg launched it, while a second core sits idle. ``PrestartedDaemon.start``
launches ``python -m keygroup_cli.execution.engines.spark.prestart SOCKET`` as the JVM is launched: it
imports all that (``preload``) and waits; the daemon module the JVM then starts hands it its role
(``spark.daemon.hand_over``), and the workers it forks begin with everything imported. Imports that would
start a thread are kept from it (pyarrow's jemalloc): a fork must not copy threads, and the prestarted
process declines to take over if it runs one.

It ends when kg closes its stdin (kg's exit, or the session's stop) before taking over, after waiting at
most ``WAIT_SECONDS``; once it has taken over, it ends as Spark's daemon does (with its JVM). It ignores
SIGINT, as the JVM does: Ctrl-C is kg's to handle.

Used where the session runs kg's own interpreter with kg's daemon module, on a machine with at least two
usable cores (on one, preloading would compete with the JVM's start). ``KG_SPARK_PRESTART=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
        if os.environ.get(PRESTART_ENV, "").strip() == "0":
            return None
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
        return cls(process, directory)

    def close(self) -> None:
        """Let the process end if it has not taken over (it has its own streams otherwise)."""
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
    """Import what every worker imports, and load the native kernels where a job would use them."""
    import pyspark.daemon  # noqa: F401
    import pyspark.worker  # noqa: F401

    from keygroup_cli.execution.engines.spark.workers import WORKER_MODULES
    from keygroup_cli.flink import kernels_expected, warm_kernels

    for name in WORKER_MODULES:
        importlib.import_module(name)
    if kernels_expected():
        warm_kernels()


def main() -> None:
    """The prestarted process: preload, then wait for the daemon module to connect, or for kg to go."""
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
    events = dict(poller.poll(int(WAIT_SECONDS * 1000)))
    if listener.fileno() not in events:
        return  # kg closed stdin (or ended), or nobody came in time
    with contextlib.suppress(OSError):
        os.unlink(where)
    adopt(listener, started)


__all__ = ["PRESTARTED_SOCKET", "PRESTART_ENV", "PRESTART_MODULE", "PrestartedDaemon", "preload"]


if __name__ == "__main__":
    main()
