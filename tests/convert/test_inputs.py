"""Any input made local or made a kg snapshot, and two inputs of either format compared through one model."""

from __future__ import annotations

import shutil
from pathlib import Path

from keygroup_cli.convert.inputs import as_snapshot, diff_inputs, readable
from keygroup_cli.snapshot import open_snapshot
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
SNAPSHOT = FIXTURES / "snapshots" / "valid"


def test_a_local_input_is_read_where_it_is():
    for path in (SAVEPOINT, SNAPSHOT):
        with readable(path) as local:
            assert Path(local) == path


def test_a_savepoint_is_made_a_scratch_kg_snapshot_that_is_removed_afterwards(tmp_path, monkeypatch):
    monkeypatch.setenv("KG_SCRATCH_DIR", str(tmp_path))
    with as_snapshot(SAVEPOINT) as local:
        converted = Path(local)
        assert converted.is_relative_to(tmp_path)
        snapshot = open_snapshot(converted)
        assert snapshot.manifest.operators
    assert not converted.exists()
    with as_snapshot(SNAPSHOT) as local:
        assert Path(local) == SNAPSHOT


def test_a_savepoint_equals_itself_across_formats_and_a_changed_snapshot_differs(tmp_path):
    with as_snapshot(SAVEPOINT) as local:
        shutil.copytree(local, tmp_path / "as-kg")
    same = diff_inputs(SAVEPOINT, tmp_path / "as-kg")
    assert same.same and same.operators
    assert same.a == str(SAVEPOINT) and same.b == str(tmp_path / "as-kg")
    assert not diff_inputs(SNAPSHOT, SAVEPOINT).same


def test_across_key_types_every_row_is_counted_and_on_its_own_side():
    diff = diff_inputs(SAVEPOINT, FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-string")
    assert not diff.same
    keyed = next(op for op in diff.operators if op.label == "keyed-state")
    assert not keyed.comparable and any("key type long in A but string in B" in n for n in keyed.notes)
    by_name = {s.state: s for s in keyed.states}
    for name in ("sum", "ids", "buckets"):
        state = by_name[name]
        assert state.rows_a > 0 and state.rows_b > 0
        assert (state.only_in_a, state.only_in_b) == (state.rows_a, state.rows_b)
