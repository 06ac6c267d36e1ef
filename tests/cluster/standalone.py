"""A real Spark standalone cluster on 127.0.0.1, started from pyspark's own scripts (tests and benchmarks).

``StandaloneCluster.start(directory, workers=2)`` runs ``<pyspark>/bin/spark-class`` for one
``org.apache.spark.deploy.master.Master`` and N ``org.apache.spark.deploy.worker.Worker`` (1 core, 1 GB
each by default), every one in its own process group with its log and work directory under
``directory`` (and each worker its own ``SPARK_LOCAL_DIRS``: its executors share no directory), and
returns once the master's JSON (``http://127.0.0.1:<webui>/json/``) reports every worker ALIVE.
``stop()`` kills the process groups (executors started by the workers included) and checks that none is
left.

The daemons get ``SPARK_HOME`` (the pyspark package, so ``find-spark-home`` never asks a ``python3`` on
PATH for it), ``SPARK_LOCAL_IP=127.0.0.1``, an empty ``SPARK_CONF_DIR`` (no ``spark-env.sh`` of the
machine's), and the caller's PATH and JAVA_HOME: Java is found the way kg's Spark engine and spark-class
find it (``JAVA_HOME``, else ``java`` on PATH). The executors' Python is not set here: a kg process says
which interpreter its tasks run with (``PYSPARK_PYTHON`` or ``spark.pyspark.python``).

No pytest in here: ``benchmarks/cluster.py`` imports it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Daemon JVMs only schedule and launch executors: the C1 compiler and the serial collector start them
#: faster on small machines (the executors keep Spark's defaults).
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class ClusterError(RuntimeError):
    """The standalone cluster did not start, or did not stop cleanly."""


def spark_home() -> Path:
    """Return the pip-installed pyspark package directory, which holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_env(conf_dir: Path) -> dict[str, str]:
    """Return the environment of the master and workers: this one plus Spark's home, address and conf."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_DAEMON_JAVA_OPTS=DAEMON_JAVA_OPTS,
        SPARK_DAEMON_MEMORY="256m",
    )
    return env


@dataclass
class Daemon:
    """One master or worker JVM: its process (a process group of its own) and its log."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    webui_port: int
    work_dir: Path | None = None

    def tail(self, lines: int = 25) -> str:
        """Return the last ``lines`` lines of the log (for failure messages)."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class StandaloneCluster:
    """A running master and its workers; ``master_url`` is what ``kg rescale --master`` takes."""

    directory: Path
    master_port: int
    master: Daemon
    workers: list[Daemon] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.master.webui_port}"

    @classmethod
    def start(
        cls,
        directory: Path,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        timeout: float = 120.0,
        pin: bool = False,
    ) -> StandaloneCluster:
        """Start a master and ``workers`` workers and wait until all are registered (ALIVE).

        With ``pin`` worker *i* (its JVM, and the executors and Python workers it starts, which inherit
        it) may only run on CPU *i* modulo the machine's CPUs: a worker of ``cores=1`` then really has
        one core, as on a cluster of one-core machines (benchmarks/cluster.py).

        Raises:
            ClusterError: Java or pyspark's scripts are missing, a daemon exited, or the workers did not
                register within ``timeout`` seconds; the message holds the log tails. Whatever was started
                is stopped first.
        """
        if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
            raise ClusterError("a Spark standalone cluster needs Java 17: set JAVA_HOME or put java on PATH")
        spark_class = spark_home() / "bin" / "spark-class"
        if not spark_class.is_file():
            raise ClusterError(f"pyspark has no {spark_class}: pip install 'pyspark>=3.5'")
        directory.mkdir(parents=True, exist_ok=True)
        conf_dir = directory / "conf"
        conf_dir.mkdir(exist_ok=True)
        env = spark_env(conf_dir)
        master_port = free_port()
        master = _launch(
            "master",
            [str(spark_class), MASTER_CLASS, "--host", "127.0.0.1", "--port", str(master_port)],
            directory,
            env,
        )
        cluster = cls(directory, master_port, master)
        try:
            cluster.wait_for_master(timeout)
            for index in range(workers):
                work_dir = directory / f"worker-{index}" / "work"
                work_dir.mkdir(parents=True, exist_ok=True)
                # Each worker's own scratch disk (its executors' shuffle and spill files): no two share one.
                local_dir = directory / f"worker-{index}" / "local"
                local_dir.mkdir(parents=True, exist_ok=True)
                cluster.workers.append(
                    _launch(
                        f"worker-{index}",
                        [
                            str(spark_class),
                            WORKER_CLASS,
                            "--host",
                            "127.0.0.1",
                            "--cores",
                            str(cores),
                            "--memory",
                            memory,
                            "--work-dir",
                            str(work_dir),
                            cluster.master_url,
                        ],
                        directory,
                        {**env, "SPARK_LOCAL_DIRS": str(local_dir)},
                        work_dir=work_dir,
                        cpu=index % (os.cpu_count() or 1) if pin else None,
                    )
                )
            cluster.wait_for_workers(workers, timeout)
        except BaseException:
            with contextlib.suppress(ClusterError):
                cluster.stop()
            raise
        return cluster

    def status(self) -> dict[str, Any]:
        """Return the master's JSON (``workers``, ``aliveworkers``, ``activeapps``, ``completedapps``)."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:  # noqa: S310
            data: dict[str, Any] = json.load(response)
        return data

    def wait_for_master(self, timeout: float) -> None:
        """Wait until the master is ALIVE, then take its ports from its log.

        A port that was free when it was picked may be taken before the master binds it: Spark then binds
        the next one and says so in its log (``Successfully started service 'MasterUI' on port N``). The
        log, not the port asked for, says where the master listens, so the workers and the JSON polling
        use the ports it really bound.

        Raises:
            ClusterError: The master exited or did not become ALIVE within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.master.process.poll() is not None:
                code = self.master.process.returncode
                raise ClusterError(f"master exited with {code} before it was ALIVE\n" + self.log_tails())
            text = self.master.log.read_text(errors="replace") if self.master.log.exists() else ""
            if "New state: ALIVE" in text:
                rpc = re.search(r"started service 'sparkMaster' on port (\d+)", text)
                ui = re.search(r"started service 'MasterUI' on port (\d+)", text)
                if rpc is None or ui is None:
                    raise ClusterError("the master is ALIVE but its log names no ports\n" + self.log_tails())
                self.master_port = int(rpc.group(1))
                self.master.webui_port = int(ui.group(1))
                return
            time.sleep(0.2)
        raise ClusterError(f"the master was not ALIVE after {timeout:.0f} s\n" + self.log_tails())

    def wait_for_workers(self, count: int, timeout: float) -> None:
        """Wait until the master reports ``count`` ALIVE workers.

        Raises:
            ClusterError: A daemon exited or ``timeout`` passed; with every daemon's log tail.
        """
        deadline = time.monotonic() + timeout
        seen: Any = None
        while time.monotonic() < deadline:
            for daemon in self.daemons:
                if daemon.process.poll() is not None:
                    raise ClusterError(
                        f"{daemon.name} exited with {daemon.process.returncode} before the cluster was up\n"
                        + self.log_tails()
                    )
            with contextlib.suppress(OSError, ValueError):
                seen = self.status().get("aliveworkers")
                if seen == count:
                    for worker in self.workers:
                        worker.webui_port = _bound_port(worker, "WorkerUI")
                    return
            time.sleep(0.5)
        raise ClusterError(
            f"the master at {self.master_url} reported aliveworkers={seen!r}, not {count}, "
            f"after {timeout:.0f} s\n" + self.log_tails()
        )

    @property
    def daemons(self) -> list[Daemon]:
        return [self.master, *self.workers]

    def log_tails(self) -> str:
        """Return the last lines of every daemon's log, each under its name."""
        return "\n".join(f"--- {d.name} ({d.log}):\n{d.tail()}" for d in self.daemons)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop every daemon's process group (SIGTERM, then SIGKILL) and check that no process is left.

        Raises:
            ClusterError: A process of a daemon's group is still alive after SIGKILL.
        """
        for daemon in reversed(self.daemons):
            _signal_group(daemon.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for daemon in self.daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(max(0.1, deadline - time.monotonic()))
        # Executors are children of a worker, in its process group: they may outlive the worker's JVM.
        for daemon in self.daemons:
            _signal_group(daemon.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(5)
        left = {d.name: _group_members(d.process.pid) for d in self.daemons}
        deadline = time.monotonic() + 10
        while any(left.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
            left = {d.name: _group_members(d.process.pid) for d in self.daemons}
        if any(left.values()):
            raise ClusterError(f"processes left after stopping the cluster: {left}")


def _launch(
    name: str,
    command: list[str],
    directory: Path,
    env: dict[str, str],
    work_dir: Path | None = None,
    cpu: int | None = None,
) -> Daemon:
    webui_port = free_port()

    def pin() -> None:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    log = directory / f"{name}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*command, "--webui-port", str(webui_port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=directory,
            start_new_session=True,  # its own process group, executors included: killed as one
            preexec_fn=pin if cpu is not None else None,
        )
    return Daemon(name, process, log, webui_port, work_dir)


def _bound_port(daemon: Daemon, service: str) -> int:
    """Return the port a registered daemon's log says ``service`` bound (Spark moves on from a taken one)."""
    text = daemon.log.read_text(errors="replace")
    found = re.findall(rf"started service '{service}' on port (\d+)", text)
    if not found:
        raise ClusterError(f"{daemon.name}'s log names no port for {service}\n{daemon.tail()}")
    return int(found[-1])


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_members(pgid: int) -> list[int]:
    """Return the live (not zombie) processes of process group ``pgid``, read from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # Fields after the command name (which may hold spaces): state, ppid, pgrp.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(stat.parent.name))
    return members
