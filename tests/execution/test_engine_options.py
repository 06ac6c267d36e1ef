"""How a rescale runs, apart from what it does: the engine options change the run, never the bytes written."""

from __future__ import annotations

import pytest

from keygroup_cli import EngineOptions, RescaleRequest, run_rescale
from keygroup_cli.core.errors import InvalidArgumentError
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"


def test_the_defaults_pick_nothing_yet():
    options = EngineOptions()
    assert (options.engine, options.master, options.spark, options.executor, options.workers) == (None,) * 5


@pytest.mark.parametrize(
    "request_", [RescaleRequest(4), RescaleRequest(4, new_max_parallelism=256)], ids=["copy", "re-key"]
)
def test_one_worker_and_two_write_the_same_savepoint(tmp_path, request_):
    one = run_rescale(SAVEPOINT, tmp_path / "one", request_, EngineOptions(engine="local", workers=1))
    two = run_rescale(SAVEPOINT, tmp_path / "two", request_, EngineOptions(engine="local", workers=2))
    assert one.plan == two.plan
    sizes = sorted(p.stat().st_size for p in (tmp_path / "one").iterdir())
    assert sizes == sorted(p.stat().st_size for p in (tmp_path / "two").iterdir())
    assert sorted(p.read_bytes() for p in (tmp_path / "one").iterdir() if p.name != "_metadata") == sorted(
        p.read_bytes() for p in (tmp_path / "two").iterdir() if p.name != "_metadata"
    )


def test_an_unknown_engine_is_a_usage_error_and_writes_nothing(tmp_path):
    with pytest.raises(InvalidArgumentError):
        run_rescale(SAVEPOINT, tmp_path / "out", RescaleRequest(4), EngineOptions(engine="flink"))
    assert not (tmp_path / "out").exists()
