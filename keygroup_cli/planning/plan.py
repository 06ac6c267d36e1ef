"""Plan a change of parallelism before anything is executed.

``plan_key_groups`` is pure math over (maxParallelism, old p, new p): for every key group its old and its
new subtask, folded into maximal runs, with the share of key groups that change owner and the skew on
each side. Optional per-key-group row and byte counts (from a snapshot manifest) weight the same plan.
``advise_parallelism`` ranks parallelisms by how evenly they spread key groups (or measured bytes).
``plan_rescale`` plans a whole snapshot: per operator, its key-group plan (or a re-hash when maxParallelism
changes) weighted by the manifest's row counts, and its operator-state redistribution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np

from keygroup_cli.core.errors import InvalidArgumentError, UnsupportedFormatError
from keygroup_cli.core.keygroups import (
    KeyGroupRange,
    explain_bounds,
    find_named_operator,
    names_operator,
    require_parallelism_in_bounds,
    skew,
    subtask_ranges,
)
from keygroup_cli.planning.redistribution import OperatorStatePlan, redistribute_operator_state
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.snapshot.model import Operator, Snapshot

if TYPE_CHECKING:
    from keygroup_cli.planning.migration import OperatorChange


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


def key_group_owners(max_parallelism: int, parallelism: int) -> list[int]:
    """Return the subtask Flink assigns each key group at ``parallelism`` (index = key group)."""
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
    require_parallelism_in_bounds(max_parallelism, old_parallelism)
    require_parallelism_in_bounds(max_parallelism, new_parallelism)
    for name, weights in (("key_group_rows", key_group_rows), ("key_group_bytes", key_group_bytes)):
        if weights is not None and len(weights) != max_parallelism:
            raise ValueError(f"{name} must have one entry per key group ({max_parallelism})")
    old = key_group_owners(max_parallelism, old_parallelism)
    new = key_group_owners(max_parallelism, new_parallelism)
    runs = _runs(old, new, key_group_rows, key_group_bytes)
    moving = [r for r in runs if r.moves]
    return KeyGroupPlan(
        max_parallelism=max_parallelism,
        old_parallelism=old_parallelism,
        new_parallelism=new_parallelism,
        runs=tuple(runs),
        transfers=_transfers(runs, rows=key_group_rows is not None, sizes=key_group_bytes is not None),
        moved_key_groups=sum(r.key_groups for r in moving),
        old_loads=_loads(old, old_parallelism, None),
        new_loads=_loads(new, new_parallelism, None),
        moved_rows=None if key_group_rows is None else sum(r.rows or 0 for r in moving),
        moved_bytes=None if key_group_bytes is None else sum(r.bytes or 0 for r in moving),
        old_row_loads=None if key_group_rows is None else _loads(old, old_parallelism, key_group_rows),
        new_row_loads=None if key_group_rows is None else _loads(new, new_parallelism, key_group_rows),
    )


def _runs(
    old: list[int], new: list[int], rows: Sequence[int] | None, sizes: Sequence[int] | None
) -> list[KeyGroupRun]:
    """Fold the key groups into maximal runs with the same ``old`` and ``new`` owner, weighted if given."""

    def weigh(weights: Sequence[int] | None, start: int, end: int) -> int | None:
        return None if weights is None else int(sum(weights[start : end + 1]))

    runs: list[KeyGroupRun] = []
    start = 0
    for kg in range(1, len(old) + 1):
        if kg == len(old) or (old[kg], new[kg]) != (old[start], new[start]):
            runs.append(
                KeyGroupRun(
                    start,
                    kg - 1,
                    old[start],
                    new[start],
                    weigh(rows, start, kg - 1),
                    weigh(sizes, start, kg - 1),
                )
            )
            start = kg
    return runs


def _transfers(runs: list[KeyGroupRun], *, rows: bool, sizes: bool) -> tuple[Transfer, ...]:
    """Group the runs by (old, new) subtask; sum their rows and bytes where the runs are weighted."""
    grouped: dict[tuple[int, int], list[KeyGroupRun]] = {}
    for run in runs:
        grouped.setdefault((run.from_subtask, run.to_subtask), []).append(run)
    return tuple(
        Transfer(
            src,
            dst,
            sum(r.key_groups for r in rs),
            tuple((r.start, r.end) for r in rs),
            sum(r.rows or 0 for r in rs) if rows else None,
            sum(r.bytes or 0 for r in rs) if sizes else None,
        )
        for (src, dst), rs in sorted(grouped.items())
    )


def _loads(owners: list[int], parallelism: int, weights: Sequence[int] | None) -> tuple[int, ...]:
    """Return the key groups (or their ``weights``) per subtask, given each key group's owner."""
    out = [0] * parallelism
    for kg, owner in enumerate(owners):
        out[owner] += 1 if weights is None else int(weights[kg])
    return tuple(out)


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
    require_parallelism_in_bounds(max_parallelism, minimum)
    require_parallelism_in_bounds(max_parallelism, upper)
    if minimum > upper:
        raise ValueError("minimum parallelism is above the maximum")
    if key_group_weights is not None and len(key_group_weights) != max_parallelism:
        raise ValueError(f"key_group_weights must have one entry per key group ({max_parallelism})")
    # Prefix sums and array range bounds keep this O(p) per parallelism, not O(maxParallelism) plus one
    # KeyGroupRange object per subtask: judging thousands of parallelisms of 32768 key groups stays fast.
    weights = np.ones(max_parallelism, np.int64) if key_group_weights is None else key_group_weights
    prefix = np.concatenate(([0], np.cumsum(np.asarray(weights, dtype=np.int64))))
    total = int(prefix[-1])
    advice = []
    for p in range(minimum, upper + 1):
        index = np.arange(p, dtype=np.int64)
        # KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex, for every subtask at once.
        starts = (index * max_parallelism + p - 1) // p
        ends = ((index + 1) * max_parallelism - 1) // p
        loads = prefix[ends + 1] - prefix[starts]
        top, bottom = int(loads.max()), int(loads.min())
        # Same as keygroups.skew(loads): max over mean, 1.0 when there is no load at all.
        spread = 1.0 if total == 0 else top / (total / p)
        advice.append(ParallelismAdvice(p, spread, top, bottom, total / p))
    return tuple(advice)


