"""The byte-level re-key route writes, byte for byte, what the decode and re-encode route writes.

Every real Flink fixture under fixtures/flink (Flink 2.3 and the versioned uid-* jobs: heap and RocksDB,
canonical and native layouts, checkpoints, snappy-compressed state, String and Long keys, timers) is
rescaled to new maxParallelisms (1- and 2-byte key-group prefixes) by both routes; every keyed file and
its offsets must be identical, so every real-Flink restore test of the row route covers the byte route.
The byte route runs its read tasks (each file cut into three) and its writes on three worker threads
(``keygroup_cli.core.workers``), the row route in one: which thread ran what must not change a byte. Every
other fixture runs the byte route on the native kernels (``KG_NATIVE=1``), the rest on the Python reference.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.javahash import PRIMITIVE_KEY_TYPES
from keygroup_cli.execution.engines.local import LocalExecutor
from keygroup_cli.execution.jobs import model as pipeline
from keygroup_cli.execution.jobs import savepoint as keyed_pipeline
from keygroup_cli.execution.jobs.savepoint import FlinkPartRead, FlinkPartWrite, plan_keyed_jobs
from keygroup_cli.execution.routes.savepoint import open_input
from keygroup_cli.flink.kernels import native as native_kernels
from keygroup_cli.planning.request import RescaleRequest

FIXTURES = Path(__file__).parents[3] / "fixtures" / "flink"
SAVEPOINTS = sorted(p.parent for p in FIXTURES.glob("*/*/_metadata"))
#: (new parallelism, new maxParallelism), one per fixture in turn: 1- and 2-byte prefixes, both ways.
TARGETS = ((3, 200), (2, 64), (4, 37), (1, 129))


def _ignore(_stage: str, _done: int, _total: int | None) -> None:
    return None


def _written(
    jobs: list[Any], out: Path, spill: Path, workers: int
) -> dict[tuple[str, int], tuple[tuple[int, ...], bytes]]:
    # Same file names on both routes, so files compare by name and bytes.
    jobs = [
        replace(j, writes=tuple(replace(w, name=f"{j.operator_id}-{w.subtask}") for w in j.writes))
        for j in jobs
    ]
    written = LocalExecutor(batch_rows=1000, workers=workers).run(jobs, spill)
    return {
        (op_id, f.subtask): (f.handle.offsets, (out / f.handle.delegate.relative_path).read_bytes())
        for op_id, files in written.items()
        for f in files
    }


@pytest.mark.parametrize("savepoint", SAVEPOINTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_both_routes_write_the_same_bytes(
    savepoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _compare_routes(savepoint, tmp_path, monkeypatch, TARGETS[SAVEPOINTS.index(savepoint) % len(TARGETS)])


@pytest.mark.parametrize("name", ["2.3/heap-files-p3-maxp128-string", "2.3/rocksdb-canonical-p3-maxp10-long"])
def test_a_state_cut_into_more_buckets_than_usual_writes_the_same_bytes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large state gets a bucket per BUCKET_BYTES (at most one per key group): 64 bytes forces it here.
    monkeypatch.setattr(pipeline, "BUCKET_BYTES", 64)
    savepoint = FIXTURES / name
    _compare_routes(savepoint, tmp_path, monkeypatch, (3, 1000), many_buckets=True)


def _compare_routes(
    savepoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    target: tuple[int, int],
    *,
    many_buckets: bool = False,
) -> None:
    new_p, new_max = target
    view = open_input(
        savepoint, tmp_path / "scratch", RescaleRequest(new_p, new_max_parallelism=new_max), _ignore
    )
    view = view.savepoint
    # Keys kg cannot hash (an opaque serializer, e.g. Kryo: the 1.20 upgrade-* fixtures) are never
    # re-keyed on either route (a maxParallelism change of them is refused before planning).
    # SQL jobs' row keys have the row route only (their re-key: tests/execution/jobs/test_keyed_pipeline.py).
    hashable = {op_id for op_id, key_type in view.key_types.items() if key_type in PRIMITIVE_KEY_TYPES}
    targets = dict.fromkeys(hashable, (new_p, new_max))
    results = []
    for as_bytes in (True, False):
        # The byte route on the kernels for every other fixture, on the Python reference for the rest
        # (both held byte for byte to the row route); the row route as the run's KG_NATIVE says.
        if as_bytes:
            kernels_on = SAVEPOINTS.index(savepoint) % 2 == 0
            monkeypatch.setenv(native_kernels.NATIVE_ENV, "1" if kernels_on else "0")
        else:
            monkeypatch.undo()
            monkeypatch.setattr(keyed_pipeline, "byte_route_applies", lambda *_args: False)
        out = tmp_path / f"out-{as_bytes}"
        out.mkdir()
        pieces = 3 if as_bytes else 1
        planned = plan_keyed_jobs(view, targets, str(out), pieces=pieces)
        jobs = [j for j in planned if j.operator_id in hashable]
        if as_bytes:
            assert all(isinstance(r, FlinkPartRead) for j in jobs for r in j.reads)
            assert all(isinstance(w, FlinkPartWrite) for j in jobs for w in j.writes)
            assert not many_buckets or max(j.buckets for j in jobs) > pipeline.MAX_BUCKETS
        results.append(_written(jobs, out, tmp_path / f"spill-{as_bytes}", 3 if as_bytes else 1))
    # Fixtures of finished operators hold no keyed state: nothing to compare, and nothing written.
    assert results[0] == results[1]
