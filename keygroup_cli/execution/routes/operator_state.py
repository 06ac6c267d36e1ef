"""The operator state of a savepoint rescale, redistributed in memory on the driver as its plan says.

Operator state is small, so the savepoint -> savepoint rescale keeps it in memory from the decoded input
streams (``convert.operator_tables``) to the encoded output streams (``flink.write.rescaled``). Its plan is
made on the opened savepoint (``planning.savepoint.plan_savepoint_operators``: the handles' states in their
modes, Flink's redistribution of the elements the streams hold); ``redistribute_savepoint_state`` executes
that plan on the driver, with the same ``jobs.snapshot.redistribute_operator_tables`` the engines apply to a
kg snapshot's rows, and checks the rows each new subtask gets against the plan. What it returns is what the
writer encodes: one ``RescaledOperator`` per operator of the savepoint.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from keygroup_cli.convert.operator_tables import OperatorStateTables, operator_rows
from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.execution.jobs.snapshot import redistribute_operator_tables
from keygroup_cli.flink import RescaledOperator
from keygroup_cli.planning.plan import OperatorPlan, RescalePlan
from keygroup_cli.planning.redistribution import UNION


def redistribute_savepoint_state(
    held: Mapping[str, OperatorStateTables], plan: RescalePlan
) -> tuple[RescaledOperator, ...]:
    """Execute ``plan``'s operator-state redistribution on ``held``; return every operator as it leaves it.

    An operator that is not rescaled, or whose operator state stays as it is, keeps its rows; a rescaled
    one gets the rows its plan deals each new subtask, its union states then held whole by every one of
    them (``replicated``: the writer keeps one copy). A rescaled operator without operator state gets none.

    Raises:
        ExecutionError: The rows of a new subtask differ from the plan (``OUTPUT_VERIFICATION_FAILED``).
    """
    operators = []
    for op_plan in plan.operators:
        state = held.get(op_plan.operator_id)
        old = dict(state.tables) if state is not None else {}
        state_plan = op_plan.operator_state
        replicated: frozenset[str] = frozenset()
        if not op_plan.rescaled or (state_plan is not None and state_plan.unchanged):
            tables = old
        elif state_plan is not None and state is not None:
            moved = redistribute_operator_tables(old, op_plan)
            tables = {subtask: operator_rows(rows) for subtask, rows in moved.items()}
            replicated = frozenset(s.name for s in state.states if s.kind == UNION)
            _check_rows(op_plan, tables)
        else:
            tables = {}
        new = RescaledOperator(
            op_plan.operator_id, op_plan.new_parallelism, op_plan.new_max_parallelism, tables, replicated
        )
        operators.append(new)
    return tuple(operators)


def _check_rows(op_plan: OperatorPlan, tables: Mapping[int, pa.Table]) -> None:
    """Refuse redistributed rows that differ, subtask by subtask, from what the plan deals out."""
    assert op_plan.operator_state is not None
    rows = [0] * op_plan.new_parallelism
    for subtask, table in tables.items():
        rows[subtask] = table.num_rows
    if rows != list(op_plan.operator_state.new_counts):
        raise ExecutionError(
            f"output verification failed: operator {op_plan.label!r}: operator-state rows per subtask "
            "differ from the plan",
            code="OUTPUT_VERIFICATION_FAILED",
        )


__all__ = ["redistribute_savepoint_state"]
