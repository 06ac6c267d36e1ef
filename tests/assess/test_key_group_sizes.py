"""Key-group sizes and byte-weighted advice, against Flink's report, Flink's ranges and the files on disk."""

from __future__ import annotations

import itertools
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from kg_fixture_state import FLINK_FIXTURES, expected

from keygroup_cli.assess.sizes import (
    KeyGroupSizes,
    key_group_bins,
    key_group_sizes,
    parallelism_range,
    subtask_loads,
)
from keygroup_cli.core.errors import InvalidArgumentError


def _report(case: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (FLINK_FIXTURES / case / "flink-report.json").read_text(encoding="utf-8")
    )
    return data


def _flink_bytes(case: str, operator_id: str) -> tuple[list[int], list[int], list[int]]:
    """Return bytes per key group, data bytes and stream bytes per subtask, from Flink's own report.

    A key group's block runs from its offset to the next recorded offset, or to the end of the stream
    (the file size in the report's file list, or the inline size).
    """
    report = _report(case)
    op = next(o for o in report["metadata"]["operators"] if o["operatorId"] == operator_id)
    sizes = [0] * op["maxParallelism"]
    data, streams = [], []
    for sub in op["subtasks"]:
        (keyed,) = sub["managedKeyedState"]
        delegate = keyed["delegate"]
        size = delegate.get("inlineSize") or report["files"][delegate["resolvedPath"]]
        start = keyed["keyGroupRange"][0]
        present = sorted((o, start + j) for j, o in enumerate(keyed["offsets"]) if o)
        for (offset, group), nxt in zip(present, [o for o, _ in present[1:]] + [size], strict=True):
            sizes[group] = nxt - offset
        data.append(size - present[0][0])
        streams.append(size)
    return sizes, data, streams


def _flink_ranges(range_vectors: dict[str, Any], max_parallelism: int, parallelism: int) -> list[list[int]]:
    entry = next(
        r
        for r in range_vectors["ranges"]
        if r["max_parallelism"] == max_parallelism and r["parallelism"] == parallelism
    )
    ranges: list[list[int]] = entry["ranges"]
    return ranges


def _keyed_state(case: str, **kwargs: Any) -> KeyGroupSizes:
    report = key_group_sizes(FLINK_FIXTURES / case, **kwargs)
    return next(op for op in report.operators if op.uid == "keyed-state")


@pytest.mark.parametrize("case", ["heap-files-p3-maxp128-long", "heap-inline-p3-maxp10-string"])
def test_flink_sizes_match_flinks_report(case: str) -> None:
    sizes = _keyed_state(case)
    flink_bytes, data, streams = _flink_bytes(case, sizes.operator_id)
    assert sizes.source == "key-group-offsets"
    assert list(sizes.bytes) == flink_bytes
    assert [s.bytes for s in sizes.subtasks] == data
    assert [s.stored_bytes for s in sizes.subtasks] == streams
    assert sizes.total_bytes == sum(data)
    ranges = expected(case)["keyGroupRanges"]
    assert [[s.key_group_start, s.key_group_end] for s in sizes.subtasks] == ranges
    assert sizes.skew == pytest.approx(max(data) / (sum(data) / len(data)))


def test_hottest_key_groups_are_the_largest_and_name_their_expected_subtask() -> None:
    case = "heap-files-p3-maxp128-long"
    sizes = _keyed_state(case)
    hottest = sizes.hottest(5)
    assert [b for _, b, _ in hottest] == sorted(sizes.bytes, reverse=True)[:5]
    subtask_of = {k["keyGroup"]: k["subtask"] for k in expected(case)["keyedOperators"][0]["keys"]}
    assert all(subtask_of[kg] == subtask for kg, _, subtask in hottest)
    assert sizes.max_bytes == hottest[0][1]
    assert sizes.min_bytes == 0  # 128 key groups, 200 keys: some key groups are empty


