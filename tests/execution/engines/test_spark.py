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
    from keygroup_cli.execution.engines.spark import class_data_sharing_option
    from keygroup_cli.execution.engines.spark.jvm import class_archive_complete

    monkeypatch.setenv("KG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KG_SPARK_CDS", raising=False)
    first = class_data_sharing_option()
    assert first.startswith("-XX:ArchiveClassesAtExit=") and first.endswith(f".{os.getpid()}.partial")
    partial = Path(first.split("=", 1)[1])
    # Written by a JVM that is still running (here: this very process): never published.
    partial.write_bytes(b"archive")
    assert class_data_sharing_option() == first
    # Written by a process that has exited, whose session ran a job, unchanged for 30 s: published.
    class_archive_complete()
    finished = _as_if_written_by_an_exited_process(partial)
    used = class_data_sharing_option()
    assert (
        used.startswith("-XX:SharedArchiveFile=") and Path(used.split("=", 1)[1]).read_bytes() == b"archive"
    )
    assert not finished.exists() and not finished.with_suffix(".ran").exists()
    monkeypatch.setenv("KG_SPARK_CDS", "0")
    assert class_data_sharing_option() == ""


def _as_if_written_by_an_exited_process(partial: Path) -> Path:
    """Rename ``partial`` (and its ``.ran`` mark, if any) to an exited process's, 60 s old; return it."""
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    finished = partial.with_name(partial.name.replace(f".{os.getpid()}.", f".{dead.stdout.strip()}."))
    partial.rename(finished)
    if partial.with_suffix(".ran").exists():
        partial.with_suffix(".ran").rename(finished.with_suffix(".ran"))
    os.utime(finished, (time.time() - 60, time.time() - 60))
    return finished


def test_a_class_archive_of_a_session_that_ran_no_job_is_removed_not_published(monkeypatch, tmp_path):
    from keygroup_cli.execution.engines.spark import class_data_sharing_option

    monkeypatch.setenv("KG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KG_SPARK_CDS", raising=False)
    partial = Path(class_data_sharing_option().split("=", 1)[1])
    partial.write_bytes(b"a start cut short: few classes")
    finished = _as_if_written_by_an_exited_process(partial)
    # Not mapped by later sessions: this one writes a new archive instead.
    assert class_data_sharing_option().startswith("-XX:ArchiveClassesAtExit=")
    assert not finished.exists() and not list(tmp_path.glob("*.jsa"))


#: What ``bin/spark-class`` prints with ``SPARK_PRINT_LAUNCH_COMMAND`` (arguments joined by spaces).
PRINTED = (
    "Spark Command: /opt/java/bin/java -cp /spark/conf:/spark/jars/* -Xmx1g -XX:+UseSerialGC "
    "-XX:+IgnoreUnrecognizedVMOptions --add-opens=java.base/java.lang=ALL-UNNAMED "
    "org.apache.spark.deploy.SparkSubmit --conf spark.master=local[*] --conf "
    "spark.driver.extraJavaOptions=-XX:+UseSerialGC pyspark-shell"
)


