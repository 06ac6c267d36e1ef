"""The Spark engine on the test run's one SparkSession, and how a missing Java is reported."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from keygroup_cli.core.errors import InvalidArgumentError, MissingDependencyError
from keygroup_cli.execution.engines import PendingExecutor, get_executor
from keygroup_cli.execution.engines.spark import SparkExecutor, require_java, spark_session
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.snapshot import open_snapshot
from tests.execution.snapshots import generate, keyed_rows

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("spark") / "in", ("counter", "string", 1200, 3, 10))


def test_spark_executor_moves_key_groups(spark, source, tmp_path):
    result = rescale(source, tmp_path / "out", 4, executor=SparkExecutor(session=spark))
    assert result.engine == "spark"
    op = open_snapshot(result.output).manifest.operator("counter")
    assert [f.subtask for f in op.keyed_files] == [0, 1, 2, 3]
    assert keyed_rows(result.output, "counter").equals(keyed_rows(source, "counter"))


def test_spark_executor_rehashes_through_a_shuffle(spark, source, tmp_path):
    truth = generate(tmp_path / "truth", ("counter", "string", 1200, 5, 64))
    result = rescale(
        source, tmp_path / "out", 5, new_max_parallelism=64, executor=SparkExecutor(session=spark)
    )
    assert keyed_rows(result.output, "counter").equals(keyed_rows(truth, "counter"))


def test_session_factory_reuses_the_active_session(spark):
    assert spark_session() is spark
    assert get_executor("spark").session is spark


def test_a_session_is_found_from_another_thread(spark):
    # kg starts the engine in a background thread while it reads its input; the active session is per
    # thread in PySpark, so the running one must still be found rather than a second context started.
    assert PendingExecutor("spark").result().session is spark


def test_pending_executor_hands_its_error_to_the_caller():
    pending = PendingExecutor("flink-on-a-toaster")
    with pytest.raises(InvalidArgumentError, match="unknown engine 'flink-on-a-toaster'"):
        pending.result()


def test_broken_java_home_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(
        MissingDependencyError, match=r"JAVA_HOME=.*no-jdk has no executable bin/java"
    ) as info:
        require_java()
    assert info.value.code == "JAVA_HOME_BROKEN" and info.value.exit_code == 6


def test_no_java_on_path_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingDependencyError, match="no java on PATH.*install Java 17") as info:
        require_java()
    assert info.value.code == "JAVA_MISSING"


def test_a_java_that_exits_is_reported_as_gateway_failure(monkeypatch, tmp_path):
    # A JAVA_HOME whose java exits at once: spark-submit cannot start the gateway.
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'Error: broken JVM' >&2\nexit 1\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setattr("pyspark.sql.SparkSession.getActiveSession", classmethod(lambda cls: None))
    monkeypatch.setattr("pyspark.SparkContext._gateway", None)
    monkeypatch.setattr("pyspark.SparkContext._jvm", None)
    monkeypatch.setattr("pyspark.SparkContext._active_spark_context", None)
    monkeypatch.setattr("pyspark.sql.SparkSession._instantiatedSession", None)
    with pytest.raises(MissingDependencyError, match="Java gateway did not start") as info:
        spark_session()
    assert info.value.code == "SPARK_GATEWAY_FAILED"
    assert os.environ["JAVA_HOME"].endswith("jdk")


def test_class_data_sharing_archive_is_created_then_published_then_used(monkeypatch, tmp_path):
    import subprocess
    import sys

    from keygroup_cli.execution.engines.spark import class_data_sharing_option

    monkeypatch.setenv("KG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KG_SPARK_CDS", raising=False)
    first = class_data_sharing_option()
    assert first.startswith("-XX:ArchiveClassesAtExit=") and first.endswith(f".{os.getpid()}.partial")
    partial = Path(first.split("=", 1)[1])
    # Written by a JVM that is still running (here: this very process): never published.
    partial.write_bytes(b"archive")
    assert class_data_sharing_option() == first
    # Written by a process that has exited, and unchanged for 30 s: published under the final name.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    finished = partial.with_name(partial.name.replace(f".{os.getpid()}.", f".{dead.stdout.strip()}."))
    partial.rename(finished)
    os.utime(finished, (time.time() - 60, time.time() - 60))
    used = class_data_sharing_option()
    assert (
        used.startswith("-XX:SharedArchiveFile=") and Path(used.split("=", 1)[1]).read_bytes() == b"archive"
    )
    assert not finished.exists()
    monkeypatch.setenv("KG_SPARK_CDS", "0")
    assert class_data_sharing_option() == ""


def test_a_ctrl_c_that_python_drops_in_a_finalizer_still_interrupts(spark, capsys):
    # py4j frees Java objects from weakref callbacks on the thread that dropped them, blocking on the
    # gateway: a Ctrl-C that comes there raises KeyboardInterrupt inside the callback, and Python drops it
    # ("Exception ignored in ..."). The Spark job then went on and kg committed its output (exit 0).
    import signal
    import sys
    import weakref

    from keygroup_cli.execution.engines.spark.errors import spark_failures

    class JavaProxy:
        pass

    def free(_reference: object) -> None:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C, while the finalizer runs

    handler, hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    with pytest.raises(KeyboardInterrupt):
        with spark_failures(spark.sparkContext):
            proxy = JavaProxy()
            reference = weakref.ref(proxy, free)
            del proxy  # the callback runs here, and its KeyboardInterrupt is dropped
            assert reference() is None
            finished = spark.sparkContext.parallelize(range(4), 2).count()
    assert finished == 4  # the block ran to its end: the interrupt is raised after it, not lost
    assert "Exception ignored" not in capsys.readouterr().err
    assert (signal.getsignal(signal.SIGINT), sys.unraisablehook) == (handler, hook)
