"""The operator state of a savepoint rescale, planned and redistributed in memory on the driver.

Operator state is small, so the savepoint -> savepoint rescale keeps it in memory from the decoded input
streams (``convert.operator_tables``) to the encoded output streams (``flink.write.rescaled``):
``rescale_operator_tables`` plans the rescale from the savepoint's operators (bounds, ``--from``, operators;
keyed state was validated before by ``savepoint.preflight``), applies Flink's redistribution of every
rescaled operator's states (the same ``tasks.redistribute_operator_tables`` the engines apply to a kg
snapshot) and checks the rows each new subtask holds against the plan, as the commit of a kg snapshot
rescale does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pyarrow as pa

from keygroup_cli.convert.operator_tables import OperatorTables, table_entry
from keygroup_cli.execution.engines import ExecutionResult, WrittenOperator
from keygroup_cli.execution.jobs.snapshot import redistribute_operator_tables
from keygroup_cli.execution.routes.snapshot import check_row_counts, rescaled_operators
from keygroup_cli.planning.plan import RescalePlan, plan_rescale
from keygroup_cli.snapshot.model import OperatorFile
from keygroup_cli.snapshot.parquet import conform_operator


def rescale_operator_tables(
    state: OperatorTables,
    new_parallelism: int,
    *,
    from_parallelism: int | None = None,
    operators: Sequence[str] | None = None,
    new_max_parallelism: int | None = None,
    with_state: set[str] | None = None,
) -> tuple[RescalePlan, OperatorTables]:
    """Plan the rescale of ``state`` and return the plan with the redistributed operator state.

    The arguments are those of ``execution.routes.rescale.rescale``, plus ``with_state``: the ids of the
    operators that hold state of any kind in the savepoint (keyed state is not in ``state``). The new
    ``OperatorTables`` has the rescaled operators (new parallelism and maxParallelism, union states
    marked replicated) and the rows of every new subtask; operators that are not rescaled keep theirs.

    Raises:
        InvalidArgumentError: Bad arguments (see ``planning.plan.plan_rescale``).
        ExecutionError: The redistributed rows differ from the plan (``OUTPUT_VERIFICATION_FAILED``).
    """
    plan = plan_rescale(
        state,
        new_parallelism,
        operators,
        new_max_parallelism,
        expected_parallelism=from_parallelism,
        operator_state_counts=state.state_counts(),
        with_state=with_state,
    )
    tables: dict[str, pa.Table] = {}
    written = []
    for op_plan in plan.operators:
        op = state.operator(op_plan.operator_id)
        assert op is not None
        files: tuple[OperatorFile, ...] = ()
        state_plan = op_plan.operator_state
        if not op_plan.rescaled or (state_plan is not None and state_plan.unchanged):
            files = op.operator_files
            tables.update((f.path, state.operator_table(f)) for f in files)
        elif state_plan is not None:
            old = {f.subtask: state.operator_table(f) for f in op.operator_files}
            new_files = []
            for subtask, rows in redistribute_operator_tables(old, op_plan).items():
                table = conform_operator(rows)
                entry = table_entry(op.operator_id, subtask, table)
                tables[entry.path] = table
                new_files.append(entry)
            files = tuple(new_files)
        written.append(WrittenOperator(op.operator_id, (), files))
    rescaled = rescaled_operators(state.operators, plan, ExecutionResult("driver", tuple(written)))
    check_row_counts(state.operators, plan, rescaled)
    return plan, replace(state, operators=rescaled, tables=tables)
