"""``spark.prestart`` and ``spark.daemon``: a daemon prestarted beside the JVM, handed Spark's daemon role.

The hand-over runs between real processes: the prestarted one, and the daemon module started as Spark's
JVM starts it (its environment, its pipes). In a real session the test run's workers are its forks.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import keygroup_cli
from keygroup_cli.execution.engines import PendingExecutor, start_early
from keygroup_cli.execution.engines.spark.daemon import PRESTARTED_SOCKET, _path_fits, _provides
from keygroup_cli.execution.engines.spark.prestart import (
    PrestartedDaemon,
    worker_start_environment,
)
from keygroup_cli.execution.engines.spark.session import DAEMON_MODULE

ROOT = str(Path(keygroup_cli.__file__).resolve().parent.parent)
SETTINGS = {"spark.master": "local[2]", "spark.executorEnv.PYTHONPATH": ROOT}
#: How long a process may take to start or end here: a bound, never a pace.
PATIENCE = 120.0


def _wait_listening(daemon: PrestartedDaemon) -> None:
    deadline = time.monotonic() + PATIENCE
    while not os.path.exists(daemon.socket):
        assert daemon.process.poll() is None, "the prestarted daemon ended before it listened"
        assert time.monotonic() < deadline
        time.sleep(0.02)


@contextlib.contextmanager
def _listening_daemon() -> Iterator[PrestartedDaemon]:
    """Yield a prestarted daemon once it listens; afterwards it is let go and ended whatever happened."""
    daemon = PrestartedDaemon.start(SETTINGS)
    assert daemon is not None
    try:
        _wait_listening(daemon)
        yield daemon
    finally:
        daemon.close()
        daemon.process.kill()
        daemon.process.wait(PATIENCE)


def _daemon_port(shim: subprocess.Popen[bytes]) -> int:
    """Return the port the daemon Spark started tells the JVM it listens on."""
    assert shim.stdout is not None
    return int.from_bytes(shim.stdout.read(4), "big")


def _as_spark_starts_it(socket: str, **overrides: str) -> subprocess.Popen[bytes]:
    """Start kg's daemon module with the environment and pipes Spark's JVM gives it."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(p) for p in sorted(lib.glob("*.zip"))]
    environment = {
        **os.environ,
        **worker_start_environment(SETTINGS),
        "PYTHONPATH": os.pathsep.join([*zips, ROOT]),
        "PYTHONUNBUFFERED": "YES",
        "SPARK_REUSE_WORKER": "1",
        "PYTHON_WORKER_FACTORY_SECRET": "test-secret",
        PRESTARTED_SOCKET: socket,
        **overrides,
    }
    return subprocess.Popen(
        [sys.executable, "-m", DAEMON_MODULE, "pyspark.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    )


def _listener_pid(port: int) -> int | None:
    """Return the pid of the process listening on 127.0.0.1:``port`` (from /proc)."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if state == "0A" and int(local.split(":")[1], 16) == port:
            inode = fields[9]
    if inode is None:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) == f"socket:[{inode}]":
                    return int(entry.name)
        except OSError:
            continue
    return None


def test_the_daemon_spark_starts_hands_its_role_to_the_prestarted_one() -> None:
    with _listening_daemon() as daemon:
        shim = _as_spark_starts_it(daemon.socket)
        assert shim.stdin is not None
        # The daemon listening for Spark's workers is the prestarted process; the one Spark started waits.
        assert _listener_pid(_daemon_port(shim)) == daemon.process.pid
        assert shim.poll() is None
        # Spark ends a daemon by closing its stdin: both end (pyspark's daemon always exits 1).
        shim.stdin.close()
        shim.wait(PATIENCE)
        daemon.process.wait(PATIENCE)


def test_spark_s_sigterm_reaches_the_prestarted_daemon() -> None:
    with _listening_daemon() as daemon:
        shim = _as_spark_starts_it(daemon.socket)
        _daemon_port(shim)
        shim.terminate()  # what Spark's JVM does to stop a daemon: it is passed on, and both end
        daemon.process.wait(PATIENCE)
        shim.wait(PATIENCE)


def _has_numba(pid: int) -> bool:
    return "llvmlite" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("wanted", [True, False], ids=["large-re-key", "small-job"])
def test_the_kernels_are_loaded_only_when_a_large_re_key_is_coming(wanted: bool) -> None:
    with _listening_daemon() as daemon:
        if wanted:
            daemon.want_kernels()
            deadline = time.monotonic() + PATIENCE
            while not _has_numba(daemon.process.pid):
                assert time.monotonic() < deadline, "numba was not loaded"
                time.sleep(0.05)
        shim = _as_spark_starts_it(daemon.socket)
        assert shim.stdin is not None
        assert _listener_pid(_daemon_port(shim)) == daemon.process.pid
        # Serving now: what it loaded is what its workers start with.
        assert _has_numba(daemon.process.pid) is wanted
        shim.stdin.close()
        shim.wait(PATIENCE)
        daemon.process.wait(PATIENCE)


def test_another_hash_seed_is_declined_and_the_daemon_runs_itself() -> None:
    with _listening_daemon() as daemon:
        shim = _as_spark_starts_it(daemon.socket, PYTHONHASHSEED="7")
        assert shim.stdin is not None
        assert _listener_pid(_daemon_port(shim)) == shim.pid
        assert daemon.process.wait(PATIENCE) == 0  # declined, then ended
        shim.stdin.close()
        shim.wait(PATIENCE)


def test_without_a_prestarted_daemon_the_daemon_runs_itself(tmp_path: Path) -> None:
    shim = _as_spark_starts_it(str(tmp_path / "nobody-listens"))
    assert shim.stdin is not None
    assert _listener_pid(_daemon_port(shim)) == shim.pid
    shim.stdin.close()
    shim.wait(PATIENCE)


def test_a_prestarted_daemon_nobody_takes_ends_when_kg_lets_go() -> None:
    daemon = PrestartedDaemon.start(SETTINGS)
    assert daemon is not None
    _wait_listening(daemon)
    daemon.close()
    assert daemon.process.wait(PATIENCE) == 0
    assert not daemon.directory.exists()


def test_prestarting_is_off_for_a_cluster_and_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PrestartedDaemon.start({**SETTINGS, "spark.master": "spark://host:7077"}) is None
    monkeypatch.setenv("KG_SPARK_PRESTART", "0")
    assert PrestartedDaemon.start(SETTINGS) is None


def test_spark_s_jar_on_the_path_fits_but_a_copy_of_a_loaded_package_does_not(tmp_path: Path) -> None:
    import zipfile

    jar = tmp_path / "spark-core.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("org/apache/spark/SparkContext.class", b"")
    assert _provides(str(jar)) == {"org"}
    assert _path_fits([sys.path[0], str(jar), *sys.path[1:]])
    shadow = tmp_path / "shadow"
    (shadow / "keygroup_cli").mkdir(parents=True)
    assert not _path_fits([str(shadow), *sys.path])
    assert not _path_fits(list(reversed(sys.path)))
    assert _provides(str(tmp_path / "missing")) == set()


def test_the_kernels_load_warm_without_compiling() -> None:
    probe = (
        "import sys\n"
        "from keygroup_cli.flink import warm_kernels\n"
        "loaded = warm_kernels()\n"
        "from keygroup_cli.flink.kernels import compiled\n"
        "print(loaded, bool(compiled.rekey_window.signatures), 'numba' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "True"]
    off = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True,
        env={**os.environ, "KG_NATIVE": "0"},
    )  # fmt: skip
    assert off.stdout.split()[0] == "False"


def test_an_early_start_needs_a_re_key_and_spark_whatever_the_input() -> None:
    assert not start_early("spark", rekey=False)
    assert not start_early("local", rekey=True)
    assert not start_early(None, rekey=True)  # no master: the input's size decides the engine
    assert PendingExecutor._early is None


@pytest.mark.spark
def test_the_test_runs_workers_are_forks_of_the_prestarted_daemon(spark) -> None:
    sc = spark.sparkContext
    socket = sc.getConf().get(f"spark.executorEnv.{PRESTARTED_SOCKET}")
    assert socket

    def parent(_index: int) -> tuple[str, bool]:
        import os
        import sys

        command = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        return command, "numba" in sys.modules or "pyarrow" in sys.modules

    for command, preloaded in sc.parallelize(range(2), 2).map(parent).collect():
        assert "spark.prestart" in command and socket in command
        assert preloaded


def test_the_workers_start_with_their_imports_exempt_from_collections(spark) -> None:
    """pyspark's worker runs a full collection after every task: what its daemon loaded is exempt."""

    def frozen(_index: int) -> int:
        import gc

        return gc.get_freeze_count()

    counts = spark.sparkContext.parallelize(range(2), 2).map(frozen).collect()
    # numpy, pyarrow and kg's task modules, preloaded: tens of thousands of objects, none traversed again.
    assert min(counts) > 20_000, counts


def test_a_kg_task_exempts_what_its_worker_imported_from_collections() -> None:
    """A cluster's workers (pyspark's own daemon) import kg in their first task: each kg task freezes it."""
    code = (
        "import gc, sys\n"
        "from keygroup_cli.execution.engines.spark.tasks import state_task\n"
        "from keygroup_cli.flink import find_operator, open_savepoint\n"
        "savepoint = open_savepoint(sys.argv[1])\n"
        "operator = find_operator(savepoint, 'typed-state').operator_id\n"
        "before = gc.get_freeze_count()\n"
        "batches = list(state_task(str(savepoint.metadata_path), operator, None, 0))\n"
        "print(before, gc.get_freeze_count(), len(batches))\n"
    )
    case = Path(ROOT) / "fixtures" / "flink" / "2.3" / "typed-rocksdb-canonical-p2"
    done = subprocess.run(
        [sys.executable, "-c", code, str(case)], capture_output=True, text=True, timeout=PATIENCE, check=True
    )
    before, after, batches = (int(x) for x in done.stdout.split())
    assert before == 0 and batches > 0
    assert after > 20_000  # numpy, pyarrow and kg's modules, loaded before the task began
