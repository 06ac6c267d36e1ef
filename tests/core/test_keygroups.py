"""Key-group math against vectors produced by Flink 2.3 itself, plus the invariants Flink relies on."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keygroup_cli.core import keygroups
from keygroup_cli.core.errors import InvalidArgumentError
from tests.conftest import FIXTURES

int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def test_murmur_and_key_groups_match_flink(key_vectors):
    for row in key_vectors:
        assert keygroups.murmur_hash(row["hash_code"]) == row["murmur"], row
        for max_p, group in row["key_groups"].items():
            assert keygroups.key_group_for_hash(row["hash_code"], int(max_p)) == group, row
        for spec, index in row["operator_index"].items():
            max_p, p = map(int, spec.split("/"))
            group = row["key_groups"][str(max_p)]
            assert keygroups.operator_index_for_key_group(max_p, p, group) == index, row


def test_vectorised_key_groups_match_flink(key_vectors):
    codes = np.array([row["hash_code"] for row in key_vectors], dtype=np.int32)
    assert keygroups.murmur_hash_array(codes).tolist() == [row["murmur"] for row in key_vectors]
    for max_p in ("10", "128", "4096", "32768"):
        groups = keygroups.key_groups_for_hashes(codes, int(max_p))
        assert groups.tolist() == [row["key_groups"][max_p] for row in key_vectors]
    groups = keygroups.key_groups_for_hashes(codes, 128)
    assert keygroups.operator_indexes_for_key_groups(groups, 128, 3).tolist() == [
        row["operator_index"]["128/3"] for row in key_vectors
    ]


def test_subtask_ranges_match_flink(range_vectors):
    assert len(range_vectors["ranges"]) > 1000
    for case in range_vectors["ranges"]:
        ranges = keygroups.subtask_ranges(case["max_parallelism"], case["parallelism"])
        assert [[r.start, r.end] for r in ranges] == case["ranges"], case["max_parallelism"]


def test_default_max_parallelism_matches_flink(range_vectors):
    spec = range_vectors["default_max_parallelism"]
    first = spec["first_parallelism"]
    computed = [keygroups.default_max_parallelism(p) for p in range(first, first + len(spec["values"]))]
    assert computed == spec["values"]


def _flink_errors(call: str) -> list[dict]:
    rows = json.loads((FIXTURES / "vectors" / "errors.json").read_text())
    return [r for r in rows if r["call"] == call]


def test_bounds_errors_use_flinks_messages():
    cases = _flink_errors("KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex")
    assert cases
    for case in cases:
        if case["exception"] is None:
            rng = keygroups.key_group_range_for_operator_index(
                case["max_parallelism"], case["parallelism"], case["operator_index"]
            )
            assert [rng.start, rng.end] == case["result"]
            continue
        with pytest.raises(InvalidArgumentError) as info:
            keygroups.key_group_range_for_operator_index(
                case["max_parallelism"], case["parallelism"], case["operator_index"]
            )
        if case["message"] is not None:
            assert info.value.message == case["message"]


def test_default_max_parallelism_errors_match_flink():
    for case in _flink_errors("KeyGroupRangeAssignment.computeDefaultMaxParallelism"):
        if case["exception"] is None:
            assert keygroups.default_max_parallelism(case["parallelism"]) == case["result"]
        else:
            with pytest.raises(InvalidArgumentError, match="^" + case["message"] + "$"):
                keygroups.default_max_parallelism(case["parallelism"])


def test_operator_ids_match_flink():
    rows = json.loads((FIXTURES / "vectors" / "operator_ids.json").read_text())
    assert len(rows) >= 30
    for row in rows:
        assert keygroups.operator_id_for_uid(row["uid"]) == row["operator_id"]


@given(int32s)
def test_vectorised_murmur_equals_scalar(code):
    assert int(keygroups.murmur_hash_array(np.array([code], dtype=np.int32))[0]) == keygroups.murmur_hash(
        code
    )


def test_murmur_folds_int_min_to_zero():
    # The one hash whose negation overflows; Flink maps it to 0 rather than leaving it negative.
    codes = np.arange(-(2**31), -(2**31) + 2_000_000, dtype=np.int64).astype(np.int32)
    vector = keygroups.murmur_hash_array(codes)
    assert (vector >= 0).all()
    assert [keygroups.murmur_hash(int(c)) for c in codes[:1000]] == vector[:1000].tolist()


@st.composite
def bounds(draw):
    max_p = draw(st.integers(min_value=1, max_value=keygroups.UPPER_BOUND_MAX_PARALLELISM))
    p = draw(st.integers(min_value=1, max_value=min(max_p, 2000)))
    return max_p, p


@given(bounds())
def test_ranges_partition_all_key_groups(case):
    max_p, p = case
    ranges = keygroups.subtask_ranges(max_p, p)
    assert len(ranges) == p
    assert ranges[0].start == 0 and ranges[-1].end == max_p - 1
    for left, right in pairwise(ranges):
        assert right.start == left.end + 1  # contiguous and disjoint
    sizes = [r.size for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == max_p
    for index, rng in enumerate(ranges):
        assert keygroups.operator_index_for_key_group(max_p, p, rng.start) == index
        assert keygroups.operator_index_for_key_group(max_p, p, rng.end) == index


@given(st.integers(min_value=-5, max_value=40000), st.integers(min_value=-5, max_value=40000))
def test_bounds_are_exactly_flinks(max_p, p):
    valid = 1 <= p <= max_p <= keygroups.UPPER_BOUND_MAX_PARALLELISM
    if valid:
        keygroups.require_parallelism_in_bounds(max_p, p)
    else:
        with pytest.raises(InvalidArgumentError):
            keygroups.require_parallelism_in_bounds(max_p, p)


def test_prefix_bytes_and_skew():
    assert keygroups.key_group_prefix_bytes(128) == 1
    assert keygroups.key_group_prefix_bytes(129) == 2
    assert keygroups.skew(keygroups.key_group_counts(128, 100)) == pytest.approx(1.5625)
    assert keygroups.skew([]) == 1.0


def test_range_intersection():
    a = keygroups.KeyGroupRange(0, 42)
    assert a.intersection(keygroups.KeyGroupRange(40, 60)) == keygroups.KeyGroupRange(40, 42)
    assert a.intersection(keygroups.KeyGroupRange(50, 60)).size == 0
    assert 42 in a and 43 not in a


def test_a_uid_names_an_operator_by_name_where_recorded_and_by_hash_where_not() -> None:
    # 72109e47… is what Flink 1.17 recorded for uid "keyed-string" (fixtures/flink/1.17, V4: no uids).
    keyed_string = "72109e4753cd9f8017460adae3d9ed0f"
    assert keygroups.operator_id_for_uid("keyed-string") == keyed_string
    assert keygroups.names_operator("keyed-string", None, keyed_string)  # V3/V4: by hash
    assert keygroups.names_operator("keyed-string", "keyed-string", keyed_string)  # V5+: by name
    assert keygroups.names_operator(keyed_string, None, keyed_string)  # the id itself
    assert keygroups.names_operator(keyed_string.upper(), "x", keyed_string)
    assert not keygroups.names_operator("keyed-long", None, keyed_string)
    # Where the metadata records a uid, only that uid (or the id) names the operator.
    assert not keygroups.names_operator("keyed-string", "other", keyed_string)


def test_even_runs_cut_sizes_into_runs_of_similar_totals_and_no_smaller_than_asked() -> None:
    sizes = [10, 10, 10, 10, 10, 10, 10, 10]
    assert _runs(sizes, 4) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    # At least 30 bytes a run: 80 bytes make two runs, however many pieces were asked for.
    assert _runs(sizes, 16, min_bytes=30) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert _runs(sizes, 16, min_bytes=100) == [tuple(range(8))]
    # A run ends once it holds its share; every item once, in order; no items is one empty run.
    assert _runs([5, 100, 5], 8) == [(0, 1), (2,)]
    assert _runs([100, 1, 1, 1, 1], 2) == [(0,), (1, 2, 3, 4)]
    assert _runs([], 4) == [()]


def _runs(sizes: list[int], pieces: int, min_bytes: int = 0) -> list[tuple[int, ...]]:
    return [tuple(run) for run in keygroups.even_runs(sizes, pieces, min_bytes)]
