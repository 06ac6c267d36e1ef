from __future__ import annotations

from itertools import pairwise

from keygroup_cli.core import keygroups


def test_plan_runs_cover_every_key_group_in_order(kg):
    result = kg("plan", "--from", "3", "--to", "4", "--max-parallelism", "128", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    runs = doc["runs"]
    assert runs[0]["key_group_start"] == 0 and runs[-1]["key_group_end"] == 127
    for left, right in pairwise(runs):
        assert right["key_group_start"] == left["key_group_end"] + 1
        assert (left["from_subtask"], left["to_subtask"]) != (right["from_subtask"], right["to_subtask"])
    for run in runs:
        for group in (run["key_group_start"], run["key_group_end"]):
            assert run["from_subtask"] == keygroups.operator_index_for_key_group(128, 3, group)
            assert run["to_subtask"] == keygroups.operator_index_for_key_group(128, 4, group)
    moved = sum(
        r["key_group_end"] - r["key_group_start"] + 1 for r in runs if r["from_subtask"] != r["to_subtask"]
    )
    assert doc["moved_key_groups"] == moved
    assert doc["moved_fraction"] == moved / 128
    assert doc["from_key_group_loads"] == [43, 43, 42] and doc["to_key_group_loads"] == [32, 32, 32, 32]
    assert doc["to_key_group_skew"] == 1.0


def test_plan_text(kg):
    result = kg("plan", "--from", "3", "--to", "4", "-m", "10")
    assert result.exit_code == 0
    assert "5 of 10 key groups change subtask (50.0%)" in result.stdout
    assert "1.20 -> 1.20" in result.stdout


def test_plan_refuses_out_of_bounds(kg):
    result = kg("plan", "--from", "3", "--to", "200", "-m", "128")
    assert result.exit_code == 2
    # Flink's words, with the option, the bound and the fix.
    assert result.stderr == (
        "kg: error: --to 200 is above --max-parallelism 128: Maximum parallelism must not be smaller than "
        "parallelism. (choose --max-parallelism 256 or more, or --to 128 or less)\n"
    )
