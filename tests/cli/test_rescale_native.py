"""``kg rescale --format native`` and the inputs it refuses, and the changelog checkpoint kg refuses (#23).

Real Flink restores of the NATIVE outputs are in tests/restore/test_native.py; here the CLI's side: the
option, its refusals (one line, exit code), and a real changelog-backend checkpoint (Flink 2.3,
``state.changelog.enabled``) refused with the line that says how to get a savepoint instead.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.execution.snapshots import generate

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "2.3"
CHANGELOG = FLINK / "changelog-checkpoint-p2-maxp128-string" / "0000000000006b67000000000000001b" / "chk-2"


def test_changelog_checkpoint_is_refused_with_how_to_get_a_savepoint(kg, tmp_path):
    for extra in ((), ("--format", "native")):
        result = kg("rescale", CHANGELOG, "--to", "3", "--out", tmp_path / "out", "--engine", "local", *extra)
        assert result.exit_code == 4
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1
        assert "changelog state backend (state.changelog.enabled" in lines[0]
        assert lines[0].endswith("flink savepoint --type canonical 0000000000006b67000000000000001b")
        assert not (tmp_path / "out").exists()


def test_native_needs_a_savepoint_input(kg, tmp_path):
    snapshot = generate(tmp_path / "snap", ("counter", "string", 50, 2, 128))
    result = kg("rescale", snapshot, "--to", "3", "--out", tmp_path / "out", "--format", "native")
    assert result.exit_code == 2
    assert "--format native writes a Flink savepoint" in result.stderr
    assert not (tmp_path / "out").exists()


def test_native_output_of_a_snappy_canonical_savepoint(kg, tmp_path):
    # Copied key groups keep the input's snappy frames: the databases are built from the decoded blocks.
    source = FLINK / "rocksdb-canonical-snappy-p3-maxp128-long"
    out = tmp_path / "out"
    args = ("--to", "4", "--out", out, "--engine", "local", "--format", "native", "--json")
    result = kg("rescale", source, *args)
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert (doc["output_format"], doc["savepoint_format"]) == ("flink-savepoint", "native")
    keyed = [op for op in doc["operators"] if op["keyed_rows"]]
    assert len(keyed) == 2 and {op["mode"] for op in keyed} == {"move"}
    assert doc["savepoint"]["keyed_files"] == 8
    for op in keyed:  # every entry went through a write task: counted, per subtask too
        assert op["keyed_rows"] == sum(s["keyed_rows"] for s in op["subtasks"]) and op["moved_rows"] is None
    operators = read_flink_metadata(out).metadata.operators
    handles = [s.managed_keyed_state for op in operators for s in op.subtasks]
    native = [h for h in handles if isinstance(h, IncrementalKeyedHandle)]
    assert len(native) == 2 * 4
    result = kg("verify", out)
    assert result.exit_code == 0, result.stdout + result.stderr


def test_native_without_rocksdict_is_refused_before_anything_is_written(kg, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # an import of it now fails
    source = FLINK / "heap-files-p3-maxp128-long"  # canonical: reading it needs no binding
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--format", "native", "--json")
    assert result.exit_code == 6
    assert result.json()["error"]["code"] == "ROCKSDB_BINDING_MISSING"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging, no scratch


def test_raw_keyed_state_that_is_not_timers_is_exit_4_and_one_line(kg, tmp_path):
    # AsyncJob's ForSt savepoint (async state API) with one subtask's raw keyed-state stream replaced:
    # no longer Flink's timer sections, so kg does not know how to redistribute it.
    source = tmp_path / "savepoint"
    shutil.copytree(FLINK / "async-forst-native-p3", source)
    raw = next(
        s.raw_keyed_state
        for op in read_flink_metadata(source).metadata.operators
        for s in op.subtasks
        if s.raw_keyed_state is not None
    )
    path = source / raw.delegate.relative_path
    path.write_bytes(b"\x00" * path.stat().st_size)
    args = ("--from", "3", "--to", "4", "--out", tmp_path / "out", "--format", "native", "--engine", "local")
    for command in (
        ("rescale", source, *args),
        ("plan", source, "--from", "3", "--to", "4", "--format", "native"),
    ):
        result = kg(*command)
        assert result.exit_code == 4, command
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "raw keyed state that is not Flink's timers" in lines[0]
    assert not (tmp_path / "out").exists()
    plan = (
        "plan",
        FLINK / "async-forst-native-p3",
        "--from",
        "3",
        "--to",
        "4",
        "-m",
        "256",
        "--format",
        "native",
    )
    assert kg(*plan).exit_code == 0


def test_canonical_output_of_async_state_is_exit_4_and_one_line(kg, tmp_path):
    # State of the async state API (KEY_VALUE_V2) restores from no canonical savepoint (HashMap and RocksDB
    # fail on the type, ForSt takes NATIVE ones only): asked for explicitly, the plan and the rescale say
    # --format native.
    source = FLINK / "async-forst-native-p3"
    args = ("--from", "3", "--to", "4", "--format", "canonical")
    for command in (
        ("rescale", source, *args, "--out", tmp_path / "out", "--engine", "local"),
        ("plan", source, *args),
    ):
        result = kg(*command)
        assert result.exit_code == 4, command
        lines = result.stderr.strip().splitlines()
        assert (
            len(lines) == 1
            and "KEY_VALUE_V2: count" in lines[0]
            and lines[0].endswith("pass --format native")
        )
    assert not (tmp_path / "out").exists()


#: What kg says when it chose NATIVE itself for async state.
CHOSEN = (
    "operator 'async-keyed' holds state of the async state API (KEY_VALUE_V2: count), which Flink restores "
    "only from a NATIVE savepoint"
)


def test_async_state_without_format_is_written_native_and_said_so(kg, tmp_path):
    # Without --format kg writes what Flink restores: NATIVE, in plain text and in --json; the plan and the
    # dry run show the same choice before anything is written.
    source = FLINK / "async-forst-native-p3"
    args = ("--from", "3", "--to", "4")
    plan = kg("plan", source, *args, "--json")
    dry = kg("rescale", source, *args, "--out", tmp_path / "dry", "--dry-run")
    assert plan.exit_code == dry.exit_code == 0, plan.stderr + dry.stderr
    assert (plan.json()["savepoint_format"], plan.json()["savepoint_format_reason"]) == ("native", CHOSEN)
    assert "output: a NATIVE Flink savepoint" in dry.stdout
    assert f"--format native chosen: {CHOSEN} (--format canonical refuses it)" in " ".join(dry.stdout.split())
    out = tmp_path / "out"
    run = kg("rescale", source, *args, "--out", out, "--engine", "local", "-q")
    assert run.exit_code == 0, run.stderr
    text = " ".join(run.stdout.split())
    assert f"wrote NATIVE Flink savepoint {out}" in text and f"--format native chosen: {CHOSEN}" in text
    # What was written is NATIVE: every keyed handle is a RocksDB database's, and kg verify accepts it.
    handles = [
        s.managed_keyed_state for op in read_flink_metadata(out).metadata.operators for s in op.subtasks
    ]
    keyed = [h for h in handles if h is not None]
    assert len(keyed) == 4 and all(isinstance(h, IncrementalKeyedHandle) for h in keyed)
    assert kg("verify", out).exit_code == 0
    doc = kg("rescale", source, *args, "--out", tmp_path / "json", "--engine", "local", "--json").json()
    assert (doc["savepoint_format"], doc["savepoint_format_reason"]) == ("native", CHOSEN)


def test_a_format_kg_need_not_choose_has_no_reason(kg, tmp_path):
    # A canonical savepoint without async state keeps the default, canonical; --format native given is
    # the user's choice: neither carries a reason.
    source = FLINK / "heap-files-p3-maxp128-long"
    plain = kg("plan", source, "--from", "3", "--to", "4", "--json").json()
    given = kg(
        "plan", FLINK / "async-forst-native-p3", "--from", "3", "--to", "4", "--format", "native", "--json"
    )
    assert (plain["savepoint_format"], plain["savepoint_format_reason"]) == ("canonical", None)
    assert (given.json()["savepoint_format"], given.json()["savepoint_format_reason"]) == ("native", None)
    assert (
        "chosen"
        not in kg(
            "plan", FLINK / "async-forst-native-p3", "--from", "3", "--to", "4", "--format", "native"
        ).stdout
    )