def test_byte_advice_uses_flinks_ranges(range_vectors: dict[str, Any]) -> None:
    case = "heap-files-p3-maxp128-long"
    sizes = _keyed_state(case, minimum=1, maximum=128)
    flink_bytes, data, _ = _flink_bytes(case, sizes.operator_id)
    assert [a.parallelism for a in sizes.advice] == list(range(1, 129))
    for advice in sizes.advice:
        ranges = _flink_ranges(range_vectors, 128, advice.parallelism)
        loads = [sum(flink_bytes[lo : hi + 1]) for lo, hi in ranges]
        counts = [hi - lo + 1 for lo, hi in ranges]
        assert (advice.max_bytes, advice.min_bytes) == (max(loads), min(loads))
        assert advice.byte_skew == pytest.approx(max(loads) / (sum(loads) / len(loads)))
        assert advice.key_group_skew == pytest.approx(max(counts) / (128 / len(counts)))
    current = sizes.advice[2]
    assert current.parallelism == 3 and current.max_bytes == max(data)
    # With 128 key groups over 128 subtasks the byte skew is the largest key group over the mean one.
    assert sizes.advice[-1].byte_skew == pytest.approx(max(flink_bytes) / (sum(flink_bytes) / 128))


def test_best_ranks_by_byte_skew_and_differs_from_key_group_evenness() -> None:
    sizes = _keyed_state("heap-inline-p3-maxp10-string")
    assert [a.parallelism for a in sizes.advice] == list(range(2, 11))
    best = sizes.best(5)
    assert [a.byte_skew for a in best] == sorted(a.byte_skew for a in sizes.advice)[:5]
    # 5 and 10 split maxParallelism 10 evenly by key groups, yet the bytes are not even.
    ten = next(a for a in sizes.advice if a.parallelism == 10)
    assert ten.key_group_skew == 1.0 and ten.byte_skew > 1.3


def test_native_savepoint_operators_are_unavailable() -> None:
    report = key_group_sizes(FLINK_FIXTURES / "rocksdb-native-files-p2-maxp128-long")
    assert report.operators and not report.available
    assert {op.unavailable_code for op in report.operators} == {"NATIVE_FORMAT"}
    assert all(op.bytes == () and op.advice == () for op in report.operators)


def test_kg_snapshot_sizes_are_a_manifest_estimate(tmp_path: Path) -> None:
    from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
    from keygroup_cli.snapshot import open_snapshot

    case = "heap-files-p3-maxp128-long"
    savepoint_to_snapshot(FLINK_FIXTURES / case, tmp_path / "kg")
    report = key_group_sizes(tmp_path / "kg")
    assert report.format == "kg-snapshot"
    sizes = next(op for op in report.operators if op.uid == "keyed-state")
    assert sizes.source == "manifest-estimate"
    groups_with_keys = {k["keyGroup"] for k in expected(case)["keyedOperators"][0]["keys"]}
    assert {kg for kg, b in enumerate(sizes.bytes) if b} == groups_with_keys
    snapshot = open_snapshot(tmp_path / "kg")
    op = next(o for o in snapshot.manifest.operators if o.uid == "keyed-state")
    on_disk = {f.subtask: os.stat(snapshot.resolve(f.path)).st_size for f in op.keyed_files}
    # The pro-rata estimate shares out each file exactly: per subtask, bytes add up to the Parquet file.
    assert [s.bytes for s in sizes.subtasks] == [on_disk[i] for i in range(3)]
    assert [s.stored_bytes for s in sizes.subtasks] == [on_disk[i] for i in range(3)]


@pytest.mark.parametrize(
    ("max_parallelism", "parallelism", "minimum", "maximum", "expected_range"),
    [
        (128, 3, None, None, (2, 32)),
        (128, 20, None, None, (2, 80)),
        (10, 3, None, None, (2, 10)),
        (1, 1, None, None, (1, 1)),
        (128, 3, 1, 500, (1, 128)),
        (128, 3, 8, 8, (8, 8)),
    ],
)
def test_parallelism_range(
    max_parallelism: int,
    parallelism: int,
    minimum: int | None,
    maximum: int | None,
    expected_range: tuple[int, int],
) -> None:
    assert parallelism_range(max_parallelism, parallelism, minimum, maximum) == expected_range


