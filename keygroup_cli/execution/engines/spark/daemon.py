"""Spark's Python daemon for kg's embedded sessions: pyspark from its installed package, or taken over.

**pyspark from its package.** Spark puts ``SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on
its Python workers' path. Python keeps no bytecode cache for modules imported from a zip, so every daemon
compiles pyspark's modules again: about 1.5 s of each session's first task on two cores, paid again by
every executor. When that zip lies inside an installed pyspark package (a pip install:
``<site>/pyspark/python/lib/``) and that package's directory ``<site>`` is on the path too, the zip and the
package are the same release. The daemon then drops the zips from its path, imports pyspark from the
package, bytecode cache included, and runs pyspark's own daemon. Any other layout (a Spark distribution, a
zip from elsewhere) keeps Spark's path untouched. Forked workers inherit the path.

**A prestarted daemon** (``spark.prestart``). kg starts a Python process beside the driver's JVM that
imports what the workers need (numpy, pyspark's daemon and worker, numba's kernels and their cached code)
while the JVM starts, on a core the start leaves idle. When the JVM then starts this module, it connects
to that process's socket (``PRESTARTED_SOCKET`` in its environment) and hands it its standard streams,
its environment and its arguments (``hand_over``); the prestarted process becomes the daemon
(``adopt``) and forks workers that have everything imported, and this process only waits for it to end
and passes on Spark's SIGTERM. The prestarted process declines what it was not started for (another
hash seed, another path, another interpreter, a thread already running: a fork must not copy threads),
and then this module runs the daemon itself, as it does when no prestarted process is there.

kg starts its embedded sessions with ``spark.python.daemon.module`` set to this module (see
``execution.engines.spark.session``). Importing it imports nothing of kg's but the packages above it (whose
``__init__`` modules load their names lazily or only type them) and ``core.allocator`` (standard library
only), so the daemon starts no threads before it forks its workers, and it sets the allocator's thresholds
(``core.allocator.keep_freed_memory``) that the workers inherit.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import struct
import sys
from typing import Any

from keygroup_cli.core.allocator import keep_freed_memory

#: The environment variable that names a prestarted daemon's socket (set by ``spark.prestart``).
PRESTARTED_SOCKET = "KG_SPARK_DAEMON_SOCKET"
#: Variables a Python process or a library it preloads reads once, at start: a prestarted daemon takes
#: over only an environment that gives them the values it was started with.
READ_AT_START = ("PYTHONHASHSEED", "OMP_NUM_THREADS")
_LENGTH = struct.Struct(">I")


def installed_copy(entry: str, path: list[str]) -> bool:
    """Return whether path entry ``entry`` is Spark's zip of a package installed beside it on ``path``.

    ``<site>/pyspark/python/lib/pyspark.zip`` is such a zip when ``<site>/pyspark/__init__.py`` exists and
    ``<site>`` is itself on ``path``; likewise ``py4j-*-src.zip`` with ``<site>/py4j/__init__.py``.
    """
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        package = "pyspark"
    elif name.startswith("py4j-") and name.endswith("-src.zip"):
        package = "py4j"
    else:
        return False
    lib = os.path.dirname(os.path.abspath(entry))
    site = os.path.dirname(os.path.dirname(os.path.dirname(lib)))
    if os.path.join(site, "pyspark", "python", "lib") != lib:
        return False
    on_path = {os.path.abspath(p) for p in path if p and p != entry}
    return site in on_path and os.path.isfile(os.path.join(site, package, "__init__.py"))


def prefer_installed(path: list[str]) -> list[str]:
    """Return ``path`` without the zips that ``installed_copy`` finds (the same list if there are none)."""
    return [entry for entry in path if not installed_copy(entry, path)]


def main() -> None:
    """Hand this daemon over to a prestarted one where there is one that takes it; else run it here."""
    sys.path[:] = prefer_installed(sys.path)
    where = os.environ.get(PRESTARTED_SOCKET)
    if where and hand_over(where):
        return
    serve()


def serve() -> None:
    """Run pyspark's daemon in this process (its workers are forked from it)."""
    # Set before the fork: every worker reuses the buffers it frees (``keygroup_cli.core.allocator``).
    keep_freed_memory()
    from pyspark import daemon

    # pyspark's workers run a full collection after every task: what is loaded by now (all of a prestarted
    # daemon's imports) is exempt from it, and the workers' collections do not write into the pages they
    # share with this process.
    gc.freeze()
    gc.enable()  # a prestarted daemon imports with the collector off
    daemon.manager()


def _send(sock: socket.socket, payload: bytes, fds: list[int] | None = None) -> None:
    data = _LENGTH.pack(len(payload)) + payload
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def _receive(sock: socket.socket, *, fds: int = 0) -> tuple[bytes, list[int]]:
    if fds:
        data, received, _flags, _address = socket.recv_fds(sock, 1 << 16, fds)
    else:
        data, received = sock.recv(1 << 16), []
    if len(data) < _LENGTH.size:
        raise ConnectionError("short message")
    (length,) = _LENGTH.unpack_from(data)
    data = data[_LENGTH.size :]
    while len(data) < length:
        more = sock.recv(length - len(data))
        if not more:
            raise ConnectionError("message cut short")
        data += more
    return data, received


