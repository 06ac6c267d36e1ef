"""kg diff on any two inputs: Flink savepoints and kg snapshots, compared by their logical state.

A savepoint is decoded into a kg snapshot in a scratch directory ($KG_SCRATCH_DIR) that is removed
afterwards. Parallelism, maxParallelism (so key groups), compression and files are layout; operators
without state never make two inputs differ, whether a side lists them or not.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from keygroup_cli.snapshot.checksums import file_digest
from tests.conftest import FIXTURES

FLINK = FIXTURES / "flink" / "2.3"
SAVEPOINT = FLINK / "heap-files-p3-maxp128-long"


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "scratch"
    root.mkdir()
    monkeypatch.setenv("KG_SCRATCH_DIR", str(root))
    return root


def _same(kg, a, b) -> None:
    result = kg("diff", a, b)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("same logical state") and result.stderr == ""


def test_a_savepoint_and_its_kg_conversion_hold_the_same_state(kg, tmp_path, scratch):
    assert kg("convert", SAVEPOINT, "--out", tmp_path / "kg", "-q").exit_code == 0
    _same(kg, SAVEPOINT, tmp_path / "kg")
    _same(kg, tmp_path / "kg", SAVEPOINT)
    doc = kg("diff", SAVEPOINT, tmp_path / "kg", "--json").json()
    assert doc["same"] is True and len(doc["operators"]) == 10
    # kg-source has a state handle but no element: no state, as for the 5 operators without a handle.
    # "uid" is null where the operator has none, as in every kg document; "operator_id" names it then.
    assert [op["uid"] or op["operator_id"] for op in doc["operators"] if op["has_state"]] == [
        "op-state",
        "9887c2fb29a6e66df7039a0be00a90dd",
        "async-wait",
        "keyed-state",
    ]
    assert list(scratch.iterdir()) == []  # the conversion is removed


def test_operators_without_state_never_differ(kg, tmp_path, scratch):
    # A kg snapshot that leaves the savepoint's stateless operators out holds the same state.
    kg("convert", SAVEPOINT, "--out", tmp_path / "kg", "-q")
    manifest_path = tmp_path / "kg" / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["operators"] = [
        op
        for op in manifest["operators"]
        if any(f["rows"] for f in op.get("keyed_files", []) + op.get("operator_files", []))
    ]
    manifest_path.write_text(json.dumps(manifest))
    result = kg("diff", SAVEPOINT, tmp_path / "kg", "--json")
    assert result.exit_code == 0, result.stdout
    doc = result.json()
    absent = [op for op in doc["operators"] if op["presence"] == "only_in_a"]
    assert len(absent) == 6 and all(op["same"] and not op["has_state"] for op in absent)
    text = kg("diff", SAVEPOINT, tmp_path / "kg")
    assert "only in a" not in text.stdout and text.stdout.rstrip().endswith("same logical state")


@pytest.mark.parametrize(
    "args",
    [
        ("--to", "4"),  # every operator to 4, the source too: key groups copied as bytes
        ("--from", "3", "--to", "2"),
        ("--from", "3", "--to", "4", "-m", "1024"),  # every key re-hashed into new key groups
        ("--to", "5", "-m", "64"),
    ],
    ids=" ".join,
)
def test_a_savepoint_and_kgs_rescale_of_it_hold_the_same_state(kg, tmp_path, scratch, args):
    out = tmp_path / "rescaled"
    assert kg("rescale", SAVEPOINT, *args, "--out", out, "--engine", "local", "-q").exit_code == 0
    _same(kg, SAVEPOINT, out)
    # The key groups differ with maxParallelism; the rows do not, and they are the state.
    doc = kg("diff", SAVEPOINT, out, "--json").json()
    keyed = next(op for op in doc["operators"] if op["uid"] == "keyed-state")
    assert keyed["same"] and {"buckets", "ids", "sum"} <= {s["name"] for s in keyed["states"]}
    if "-m" in args:
        assert any(note.startswith("maxParallelism 128 -> ") for note in keyed["notes"])
    assert list(scratch.iterdir()) == []


def test_a_savepoint_and_a_kg_snapshot_rescale_of_it(kg, tmp_path, scratch):
    kg("convert", SAVEPOINT, "--out", tmp_path / "kg", "-q")
    kg(
        "rescale",
        tmp_path / "kg",
        "--to",
        "7",
        "-m",
        "256",
        "--out",
        tmp_path / "r",
        "--engine",
        "local",
        "-q",
    )
    _same(kg, SAVEPOINT, tmp_path / "r")


def test_compression_is_layout(kg, scratch):
    _same(kg, SAVEPOINT, FLINK / "heap-snappy-files-p3-maxp128-long")


def test_two_different_savepoints_differ_naming_operator_and_state(kg, scratch):
    other = FLINK / "heap-snappy-files-p4-maxp128-long"  # the job run at 4: other union counts
    result = kg("diff", SAVEPOINT, other)
    assert result.exit_code == 1 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[-1] == "different"
    assert any("op-state" in line and "union-counts" in line and "operator-union" in line for line in lines)
    doc = kg("diff", SAVEPOINT, other, "--json").json()
    assert doc["same"] is False
    (differing,) = [op for op in doc["operators"] if not op["same"]]
    assert differing["uid"] == "op-state"
    assert [s["name"] for s in differing["states"] if (s["only_in_a"], s["only_in_b"]) != (0, 0)] == [
        "union-counts"
    ]


def _change_one_value(snapshot: Path, uid: str, state: str) -> None:
    """Change the value of one keyed row of ``state`` in a kg snapshot (manifest digests kept right)."""
    manifest_path = snapshot / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    op = next(o for o in manifest["operators"] if o.get("uid") == uid)
    for entry in op["keyed_files"]:
        path = snapshot / entry["path"]
        table = pq.read_table(path)
        rows = pc.equal(table.column("state").cast(pa.string()), state)
        if not pc.any(rows).as_py():
            continue
        index = pc.index(rows, True).as_py()
        values = table.column("value").to_pylist()
        values[index] = values[index][:-1] + bytes([values[index][-1] ^ 0x01])
        column = table.schema.get_field_index("value")
        table = table.set_column(
            column, table.schema.field(column), pa.array(values, table.schema.field(column).type)
        )
        pq.write_table(table, path)
        entry["bytes"], entry["xxh64"] = file_digest(path)
        manifest_path.write_text(json.dumps(manifest))
        return
    raise AssertionError(f"no row of {state!r}")


def test_a_savepoint_with_one_value_changed_differs_there(kg, tmp_path, scratch):
    kg("convert", SAVEPOINT, "--out", tmp_path / "kg", "-q")
    _change_one_value(tmp_path / "kg", "keyed-state", "sum")
    assert kg("verify", tmp_path / "kg").exit_code == 0
    changed = tmp_path / "changed-savepoint"
    assert kg("convert", tmp_path / "kg", "--to-flink", "--out", changed, "-q").exit_code == 0
    result = kg("diff", SAVEPOINT, changed, "--json")
    assert result.exit_code == 1
    (differing,) = [op for op in result.json()["operators"] if not op["same"]]
    assert differing["uid"] == "keyed-state"
    (state,) = [s for s in differing["states"] if (s["only_in_a"], s["only_in_b"]) != (0, 0)]
    assert (state["name"], state["kind"], state["only_in_a"], state["only_in_b"]) == ("sum", "value", 1, 1)
    text = kg("diff", SAVEPOINT, changed)
    assert text.exit_code == 1 and "keyed-state" in text.stdout and "sum" in text.stdout
    # Against a rescale at a new maxParallelism of the original, the change still shows.
    kg(
        "rescale",
        SAVEPOINT,
        "--from",
        "3",
        "--to",
        "4",
        "-m",
        "256",
        "--out",
        tmp_path / "m",
        "--engine",
        "local",
        "-q",
    )
    assert kg("diff", tmp_path / "m", changed).exit_code == 1
    assert list(scratch.iterdir()) == []


def test_quiet_prints_nothing_the_exit_code_answers(kg, tmp_path, scratch):
    same = kg("diff", "-q", SAVEPOINT, FLINK / "heap-snappy-files-p3-maxp128-long")
    assert (same.exit_code, same.stdout, same.stderr) == (0, "", "")
    different = kg("diff", SAVEPOINT, FLINK / "heap-snappy-files-p4-maxp128-long", "-q")
    assert (different.exit_code, different.stdout, different.stderr) == (1, "", "")
    snapshots = FIXTURES / "snapshots"
    for a, b, code in (("valid", "mismatched-maxp", 0), ("valid", "valid", 0)):
        quiet = kg("diff", "-q", snapshots / a, snapshots / b)
        assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (code, "", "")
    # --json is asked for explicitly: it still prints its one document.
    assert kg("diff", "-q", "--json", SAVEPOINT, SAVEPOINT).json()["same"] is True
    # An error is still one line on stderr.
    missing = kg("diff", "-q", SAVEPOINT, tmp_path / "nope")
    assert missing.exit_code == 3 and missing.stdout == "" and missing.stderr.count("\n") == 1


def test_an_unreadable_layout_is_refused_and_scratch_removed(kg, tmp_path, scratch):
    copy = tmp_path / "broken"
    shutil.copytree(SAVEPOINT, copy)
    state_files = (p for p in copy.iterdir() if p.name != "_metadata" and p.suffix != ".json")
    keyed = max(state_files, key=lambda p: p.stat().st_size)
    keyed.write_bytes(keyed.read_bytes()[: keyed.stat().st_size // 2])  # truncated
    result = kg("diff", SAVEPOINT, copy)
    assert result.exit_code == 3 and result.stdout == "" and result.stderr.count("\n") == 1
    assert list(scratch.iterdir()) == []
