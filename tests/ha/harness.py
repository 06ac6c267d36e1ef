"""A real ZooKeeper server and a real Flink 2.3 JobManager with ZooKeeper HA, for tests/ha.

- ``ZooKeeperServer``: the ZooKeeper 3.7 server Flink ships shaded in ``flink-dist`` (the ``[test]`` extra's
  ``apache-flink-libraries``, so the README's test command needs no install step of its own) started on
  127.0.0.1, a free port and a temp data dir, with ``tickTime=500`` so sessions may be as short as 1 s.
- ``HaJobProcess``: ``kg.fixtures.HaJob`` (fixtures/java) in its own JVM; ``halt()`` ends it with
  ``Runtime.halt``, a JobManager crash that closes no ZooKeeper session.
- ``wait_for_session_expiry`` and ``wait_until_swept``: the two steps by which ZooKeeper itself changes the
  tree after the crash, so that a test compares trees only once the server has finished with them.
- ``tree``: every znode under a path with its ``mzxid``, data digest and ephemeral owner, to prove kg
  changed nothing.
- ``run_kg``: kg through its real error boundary, stdout and stderr apart.

Missing Java or ZooKeeper raise ``HaHarnessError``: the suite fails, it never skips.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from keygroup_cli.cli import run

#: flink-dist's shaded ZooKeeper server (``org.apache.zookeeper`` relocated under Flink's shaded prefix).
ZOOKEEPER_MAIN = "org.apache.flink.shaded.zookeeper3.org.apache.zookeeper.server.quorum.QuorumPeerMain"
INSTALL_HINT = "install kg's [test] extra (apache-flink-libraries carries flink-dist and its ZooKeeper)"
#: How often the server deletes empty container znodes (ZooKeeper's default is once a minute).
#:
#: Curator creates a leader latch's parent (``<ha>/leader/latch``) as a container: once the crashed
#: JobManager's session expires and its ephemeral latch node goes, the server deletes the empty container
#: at its next sweep, a minute later at most by default, on a timer of its own. A test that took a
#: "before" tree between the expiry and that sweep saw the latch vanish while kg ran (it did under load,
#: when the steps between the two trees took longer). A short sweep makes the wait for it short.
CONTAINER_SWEEP_MS = 200


def flink_dist_classpath() -> str:
    """Return ``<pyflink>/lib/*``, the installed Flink jars, whose flink-dist carries a ZooKeeper server.

    Raises:
        HaHarnessError: pyflink (``apache-flink-libraries``) or its flink-dist jar is missing.
    """
    import importlib.util

    spec = importlib.util.find_spec("pyflink")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    lib = next((Path(p) / "lib" for p in locations if any((Path(p) / "lib").glob("flink-dist-*.jar"))), None)
    if lib is None:
        raise HaHarnessError(f"no flink-dist jar (pyflink/lib); {INSTALL_HINT}")
    return f"{lib}/*"


class HaHarnessError(RuntimeError):
    """ZooKeeper, Java or the HA job could not be started."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ZooKeeperServer:
    """A standalone ZooKeeper on 127.0.0.1 (``QuorumPeerMain`` with a generated ``zoo.cfg``)."""

    def __init__(self, workdir: Path) -> None:
        classpath = flink_dist_classpath()
        if shutil.which("java") is None:
            raise HaHarnessError("the HA tests need `java` (Java 17) on PATH")
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "data").mkdir(exist_ok=True)
        cfg = workdir / "zoo.cfg"
        cfg.write_text(
            "tickTime=500\n"
            f"dataDir={workdir / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "minSessionTimeout=1000\n"
            "maxSessionTimeout=60000\n"
            "admin.enableServer=false\n"
        )
        self._log = open(workdir / "zookeeper.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                "java",
                "-Xmx128m",
                "-XX:+UseSerialGC",
                # flink-dist's log4j finds no configuration: keep its own status chatter out of the log.
                "-Dlog4j2.statusLoggerLevel=ERROR",
                f"-Dznode.container.checkIntervalMs={CONTAINER_SWEEP_MS}",
                "-cp",
                classpath,
                ZOOKEEPER_MAIN,
                str(cfg),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.hosts = f"127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise HaHarnessError(
                    f"ZooKeeper did not start: {(workdir / 'zookeeper.log').read_text()[-2000:]}"
                )
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"srvr")
                return b"Mode" in s.recv(4096)
        except OSError:
            return False

    def client(self) -> Any:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.hosts, timeout=10)
        client.start(timeout=10)
        return client

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._log.close()


@dataclass(frozen=True)
class Znode:
    mzxid: int
    data_sha1: str
    ephemeral_owner: int


def tree(client: Any, path: str = "/") -> dict[str, Znode]:
    """Every znode under ``path``: its mzxid, a digest of its data and its ephemeral owner."""
    nodes: dict[str, Znode] = {}

    def walk(p: str) -> None:
        data, stat = client.get(p)
        nodes[p] = Znode(stat.mzxid, hashlib.sha1(data or b"").hexdigest(), stat.ephemeralOwner)
        for child in client.get_children(p):
            walk(p.rstrip("/") + "/" + child)

    walk(path)
    return nodes


class HaJobProcess:
    """``kg.fixtures.HaJob`` in its own JVM, until ``READY``; ``halt()`` crashes it."""

    def __init__(
        self,
        classpath: str,
        quorum: str,
        workdir: Path,
        session_timeout_ms: int,
        savepoint: Path | None = None,
    ) -> None:
        args = [quorum, str(workdir), str(session_timeout_ms)] + ([str(savepoint)] if savepoint else [])
        self.log = workdir.parent / f"{workdir.name}-jobmanager.log"
        self._err = open(self.log, "wb")  # noqa: SIM115 - closed in halt()
        self.process = subprocess.Popen(
            [
                "java",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Xmx1g",
                "-cp",
                classpath,
                "kg.fixtures.HaJob",
                *args,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # blocks until READY or the JVM ends
        if not line.startswith("READY "):
            self.halt()
            raise HaHarnessError(f"HaJob did not get ready: {line!r}\n{self.log.read_text()[-4000:]}")
        self.job_id = line.split()[1]

    def halt(self) -> None:
        """Crash the JobManager: ``Runtime.halt`` closes no ZooKeeper session and cleans nothing up."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write("halt\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._err.close()


def wait_for_session_expiry(client: Any, latch: str, timeout: float = 120) -> float:
    """Wait until ``latch`` has no contender left (or is gone) and return how long that took, in seconds."""
    from kazoo.exceptions import NoNodeError

    start = time.monotonic()
    while True:
        try:
            if not client.get_children(latch):
                break
        except NoNodeError:  # the emptied container was swept already
            break
        if time.monotonic() - start > timeout:
            raise HaHarnessError(f"{latch} still has contenders after {timeout:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - start


def wait_until_swept(client: Any, container: str, timeout: float = 120) -> None:
    """Wait until the server has deleted the empty container znode ``container`` (``CONTAINER_SWEEP_MS``).

    Woken by a watch on the node, not by polling.

    Raises:
        HaHarnessError: ``container`` still exists after ``timeout`` seconds, or has children.
    """
    gone = threading.Event()
    deadline = time.monotonic() + timeout
    while client.exists(container, watch=lambda _event: gone.set()) is not None:
        if client.get_children(container):
            raise HaHarnessError(f"{container} has children: it is not an empty container")
        if not gone.wait(max(0.0, deadline - time.monotonic())):
            raise HaHarnessError(f"{container} was not swept within {timeout:.0f} s")
        gone.clear()


@dataclass(frozen=True)
class KgRun:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_kg(*args: object) -> KgRun:
    """Run kg in-process through its error boundary (``cli.run``), with stdout and stderr apart."""
    runner = CliRunner()
    env = {"COLUMNS": "120", "NO_COLOR": "1"}
    with runner.isolation(env=env) as (out, err, _):
        code = run([str(a) for a in args])
    return KgRun(code, out.getvalue().decode(), err.getvalue().decode())