def test_the_driver_command_spark_submit_printed_is_started_directly_next_time(monkeypatch, tmp_path):
    from keygroup_cli.execution.engines.spark.jvm import forget_launch, launch_command, learn_launch

    monkeypatch.setenv("KG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("keygroup_cli.execution.engines.spark.jvm.shutil.which", lambda name: name)
    log = tmp_path / "console.log"
    settings = {"spark.master": "local[*]", "spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}
    assert launch_command(settings) is None  # nothing learnt yet: spark-submit starts it
    log.write_text(f"{PRINTED}\n========================================\nSpark's log lines\n")
    learn_launch(log, settings)
    command, environment = launch_command({**settings, "spark.app.name": "kg rescale"})
    assert command == [
        "/opt/java/bin/java",
        "-cp",
        "/spark/conf:/spark/jars/*",
        "-Xmx1g",
        "-XX:+UseSerialGC",
        "-XX:+IgnoreUnrecognizedVMOptions",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "org.apache.spark.deploy.SparkSubmit",
        "--conf",
        "spark.master=local[*]",
        "--conf",
        "spark.driver.extraJavaOptions=-XX:+UseSerialGC",
        "--conf",
        "spark.app.name=kg rescale",
        "pyspark-shell",
    ]
    # What Spark's scripts export to the JVM; PySpark's workers need a fixed string hash seed.
    assert environment["PYTHONHASHSEED"] == "0" and environment["SPARK_ENV_LOADED"] == "1"
    forget_launch()
    assert launch_command(settings) is None


def test_a_printed_command_that_does_not_parse_back_is_not_learnt(monkeypatch, tmp_path):
    from keygroup_cli.execution.engines.spark.jvm import launch_command, learn_launch

    monkeypatch.setenv("KG_CACHE_DIR", str(tmp_path))
    log = tmp_path / "console.log"
    log.write_text(PRINTED + "\n")
    # The driver options printed are not this session's (say, a path with a space split them apart).
    learn_launch(log, {"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/a b.jsa"})
    assert launch_command({}) is None
    log.write_text("no command printed\n")
    learn_launch(log, {})
    assert launch_command({}) is None


def test_spark_submit_starts_the_jvm_where_its_launcher_would_read_more(monkeypatch, tmp_path):
    from keygroup_cli.execution.engines.spark.jvm import direct_launch

    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    for name in ("KG_SPARK_DIRECT", "SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS", "HADOOP_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert direct_launch({"spark.master": "local[*]"})
    assert not direct_launch({"spark.driver.memory": "4g"})
    assert not direct_launch({"spark.jars.packages": "org.example:lib:1.0"})
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Dx=y")
    assert not direct_launch({})
    monkeypatch.delenv("SPARK_SUBMIT_OPTS")
    (conf / "spark-defaults.conf").write_text("spark.driver.memory 4g\n")
    assert not direct_launch({})
    (conf / "spark-defaults.conf").unlink()
    monkeypatch.setenv("KG_SPARK_DIRECT", "0")
    assert not direct_launch({})


#: A session started, probed and stopped as kg does, in a fresh process: how its JVM was started.
SESSION = """
import os, sys
from pyspark import SparkContext
from keygroup_cli.execution.engines.spark import session, workers
sc = session.spark_context()
workers.require_workers(sc)
seed = sc.parallelize([0], 1).map(lambda _: os.environ.get("PYTHONHASHSEED")).collect()[0]
launcher = os.path.basename(sc._gateway.proc.args[0])
from keygroup_cli.execution.engines.spark import jvm
# log4j configured once, from Spark's defaults named up front: Spark did not configure it a second time.
again = jvm._console_logs["path"].read_text().count("Using Spark's default log4j profile")
session._stop_quietly(sc)
print(launcher, seed, SparkContext._active_spark_context is None, again)
"""


def test_a_session_is_started_through_spark_submit_once_then_directly(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("KG_SPARK_DIRECT", "SPARK_SUBMIT_OPTS")}
    env.update(KG_CACHE_DIR=str(tmp_path), KG_SPARK_CDS="0")

    def session() -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", SESSION], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
        )
        return proc.stdout.split()

    # The first session learns the command spark-submit's launcher builds; the next one starts it itself.
    # Both run a job on workers with PYTHONHASHSEED=0 (spark-submit exports it; kg does the same) and stop.
    assert session() == ["spark-submit", "0", "True", "0"]
    assert session() == ["java", "0", "True", "0"]


def test_spark_default_log4j_setup_is_named_only_where_nothing_else_could_configure_log4j(
    monkeypatch, tmp_path
):
    from keygroup_cli.execution.engines.spark.jvm import SPARK_LOG4J_DEFAULTS, logging_option

    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    for name in ("KG_SPARK_DIRECT", "SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS", "HADOOP_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name in ("LOG4J_CONFIGURATION_FILE", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    named = f"-Dlog4j2.configurationFile=classpath:{SPARK_LOG4J_DEFAULTS}"
    assert logging_option({"spark.master": "local[*]"}) == named
    # The user's own configuration, or what spark-submit would read, decides instead.
    assert logging_option({"spark.driver.extraClassPath": "/opt/lib/*"}) == ""
    monkeypatch.setenv("LOG4J_CONFIGURATION_FILE", "/etc/log4j2.xml")
    assert logging_option({}) == ""
    monkeypatch.delenv("LOG4J_CONFIGURATION_FILE")
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Dlog4j2.configurationFile=/etc/log4j2.xml")
    assert logging_option({}) == ""
    monkeypatch.delenv("JAVA_TOOL_OPTIONS")
    (conf / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert logging_option({}) == ""
    (conf / "log4j2.properties").unlink()
    monkeypatch.setenv("KG_SPARK_DIRECT", "0")
    assert logging_option({}) == ""


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
