"""The Flink autoscaler's ceiling: which parallelisms a state's maxParallelism lets it choose.

The autoscaler (flink-kubernetes-operator, ``JobVertexScaler.scale`` and ``ParallelismAligner``) caps a
vertex's parallelism at ``min(maxParallelism, job.autoscaler.vertex.max-parallelism)`` (default 200) and,
for a keyed vertex, aligns it to a divisor of the number of key groups (the maxParallelism) in the default
alignment mode, so key groups spread evenly. A job restored from state at maxParallelism 128 therefore
never runs a keyed vertex above 128, and between 64 and 128 it has no step at all.

``autoscaler_plan(N, ...)`` says whether the maxParallelism allows parallelism N (N divides it) and, if not,
proposes one that does: among the maxParallelisms from ``max(N, 128)`` to ``max(4N, 512)`` (at most 32768
key groups) that N divides, the one with the most even parallelisms up to N (the divisors ``kg advise``
lists as ``even``), the smaller on a tie. ``kg advise -m M --max N`` shows the same ranking's detail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.keygroups import UPPER_BOUND_MAX_PARALLELISM
from keygroup_cli.planning.plan import advise_parallelism

#: The autoscaler's default ``job.autoscaler.vertex.max-parallelism``.
AUTOSCALER_DEFAULT_MAX = 200
#: How many candidates a plan lists.
SHOWN_CANDIDATES = 5


@dataclass(frozen=True, slots=True)
class MaxParallelismCandidate:
    """A maxParallelism and the parallelisms up to N the autoscaler may choose with it."""

    max_parallelism: int
    reachable: tuple[int, ...]
    #: The key-group skew (hottest subtask over the mean) at parallelism N; None when N exceeds it.
    skew_at_target: float | None

    @property
    def ceiling(self) -> int:
        """Return the largest parallelism up to N the autoscaler may choose."""
        return self.reachable[-1]

    def document(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "max_parallelism": self.max_parallelism,
            "even_parallelisms": list(self.reachable),
            "ceiling": self.ceiling,
            "coarsest_step": list(coarsest_step(self.reachable)),
            "key_group_skew_at_target": None
            if self.skew_at_target is None
            else round(self.skew_at_target, 6),
        }


@dataclass(frozen=True, slots=True)
class AutoscalerPlan:
    """Whether the state's maxParallelism lets the autoscaler reach parallelism ``target``.

    Attributes:
        target: N: ``--to`` / ``--autoscaler-max``.
        state_max_parallelism: The state's maxParallelism (of its keyed operators; the lowest if they differ).
        job_max_parallelism: The deployment's ``pipeline.max-parallelism``, if set.
        current: The candidate of the maxParallelism the job runs with (the job's, else the state's).
        allowed: Whether N divides it (and so the autoscaler may choose N).
        proposal: A better maxParallelism when not ``allowed``; None otherwise.
        candidates: The best ``SHOWN_CANDIDATES`` maxParallelisms, best first.
    """

    target: int
    state_max_parallelism: int
    job_max_parallelism: int | None
    current: MaxParallelismCandidate
    allowed: bool
    proposal: MaxParallelismCandidate | None
    candidates: tuple[MaxParallelismCandidate, ...]

    @property
    def max_parallelism(self) -> int:
        """Return the maxParallelism the job runs with: the job's, else the state's (Flink adopts it)."""
        return self.current.max_parallelism

    def verdict(self) -> str:
        """Return the plan in one sentence."""
        m, n = self.max_parallelism, self.target
        steps = ", ".join(map(str, self.current.reachable[-6:]))
        if self.allowed:
            return f"maxParallelism {m} allows parallelism {n}: the autoscaler's steps up to it end {steps}"
        reason = (
            f"the autoscaler cannot exceed maxParallelism {m}"
            if n > m
            else f"{n} does not divide {m}, so the autoscaler aligns keyed vertices to other divisors"
        )
        return (
            f"maxParallelism {m} does not allow parallelism {n}: {reason}; its steps up to {n} end {steps} "
            f"(ceiling {self.current.ceiling})"
        )

    def document(self) -> dict[str, Any]:
        """Return the JSON form (``autoscaler`` in ``kg plan --json``)."""
        return {
            "target": self.target,
            "state_max_parallelism": self.state_max_parallelism,
            "job_max_parallelism": self.job_max_parallelism,
            "max_parallelism": self.max_parallelism,
            "allowed": self.allowed,
            "current": self.current.document(),
            "proposal": None if self.proposal is None else self.proposal.document(),
            "candidates": [c.document() for c in self.candidates],
            "verdict": self.verdict(),
        }


def coarsest_step(reachable: tuple[int, ...]) -> tuple[int, int]:
    """Return the two neighbouring parallelisms furthest apart: the autoscaler's biggest jump."""
    if len(reachable) < 2:
        return (reachable[0], reachable[0])
    pairs = list(zip(reachable, reachable[1:], strict=False))
    return max(pairs, key=lambda ab: (ab[1] - ab[0], ab[1]))


