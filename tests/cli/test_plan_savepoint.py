"""kg plan SAVEPOINT and kg rescale SAVEPOINT --dry-run: the rescale's plan and refusals, nothing written.

The plan of a Flink savepoint is validated by the functions the rescale validates with, in its order
(``execution.routes.savepoint_plan``), so every refusal is the rescale's own, word for word; keyed state is
never read (bytes per key group come from ``_metadata``'s offsets and the files' sizes), and what it plans is
what the rescale then does.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

from keygroup_cli.core.keygroups import subtask_ranges
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.conftest import FIXTURES
from tests.execution.snapshots import generate

FLINK = FIXTURES / "flink" / "2.3"
SAVEPOINT = FLINK / "heap-files-p3-maxp128-long"


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(
    "case",
    [
        "heap-files-p3-maxp128-long",  # canonical savepoint
        "rocksdb-canonical-snappy-p2-maxp256-string",  # snappy, another key type
        "heap-checkpoint-p2-maxp128-string",  # a retained HashMap checkpoint (heap layout)
        "uid-rocksdb-incremental-p3",  # RocksDB files: no key-group offsets
        "finished-partially-source-p2",  # a partially finished operator
    ],
)
@pytest.mark.parametrize("extra", [[], ["-m", "256"], ["--json"]])
def test_dry_run_prints_exactly_kg_plan_and_writes_nothing(kg, tmp_path, case, extra):
    source = FLINK / case
    before = _tree(source)
    plan = kg("plan", source, "--to", "4", *extra)
    dry = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--dry-run", *extra)
    assert plan.exit_code == dry.exit_code == 0, dry.stderr
    assert dry.stdout == plan.stdout and dry.stderr == plan.stderr
    assert list(tmp_path.iterdir()) == []  # no DEST, no staging, no scratch beside it
    assert _tree(source) == before


def test_the_json_plan_of_a_savepoint(kg):
    result = kg("plan", SAVEPOINT, "--from", "3", "--to", "4", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    doc = result.json()
    assert doc["input_format"] == "flink-savepoint" and doc["checkpoint_id"] == 1 and doc["warnings"] == []
    by_label = {op["uid"] or op["operator_id"]: op for op in doc["operators"]}
    assert len(by_label) == 10  # every operator of _metadata, those without state too
    keyed = by_label["keyed-state"]
    assert keyed["mode"] == "move" and keyed["key_type"] == "long" and keyed["has_state"] is True
    assert (keyed["from_parallelism"], keyed["to_parallelism"]) == (3, 4)
    assert (keyed["from_max_parallelism"], keyed["to_max_parallelism"]) == (128, 128)
    # Rows are unknown without reading keyed state; bytes come from the key-group offsets.
    assert keyed["keyed_rows"] is None and keyed["moved_rows"] is None and keyed["to_row_loads"] is None
    assert keyed["key_group_bytes"] == sum(run["bytes"] for run in keyed["runs"]) > 0
    assert keyed["moved_bytes"] == sum(
        run["bytes"] for run in keyed["runs"] if run["from_subtask"] != run["to_subtask"]
    )
    assert sum(keyed["to_byte_loads"]) == keyed["key_group_bytes"] and len(keyed["to_byte_loads"]) == 4
    assert keyed["moved_key_groups"] == 65 and keyed["to_key_group_loads"] == [32, 32, 32, 32]
    assert by_label["op-state"]["mode"] == "none" and by_label["op-state"]["operator_state"]["to_rows"]
    source = by_label["kg-source"]
    assert source["rescaled"] is False and source["to_parallelism"] == 1  # --from 3 keeps it at 1
    stateless = [op for op in doc["operators"] if not op["has_state"]]
    assert len(stateless) == 5 and all(op["mode"] == "none" for op in stateless)
    rehash = kg("plan", SAVEPOINT, "--from", "3", "--to", "4", "-m", "256", "--json").json()
    keyed = next(op for op in rehash["operators"] if op["uid"] == "keyed-state")
    assert keyed["mode"] == "rehash" and keyed["runs"] == [] and keyed["to_max_parallelism"] == 256
    assert keyed["moved_bytes"] == keyed["key_group_bytes"] > 0
    # Operators left at 1 by --from still take the new maxParallelism, as the rescale writes them.
    assert next(op for op in rehash["operators"] if op["uid"] == "kg-source")["to_max_parallelism"] == 256


def test_the_text_plan_of_a_savepoint(kg):
    result = kg("plan", SAVEPOINT, "--from", "3", "--to", "4")
    assert result.exit_code == 0 and result.stderr == ""
    out = result.stdout
    assert "keyed-state: parallelism 3 -> 4, maxParallelism 128 (key groups move between subtasks)" in out
    assert "65 of 128 key groups change subtask" in out
    assert "keyed bytes moved: " in out and "from _metadata's key-group offsets" in out
    assert "keyed bytes per new subtask: " in out
    assert "kg-source: kept as it is (parallelism 1, maxParallelism 128)" in out
    assert "10 operators, 5 with state; the 5 without state are not shown (--json lists them)" in out
    native = kg("plan", FLINK / "uid-rocksdb-incremental-p3", "--from", "3", "--to", "4")
    assert native.exit_code == 0
    assert " of RocksDB files, which record no key-group offsets" in native.stdout


def test_the_plan_is_what_the_rescale_does(kg, tmp_path):
    for extra in ([], ["-m", "256"]):
        args = ("--from", "3", "--to", "4", *extra)
        plan = kg("plan", SAVEPOINT, *args, "--json").json()
        done = kg(
            "rescale", SAVEPOINT, *args, "--out", tmp_path / f"out{len(extra)}", "--engine", "local", "--json"
        )
        assert done.exit_code == 0, done.stderr
        result = {op["operator_id"]: op for op in done.json()["operators"]}
        for op in plan["operators"]:
            real = result[op["operator_id"]]
            for field in ("rescaled", "from_parallelism", "to_parallelism", "to_max_parallelism"):
                assert op[field] == real[field], (op["uid"], field)
            if op["rescaled"] and op["operator_state"] is not None:
                assert op["operator_state"]["to_rows"] == [s["operator_state_rows"] for s in real["subtasks"]]
            if op["mode"] == "move":
                ranges = subtask_ranges(op["to_max_parallelism"], op["to_parallelism"])
                assert [s["key_group_start"] for s in real["subtasks"]] == [r.start for r in ranges]
                assert op["to_key_group_loads"] == [r.size for r in ranges]
            expected_mode = {"move": "regroup", "copy": "regroup", "rehash": "rehash"}.get(op["mode"])
            if op["rescaled"] and expected_mode is not None:
                assert real["mode"] == expected_mode


def _garble_keyed_blocks(savepoint: Path) -> None:
    """Overwrite every keyed file's key-group blocks (not its header) with garbage of the same size."""
    snapshot = read_flink_metadata(savepoint)
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if not isinstance(handle, KeyGroupsHandle) or not any(handle.offsets):
                continue
            path = Path(str(local_path(handle.delegate, snapshot.directory)))
            data = bytearray(path.read_bytes())
            first = min(o for o in handle.offsets if o)
            data[first:] = b"\xa5" * (len(data) - first)
            path.write_bytes(bytes(data))


