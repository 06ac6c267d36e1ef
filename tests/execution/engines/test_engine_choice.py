"""The default engine: local on one machine, Spark once a master is set or a session given."""

from __future__ import annotations

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.execution.engines import choose_engine


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
