"""kg plan SNAPSHOT: the rescale plan from the manifest alone, and kg rescale --dry-run printing the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.core import keygroups
from keygroup_cli.snapshot import open_snapshot
from tests.execution.snapshots import generate


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return generate(
        tmp_path_factory.mktemp("plan") / "in",
        ("counter", "string", 600, 3, 10),
        ("ids", "long", 300, 2, 128),
    )


def test_plan_snapshot_json_weights_runs_with_manifest_rows(kg, source):
    result = kg("plan", source, "--to", "4", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["command"] == "plan" and doc["to_parallelism"] == 4
    manifest = open_snapshot(source).manifest
    counter = next(op for op in doc["operators"] if op["uid"] == "counter")
    rows = [n for f in manifest.operator("counter").keyed_files for n in f.key_group_rows]
    assert counter["mode"] == "move"
    for run in counter["runs"]:
        assert run["rows"] == sum(rows[run["key_group_start"] : run["key_group_end"] + 1])
        assert run["from_subtask"] == keygroups.operator_index_for_key_group(10, 3, run["key_group_start"])
        assert run["to_subtask"] == keygroups.operator_index_for_key_group(10, 4, run["key_group_end"])
    assert counter["moved_rows"] == sum(
        r["rows"] for r in counter["runs"] if r["from_subtask"] != r["to_subtask"]
    )
    expected_loads = [sum(rows[r.start : r.end + 1]) for r in keygroups.subtask_ranges(10, 4)]
    assert counter["to_row_loads"] == expected_loads
    assert counter["to_row_skew"] == max(expected_loads) / (sum(expected_loads) / 4)
    assert counter["operator_state"]["unchanged"] is False


def test_plan_snapshot_reads_no_keyed_data(kg, source, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    for path in copy.rglob("keyed-*.parquet"):
        path.unlink()
    assert kg("plan", copy, "--to", "4", "--json").json() == {
        **kg("plan", source, "--to", "4", "--json").json(),
        "input": str(copy),
    }


def test_plan_snapshot_operator_and_rehash(kg, source):
    result = kg("plan", source, "--to", "5", "--operator", "counter", "-m", "64", "--json")
    assert result.exit_code == 0, result.stderr
    counter, ids = result.json()["operators"]
    assert counter["mode"] == "rehash" and counter["to_max_parallelism"] == 64
    assert counter["runs"] == [] and counter["to_row_loads"] is None
    assert counter["moved_rows"] == counter["keyed_rows"]
    assert ids["rescaled"] is False and ids["to_parallelism"] == 2


def test_plan_snapshot_text(kg, source):
    result = kg("plan", source, "--to", "4")
    assert result.exit_code == 0, result.stderr
    assert "counter: parallelism 3 -> 4, maxParallelism 10" in result.stdout
    assert "keyed rows per new subtask:" in result.stdout
    assert "operator state redistributed" in result.stdout


@pytest.mark.parametrize("extra", [[], ["--json"], ["--operator", "ids", "-m", "256", "--from", "2"]])
def test_rescale_dry_run_prints_exactly_the_plan(kg, source, tmp_path, extra):
    plan = kg("plan", source, "--to", "4", *extra)
    dry = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--dry-run", *extra)
    assert plan.exit_code == dry.exit_code == 0, dry.stderr
    assert dry.stdout == plan.stdout and dry.stderr == plan.stderr
    # ids runs at 2, counter at 3: without --from both go to 4, and both commands name ids.
    if "--from" in extra:
        assert plan.stderr == ""
    else:
        assert plan.stderr.startswith("kg: warning: without --from or --operator every operator is rescaled")
        assert "'ids' at 2" in plan.stderr and plan.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_plan_snapshot_refusals(kg, source):
    result = kg("plan", source, "--to", "4", "--from", "5")
    assert result.exit_code == 2
    assert result.stderr.startswith("kg: error: --from 5 does not match operator 'counter'")
    missing = kg("plan", source.parent / "nope", "--to", "4")
    assert missing.exit_code == 3


def test_plan_without_snapshot_still_needs_from_and_max_parallelism(kg):
    result = kg("plan", "--to", "4")
    assert result.exit_code == 2
    assert "give --from and --max-parallelism" in result.stderr


def test_plan_and_dry_run_on_a_savepoint_plan_it(kg, tmp_path):
    # Once refused (exit 4, PLAN_NEEDS_KG_SNAPSHOT); tests/cli/test_plan_savepoint.py has the rest.
    savepoint = Path(__file__).parents[2] / "fixtures" / "flink" / "2.3" / "heap-files-p3-maxp128-long"
    plan = kg("plan", savepoint, "--from", "3", "--to", "4")
    dry = kg("rescale", savepoint, "--from", "3", "--to", "4", "--out", tmp_path / "o", "--dry-run")
    assert plan.exit_code == dry.exit_code == 0 and dry.stdout == plan.stdout
    assert "keyed-state: parallelism 3 -> 4" in plan.stdout
    assert not (tmp_path / "o").exists()
