"""Which Python the Spark engine starts its workers with, and how a broken worker is reported.

Against the test run's real SparkSession: the worker interpreter is swapped for a decoy that fails, for
kg's own interpreter without its site-packages (so kg's dependencies cannot be imported), and back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from keygroup_cli.core.errors import MissingDependencyError
from keygroup_cli.execution.engines import PendingExecutor
from keygroup_cli.execution.engines.spark import SparkExecutor
from keygroup_cli.execution.engines.spark.errors import worker_cause
from keygroup_cli.execution.engines.spark.workers import require_workers, worker_python
from keygroup_cli.execution.routes.rescale import rescale
from tests.conftest import DECOY_MARK, write_decoys

pytestmark = pytest.mark.spark

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "flink" / "2.3"


def test_local_mode_uses_kgs_own_interpreter(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python(None) == sys.executable
    assert worker_python("local[2]") == sys.executable


def test_the_users_choice_wins(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    assert worker_python(None) is None  # Spark reads PYSPARK_PYTHON itself
    chosen = {"spark.pyspark.python": "/env/bin/python"}
    assert worker_python(None, chosen) == "/env/bin/python"  # --conf beats the environment
    monkeypatch.delenv("PYSPARK_PYTHON")
    assert worker_python("spark://host:7077", chosen) == "/env/bin/python"


def test_a_cluster_keeps_the_executors_python(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python("spark://host:7077") is None
    assert worker_python("yarn") is None


@pytest.fixture
def worker_exec(spark):
    """Set the session's worker interpreter for one test and restore it afterwards."""
    sc = spark.sparkContext
    original = sc.pythonExec

    def use(path: str) -> None:
        sc.pythonExec = path

    yield use
    sc.pythonExec = original


def test_workers_of_kgs_interpreter_pass_the_check(spark, worker_exec):
    worker_exec(sys.executable)
    require_workers(spark.sparkContext)


def test_a_worker_that_cannot_start_is_one_line(spark, worker_exec, tmp_path):
    decoy = write_decoys(tmp_path / "decoy") / "python3"
    worker_exec(str(decoy))
    with pytest.raises(MissingDependencyError) as raised:
        require_workers(spark.sparkContext)
    error = raised.value
    assert error.code == "SPARK_WORKER_FAILED" and error.exit_code == 6
    assert DECOY_MARK in error.message and str(decoy) in error.message
    assert "\n" not in error.message and "PYSPARK_PYTHON" in error.message


def test_a_worker_without_kgs_dependencies_names_them(spark, worker_exec, tmp_path):
    # The same interpreter with site-packages switched off: pyspark's own modules still come from
    # Spark's PYTHONPATH, but numpy, pyarrow, mmh3, xxhash and kg do not import.
    wrapper = tmp_path / "python-no-site"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    worker_exec(str(wrapper))
    with pytest.raises(MissingDependencyError, match="cannot import what kg needs") as raised:
        require_workers(spark.sparkContext)
    message = raised.value.message
    assert "No module named 'mmh3'" in message and "No module named 'pyarrow'" in message
    assert "\n" not in message


def test_a_worker_without_rocksdict_fails_a_native_rescale_with_exit_6(spark, worker_exec, tmp_path):
    # --format native builds each database in a write task on an executor, which imports rocksdict there:
    # a worker that cannot import it is the binding's one-line exit 6, as on the driver, and nothing is
    # committed.
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "rocksdict.py").write_text('raise ImportError("rocksdict blocked on this worker")\n')
    wrapper = tmp_path / "python-no-rocksdict"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{blocker}:$PYTHONPATH" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    worker_exec(str(wrapper))
    source = FIXTURES / "rocksdb-canonical-p3-maxp128-string"
    out = tmp_path / "out"
    with pytest.raises(MissingDependencyError) as raised:
        rescale(source, out, 2, output_format="native", executor=SparkExecutor(session=spark))
    assert raised.value.code == "ROCKSDB_BINDING_MISSING" and raised.value.exit_code == 6
    assert "rocksdict blocked on this worker" in raised.value.message
    assert not out.exists()


def test_version_mismatch_is_named():
    text = (
        "An error occurred while calling o42.collect.\n: org.apache.spark.SparkException: Job aborted\n"
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python in worker "
        "has different version: 3.12 than that in driver: 3.11, PySpark cannot run with different minor "
        "versions.\n"
    )
    assert (
        worker_cause(RuntimeError(text))
        == "their Python version differs from kg's (worker 3.12, driver 3.11)"
    )


def test_starting_spark_is_a_stage_of_its_own(spark):
    seen: list[tuple[str, int, int | None]] = []
    executor = PendingExecutor("spark", lambda *event: seen.append(event), session=spark).result()
    assert executor.name == "spark"
    assert seen == [("starting Spark", 0, None), ("starting Spark", 1, 1)]


def test_the_local_engine_has_no_start_stage():
    seen: list[tuple[str, int, int | None]] = []
    PendingExecutor("local", lambda *event: seen.append(event)).result()
    assert seen == []


def test_the_console_log_lives_in_kgs_cache_directory(spark):
    # The console log of the session kg started lives under $KG_CACHE_DIR/logs (removed at exit unless
    # the run failed: tests/test_fresh_install.py), never one per run in the temp directory.
    from keygroup_cli.core.cache import cache_directory
    from keygroup_cli.execution.engines.spark.jvm import _console_logs

    assert _console_logs["path"].parent == cache_directory() / "logs"


