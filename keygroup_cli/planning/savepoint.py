"""The plan of a savepoint rescale's operators, made on the opened savepoint itself.

``plan_savepoint_operators(savepoint, request, held)`` plans every operator of ``_metadata`` as the request
asks: which are rescaled (``select_operators``, ``--from``, chain followers), their new parallelism and
maxParallelism (checked against Flink's bounds), and the redistribution of each one's operator state,
Flink's round-robin, union and broadcast semantics (``planning.redistribution``) applied to the states the
savepoint's own handles name, in their modes, with the elements its own streams hold. No kg snapshot model
is made: the operators are ``_metadata``'s ``OperatorState``s. The keyed part of each operator's plan is
added by the caller from ``_metadata``'s offsets (``execution.routes.savepoint_plan``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from keygroup_cli.flink import FlinkCheckpoint, OperatorState, Savepoint
from keygroup_cli.planning.plan import (
    OperatorPlan,
    RescalePlan,
    checked_new_max_parallelism,
    operator_target,
    select_operators,
)
from keygroup_cli.planning.redistribution import NamedState, redistribute_operator_state
from keygroup_cli.planning.request import RescaleRequest


class HeldOperatorState(Protocol):
    """One operator's operator state as a savepoint holds it (``convert.operator_tables``)."""

    @property
    def states(self) -> Sequence[NamedState]: ...  # noqa: D102
    @property
    def tables(self) -> Mapping[int, Any]: ...  # noqa: D102
    def counts(self) -> list[dict[str, int]]: ...  # noqa: D102


def plan_savepoint_operators(
    savepoint: FlinkCheckpoint,
    request: RescaleRequest,
    held: Mapping[str, HeldOperatorState],
    key_types: Mapping[str, str] | None = None,
) -> RescalePlan:
    """Plan every operator of ``savepoint`` as ``request`` asks, its operator state included.

    ``held`` is the operator state by operator id (an operator absent holds none); ``key_types`` the key
    type of each keyed operator (a maxParallelism change of binary keys is refused).

    Raises:
        InvalidArgumentError: Unknown operators, ``--from`` mismatch, Flink's bounds, ``CHAIN_AMBIGUOUS``.
        UnsupportedFormatError: A maxParallelism change of keys kg cannot re-hash.
    """
    all_operators = savepoint.metadata.operators
    with_state = set(Savepoint.of(savepoint).with_state)
    labels, new_max_parallelism = request.operators, request.new_max_parallelism
    selected = select_operators(
        all_operators, labels, request.from_parallelism, with_state, new_max_parallelism
    )
    plans = []
    for op in all_operators:
        state = held.get(op.operator_id)
        counts = state.counts() if state is not None else [{} for _ in range(op.parallelism)]
        target = operator_target(op, selected, labels, request.new_parallelism, new_max_parallelism)
        new_max = op.max_parallelism
        if target is not None:
            new_max = checked_new_max_parallelism(
                op,
                (key_types or {}).get(op.operator_id),
                target,
                new_max_parallelism,
                request.from_parallelism if op.operator_id in selected else None,
            )
        plans.append(_operator_plan(op, target, new_max, state, counts, op.operator_id in with_state))
    return RescalePlan(
        savepoint.metadata.checkpoint_id, request.new_parallelism, new_max_parallelism, tuple(plans)
    )


def _operator_plan(
    op: OperatorState,
    target: int | None,
    new_max: int,
    state: HeldOperatorState | None,
    counts: Sequence[Mapping[str, int]],
    holds_state: bool,
) -> OperatorPlan:
    """Return one operator's plan: kept (``target`` None) or rescaled, operator state redistributed."""
    operator_state = None
    if target is not None and state is not None and state.states and state.tables:
        operator_state = redistribute_operator_state(state.states, counts, target)
    return OperatorPlan(
        uid=op.uid,
        operator_id=op.operator_id,
        key_type=None,
        rescaled=target is not None,
        old_parallelism=op.parallelism,
        new_parallelism=op.parallelism if target is None else target,
        old_max_parallelism=op.max_parallelism,
        new_max_parallelism=new_max,
        keyed_mode="none",
        key_groups=None,
        operator_state=operator_state,
        keyed_rows=0,
        keyed_bytes=0,
        operator_rows=sum(sum(c.values()) for c in counts),
        holds_state=holds_state,
        name=op.name,
    )


__all__ = ["HeldOperatorState", "plan_savepoint_operators"]
