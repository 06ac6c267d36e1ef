"""The default engine: local on one machine (Spark local[*] for a large re-key without the native kernels),
Spark once a master is set or a session given."""

from __future__ import annotations

import importlib.util
import os

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.workers import usable_cores
from keygroup_cli.execution import engines
from keygroup_cli.execution.engines import SPARK_LOCAL_PAYS_OFF_BYTES, choose_engine, java_found
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink import kernels_expected, open_savepoint
from tests.conftest import FIXTURES


@pytest.fixture(autouse=True)
def _no_master_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_MASTER", raising=False)


def test_one_machine_runs_the_local_engine_and_says_why():
    choice = choose_engine(None)
    assert choice.name == "local" and choice.reason.startswith("default engine: one machine")
    assert choose_engine("auto") == choice


@pytest.mark.parametrize(
    ("kwargs", "env", "master"),
    [
        ({"master": "spark://h:7077"}, None, "spark://h:7077"),
        ({"spark_conf": {"spark.master": "yarn"}}, None, "yarn"),
        ({}, "local[2]", "local[2]"),
        ({"master": "spark://h:7077", "spark_conf": {"spark.master": "yarn"}}, "local[2]", "spark://h:7077"),
    ],
    ids=["--master", "spark.master", "SPARK_MASTER", "--master first"],
)
def test_a_master_set_anywhere_runs_spark_and_names_it(monkeypatch, kwargs, env, master):
    if env is not None:
        monkeypatch.setenv("SPARK_MASTER", env)
    choice = choose_engine(None, **kwargs)
    assert (choice.name, choice.reason) == ("spark", f"default engine: a Spark master is set ({master})")


def test_a_session_given_runs_spark():
    assert choose_engine(None, session=object()).name == "spark"


def test_an_engine_asked_for_is_the_engine_that_runs():
    assert choose_engine("local", master="spark://h:7077").name == "local"
    assert (choose_engine("spark").name, choose_engine("spark").reason) == ("spark", "--engine spark")
    with pytest.raises(InvalidArgumentError):
        choose_engine("flink")


def test_a_large_rekey_without_the_native_kernels_runs_spark_local_and_says_why():
    """Without the kernels the local engine's numpy route waits on Python's lock; Spark's workers do not."""
    large = SPARK_LOCAL_PAYS_OFF_BYTES
    choice = choose_engine(None, rekey_bytes=large, native_kernels=False)
    assert choice.name == "spark"
    assert choice.reason.startswith("default engine: a re-key of 1.0 GiB without the native kernels")
    assert choice.reason.endswith("and is the faster; --engine local to keep it")
    # With the kernels, below the size, or when asked for, the local engine runs.
    assert choose_engine(None, rekey_bytes=large, native_kernels=True).name == "local"
    assert choose_engine(None, rekey_bytes=large - 1, native_kernels=False).name == "local"
    assert choose_engine("local", rekey_bytes=large, native_kernels=False).name == "local"


def test_a_large_native_output_runs_spark_local_with_or_without_the_kernels():
    """Building RocksDB databases is Python work under its lock: the local engine builds one at a time."""
    large = SPARK_LOCAL_PAYS_OFF_BYTES
    choice = choose_engine(None, rekey_bytes=large, native_kernels=True, native_output=True)
    assert choice.name == "spark"
    assert choice.reason.startswith("default engine: a NATIVE output of 1.0 GiB")
    assert choose_engine(None, rekey_bytes=large - 1, native_kernels=True, native_output=True).name == "local"


def test_spark_local_is_not_the_default_where_it_cannot_start(monkeypatch, tmp_path):
    """No Java (JAVA_HOME without bin/java, none on PATH) or one core: the local engine, which can run."""
    large = SPARK_LOCAL_PAYS_OFF_BYTES
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert not java_found()
    assert choose_engine(None, rekey_bytes=large, native_kernels=False).name == "local"
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert not java_found()
    assert choose_engine(None, rekey_bytes=large, native_kernels=False).name == "local"


def test_one_core_keeps_the_local_engine():
    """Pinned to one CPU (as a container may be), Spark local[*] has no second core to win with."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        assert usable_cores() == 1
        choice = choose_engine(None, rekey_bytes=SPARK_LOCAL_PAYS_OFF_BYTES, native_kernels=False)
        assert choice.name == "local"
    finally:
        os.sched_setaffinity(0, before)


def test_kernels_expected_follows_kg_native(monkeypatch):
    monkeypatch.setenv("KG_NATIVE", "0")
    assert not kernels_expected()
    monkeypatch.setenv("KG_NATIVE", "auto")
    assert kernels_expected() == (importlib.util.find_spec("numba") is not None)


@pytest.mark.spark
def test_a_rescale_chooses_by_the_keyed_bytes_it_rekeys(monkeypatch, tmp_path):
    """The route hands the input's keyed bytes and the kernels' state to the choice; the run says which."""
    source = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
    keyed = sum(s.handle.size for streams in open_savepoint(source).keyed_streams.values() for s in streams)
    monkeypatch.setenv("KG_NATIVE", "0")
    monkeypatch.setattr(engines, "SPARK_LOCAL_PAYS_OFF_BYTES", keyed)
    result = rescale(source, tmp_path / "spark", 4, new_max_parallelism=1024)
    assert result.engine == "spark" and "without the native kernels" in result.engine_reason
    monkeypatch.setattr(engines, "SPARK_LOCAL_PAYS_OFF_BYTES", keyed + 1)
    assert rescale(source, tmp_path / "local", 4, new_max_parallelism=1024).engine == "local"
