"""Flink 2.3 restores kg's rescale of a savepoint written with the async state API (State V2, #23).

``fixtures/flink/2.3/async-forst-native-p3`` is AsyncJob (fixtures/java/async): ``keyBy().enableAsyncState()``
into a ``KeyedProcessFunction`` with a v2 ``ValueState`` and event- and processing-time timers, String keys,
on ForSt, a NATIVE savepoint at p 3 and maxParallelism 128, with a stateless filter and sink chained behind
the keyed operator. ForSt keeps such an operator's timers on the heap, so the operator writes them into its
raw keyed-state stream, one section per key group (``flink.raw_timers``). kg rescales it with
``--format native`` (ForSt takes no canonical savepoint) to p 4 at the same maxParallelism (sections copied
by key group) and to p 4 with maxParallelism 256 (every timer re-keyed). Flink 2.3 restores the original
and both outputs in one JVM, each by a job that sets no maxParallelism, and every key must read its count
and every timer must fire once, where Flink's own lookup places its key, as in the original's restore.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from keygroup_cli.execution.rescale import rescale
from tests.flink.harness import (
    ASYNC_BUILD_SH,
    ASYNC_CASE,
    ASYNC_TIMERS,
    assert_async_job_restored,
    async_expected_timers,
    build_versioned_classpath,
    canonical,
    run_async_restores,
    uid_case,
)

pytestmark = pytest.mark.flink

VERSION = "2.3.0"


def test_flink_2_3_restores_kgs_rescale_of_an_async_state_savepoint(tmp_path: Path) -> None:
    source = uid_case(VERSION, ASYNC_CASE)
    same, rekeyed = tmp_path / "p4", tmp_path / "p4-m256"
    rescale(source, same, 4, from_parallelism=3, output_format="native", engine="local")
    rescale(source, rekeyed, 4, from_parallelism=3, new_max_parallelism=256, output_format="native",
            engine="local")  # fmt: skip
    shapes = {source: (3, 128), same: (4, 128), rekeyed: (4, 256)}
    requests = [
        {"savepoint": str(path), "parallelism": p, "timers": ASYNC_TIMERS} for path, (p, _m) in shapes.items()
    ]
    classpath = build_versioned_classpath(VERSION, ASYNC_BUILD_SH)
    dumps = run_async_restores(VERSION, requests, tmp_path / "dumps", classpath)
    expected = async_expected_timers(source)
    for (p, m), dump in zip(shapes.values(), dumps, strict=True):
        assert_async_job_restored(dump, p, m, expected)
    # Key by key as the original's restore read them: each key's value, each timer with the value it read.
    own = dumps[0]
    for dump in dumps[1:]:
        assert {k: e["restored"] for k, e in dump["keyed"].items()} == {
            k: e["restored"] for k, e in own["keyed"].items()
        }
        assert Counter(_fired(t) for t in dump["timers"]) == Counter(_fired(t) for t in own["timers"])


def _fired(timer: dict[str, object]) -> str:
    return canonical([timer["key"], timer["domain"], timer["timestamp"], timer["count"]])
