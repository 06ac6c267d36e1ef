"""Plan a change of parallelism before anything is executed.

``plan_key_groups`` is pure math over (maxParallelism, old p, new p): for every key group its old and its
new subtask, folded into maximal runs, with the share of key groups that change owner and the skew on
each side. Optional per-key-group row and byte counts (from a snapshot manifest) weight the same plan.
``advise_parallelism`` ranks parallelisms by how evenly they spread key groups (or measured bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from keygroup_cli.keygroups import check_parallelism_bounds, skew, subtask_ranges


@dataclass(frozen=True, slots=True)
class KeyGroupRun:
    """A maximal run of consecutive key groups with the same old and new owner."""

    start: int
    end: int
    from_subtask: int
    to_subtask: int
    rows: int | None = None
    bytes: int | None = None

    @property
    def key_groups(self) -> int:
        """Return the number of key groups in the run."""
        return self.end - self.start + 1

    @property
    def moves(self) -> bool:
        """Return whether the run changes owner (index-wise)."""
        return self.from_subtask != self.to_subtask


@dataclass(frozen=True, slots=True)
class Transfer:
    """Everything that goes from one old subtask to one new subtask."""

    from_subtask: int
    to_subtask: int
    key_groups: int
    runs: tuple[tuple[int, int], ...]
    rows: int | None = None
    bytes: int | None = None


@dataclass(frozen=True, slots=True)
class KeyGroupPlan:
    """Where every key group of one operator goes when parallelism changes (maxParallelism unchanged)."""

    max_parallelism: int
    old_parallelism: int
    new_parallelism: int
    runs: tuple[KeyGroupRun, ...]
    transfers: tuple[Transfer, ...]
    moved_key_groups: int
    old_loads: tuple[int, ...]
    new_loads: tuple[int, ...]
    moved_rows: int | None = None
    moved_bytes: int | None = None
    old_row_loads: tuple[int, ...] | None = None
    new_row_loads: tuple[int, ...] | None = None

    @property
    def moved_fraction(self) -> float:
        """Return the share of key groups whose subtask index changes."""
        return self.moved_key_groups / self.max_parallelism

    @property
    def old_skew(self) -> float:
        """Return max/mean key groups per old subtask."""
        return skew(self.old_loads)

    @property
    def new_skew(self) -> float:
        """Return max/mean key groups per new subtask."""
        return skew(self.new_loads)


def _owners(max_parallelism: int, parallelism: int) -> list[int]:
    owners = [0] * max_parallelism
    for index, rng in enumerate(subtask_ranges(max_parallelism, parallelism)):
        owners[rng.start : rng.end + 1] = [index] * rng.size
    return owners


def plan_key_groups(
    max_parallelism: int,
    old_parallelism: int,
    new_parallelism: int,
    *,
    key_group_rows: Sequence[int] | None = None,
    key_group_bytes: Sequence[int] | None = None,
) -> KeyGroupPlan:
    """Plan the move of every key group from ``old_parallelism`` to ``new_parallelism`` subtasks.

    Args:
        max_parallelism: The operator's maxParallelism (unchanged by this plan).
        old_parallelism: The parallelism the state was taken at.
        new_parallelism: The parallelism to restore at.
        key_group_rows: Optional rows per key group (length ``max_parallelism``), to weight the plan.
        key_group_bytes: Optional bytes per key group (length ``max_parallelism``).

    Raises:
        InvalidArgumentError: A parallelism is out of Flink's bounds.
    """
    check_parallelism_bounds(max_parallelism, old_parallelism)
    check_parallelism_bounds(max_parallelism, new_parallelism)
    for name, weights in (("key_group_rows", key_group_rows), ("key_group_bytes", key_group_bytes)):
        if weights is not None and len(weights) != max_parallelism:
            raise ValueError(f"{name} must have one entry per key group ({max_parallelism})")
    old, new = _owners(max_parallelism, old_parallelism), _owners(max_parallelism, new_parallelism)

    def weigh(weights: Sequence[int] | None, start: int, end: int) -> int | None:
        return None if weights is None else int(sum(weights[start : end + 1]))

    runs: list[KeyGroupRun] = []
    start = 0
    for kg in range(1, max_parallelism + 1):
        if kg == max_parallelism or (old[kg], new[kg]) != (old[start], new[start]):
            runs.append(
                KeyGroupRun(
                    start,
                    kg - 1,
                    old[start],
                    new[start],
                    weigh(key_group_rows, start, kg - 1),
                    weigh(key_group_bytes, start, kg - 1),
                )
            )
            start = kg

    grouped: dict[tuple[int, int], list[KeyGroupRun]] = {}
    for run in runs:
        grouped.setdefault((run.from_subtask, run.to_subtask), []).append(run)
    transfers = tuple(
        Transfer(
            src,
            dst,
            sum(r.key_groups for r in rs),
            tuple((r.start, r.end) for r in rs),
            None if key_group_rows is None else sum(r.rows or 0 for r in rs),
            None if key_group_bytes is None else sum(r.bytes or 0 for r in rs),
        )
        for (src, dst), rs in sorted(grouped.items())
    )
    moving = [r for r in runs if r.moves]

    def loads(owners: list[int], parallelism: int, weights: Sequence[int] | None) -> tuple[int, ...]:
        out = [0] * parallelism
        for kg, owner in enumerate(owners):
            out[owner] += 1 if weights is None else int(weights[kg])
        return tuple(out)

    return KeyGroupPlan(
        max_parallelism=max_parallelism,
        old_parallelism=old_parallelism,
        new_parallelism=new_parallelism,
        runs=tuple(runs),
        transfers=transfers,
        moved_key_groups=sum(r.key_groups for r in moving),
        old_loads=loads(old, old_parallelism, None),
        new_loads=loads(new, new_parallelism, None),
        moved_rows=None if key_group_rows is None else sum(r.rows or 0 for r in moving),
        moved_bytes=None if key_group_bytes is None else sum(r.bytes or 0 for r in moving),
        old_row_loads=None if key_group_rows is None else loads(old, old_parallelism, key_group_rows),
        new_row_loads=None if key_group_rows is None else loads(new, new_parallelism, key_group_rows),
    )


@dataclass(frozen=True, slots=True)
class ParallelismAdvice:
    """How evenly one parallelism spreads the load (key groups, or measured weights) over subtasks."""

    parallelism: int
    skew: float
    max_load: int
    min_load: int
    mean_load: float

    @property
    def even(self) -> bool:
        """Return whether every subtask carries the same load."""
        return self.max_load == self.min_load


def advise_parallelism(
    max_parallelism: int,
    minimum: int = 1,
    maximum: int | None = None,
    *,
    key_group_weights: Sequence[int] | None = None,
) -> tuple[ParallelismAdvice, ...]:
    """Return the skew of every parallelism in ``[minimum, maximum]`` (default: up to maxParallelism).

    Without weights each key group counts as 1, so the even parallelisms are the divisors of maxParallelism.
    With ``key_group_weights`` (rows or bytes per key group) the skew is that of the real load.
    """
    upper = max_parallelism if maximum is None else maximum
    check_parallelism_bounds(max_parallelism, minimum)
    check_parallelism_bounds(max_parallelism, upper)
    if minimum > upper:
        raise ValueError("minimum parallelism is above the maximum")
    if key_group_weights is not None and len(key_group_weights) != max_parallelism:
        raise ValueError(f"key_group_weights must have one entry per key group ({max_parallelism})")
    advice = []
    for p in range(minimum, upper + 1):
        ranges = subtask_ranges(max_parallelism, p)
        if key_group_weights is None:
            loads = [r.size for r in ranges]
        else:
            loads = [int(sum(key_group_weights[r.start : r.end + 1])) for r in ranges]
        total = sum(loads)
        advice.append(ParallelismAdvice(p, skew(loads), max(loads), min(loads), total / p))
    return tuple(advice)