def hand_over(where: str) -> bool:
    """Give this process's daemon role to the prestarted daemon at socket ``where``; wait for it to end.

    Return False, having changed nothing, where there is no such daemon or it declines: the caller then
    runs the daemon itself. Return True once the prestarted daemon has ended (Spark's SIGTERM to this
    process is passed on to it).
    """
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(where)
    except OSError:
        return False
    # Spark's SIGTERM waits until this process knows whom to pass it on to (or runs the daemon itself).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        pid = _ask(conn)
        if pid is None:
            conn.close()
            return False
        _wait_for(conn, pid)
        return True
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _ask(conn: socket.socket) -> int | None:
    """Send this process's role over ``conn``; return the pid of the daemon that took it (None: declined)."""
    try:
        request = {
            "environment": dict(os.environ),
            "argv": list(sys.argv),
            "cwd": os.getcwd(),
            "path": list(sys.path),
            "executable": sys.executable,
        }
        _send(conn, json.dumps(request).encode(), [0, 1, 2])
        answer, _fds = _receive(conn)
        reply: dict[str, Any] = json.loads(answer)
    except (OSError, ValueError):
        return None
    pid = reply.get("pid")
    return pid if isinstance(pid, int) else None


def _wait_for(conn: socket.socket, pid: int) -> None:
    """Wait until daemon ``pid`` ends (``conn`` closes), passing Spark's SIGTERM on to it."""
    # The prestarted daemon writes to Spark's pipes now: this process lets go of them, so that they close
    # when it ends, and passes Spark's SIGTERM (its way to stop a daemon) on to it.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)

    def stop(_signum: int, _frame: Any) -> None:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one that came meanwhile is passed on now
    # The connection closes when the prestarted daemon ends (its workers do not hold it).
    while True:
        try:
            if not conn.recv(1):
                break
        except OSError:
            break
    conn.close()


def adopt(listener: socket.socket, started: dict[str, str | None]) -> bool:
    """Take over the daemon role of the process that connects to ``listener``, then run the daemon.

    ``started``: the values of ``READ_AT_START`` this process was started with. Declines (returns False,
    the other process runs the daemon) where the environment, path or interpreter differ from this
    process's, or where this process runs a thread besides its main one.
    """
    conn, _address = listener.accept()
    listener.close()
    try:
        if not _same_user(conn):
            conn.close()
            return False
        message, fds = _receive(conn, fds=3)
        request = json.loads(message)
    except (OSError, ValueError):
        conn.close()
        return False
    environment: dict[str, str] = request.get("environment", {})
    same = (
        len(fds) == 3
        and request.get("executable") == sys.executable
        and _path_fits(request.get("path", []))
        and all(environment.get(name) == started.get(name) for name in READ_AT_START)
        and _threads() == 1
    )
    if not same:
        for fd in fds:
            os.close(fd)
        try:
            _send(conn, json.dumps({"declined": True}).encode())
        finally:
            conn.close()
        return False
    sys.path[:] = request["path"]
    os.environ.clear()
    os.environ.update(environment)
    sys.argv[:] = request.get("argv", sys.argv)
    os.chdir(request.get("cwd", os.getcwd()))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # The workers forked from here must not hold the connection: it closes when this daemon ends.
    os.register_at_fork(after_in_child=conn.close)
    _send(conn, json.dumps({"pid": os.getpid()}).encode())
    serve()
    return True


def _path_fits(theirs: list[str]) -> bool:
    """Return whether ``theirs`` is this process's path plus entries that provide none of its modules.

    Spark puts its own jar on the workers' path, which holds no Python; any entry that does hold a
    package this process imported from elsewhere would have given the daemon another copy of it.
    """
    extra = set(theirs) - set(sys.path)
    if [entry for entry in theirs if entry not in extra] != sys.path:
        return False
    imported = {name.partition(".")[0] for name in list(sys.modules)}
    for entry in extra:
        provided = _provides(entry)
        if provided is None or provided & imported:
            return False
    return True


def _provides(entry: str) -> set[str] | None:
    """Return the top-level names a path entry (a directory, a zip or a jar) can import; None: unknown."""
    import zipfile

    try:
        if os.path.isdir(entry):
            names = os.listdir(entry)
        elif zipfile.is_zipfile(entry):
            with zipfile.ZipFile(entry) as archive:
                names = [name.partition("/")[0] for name in archive.namelist()]
        else:
            return set()
    except OSError:
        return None
    return {name.partition(".")[0] for name in names}


def _same_user(conn: socket.socket) -> bool:
    credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return uid == os.getuid()


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0  # unknown: declined (a fork must not copy threads)


if __name__ == "__main__":
    main()
