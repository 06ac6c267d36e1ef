"""The dry run prints the plan the run executes: one library function plans both (``execution.routes.plan``).

``kg plan SNAPSHOT --json`` (what ``kg rescale --dry-run`` prints) and the real ``kg rescale --json`` of the
same arguments are compared field by field, for a savepoint copied at the same maxParallelism, re-keyed to a
new one, with operator migration, written NATIVE, a retained HashMap checkpoint (rewritten in the canonical
layout first) and a kg snapshot. Through the Python API the ``RescalePlan`` ``keygroup_cli.plan`` returns
equals, as a value, the one ``rescale()`` reports it executed. A refusal is the same message from
``kg plan``, ``--dry-run``, the rescale and the library.

What differs by nature, and is compared only where both know it:

- ``mode``: the run says ``regroup`` where a canonical savepoint's key groups were copied as bytes (the
  plan's ``copy`` or ``move``); a NATIVE run at the same maxParallelism says ``copy`` or ``move``;
- ``keyed_rows``, ``moved_rows``: a savepoint's plan reads no keyed state (None); the run counts the
  entries it decoded (re-keyed or NATIVE), None where it copied bytes;
- bytes: the plan estimates keyed bytes from the input's offsets; the run reports the bytes it wrote.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import keygroup_cli as kg_api
from keygroup_cli.core.errors import KgError
from keygroup_cli.core.keygroups import subtask_ranges
from keygroup_cli.planning.migration import MigrationRequest
from tests.conftest import FIXTURES

FLINK = FIXTURES / "flink" / "2.3"
SAVEPOINT = FLINK / "heap-files-p3-maxp128-long"
KG_SNAPSHOT = FIXTURES / "snapshots" / "valid"

#: Fields of one operator both documents hold and must agree on, whatever the input.
SAME = ("uid", "operator_id", "rescaled", "from_parallelism", "to_parallelism")
SAME += ("from_max_parallelism", "to_max_parallelism")
#: The run's ``mode`` for the plan's, by how the keyed state was written.
REGROUPED = {"copy": "regroup", "move": "regroup", "rehash": "rehash", "none": "none"}

CASES = [
    pytest.param(SAVEPOINT, ["--from", "3", "--to", "4"], "regroup", id="same-maxp-copy"),
    pytest.param(SAVEPOINT, ["--from", "3", "--to", "2", "-m", "256"], "decoded", id="rekey-256"),
    pytest.param(
        SAVEPOINT, ["--to", "4", "--rename", "keyed-state=renamed"], "regroup", id="migration-rename"
    ),
    pytest.param(SAVEPOINT, ["--from", "3", "--to", "2", "--format", "native"], "decoded", id="native"),
    pytest.param(FLINK / "heap-checkpoint-p2-maxp128-string", ["--to", "3"], "regroup", id="heap-layout"),
    pytest.param(KG_SNAPSHOT, ["--to", "4"], "kg", id="kg-snapshot"),
    # Async state (State V2) without --format: kg chooses native, and the plan says so as the run does.
    pytest.param(FLINK / "async-forst-native-p3", ["--from", "3", "--to", "4"], "decoded", id="async-native"),
]


def _subtask_ranges_of_runs(op: dict[str, Any]) -> list[list[int]]:
    """Return ``[first, last]`` key group of every new subtask, from a plan's runs."""
    ranges: dict[int, list[int]] = {}
    for run in op["runs"]:
        found = ranges.setdefault(run["to_subtask"], [run["key_group_start"], run["key_group_end"]])
        found[0] = min(found[0], run["key_group_start"])
        found[1] = max(found[1], run["key_group_end"])
    return [ranges[i] for i in sorted(ranges)]


@pytest.mark.parametrize(("source", "args", "keyed"), CASES)
def test_the_dry_run_prints_the_plan_the_run_executes(kg, tmp_path, source, args, keyed):
    plan = kg("plan", source, *args, "--json")
    dry = kg("rescale", source, *args, "--out", tmp_path / "dry", "--dry-run", "--json")
    run = kg("rescale", source, *args, "--out", tmp_path / "out", "--engine", "local", "--json")
    assert plan.exit_code == dry.exit_code == run.exit_code == 0, (plan.stderr, run.stderr)
    assert dry.stdout == plan.stdout and dry.stderr == plan.stderr == run.stderr
    planned, done = plan.json(), run.json()
    for field in ("input", "checkpoint_id", "migration", "output_format", "savepoint_format", "warnings"):
        assert planned[field] == done[field], field
    assert planned["savepoint_format_reason"] == done["savepoint_format_reason"]
    assert [op["operator_id"] for op in planned["operators"]] == [
        op["operator_id"] for op in done["operators"]
    ]
    for op, real in zip(planned["operators"], done["operators"], strict=True):
        for field in SAME:
            assert op[field] == real[field], (op["uid"], field)
        ranges = subtask_ranges(op["to_max_parallelism"], op["to_parallelism"])
        assert [[s["key_group_start"], s["key_group_end"]] for s in real["subtasks"]] == [
            [r.start, r.end] for r in ranges
        ]
        if op["runs"] and op["rescaled"]:
            assert _subtask_ranges_of_runs(op) == [[r.start, r.end] for r in ranges]
        if op["rescaled"] and op["operator_state"] is not None:
            assert op["operator_state"]["to_rows"] == [s["operator_state_rows"] for s in real["subtasks"]]
        if keyed == "kg":
            # A kg snapshot's manifest counts rows: the plan knows them as the run does.
            for field in ("mode", "keyed_rows", "moved_rows"):
                assert op[field] == real[field], (op["uid"], field)
        elif op["mode"] == "none":
            assert real["mode"] == "none" and real["moved_rows"] == op["moved_rows"]
        else:
            # Known only once entries are decoded: the plan reads no keyed state.
            assert op["keyed_rows"] is None and op["moved_rows"] is None and op["key_type"]
            if keyed == "regroup":
                assert real["mode"] == REGROUPED[op["mode"]] and real["keyed_rows"] is None
            elif op["mode"] == "rehash":
                assert real["mode"] == "rehash" and real["keyed_rows"] == real["moved_rows"] > 0
            else:  # NATIVE at the same maxParallelism: every entry written into a database, counted
                assert real["mode"] == op["mode"] and real["keyed_rows"] > 0
    if keyed == "kg":
        assert done["moved_rows"] == sum(op["moved_rows"] or 0 for op in planned["operators"])
    assert not (tmp_path / "dry").exists()


