"""A TCP proxy in front of an S3 server that logs every request and can kill the executor making one.

``S3Proxy(upstream)`` listens on 127.0.0.1; kg (the driver and the executors) reaches the store through it
(``AWS_ENDPOINT_URL``). It forwards bytes unchanged both ways and notes each request's method, path and
``Range`` header, and the client's process (``requests``).

``arm_kill(pattern)`` makes the proxy kill the Spark executor whose task sends the first request matching
``pattern`` that *completes* an object (a ``PUT`` without ``partNumber``, or the ``POST …?uploadId=`` of a
multipart upload): the request is forwarded, the server's answer awaited (the object is then whole on the
server), and instead of passing the answer on, the proxy kills with SIGKILL the executor JVM (the
``CoarseGrainedExecutorBackend`` above the Python worker that owns the client's socket) and that worker,
and closes the connection. So the task dies at one exact point of its work, whatever the timing, as when
its machine fails: its object is in the store, and Spark never hears that the task finished.

No pytest in here.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Request:
    """One request that went through the proxy."""

    method: str
    target: str
    range: str | None
    #: The pid of the process that sent it (the socket's owner), None if it could not be found.
    pid: int | None


@dataclass
class Kill:
    """What ``arm_kill`` did: the request it struck on and the processes it killed."""

    pattern: str
    target: str = ""
    executor_pid: int | None = None
    worker_pid: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


class S3Proxy:
    """See the module docstring; ``endpoint`` is what ``AWS_ENDPOINT_URL`` takes."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.requests: list[Request] = []
        self.kill: Kill | None = None
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm_kill(self, pattern: str) -> Kill:
        """Kill the executor that completes the first object whose request matches ``pattern``."""
        with self._lock:
            self.kill = Kill(pattern)
            return self.kill

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()

    # -- the proxy -------------------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, address = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client, address[1]), daemon=True).start()

    def _serve(self, client: socket.socket, client_port: int) -> None:
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        striking = threading.Event()
        struck = threading.Event()
        threading.Thread(
            target=self._answers, args=(upstream, client, striking, struck, client_port), daemon=True
        ).start()
        pending = b""
        owner: list[int | None] = []  # the client's process, found at its first request
        try:
            while not struck.is_set():
                head, pending = _read_head(client, pending)
                if head is None:
                    break
                method, target = head.split(b" ", 2)[:2]
                headers = _headers(head)
                if not owner:
                    owner.append(_socket_owner(client_port, self.port))
                record = Request(method.decode(), target.decode(), headers.get("range"), owner[0])
                with self._lock:
                    self.requests.append(record)
                    kill = self.kill
                    if (
                        kill is not None
                        and not kill.target
                        and _completes(record)
                        and re.search(kill.pattern, record.target)
                    ):
                        kill.target = record.target
                        striking.set()
                upstream.sendall(head)
                pending = _forward_body(client, upstream, headers, pending)
        except OSError:
            pass
        finally:
            if not striking.is_set():
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)

    def _answers(
        self,
        upstream: socket.socket,
        client: socket.socket,
        striking: threading.Event,
        struck: threading.Event,
        client_port: int,
    ) -> None:
        try:
            while True:
                data = upstream.recv(1 << 16)
                if not data:
                    break
                if striking.is_set() and not data.startswith(b"HTTP/1.1 100"):
                    # The answer to the request that completed the object: the object is whole on the
                    # server. The task that wrote it dies before it hears so.
                    self._strike(client_port)
                    struck.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()

    def _strike(self, client_port: int) -> None:
        kill = self.kill
        assert kill is not None
        worker = _socket_owner(client_port, self.port)
        executor = _executor_above(worker) if worker is not None else None
        for pid in (executor, worker):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        kill.worker_pid, kill.executor_pid = worker, executor
        kill.done.set()


def _read_head(sock: socket.socket, pending: bytes) -> tuple[bytes | None, bytes]:
    """Read one request's head (through the blank line); return it and the bytes read past it."""
    while b"\r\n\r\n" not in pending:
        data = sock.recv(1 << 16)
        if not data:
            return None, b""
        pending += data
    end = pending.index(b"\r\n\r\n") + 4
    return pending[:end], pending[end:]


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}


def _forward_body(
    client: socket.socket, upstream: socket.socket, headers: dict[str, str], pending: bytes
) -> bytes:
    """Forward a request's body (by ``Content-Length``, or chunked); return the bytes read past it."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            while b"\r\n" not in pending:
                pending += _recv(client)
            line, _, rest = pending.partition(b"\r\n")
            size = int(line.split(b";")[0], 16)
            need = size + 2
            while len(rest) < need:
                rest += _recv(client)
            upstream.sendall(line + b"\r\n" + rest[:need])
            pending = rest[need:]
            if size == 0:
                return pending
    length = int(headers.get("content-length", "0"))
    while length:
        if not pending:
            pending = _recv(client)
        chunk, pending = pending[:length], pending[length:]
        upstream.sendall(chunk)
        length -= len(chunk)
    return pending


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(1 << 16)
    if not data:
        raise OSError("the client closed the connection mid-request")
    return data


def _completes(request: Request) -> bool:
    """Return whether a request completes an object: a plain PUT, or the POST ending a multipart upload."""
    if request.method == "PUT":
        return "partNumber=" not in request.target
    return request.method == "POST" and "uploadId=" in request.target


def _socket_owner(client_port: int, proxy_port: int) -> int | None:
    """Return the pid that owns the TCP connection 127.0.0.1:client_port → 127.0.0.1:proxy_port."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, remote = fields[1], fields[2]
                if (
                    int(local.split(":")[1], 16) == client_port
                    and int(remote.split(":")[1], 16) == proxy_port
                ):
                    inode = fields[9]
                    break
        if inode is not None:
            break
    if inode is None:
        return None
    wanted = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == wanted:
                        return int(proc.name)
    return None


def _executor_above(pid: int) -> int | None:
    """Return the executor JVM (``CoarseGrainedExecutorBackend``) among ``pid``'s ancestors."""
    seen = 0
    while pid > 1 and seen < 16:
        with contextlib.suppress(OSError):
            if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
        seen += 1
    return None


__all__ = ["Kill", "Request", "S3Proxy"]