# -- Rescaling a snapshot ------------------------------------------------------------------------------------

#: How an operator's keyed rows are rewritten: not at all (no keyed state), copied file for file (same
#: parallelism and maxParallelism), moved by key group (new parallelism) or re-hashed (new maxParallelism).
KEYED_MODES = ("none", "copy", "move", "rehash")


@dataclass(frozen=True, slots=True)
class OperatorPlan:
    """How one operator of a snapshot is rescaled (or kept as it is, when it is not selected).

    ``key_groups`` is the key-group plan weighted by the manifest's per-key-group row counts (bytes are
    estimated in proportion to rows within each file); it is None when keys are re-hashed (their new key
    groups are only known once the keys are read) or when there is no keyed state. A Flink savepoint's
    plan (``execution.routes.savepoint_plan``) knows bytes per key group from ``_metadata``'s offsets but no
    rows: its ``keyed_rows`` is None, and so are the row counts derived from it.
    """

    uid: str | None
    operator_id: str
    key_type: str | None
    rescaled: bool
    old_parallelism: int
    new_parallelism: int
    old_max_parallelism: int
    new_max_parallelism: int
    keyed_mode: str
    key_groups: KeyGroupPlan | None
    operator_state: OperatorStatePlan | None
    keyed_rows: int | None
    keyed_bytes: int | None
    operator_rows: int
    #: Whether the operator holds state as the operator selection counts it (``select_operators``'s
    #: ``with_state``): a kg snapshot operator with files, a savepoint operator with a subtask state
    #: handle. A savepoint lists every operator of the job, most of them without state.
    holds_state: bool = True
    #: The operator's name in the input, if it records one (for display: uid, else name, else id).
    name: str | None = None

    @property
    def label(self) -> str:
        """Return the uid if there is one, else the operator id."""
        return self.uid if self.uid else self.operator_id

    @property
    def new_ranges(self) -> tuple[KeyGroupRange, ...]:
        """Return the key-group range of every new subtask."""
        return subtask_ranges(self.new_max_parallelism, self.new_parallelism)

    @property
    def moved_rows(self) -> int | None:
        """Return the keyed rows that change subtask (all of them when keys are re-hashed); None: unknown."""
        if self.keyed_mode == "rehash":
            return self.keyed_rows
        if self.key_groups is None:
            return 0
        return None if self.keyed_rows is None else self.key_groups.moved_rows or 0

    @property
    def moved_bytes(self) -> int | None:
        """Return the (estimated) keyed bytes that change subtask; None when no size is known."""
        if self.keyed_mode == "rehash":
            return self.keyed_bytes
        if self.key_groups is None:
            return 0
        return self.key_groups.moved_bytes

    @property
    def new_row_loads(self) -> tuple[int, ...] | None:
        """Return keyed rows per new subtask, or None when only reading the keys can tell (re-hash)."""
        if self.keyed_mode == "none":
            return (0,) * self.new_parallelism
        if self.key_groups is None:
            return None
        return self.key_groups.new_row_loads


