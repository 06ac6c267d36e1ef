"""The autoscaler's ceiling and the maxParallelism kg proposes (keygroup_cli/planning/autoscaler.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.planning.autoscaler import (
    autoscaler_plan,
    autoscaler_target,
    coarsest_step,
    rank_max_parallelisms,
    state_max_parallelism,
)
from keygroup_cli.planning.plan import advise_parallelism


def _divisors_up_to(m: int, n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, min(m, n) + 1) if m % d == 0)


def test_state_at_128_cannot_reach_200_and_600_is_proposed():
    plan = autoscaler_plan(200, 128)
    assert not plan.allowed and plan.max_parallelism == 128
    assert plan.current.reachable == (1, 2, 4, 8, 16, 32, 64, 128) and plan.current.ceiling == 128
    assert coarsest_step(plan.current.reachable) == (64, 128)
    assert plan.current.skew_at_target is None  # 200 > 128: not a parallelism Flink restores at all
    assert plan.proposal is not None and plan.proposal.max_parallelism == 600
    assert plan.proposal.ceiling == 200 and plan.proposal.skew_at_target == 1.0
    assert "cannot exceed maxParallelism 128" in plan.verdict()
    assert plan.document()["proposal"]["max_parallelism"] == 600


@pytest.mark.parametrize("target", [24, 100, 200, 500])
def test_the_ranking_is_advises_even_parallelisms_and_nothing_in_range_beats_the_proposal(target):
    ranked = rank_max_parallelisms(target)
    for c in ranked:
        even = tuple(
            a.parallelism
            for a in advise_parallelism(c.max_parallelism, 1, min(target, c.max_parallelism))
            if a.even
        )
        assert c.reachable == even == _divisors_up_to(c.max_parallelism, target)
    best = ranked[0]
    assert best.max_parallelism % target == 0 and best.ceiling == target
    low, high = max(target, 128), max(4 * target, 512)
    for m in range(low, high + 1):
        if m % target == 0:
            assert len(_divisors_up_to(m, target)) <= len(best.reachable), m
            if len(_divisors_up_to(m, target)) == len(best.reachable):
                assert m >= best.max_parallelism


def test_a_divisor_is_allowed_and_a_non_divisor_is_not():
    assert autoscaler_plan(64, 128).allowed and autoscaler_plan(64, 128).proposal is None
    plan = autoscaler_plan(24, 128)
    assert not plan.allowed and plan.current.ceiling == 16
    assert "24 does not divide 128" in plan.verdict()
    assert plan.proposal is not None and plan.proposal.max_parallelism % 24 == 0


def test_the_jobs_configured_max_parallelism_is_the_one_judged():
    plan = autoscaler_plan(200, 128, job_max_parallelism=600)
    assert plan.allowed and plan.max_parallelism == 600 and plan.state_max_parallelism == 128


def test_target_bounds():
    with pytest.raises(InvalidArgumentError):
        autoscaler_plan(0, 128)
    with pytest.raises(InvalidArgumentError):
        autoscaler_plan(32769, 128)


def test_autoscaler_target_from_the_deployments_configuration():
    assert autoscaler_target({"job.autoscaler.vertex.max-parallelism": "48"}) == (
        48,
        "job.autoscaler.vertex.max-parallelism",
    )
    legacy = "kubernetes.operator.job.autoscaler.vertex.max-parallelism"
    assert autoscaler_target({legacy: "96"}) == (96, legacy)
    assert autoscaler_target({"job.autoscaler.enabled": "true"})[0] == 200
    assert autoscaler_target({"job.autoscaler.enabled": "false"}) is None
    with pytest.raises(InvalidArgumentError):
        autoscaler_target({"job.autoscaler.vertex.max-parallelism": "lots"})


@dataclass
class _Op:
    max_parallelism: int
    has_keyed_state: bool


def test_state_max_parallelism_is_the_lowest_keyed_one():
    assert state_max_parallelism([_Op(128, True), _Op(256, True), _Op(64, False)]) == 128
    assert state_max_parallelism([_Op(64, False), _Op(96, False)]) == 64
