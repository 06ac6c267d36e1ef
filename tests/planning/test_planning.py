"""plan_rescale: per-operator key-group plans, re-hash mode, operator state and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.core.errors import InvalidArgumentError, UnsupportedFormatError
from keygroup_cli.core.keygroups import subtask_ranges
from keygroup_cli.planning.plan import plan_rescale
from keygroup_cli.snapshot.model import KeyedFile, Manifest, Operator, OperatorFile, Snapshot, StateDescriptor

OP_ID = "35a9f8ef506cec52320f30f0582ce304"
OTHER_ID = "0123456789abcdef0123456789abcdef"


def _operator(uid: str, op_id: str, p: int, max_p: int, key_type: str = "long") -> Operator:
    keyed = []
    for i, rng in enumerate(subtask_ranges(max_p, p)):
        # Rows per key group: kg + 1, so every key group is distinguishable in the totals.
        kg_rows = tuple(kg + 1 for kg in range(rng.start, rng.end + 1))
        keyed.append(
            KeyedFile(
                i,
                rng.start,
                rng.end,
                f"{uid}/keyed-{i:05d}.parquet",
                sum(kg_rows),
                10 * sum(kg_rows),
                "0" * 16,
                kg_rows,
            )
        )
    ops = tuple(OperatorFile(i, f"{uid}/operator-{i:05d}.parquet", 3, 100, "0" * 16) for i in range(p))
    states = (StateDescriptor("count", "value"), StateDescriptor("buffer", "operator-split"))
    return Operator(uid, op_id, None, p, max_p, key_type, states, tuple(keyed), ops)


def _snapshot(*operators: Operator) -> Snapshot:
    return Snapshot(Path("/nonexistent"), Manifest(7, "kg test", "2026-01-01T00:00:00Z", {}, operators))


COUNTS = {OP_ID: [{"buffer": 3}] * 3, OTHER_ID: [{"buffer": 3}] * 2}


def test_move_plan_weights_runs_by_manifest_rows() -> None:
    snap = _snapshot(_operator("counter", OP_ID, 3, 10))
    plan = plan_rescale(snap, 4, operator_state_counts=COUNTS)
    (op,) = plan.operators
    assert op.keyed_mode == "move" and op.rescaled
    assert (op.old_parallelism, op.new_parallelism, op.new_max_parallelism) == (3, 4, 10)
    assert op.key_groups is not None
    # New ranges for (10, 4): [0,2] [3,4] [5,7] [8,9]; rows of kg k are k + 1.
    assert op.new_row_loads == (1 + 2 + 3, 4 + 5, 6 + 7 + 8, 9 + 10)
    moved = sum(r.rows or 0 for r in op.key_groups.runs if r.from_subtask != r.to_subtask)
    assert op.moved_rows == moved > 0
    assert op.keyed_rows == sum(range(1, 11))
    assert sum(r.bytes or 0 for r in op.key_groups.runs) == op.keyed_bytes
    assert op.operator_state is not None and op.operator_state.new_counts == (3, 2, 2, 2)


def test_same_parallelism_copies_keyed_files_and_keeps_operator_state() -> None:
    plan = plan_rescale(_snapshot(_operator("counter", OP_ID, 3, 10)), 3, operator_state_counts=COUNTS)
    (op,) = plan.operators
    assert op.keyed_mode == "copy" and op.moved_rows == 0
    assert op.operator_state is not None and op.operator_state.unchanged


def test_new_max_parallelism_rehashes_and_has_no_row_loads_yet() -> None:
    plan = plan_rescale(
        _snapshot(_operator("counter", OP_ID, 3, 10)), 3, new_max_parallelism=64, operator_state_counts=COUNTS
    )
    (op,) = plan.operators
    assert op.keyed_mode == "rehash"
    assert op.key_groups is None and op.new_row_loads is None
    assert op.moved_rows == op.keyed_rows
    assert [(r.start, r.end) for r in op.new_ranges] == [(0, 21), (22, 42), (43, 63)]


def test_only_named_operators_are_rescaled() -> None:
    snap = _snapshot(_operator("counter", OP_ID, 3, 10), _operator("other", OTHER_ID, 2, 128))
    plan = plan_rescale(snap, 4, operators=["other"], operator_state_counts=COUNTS)
    kept, rescaled = plan.operators
    assert not kept.rescaled and kept.new_parallelism == 3 and kept.keyed_mode == "copy"
    assert rescaled.rescaled and rescaled.new_parallelism == 4
    assert plan.rescaled == (rescaled,)
    # By operator id too.
    assert plan_rescale(snap, 4, operators=[OP_ID], operator_state_counts=COUNTS).rescaled[0].uid == "counter"


def test_unknown_operator_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="no operator 'nope'.*counter") as info:
        plan_rescale(_snapshot(_operator("counter", OP_ID, 3, 10)), 4, operators=["nope"])
    assert info.value.code == "OPERATOR_NOT_FOUND"


def test_from_must_match_the_snapshot() -> None:
    with pytest.raises(InvalidArgumentError, match="--from 2 does not match operator 'counter'") as info:
        plan_rescale(_snapshot(_operator("counter", OP_ID, 3, 10)), 4, expected_parallelism=2)
    assert info.value.code == "PARALLELISM_MISMATCH"


@pytest.mark.parametrize(
    ("new_p", "new_max", "message"),
    [
        (0, None, "Operator parallelism not within bounds: 0"),
        (11, None, "Maximum parallelism must not be smaller than parallelism."),
        (4, 32769, "Operator parallelism not within bounds: 32769"),
        (65, 64, "Maximum parallelism must not be smaller than parallelism."),
    ],
)
def test_bounds_use_flink_messages(new_p: int, new_max: int | None, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        plan_rescale(_snapshot(_operator("counter", OP_ID, 3, 10)), new_p, new_max_parallelism=new_max)


def test_binary_keys_cannot_change_max_parallelism() -> None:
    snap = _snapshot(_operator("counter", OP_ID, 3, 10, key_type="binary"))
    with pytest.raises(UnsupportedFormatError, match="binary keys") as info:
        plan_rescale(snap, 3, new_max_parallelism=64, operator_state_counts=COUNTS)
    assert info.value.code == "KEY_TYPE_NOT_HASHABLE"
    # Moving binary keys between subtasks is fine.
    assert plan_rescale(snap, 4, operator_state_counts=COUNTS).operators[0].keyed_mode == "move"