@dataclass(frozen=True, slots=True)
class RescalePlan:
    """The plan of a whole snapshot rescale: one ``OperatorPlan`` per operator, in manifest order."""

    snapshot_id: int
    new_parallelism: int
    new_max_parallelism: int | None
    operators: tuple[OperatorPlan, ...]
    #: Operator migration done in the same pass (``kg rescale --rename/--assign-uid/--drop``): the
    #: operators above are named as the migration leaves them.
    migration: tuple[OperatorChange, ...] = ()

    @property
    def rescaled(self) -> tuple[OperatorPlan, ...]:
        """Return the plans of the operators that are rescaled."""
        return tuple(op for op in self.operators if op.rescaled)


def plan_rescale(
    snapshot: Snapshot,
    new_parallelism: int,
    operators: Sequence[str] | None = None,
    new_max_parallelism: int | None = None,
    *,
    expected_parallelism: int | None = None,
    operator_state_counts: Mapping[str, Sequence[Mapping[str, int]]] | None = None,
) -> RescalePlan:
    """Plan the rescale of the kg ``snapshot`` to ``new_parallelism`` without reading keyed data.

    ``plan_snapshot`` with these arguments as a ``RescaleRequest`` (``expected_parallelism`` is its
    ``from_parallelism``, ``--from``).

    Raises:
        InvalidArgumentError: An unknown operator, a parallelism out of Flink's bounds, or a mismatch with
            ``expected_parallelism``.
        UnsupportedFormatError: A maxParallelism change for an operator with ``binary`` keys.
    """
    request = RescaleRequest(
        new_parallelism,
        from_parallelism=expected_parallelism,
        operators=operators,
        new_max_parallelism=new_max_parallelism,
    )
    return plan_snapshot(snapshot, request, operator_state_counts=operator_state_counts)


def plan_snapshot(
    snapshot: Snapshot,
    request: RescaleRequest,
    *,
    operator_state_counts: Mapping[str, Sequence[Mapping[str, int]]] | None = None,
) -> RescalePlan:
    """Plan the kg ``snapshot``'s rescale as ``request`` asks, without reading keyed data.

    ``request.operators`` (uids or ids; None: every operator) are rescaled to ``request.new_parallelism``
    and the others kept; with ``request.from_parallelism`` (``--from``) and no operators, the operators at
    that parallelism are rescaled (at least one with state must be), with operators each must have it.
    ``operator_state_counts`` are the elements per old subtask per operator-state name, by operator id;
    read from the operator-state files (their ``state`` column only) when not given.

    Raises:
        InvalidArgumentError: An unknown operator, a parallelism out of Flink's bounds, or a mismatch with
            ``--from``.
        UnsupportedFormatError: A maxParallelism change for an operator with ``binary`` keys.
    """
    manifest = snapshot.manifest
    labels, new_max_parallelism = request.operators, request.new_max_parallelism
    expected_parallelism = request.from_parallelism
    with_state = {op.operator_id for op in manifest.operators if op.files}
    selected = select_operators(
        manifest.operators, labels, expected_parallelism, with_state, new_max_parallelism
    )
    plans = []
    for op in manifest.operators:
        holds_state = op.operator_id in with_state
        target = operator_target(op, selected, labels, request.new_parallelism, new_max_parallelism)
        if target is None:
            plans.append(replace(_keep(op), holds_state=holds_state))
            continue
        new_max = checked_new_max_parallelism(
            op,
            op.key_type if op.keyed_files else None,
            target,
            new_max_parallelism,
            expected_parallelism if op.operator_id in selected else None,
        )
        counts = (operator_state_counts or {}).get(op.operator_id)
        plans.append(_rescale_operator(snapshot, op, target, new_max, counts, holds_state=holds_state))
    return RescalePlan(manifest.snapshot_id, request.new_parallelism, new_max_parallelism, tuple(plans))


