"""Operator-state redistribution against Flink's own RoundRobinOperatorStateRepartitioner."""

from __future__ import annotations

import json
from typing import Any

import pytest

from keygroup_cli.planning.redistribution import ElementRun, java_hashmap_order, redistribute_operator_state
from keygroup_cli.snapshot.model import StateDescriptor
from tests.conftest import FIXTURES

CASES: list[dict[str, Any]] = json.loads((FIXTURES / "vectors" / "operator_repartition.json").read_text())[
    "cases"
]


def _plan(case: dict[str, Any]):
    states = [StateDescriptor(s["name"], s["kind"]) for s in case["states"]]
    counts = [{s["name"]: s["counts"][i] for s in case["states"]} for i in range(case["old_parallelism"])]
    return redistribute_operator_state(states, counts, case["new_parallelism"])


def _received(runs: tuple[ElementRun, ...]) -> list[dict[str, Any]]:
    got: dict[tuple[str, int], list[int]] = {}
    for run in runs:
        got.setdefault((run.state, run.from_subtask), []).extend(
            range(run.from_position, run.from_position + run.count)
        )
    return [{"state": s, "from_subtask": f, "positions": p} for (s, f), p in sorted(got.items())]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_flink(case: dict[str, Any]) -> None:
    plan = _plan(case)
    assert plan.unchanged == case["unchanged"]
    assert len(case["result"]) == case["new_parallelism"]
    for target, expected in enumerate(case["result"]):
        assert _received(plan.runs_for(target)) == expected, f"new subtask {target}"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_new_positions_are_dense_per_state(case: dict[str, Any]) -> None:
    plan = _plan(case)
    for target in range(plan.new_parallelism):
        next_position: dict[str, int] = {}
        for run in plan.runs_for(target):
            assert run.to_position == next_position.get(run.state, 0)
            next_position[run.state] = run.to_position + run.count


def test_split_keeps_old_subtask_order_within_a_new_subtask() -> None:
    # 3 -> 2 of [4, 3, 3]: new subtask 1 holds old 1's positions 1..2, then old 2's 0..2, in that order.
    states = [StateDescriptor("buffer", "operator-split")]
    plan = redistribute_operator_state(states, [{"buffer": 4}, {"buffer": 3}, {"buffer": 3}], 2)
    assert plan.runs_for(1) == (
        ElementRun("buffer", 1, 1, 1, 0, 2),
        ElementRun("buffer", 2, 0, 1, 2, 3),
    )
    assert plan.new_counts == (5, 5)


def test_union_goes_everywhere_and_counts_add_up() -> None:
    states = [StateDescriptor("offsets", "operator-union"), StateDescriptor("count", "value")]
    plan = redistribute_operator_state(states, [{"offsets": 2}, {"offsets": 1}], 3)
    assert plan.new_counts == (3, 3, 3)
    assert all(r.state == "offsets" for r in plan.runs)


def test_replicated_union_state_counts_once() -> None:
    # After a kg rescale every subtask holds the same complete list: its first copy is the state.
    states = [StateDescriptor("offsets", "operator-union", {"replicated": True})]
    plan = redistribute_operator_state(states, [{}, {"offsets": 3}, {"offsets": 3}], 2)
    assert plan.new_counts == (3, 3)
    assert {r.from_subtask for r in plan.runs} == {1}
    # Unmarked, the same counts are per-subtask partitions and are concatenated.
    plain = redistribute_operator_state(
        [StateDescriptor("offsets", "operator-union")], [{}, {"offsets": 3}, {"offsets": 3}], 2
    )
    assert plain.new_counts == (6, 6)


def test_java_hashmap_order_buckets_then_insertion() -> None:
    # "a" (97) lands in bucket 1 and "b" (98) in 2, whatever the insertion order; "Aa" and "BB" collide
    # (both hash to 2112), so they keep insertion order within their bucket.
    assert java_hashmap_order(["b", "a"]) == ["a", "b"]
    assert java_hashmap_order(["BB", "Aa"]) == ["BB", "Aa"]
    assert java_hashmap_order(["Aa", "BB"]) == ["Aa", "BB"]


def test_rejects_a_zero_parallelism() -> None:
    with pytest.raises(ValueError):
        redistribute_operator_state([], [{}], 0)