@pytest.mark.parametrize(
    ("minimum", "maximum", "message"),
    [(0, None, "at least 1"), (9, 8, "above --max"), (200, 300, "maxParallelism 128")],
)
def test_parallelism_range_refuses(minimum: int, maximum: int | None, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parallelism_range(128, 3, minimum, maximum)


def test_weighted_advice_matches_flinks_ranges_for_every_vector(range_vectors: dict[str, Any]) -> None:
    """advise_parallelism's array range bounds equal Flink's ranges for every generated (maxP, p)."""
    from keygroup_cli.planning.plan import advise_parallelism

    rng = random.Random(7)
    weights: dict[int, tuple[list[int], list[int]]] = {}
    checked = 0
    for entry in range_vectors["ranges"]:
        m, p = entry["max_parallelism"], entry["parallelism"]
        if m not in weights:
            w = [rng.randrange(0, 1 << 40) for _ in range(m)]
            weights[m] = (w, [0, *itertools.accumulate(w)])
        w, prefix = weights[m]
        (advice,) = advise_parallelism(m, p, p, key_group_weights=w)
        loads = [prefix[hi + 1] - prefix[lo] for lo, hi in entry["ranges"]]
        assert (advice.max_load, advice.min_load) == (max(loads), min(loads)), (m, p)
        assert advice.skew == pytest.approx(max(loads) / (sum(loads) / p))
        checked += 1
    assert checked > 1000


def test_subtask_loads_sum_flinks_ranges(range_vectors: dict[str, Any]) -> None:
    rng = random.Random(25)
    for max_p, p in [(10, 3), (128, 3), (128, 7), (256, 5), (4096, 96)]:
        sizes = [rng.randrange(0, 5000) for _ in range(max_p)]
        loads = subtask_loads(sizes, p)
        ranges = _flink_ranges(range_vectors, max_p, p) if max_p <= 256 else None
        if ranges is not None:
            assert list(loads) == [sum(sizes[a : b + 1]) for a, b in ranges]
        assert len(loads) == p and sum(loads) == sum(sizes)
    assert subtask_loads([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 3) == (10, 18, 27)


def test_sizes_know_their_suggested_parallelism_and_its_loads() -> None:
    sizes = _keyed_state("heap-files-p3-maxp128-long")
    assert sizes.suggested == sizes.best(1)[0].parallelism
    at_current = sizes.subtask_bytes(sizes.parallelism)
    assert list(at_current) == [s.bytes for s in sizes.subtasks]
    suggested = sizes.subtask_bytes(sizes.suggested)
    found = next(a for a in sizes.advice if a.parallelism == sizes.suggested)
    assert (max(suggested), min(suggested), sum(suggested)) == (
        found.max_bytes,
        found.min_bytes,
        sizes.total_bytes,
    )


@pytest.mark.parametrize(("n", "bins"), [(0, 4), (5, 10), (10, 3), (128, 40), (32768, 500), (7, 1)])
def test_key_group_bins_cover_every_key_group_once(n: int, bins: int) -> None:
    sizes = [(i * 7919) % 1000 for i in range(n)]
    out = key_group_bins(sizes, bins)
    assert len(out) == min(n, bins)
    assert [kg for b in out for kg in range(b.start, b.end + 1)] == list(range(n))
    widths = {b.end - b.start + 1 for b in out}
    assert not widths or max(widths) - min(widths) <= 1
    assert sum(b.bytes for b in out) == sum(sizes)
    assert all(b.max_bytes == max(sizes[b.start : b.end + 1]) for b in out)
    with pytest.raises(ValueError, match="bins must be at least 1"):
        key_group_bins(sizes, 0)