def test_the_plan_reads_no_keyed_state(kg, tmp_path):
    copy = tmp_path / "garbled"
    shutil.copytree(SAVEPOINT, copy)
    _garble_keyed_blocks(copy)
    for extra in ([], ["-m", "256"]):
        args = ("--from", "3", "--to", "4", *extra, "--json")
        assert kg("plan", copy, *args).json() == {
            **kg("plan", SAVEPOINT, *args).json(),
            "input": str(copy),
        }
        dry = kg("rescale", copy, *args, "--out", tmp_path / "dry", "--dry-run")
        assert dry.exit_code == 0 and not (tmp_path / "dry").exists()
    # The rescale itself reads the blocks and refuses them: the plan really left them alone.
    real = kg("rescale", copy, "--from", "3", "--to", "4", "--out", tmp_path / "real", "--engine", "local")
    assert real.exit_code == 3 and not (tmp_path / "real").exists()


def _chain_ambiguous_input(kg, tmp_path: Path) -> Path:
    # The source rescaled by kg from 1 to 3: it then shares (3, 128) with keyed-long, so the operators
    # without state at (3, 128) may be chained with either (tests/assess/test_uid_job.py).
    source = tmp_path / "sp3"
    args = ("--to", "3", "-o", "uid-source", "--out", source, "--engine", "local", "-q")
    assert kg("rescale", FLINK / "uid-heap-canonical-p3", *args).exit_code == 0
    return source


@pytest.mark.parametrize(
    ("case", "args", "code", "needle"),
    [
        (SAVEPOINT, ["--to", "200"], 2, "--to 200 is above the state's maxParallelism 128"),
        (SAVEPOINT, ["--to", "0"], 2, "Operator parallelism not within bounds: 0"),
        (SAVEPOINT, ["--to", "4", "-m", "40000"], 2, "-m 40000"),
        (SAVEPOINT, ["--from", "5", "--to", "4"], 2, "--from 5 does not match operator 'op-state'"),
        (SAVEPOINT, ["--to", "4", "-o", "nope"], 2, "no operator 'nope' in the snapshot"),
        ("chain", ["--to", "4", "-o", "keyed-long", "-m", "256"], 2, "may share a task with"),
        (FLINK / "unaligned-checkpoint-p2", ["--to", "3"], 4, "holds in-flight data"),
    ],
)
def test_the_same_refusals_as_the_rescale(kg, tmp_path, case, args, code, needle):
    source = _chain_ambiguous_input(kg, tmp_path) if case == "chain" else case
    before = _tree(source)
    real = kg("rescale", source, *args, "--out", tmp_path / "real", "--engine", "local")
    dry = kg("rescale", source, *args, "--out", tmp_path / "dry", "--dry-run")
    plan = kg("plan", source, *args)
    assert real.exit_code == dry.exit_code == plan.exit_code == code
    assert needle in real.stderr and real.stderr.count("\n") == 1
    assert dry.stderr == plan.stderr == real.stderr
    assert dry.stdout == plan.stdout == ""
    assert not (tmp_path / "real").exists() and not (tmp_path / "dry").exists()
    assert _tree(source) == before


