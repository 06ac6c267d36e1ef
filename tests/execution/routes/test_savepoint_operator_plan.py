"""A savepoint rescale's operator state: planned on the opened savepoint, redistributed on the driver.

The plan is made from the savepoint's own handles (states in their modes) and streams, with no kg snapshot
model; it must deal out exactly what the kg snapshot plan of the same state deals out (Flink's round-robin,
union and broadcast semantics, ``planning.redistribution``), and the rescale reports a savepoint result.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.convert.operator_tables import read_operator_state
from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.execution.routes.operator_state import redistribute_savepoint_state
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.execution.routes.snapshot import SavepointRescaleResult
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.savepoint import open_savepoint
from keygroup_cli.planning.plan import plan_snapshot
from keygroup_cli.planning.redistribution import BROADCAST, SPLIT, UNION
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.planning.savepoint import plan_savepoint_operators
from keygroup_cli.snapshot import open_snapshot

FIXTURES = Path(__file__).parents[3] / "fixtures" / "flink" / "2.3"
#: Split, union and broadcast operator state, at parallelism 3 and 2.
CASES = ("heap-files-p3-maxp128-long", "rocksdb-canonical-snappy-p2-maxp256-string")


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fixtures' operator state as kg snapshots: what the former route planned on."""
    out = tmp_path_factory.mktemp("converted")
    for case in CASES:
        savepoint_to_snapshot(FIXTURES / case, out / case, keyed=False)
    return {case: out / case for case in CASES}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("new_p", [1, 2, 4, 7])
def test_the_savepoint_plan_deals_what_the_kg_snapshot_plan_deals(
    case: str, new_p: int, converted: dict[str, Path]
) -> None:
    savepoint = open_savepoint(FIXTURES / case)
    held = read_operator_state(savepoint)
    request = RescaleRequest(new_p)
    planned = plan_savepoint_operators(savepoint, request, held)
    former = {p.operator_id: p for p in plan_snapshot(open_snapshot(converted[case]), request).operators}
    kinds = set()
    dealt = 0
    for op_plan in planned.operators:
        old = former[op_plan.operator_id]
        assert (op_plan.rescaled, op_plan.new_parallelism, op_plan.operator_rows) == (
            old.rescaled,
            old.new_parallelism,
            old.operator_rows,
        )
        assert op_plan.operator_state == old.operator_state
        if op_plan.operator_state is not None:
            dealt += len(op_plan.operator_state.runs)
            kinds |= {s.kind for s in held[op_plan.operator_id].states}
    assert dealt > 0 and {SPLIT, UNION, BROADCAST} <= kinds


@pytest.mark.parametrize("new_p", [1, 4])
def test_rows_are_redistributed_as_planned(new_p: int) -> None:
    savepoint = open_savepoint(FIXTURES / CASES[0])
    held = read_operator_state(savepoint)
    plan = plan_savepoint_operators(savepoint, RescaleRequest(new_p), held)
    operators = redistribute_savepoint_state(held, plan)
    assert [op.operator_id for op in operators] == [op.operator_id for op in savepoint.metadata.operators]
    moved = 0
    for op_plan, new in zip(plan.operators, operators, strict=True):
        assert (new.parallelism, new.max_parallelism) == (
            op_plan.new_parallelism,
            op_plan.new_max_parallelism,
        )
        state_plan = op_plan.operator_state
        if state_plan is None:
            assert not new.tables and not new.replicated
            continue
        rows = [new.tables[i].num_rows if i in new.tables else 0 for i in range(new_p)]
        assert rows == list(state_plan.new_counts)
        unions = {s.name for s in held[op_plan.operator_id].states if s.kind == UNION}
        assert new.replicated == unions
        # Every union list reaches every new subtask whole.
        for name in unions:
            whole = sum(
                t.column("state").to_pylist().count(name) for t in held[op_plan.operator_id].tables.values()
            )
            for table in new.tables.values():
                assert table.column("state").to_pylist().count(name) == whole
        moved += 1
    assert moved > 0


def test_an_operator_kept_keeps_its_rows() -> None:
    savepoint = open_savepoint(FIXTURES / CASES[0])
    held = read_operator_state(savepoint)
    plan = plan_savepoint_operators(
        savepoint, RescaleRequest(savepoint.metadata.operators[0].parallelism), held
    )
    for op_plan, new in zip(plan.operators, redistribute_savepoint_state(held, plan), strict=True):
        state_plan = op_plan.operator_state
        if state_plan is not None and not state_plan.unchanged:
            continue
        assert new.tables == dict(held[op_plan.operator_id].tables) and not new.replicated


def test_rows_that_differ_from_the_plan_are_refused() -> None:
    savepoint = open_savepoint(FIXTURES / CASES[0])
    held = read_operator_state(savepoint)
    plan = plan_savepoint_operators(savepoint, RescaleRequest(4), held)
    op_id = next(p.operator_id for p in plan.operators if p.operator_state is not None and p.operator_rows)
    state = held[op_id]
    subtask, table = next((i, t) for i, t in state.tables.items() if t.num_rows)
    # A subtask's stream that lost a row after the plan was made: the execution must not write it.
    short = replace(state, tables={**state.tables, subtask: table.slice(0, table.num_rows - 1)})
    with pytest.raises(ExecutionError) as err:
        redistribute_savepoint_state({**held, op_id: short}, plan)
    assert err.value.code == "OUTPUT_VERIFICATION_FAILED"


def test_a_savepoint_rescale_reports_a_savepoint_result(tmp_path: Path) -> None:
    source = FIXTURES / CASES[0]
    result = rescale(source, tmp_path / "sp", 4, engine="local")
    written = result.savepoint
    assert isinstance(written, SavepointRescaleResult)
    metadata = read_flink_metadata(tmp_path / "sp").metadata
    assert written.metadata == metadata
    assert (written.input, written.output) == (str(source), str(tmp_path / "sp"))
    assert written.operators == len(metadata.operators)
    streams = open_savepoint(tmp_path / "sp").operator_streams.values()
    assert written.operator_files == len(streams) > 0
    assert written.operator_rows == sum(s.table.num_rows for s in streams if s.table is not None) > 0
    assert written.keyed_files == sum(
        1 for op in metadata.operators for s in op.subtasks if s.managed_keyed_state
    )