def candidate(max_parallelism: int, target: int) -> MaxParallelismCandidate:
    """Return what ``max_parallelism`` offers up to ``target``, by ``kg advise``'s ranking of parallelisms."""
    upper = min(target, max_parallelism)
    advice = advise_parallelism(max_parallelism, 1, upper)
    even = tuple(a.parallelism for a in advice if a.even)
    skew = advice[-1].skew if target <= max_parallelism else None
    return MaxParallelismCandidate(max_parallelism, even, skew)


def _divisors_up_to(m: int, n: int) -> int:
    count, d = 0, 1
    while d * d <= m:
        if m % d == 0:
            count += d <= n
            other = m // d
            count += other != d and other <= n
        d += 1
    return count


def rank_max_parallelisms(target: int) -> tuple[MaxParallelismCandidate, ...]:
    """Return the best maxParallelisms for the autoscaler up to ``target``, best first.

    Candidates are every M in ``[max(N, 128), max(4N, 512)]`` (at most 32768). Those N divides come first
    (the autoscaler may then choose N itself); among them, and then among the rest, more even parallelisms
    up to N rank higher, the smaller M on a tie. For N 200 that is 600 (22 even steps, 200 among them), then
    200, 800, 400, then 720 (27 steps, but none between 180 and 200).
    """
    low = max(target, 128)
    high = min(max(4 * target, 512), UPPER_BOUND_MAX_PARALLELISM)
    scored = sorted(
        range(low, high + 1),
        key=lambda m: (m % target != 0, -_divisors_up_to(m, target), m),
    )
    return tuple(candidate(m, target) for m in scored[:SHOWN_CANDIDATES])


def autoscaler_plan(
    target: int, state_max_parallelism: int, job_max_parallelism: int | None = None
) -> AutoscalerPlan:
    """Judge whether a job may run (and the autoscaler may choose) parallelism ``target``.

    Args:
        target: N, the parallelism the autoscaler should be able to reach.
        state_max_parallelism: The state's maxParallelism.
        job_max_parallelism: The deployment's ``pipeline.max-parallelism``, if it sets one (a different
            value than the state's is refused at restore; ``kg check`` says so).

    Raises:
        InvalidArgumentError: N outside 1..32768.
    """
    if not 1 <= target <= UPPER_BOUND_MAX_PARALLELISM:
        raise InvalidArgumentError(
            f"--to {target} is outside Flink's parallelism bounds 1..{UPPER_BOUND_MAX_PARALLELISM}",
            code="PARALLELISM_OUT_OF_BOUNDS",
        )
    running = job_max_parallelism or state_max_parallelism
    current = candidate(running, target)
    allowed = target <= running and running % target == 0
    ranked = rank_max_parallelisms(target)
    return AutoscalerPlan(
        target,
        state_max_parallelism,
        job_max_parallelism,
        current,
        allowed,
        None if allowed else ranked[0],
        ranked,
    )


#: The autoscaler's keys in ``spec.flinkConfiguration`` (the second is the operator's older prefix).
AUTOSCALER_MAX_KEYS = (
    "job.autoscaler.vertex.max-parallelism",
    "kubernetes.operator.job.autoscaler.vertex.max-parallelism",
)
AUTOSCALER_ENABLED_KEYS = ("job.autoscaler.enabled", "kubernetes.operator.job.autoscaler.enabled")


def autoscaler_target(configuration: Mapping[str, str]) -> tuple[int, str] | None:
    """Return the autoscaler's ``vertex.max-parallelism`` a deployment configures, and its key.

    Its default (200) when the autoscaler is enabled and no maximum is set; None when it is not enabled.

    Raises:
        InvalidArgumentError: A value that is not a positive integer.
    """
    for key in AUTOSCALER_MAX_KEYS:
        value = configuration.get(key)
        if value is not None:
            if not value.strip().isdigit() or int(value) < 1:
                raise InvalidArgumentError(
                    f"spec.flinkConfiguration {key} {value!r} is not a positive integer",
                    code="K8S_RESOURCE_INVALID",
                )
            return int(value), key
    if any(configuration.get(k, "").lower() == "true" for k in AUTOSCALER_ENABLED_KEYS):
        return AUTOSCALER_DEFAULT_MAX, f"{AUTOSCALER_MAX_KEYS[0]} (default, autoscaler enabled)"
    return None


def state_max_parallelism(operators: Sequence[_Operator]) -> int:
    """Return the maxParallelism that bounds a state: the lowest of its keyed operators' (of all, if none)."""
    keyed = [op.max_parallelism for op in operators if op.has_keyed_state]
    values = keyed or [op.max_parallelism for op in operators]
    if not values:
        raise InvalidArgumentError("the state has no operators", code="OPERATOR_NOT_FOUND")
    return min(values)


class _Operator(Protocol):
    @property
    def max_parallelism(self) -> int: ...  # noqa: D102
    @property
    def has_keyed_state(self) -> bool: ...  # noqa: D102