def _rescale_operator(
    snapshot: Snapshot,
    op: Operator,
    target: int,
    new_max: int,
    operator_state_counts: Sequence[Mapping[str, int]] | None,
    *,
    holds_state: bool,
) -> OperatorPlan:
    """Plan one operator's rescale to ``target`` subtasks and ``new_max`` key groups (request validated).

    ``operator_state_counts`` are its elements per old subtask per operator-state name, read from its
    operator-state files when None.
    """
    mode = _keyed_mode(op, target, new_max)
    key_groups = None
    if mode in ("copy", "move"):
        rows, sizes = key_group_weights(op)
        key_groups = plan_key_groups(
            op.max_parallelism, op.parallelism, target, key_group_rows=rows, key_group_bytes=sizes
        )
    operator_state = None
    if any(not s.is_keyed for s in op.states) and op.operator_files:
        counts = operator_state_counts
        if counts is None:
            counts = _operator_state_counts(snapshot, op)
        operator_state = redistribute_operator_state(op.states, counts, target)
    return OperatorPlan(
        uid=op.uid,
        operator_id=op.operator_id,
        key_type=op.key_type,
        rescaled=True,
        old_parallelism=op.parallelism,
        new_parallelism=target,
        old_max_parallelism=op.max_parallelism,
        new_max_parallelism=new_max,
        keyed_mode=mode,
        key_groups=key_groups,
        operator_state=operator_state,
        keyed_rows=op.keyed_rows,
        keyed_bytes=sum(f.bytes for f in op.keyed_files),
        operator_rows=sum(f.rows for f in op.operator_files),
        holds_state=holds_state,
        name=op.name,
    )


def _keyed_mode(op: Operator, target: int, new_max: int) -> str:
    """Return how the operator's keyed rows are rewritten (one of ``KEYED_MODES``)."""
    if not op.keyed_files:
        return "none"
    if new_max != op.max_parallelism:
        return "rehash"
    return "copy" if target == op.parallelism else "move"


class LabelledOperator(Protocol):
    """What request validation needs of an operator (a kg ``Operator`` or a Flink ``OperatorState``)."""

    @property
    def uid(self) -> str | None: ...  # noqa: D102
    @property
    def operator_id(self) -> str: ...  # noqa: D102
    @property
    def parallelism(self) -> int: ...  # noqa: D102
    @property
    def max_parallelism(self) -> int: ...  # noqa: D102
    @property
    def label(self) -> str: ...  # noqa: D102
    @property
    def name(self) -> str | None: ...  # noqa: D102


def checked_new_max_parallelism(
    op: LabelledOperator,
    key_type: str | None,
    new_parallelism: int,
    new_max_parallelism: int | None,
    expected_parallelism: int | None,
) -> int:
    """Check one operator's rescale request against Flink's rules; return its new maxParallelism.

    Shared by ``plan_rescale`` (kg snapshots) and the savepoint require_rescalable, so both refuse the same
    requests with the same messages before anything is written.

    Args:
        op: The operator as it is now.
        key_type: Its key type if it has keyed state, else None.
        new_parallelism: The requested parallelism.
        new_max_parallelism: The requested maxParallelism (None keeps the current one).
        expected_parallelism: ``--from``: the parallelism the operator must have now, if given.

    Raises:
        InvalidArgumentError: ``--from`` mismatch or a parallelism outside Flink's bounds.
        UnsupportedFormatError: A maxParallelism change of an operator with ``binary`` keys.
    """
    if expected_parallelism is not None and op.parallelism != expected_parallelism:
        raise _parallelism_mismatch(op, expected_parallelism)
    new_max = op.max_parallelism if new_max_parallelism is None else new_max_parallelism
    refused = explain_bounds(
        new_max,
        new_parallelism,
        parallelism_option="--to",
        max_option="-m",
        max_given=new_max_parallelism is not None,
        can_change_max=True,
    )
    if refused is not None:
        raise refused
    if new_max != op.max_parallelism and key_type == "binary":
        raise UnsupportedFormatError(
            f"operator {op.label!r} has binary keys, which kg cannot re-hash, so its maxParallelism "
            f"cannot change from {op.max_parallelism} to {new_max}; drop --max-parallelism",
            code="KEY_TYPE_NOT_HASHABLE",
        )
    return new_max


