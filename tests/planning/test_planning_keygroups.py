from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keygroup_cli.core import keygroups
from keygroup_cli.planning import plan as planning


@st.composite
def rescales(draw):
    max_p = draw(st.integers(min_value=1, max_value=4096))
    old = draw(st.integers(min_value=1, max_value=min(max_p, 300)))
    new = draw(st.integers(min_value=1, max_value=min(max_p, 300)))
    return max_p, old, new


@given(rescales())
def test_runs_are_maximal_and_agree_with_flink_ranges(case):
    max_p, old, new = case
    plan = planning.plan_key_groups(max_p, old, new)
    assert plan.runs[0].start == 0 and plan.runs[-1].end == max_p - 1
    for left, right in pairwise(plan.runs):
        assert right.start == left.end + 1
        assert (left.from_subtask, left.to_subtask) != (right.from_subtask, right.to_subtask)
    for run in plan.runs:
        assert keygroups.operator_index_for_key_group(max_p, old, run.start) == run.from_subtask
        assert keygroups.operator_index_for_key_group(max_p, new, run.end) == run.to_subtask
    assert sum(t.key_groups for t in plan.transfers) == max_p
    assert plan.old_loads == tuple(keygroups.key_group_counts(max_p, old))
    if old == new:
        assert plan.moved_key_groups == 0


def test_weights_are_summed_per_run_and_transfer():
    rows = list(range(10))
    plan = planning.plan_key_groups(10, 3, 4, key_group_rows=rows, key_group_bytes=[2 * r for r in rows])
    assert sum(r.rows for r in plan.runs) == 45
    assert plan.moved_rows == sum(r.rows for r in plan.runs if r.moves)
    assert plan.new_row_loads == (0 + 1 + 2, 3 + 4, 5 + 6 + 7, 8 + 9)
    assert sum(t.bytes for t in plan.transfers) == 90


def test_weights_must_cover_every_key_group():
    with pytest.raises(ValueError):
        planning.plan_key_groups(10, 3, 4, key_group_rows=[1, 2])


def test_advise_with_measured_weights():
    weights = [100] + [1] * 127  # one hot key group
    advice = {a.parallelism: a for a in planning.advise_parallelism(128, 2, 4, key_group_weights=weights)}
    assert advice[2].max_load == 100 + 63
    assert advice[4].skew == pytest.approx(131 / (227 / 4))