def _api_arguments(source: Path, tmp_path: Path) -> list[tuple[Path, dict[str, Any]]]:
    rename = MigrationRequest(renames=(("keyed-state", "renamed"),))
    return [
        (source, {"from_parallelism": 3, "new_parallelism": 4}),
        (source, {"new_parallelism": 2, "new_max_parallelism": 256}),
        (source, {"new_parallelism": 4, "migration": rename, "operators": ["renamed"]}),
        (source, {"new_parallelism": 2, "output_format": "native"}),
        (FLINK / "heap-checkpoint-p2-maxp128-string", {"new_parallelism": 3}),
        (KG_SNAPSHOT, {"new_parallelism": 4, "operators": ["counter"]}),
    ]


def test_the_library_returns_the_plan_rescale_executes(tmp_path):
    for i, (source, arguments) in enumerate(_api_arguments(SAVEPOINT, tmp_path)):
        planned = kg_api.plan(source, **arguments)
        assert isinstance(planned, kg_api.PlannedRescale)
        result = kg_api.rescale(source, tmp_path / f"out{i}", engine="local", **arguments)
        # The same value, estimates included: the run planned with the same function on the same input.
        assert planned.plan == result.plan, (source.name, arguments)
        kg_snapshot = source == KG_SNAPSHOT
        assert planned.input_format == ("kg-snapshot" if kg_snapshot else "flink-savepoint")
        assert planned.savepoint_format == (
            None if kg_snapshot else arguments.get("output_format", "canonical")
        )
        assert planned.route == ("snapshot" if kg_snapshot else "in-place")


@pytest.mark.parametrize(
    ("source", "args", "arguments", "code"),
    [
        (SAVEPOINT, ["--from", "5", "--to", "4"], {"from_parallelism": 5, "new_parallelism": 4}, 2),
        (SAVEPOINT, ["--to", "200"], {"new_parallelism": 200}, 2),
        (SAVEPOINT, ["--to", "4", "--drop", "nope"], {"new_parallelism": 4, "migration": "drop"}, 2),
        (
            FLINK / "async-forst-native-p3",
            ["--from", "3", "--to", "4", "--format", "canonical"],
            {"new_parallelism": 4, "output_format": "canonical"},
            4,
        ),
        (
            KG_SNAPSHOT,
            ["--to", "4", "--format", "native"],
            {"new_parallelism": 4, "output_format": "native"},
            2,
        ),
    ],
)
def test_a_refusal_is_the_same_from_the_plan_and_the_rescale(kg, tmp_path, source, args, arguments, code):
    if arguments.get("migration") == "drop":
        arguments = {**arguments, "migration": MigrationRequest(drops=("nope",))}
    plan = kg("plan", source, *args)
    dry = kg("rescale", source, *args, "--out", tmp_path / "dry", "--dry-run")
    run = kg("rescale", source, *args, "--out", tmp_path / "out", "--engine", "local")
    assert plan.exit_code == dry.exit_code == run.exit_code == code
    assert plan.stderr == dry.stderr == run.stderr and run.stderr.count("\n") == 1
    with pytest.raises(KgError) as planned:
        kg_api.plan(source, **arguments)
    with pytest.raises(KgError) as rescaled:
        kg_api.rescale(source, tmp_path / "api", engine="local", **arguments)
    assert type(planned.value) is type(rescaled.value)
    assert str(planned.value) == str(rescaled.value) and planned.value.code == rescaled.value.code
    # The CLI names the --from that would work (kg plan and kg rescale alike).
    hint = "; --from 3 selects the operators at 3" if rescaled.value.code == "PARALLELISM_MISMATCH" else ""
    assert run.stderr == f"kg: error: {rescaled.value}{hint}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_copy_of_the_input_plans_alike(tmp_path):
    # The plan names nothing of where it ran: a copy plans to the same value.
    copy = tmp_path / "copy"
    shutil.copytree(SAVEPOINT, copy)
    assert kg_api.plan(copy, 4, from_parallelism=3).plan == kg_api.plan(SAVEPOINT, 4, from_parallelism=3).plan