def operator_target(
    op: LabelledOperator,
    selected: set[str],
    labels: Sequence[str] | None,
    new_parallelism: int,
    new_max_parallelism: int | None,
) -> int | None:
    """Return the parallelism an operator is rescaled to, or None if it is kept as it is.

    Selected operators go to ``new_parallelism``. An operator left out by ``--from`` (not by naming
    ``--operator``s) still takes a new maxParallelism, at its own parallelism: Flink checks every
    operator's maxParallelism against the job's at restore, so leaving one behind would fail there.
    """
    if op.operator_id in selected:
        return new_parallelism
    if labels or new_max_parallelism is None or new_max_parallelism == op.max_parallelism:
        return None
    return op.parallelism


def _parallelism_mismatch(op: LabelledOperator, expected: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"--from {expected} does not match operator {op.label!r}, "
        f"which has parallelism {op.parallelism} in the snapshot",
        code="PARALLELISM_MISMATCH",
    )


def select_operators(
    all_operators: Sequence[LabelledOperator],
    labels: Sequence[str] | None,
    expected_parallelism: int | None = None,
    with_state: set[str] | None = None,
    new_max_parallelism: int | None = None,
) -> set[str]:
    """Return the ids of the operators to rescale.

    Operators named by uid, id, name or id prefix, if ``labels`` are given (a uid matches by its hash where
    the metadata records no uids, ``core.keygroups.find_named_operator``), plus the operators without state
    that must follow them (``chain_followers``, when ``with_state`` is given). Otherwise, with ``--from P``
    (``expected_parallelism``), the operators at parallelism P: ``kg rescale --from 3 --to 4`` on a job
    whose non-parallel source runs at 1 rescales the operators at 3 and keeps the source as it is. Without
    either, every operator.

    Raises:
        InvalidArgumentError: A label names no operator (``OPERATOR_NOT_FOUND``) or several
            (``OPERATOR_AMBIGUOUS``); no operator with state
            (ids in ``with_state``) has parallelism P (``PARALLELISM_MISMATCH``); an operator without
            state may share a task with a changed and a kept one (``CHAIN_AMBIGUOUS``).
    """
    if not labels:
        if expected_parallelism is None:
            return {op.operator_id for op in all_operators}
        chosen = {op.operator_id for op in all_operators if op.parallelism == expected_parallelism}
        stateful = [op for op in all_operators if with_state is None or op.operator_id in with_state]
        if stateful and not any(op.operator_id in chosen for op in stateful):
            raise _parallelism_mismatch(stateful[0], expected_parallelism)
        return chosen
    chosen = set()
    for label in labels:
        match = find_named_operator(label, all_operators)
        if match is None:
            known = ", ".join(op.label for op in all_operators) or "none"
            raise InvalidArgumentError(
                f"no operator {label!r} in the snapshot (operators: {known})", code="OPERATOR_NOT_FOUND"
            )
        chosen.add(match.operator_id)
    if with_state is None:
        return chosen
    return chosen | chain_followers(all_operators, chosen, with_state, new_max_parallelism)


def chain_followers(
    all_operators: Sequence[LabelledOperator],
    chosen: set[str],
    with_state: set[str],
    new_max_parallelism: int | None,
) -> set[str]:
    """Return the operators without state that follow the named ones into their new maxParallelism.

    Flink records a job vertex's parallelism and maxParallelism for every operator chained in it
    (``OperatorState`` of each ``OperatorIDPair``), and at restore it holds all of a vertex's operator
    states to one maxParallelism: ``Checkpoints.loadAndValidateCheckpoint`` refuses any listed operator
    whose maxParallelism differs from a configured one, and where the job configures none,
    ``StateAssignmentOperation.checkParallelismPreconditions`` moves the vertex to each state's
    maxParallelism in turn, so a chain member left behind decides the key groups of the rescaled one.
    ``_metadata`` does not record chains, but a chain's members share (parallelism, maxParallelism): an
    operator without state follows when every operator with state that shares its pair is named. When
    some are named and some are not and the maxParallelism changes, kg cannot tell which task it is in
    and refuses, unless an operator without state is named too: then the names are the whole answer and
    the operators without state that are not named keep what they have.

    Raises:
        InvalidArgumentError: ``CHAIN_AMBIGUOUS``, as above.
    """
    named_stateless = any(
        op.operator_id in chosen and op.operator_id not in with_state for op in all_operators
    )
    stateful = [op for op in all_operators if op.operator_id in with_state]
    followers: set[str] = set()
    for op in all_operators:
        if op.operator_id in with_state or op.operator_id in chosen:
            continue
        mates = [
            s for s in stateful if (s.parallelism, s.max_parallelism) == (op.parallelism, op.max_parallelism)
        ]
        changed = [s for s in mates if s.operator_id in chosen]
        if not changed:
            continue
        if len(changed) == len(mates):
            followers.add(op.operator_id)
            continue
        if named_stateless or new_max_parallelism in (None, op.max_parallelism):
            continue
        kept = next(s for s in mates if s.operator_id not in chosen)
        raise InvalidArgumentError(
            f"operator {op.label!r} holds no state and may share a task with {changed[0].label!r} "
            f"(maxParallelism {op.max_parallelism} -> {new_max_parallelism}) or with {kept.label!r} (kept at "
            f"{op.max_parallelism}), and Flink restores a task only at one maxParallelism; kg cannot see "
            "chains: also name with --operator the operators without state chained with the ones you "
            f"change (the others are then kept), or drop --operator to change every operator",
            code="CHAIN_AMBIGUOUS",
        )
    return followers