def test_kgs_session_imports_pyspark_from_its_package_not_sparks_zip(spark):
    # Spark puts its zip of pyspark first on the workers' path; a zip has no bytecode cache (about 1.5 s
    # of every daemon's start). kg's daemon module imports the installed package instead.
    assert (
        spark.sparkContext.getConf().get("spark.python.daemon.module")
        == "keygroup_cli.execution.engines.spark.daemon"
    )

    def where(_index: int) -> tuple[str, bool]:
        import sys as worker_sys

        import pyspark

        return pyspark.__file__, any(p.endswith("pyspark.zip") for p in worker_sys.path)

    found = spark.sparkContext.parallelize(range(2), 2).map(where).collect()
    assert all(not file.endswith(".zip/pyspark/__init__.py") and ".zip" not in file for file, _ in found)
    assert not any(zip_on_path for _, zip_on_path in found)


def test_every_keyed_operator_of_a_stage_runs_in_one_spark_job(spark, tmp_path, monkeypatch):
    # Two keyed operators re-keyed (a shuffle each): their tasks run together (with the shared-store
    # exchange: one Spark job of read tasks, then one of write tasks), not a job per operator.
    collected = []
    original = SparkExecutor._collect

    def counting(self, sc, jobs, scratch):  # type: ignore[no-untyped-def]
        collected.append(sorted(job.operator_id for job in jobs))
        return original(self, sc, jobs, scratch)

    monkeypatch.setattr(SparkExecutor, "_collect", counting)
    source = FIXTURES / "heap-files-p3-maxp128-long"
    result = rescale(source, tmp_path / "out", 4, new_max_parallelism=1024, engine="spark", spark=spark)
    assert result.keyed_rows is not None and len(result.keyed_rows) >= 2
    assert collected == [sorted(result.keyed_rows)]
    local = rescale(source, tmp_path / "local", 4, new_max_parallelism=1024, engine="local")
    assert result.keyed_rows == local.keyed_rows


def test_only_kgs_own_interpreter_gets_kgs_daemon(monkeypatch):
    # Another worker Python (the user's choice) may not have kg: it keeps pyspark's own daemon.
    from keygroup_cli.execution.engines.spark.session import DAEMON_MODULE, session_settings

    def daemon(master, config=None):  # type: ignore[no-untyped-def]
        return session_settings(master, config).get("spark.python.daemon.module")

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert daemon(None) == DAEMON_MODULE and daemon("local[2]") == DAEMON_MODULE
    assert daemon(None, {"spark.pyspark.python": "/env/bin/python"}) is None
    assert daemon("spark://host:7077") is None
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    assert daemon(None) is None


def test_spark_ui_is_off_on_one_machine_and_on_for_a_cluster():
    from keygroup_cli.execution.engines.spark.session import session_settings

    def ui(master, config=None):  # type: ignore[no-untyped-def]
        return session_settings(master, config).get("spark.ui.enabled")

    assert ui(None) == "false" and ui("local[2]") == "false"
    assert ui("spark://host:7077") is None  # Spark's default: the UI is on
    assert ui("spark://host:7077", {"spark.ui.enabled": "false"}) == "false"
    assert ui("local[2]", {"spark.ui.enabled": "true"}) == "true"


def test_a_context_another_thread_is_still_starting_is_taken_only_once_whole() -> None:
    # pyspark makes a SparkContext the active one before it initializes it. A kg run that failed early leaves
    # its PendingExecutor thread starting one; the next run in the same process (kg's Python API) took the
    # half-made context and failed with an internal error ("no attribute 'pythonExec'"). Here the real
    # initialization is held back for two seconds, in a process of its own (its own JVM).
    code = (
        "import time\n"
        "from pyspark import SparkContext\n"
        "real = SparkContext._do_init\n"
        "def held(self, *args, **kwargs):\n"
        "    time.sleep(2)\n"
        "    return real(self, *args, **kwargs)\n"
        "SparkContext._do_init = held\n"
        "from keygroup_cli.execution.engines import PendingExecutor\n"
        "from keygroup_cli.execution.engines.spark import spark_context\n"
        "pending = PendingExecutor('spark', master='local[1]')\n"
        "while SparkContext._active_spark_context is None:\n"
        "    time.sleep(0.05)\n"
        "context = spark_context()\n"
        "print(hasattr(context, 'pythonExec'), context is pending.result().context)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ),
    )
    assert done.stdout.split() == ["True", "True"], done.stderr[-3000:]


def test_spark_workers_keep_freed_memory(spark):
    # kg's daemon sets the allocator's thresholds before it forks the workers (keygroup_cli.core.allocator): a
    # task that fills ever larger buffers of about 8 MiB, two alive at once, reuses the pages it freed.
    # With glibc's own thresholds each buffer would be a fresh mapping (tests/core/test_allocator.py).
    def churn(_: object) -> int:
        import resource

        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        alive = []
        for i in range(24):
            alive.append(b"\x01" * ((8 << 20) + i * 65536))
            if len(alive) > 2:
                alive.pop(0)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults = spark.sparkContext.parallelize([0], 1).map(churn).collect()
    assert faults[0] < 8 * (8 << 20) // 4096