def test_a_partially_finished_operator_is_refused_as_the_rescale_refuses_it(kg, tmp_path):
    from dataclasses import replace

    from keygroup_cli.flink.metadata.reader import SubtaskState, parse_metadata
    from keygroup_cli.flink.metadata.writer import write_metadata

    # keyed-sum's subtask 1 finished too: at parallelism 1 its one subtask would get state.
    source = tmp_path / "keyed-finished"
    shutil.copytree(FLINK / "finished-partially-source-p2", source)
    md = parse_metadata((source / "_metadata").read_bytes())
    ops = tuple(
        replace(op, subtasks=(op.subtasks[0], SubtaskState(1, finished=True)))
        if op.uid == "keyed-sum"
        else op
        for op in md.operators
    )
    (source / "_metadata").write_bytes(write_metadata(replace(md, operators=ops)))
    args = ("--to", "1", "-o", "keyed-sum", "-o", "sum-sink")
    real = kg("rescale", source, *args, "--out", tmp_path / "real", "--engine", "local")
    dry = kg("rescale", source, *args, "--out", tmp_path / "dry", "--dry-run", "--json")
    assert real.exit_code == dry.exit_code == 2
    assert "'keyed-sum' is partially finished" in real.stderr and dry.stderr == real.stderr
    assert dry.json()["error"]["code"] == "FINISHED_SUBTASK_NOT_KEPT"


def test_dry_run_refuses_the_destination_the_rescale_refuses(kg, tmp_path):
    (tmp_path / "taken").mkdir()
    for dest, code in (
        (tmp_path / "taken", "DESTINATION_EXISTS"),
        (SAVEPOINT / "inside", "DESTINATION_INSIDE_INPUT"),
    ):
        real = kg(
            "rescale", SAVEPOINT, "--from", "3", "--to", "4", "--out", dest, "--engine", "local", "--json"
        )
        dry = kg("rescale", SAVEPOINT, "--from", "3", "--to", "4", "--out", dest, "--dry-run", "--json")
        assert real.exit_code == dry.exit_code == 2
        assert real.json()["error"] == dry.json()["error"] and dry.json()["error"]["code"] == code
    assert not (SAVEPOINT / "inside").exists()


def test_the_plan_names_the_output_format(kg, tmp_path, monkeypatch):
    # kg rescale --dry-run --format native prints kg plan --format native: the output it leads to, in text
    # and JSON; the refusals of --format native are the rescale's (a kg snapshot in, no binding).
    args = ("--to", "4", "-m", "256", "--format", "native")
    for extra in ((), ("--json",)):
        plan = kg("plan", SAVEPOINT, *args, *extra)
        dry = kg("rescale", SAVEPOINT, *args, "--out", tmp_path / "out", "--dry-run", *extra)
        assert plan.exit_code == dry.exit_code == 0, plan.stderr
        assert dry.stdout == plan.stdout
    doc = plan.json()
    assert (doc["output_format"], doc["savepoint_format"]) == ("flink-savepoint", "native")
    native = "a NATIVE Flink savepoint, one RocksDB database per new subtask (RocksDB and ForSt restore it)"
    assert kg("plan", SAVEPOINT, *args).stdout.rstrip().endswith(f"output: {native}")
    canonical = kg("plan", SAVEPOINT, "--to", "4", "--json").json()
    assert (canonical["output_format"], canonical["savepoint_format"]) == ("flink-savepoint", "canonical")
    assert (
        kg("plan", SAVEPOINT, "--to", "4")
        .stdout.rstrip()
        .endswith("output: a canonical Flink savepoint (every state backend restores it)")
    )
    snapshot = generate(tmp_path / "snap", ("counter", "string", 50, 2, 128))
    kept = kg("plan", snapshot, "--to", "3", "--json").json()
    assert (kept["output_format"], kept["savepoint_format"]) == ("kg-snapshot", None)
    refused = kg("plan", snapshot, "--to", "3", "--format", "native")
    real = kg("rescale", snapshot, "--to", "3", "--format", "native", "--out", tmp_path / "real")
    assert refused.exit_code == real.exit_code == 2
    assert refused.stderr == real.stderr and "--format native writes a Flink savepoint" in refused.stderr
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # an import of it now fails
    missing = kg("rescale", SAVEPOINT, *args, "--out", tmp_path / "out", "--dry-run", "--json")
    assert missing.exit_code == 6 and missing.json()["error"]["code"] == "ROCKSDB_BINDING_MISSING"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]