_Named = TypeVar("_Named", bound=LabelledOperator)


def named_operators(all_operators: Sequence[_Named], labels: Sequence[str]) -> tuple[_Named, ...]:
    """Return the operators ``labels`` name, in snapshot order, each carrying the uid that named it.

    An operator named by a uid its metadata does not record (V3/V4, matched by hash) gets that uid,
    so the caller can show it; the operator id stays as recorded. ``all_operators`` must be dataclasses.

    Raises:
        InvalidArgumentError: A label names no operator (``OPERATOR_NOT_FOUND``).
    """
    chosen = select_operators(all_operators, labels)
    given = {
        op.operator_id: label
        for label in labels
        for op in all_operators
        if op.uid is None and label != op.operator_id and names_operator(label, None, op.operator_id)
    }
    out = []
    for op in all_operators:
        if op.operator_id in chosen:
            uid = given.get(op.operator_id)
            out.append(replace(op, uid=uid) if uid is not None else op)  # type: ignore[type-var]
    return tuple(out)


def _keep(op: Operator) -> OperatorPlan:
    """Return the plan of an operator that is not rescaled: every file is copied as it is."""
    return OperatorPlan(
        uid=op.uid,
        operator_id=op.operator_id,
        key_type=op.key_type,
        rescaled=False,
        old_parallelism=op.parallelism,
        new_parallelism=op.parallelism,
        old_max_parallelism=op.max_parallelism,
        new_max_parallelism=op.max_parallelism,
        keyed_mode="copy" if op.keyed_files else "none",
        key_groups=None,
        operator_state=None,
        keyed_rows=op.keyed_rows,
        keyed_bytes=sum(f.bytes for f in op.keyed_files),
        operator_rows=sum(f.rows for f in op.operator_files),
        name=op.name,
    )


def key_group_weights(op: Operator) -> tuple[list[int], list[int]]:
    """Return rows and estimated bytes per key group from the manifest (bytes pro rata of rows per file)."""
    rows = [0] * op.max_parallelism
    sizes = [0] * op.max_parallelism
    for f in op.keyed_files:
        total = max(f.rows, 1)
        cumulative = 0
        for j, n in enumerate(f.key_group_rows):
            kg = f.key_group_start + j
            rows[kg] = n
            # Cumulative rounding makes the per-key-group estimates add up to the file's size exactly.
            before = cumulative * f.bytes // total
            cumulative += n
            sizes[kg] = cumulative * f.bytes // total - before
    return rows, sizes


def _operator_state_counts(snapshot: Snapshot, op: Operator) -> list[dict[str, int]]:
    """Return, per old subtask, how many elements of each operator state its file holds."""
    # Deferred: keeps `kg plan --from/--to` (pure math) free of pyarrow.
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    counts: list[dict[str, int]] = [{} for _ in range(op.parallelism)]
    for f in op.operator_files:
        column = pq.read_table(snapshot.resolve(f.path), columns=["state"]).column("state")
        for item in pc.value_counts(column.cast("string")).to_pylist():
            counts[f.subtask][str(item["values"])] = int(item["counts"])
    return counts
