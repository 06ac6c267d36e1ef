from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from keygroup_cli.snapshot.checksums import file_digest
from keygroup_cli.snapshot.diff import diff_snapshots
from keygroup_cli.snapshot.synthetic import SyntheticOperator, generate_snapshot


def _gen(dest: Path, *ops: SyntheticOperator, seed: int = 1) -> Path:
    generate_snapshot(dest, ops, seed=seed, created_at="2026-01-01T00:00:00Z")
    return dest


def _rewrite(
    snap: Path, kind: str, index: int, transform: Callable[[pa.Table], pa.Table], op: int = 0
) -> None:
    manifest = json.loads((snap / "_manifest.json").read_text())
    entry = manifest["operators"][op][kind][index]
    path = snap / entry["path"]
    table = transform(pq.read_table(path))
    pq.write_table(table, path)
    entry["bytes"], entry["xxh64"] = file_digest(path)
    entry["rows"] = table.num_rows
    if kind == "keyed_files":
        counts = [0] * (entry["key_group_end"] - entry["key_group_start"] + 1)
        for kg in table.column("key_group").to_pylist():
            counts[kg - entry["key_group_start"]] += 1
        entry["key_group_rows"] = counts
    (snap / "_manifest.json").write_text(json.dumps(manifest))


def _states(result, label: str) -> dict[str, tuple[int, int]]:
    op = next(o for o in result.operators if o.label == label)
    return {s.state: (s.only_in_a, s.only_in_b) for s in op.states if not s.same}


@pytest.mark.parametrize("key_type", ["string", "long", "int", "boolean", "binary"])
@pytest.mark.parametrize(("p_b", "max_b"), [(5, 128), (1, 256)])
def test_same_state_at_other_parallelism_and_max_parallelism(
    tmp_path: Path, key_type: str, p_b: int, max_b: int
) -> None:
    keys = 2 if key_type == "boolean" else 150
    a = _gen(tmp_path / "a", SyntheticOperator("op", key_type, keys, 3, 128))
    b = _gen(tmp_path / "b", SyntheticOperator("op", key_type, keys, p_b, max_b))
    result = diff_snapshots(a, b)
    assert result.same
    assert result.operators[0].notes[0] == f"parallelism 3 -> {p_b}"


def test_different_seed_differs_everywhere(tmp_path: Path) -> None:
    a = _gen(tmp_path / "a", SyntheticOperator("op", "long", 50, 2, 128), seed=1)
    b = _gen(tmp_path / "b", SyntheticOperator("op", "long", 50, 2, 128), seed=2)
    result = diff_snapshots(a, b)
    assert not result.same
    count = next(s for s in result.operators[0].states if s.state == "count")
    assert (count.rows_a, count.only_in_a, count.only_in_b) == (50, 50, 50)


def test_one_changed_value_and_one_duplicated_row(tmp_path: Path) -> None:
    a = _gen(tmp_path / "a", SyntheticOperator("op", "string", 80, 2, 16))
    b = _gen(tmp_path / "b", SyntheticOperator("op", "string", 80, 4, 16))

    def change(t: pa.Table) -> pa.Table:
        states = t.column("state").cast(pa.string()).to_pylist()
        values = t.column("value").to_pylist()
        values[states.index("seen")] = b"changed"
        dup = states.index("events")
        t = t.set_column(5, "value", pa.array(values, pa.binary()))
        return pa.concat_tables([t.slice(0, dup + 1), t.slice(dup, 1), t.slice(dup + 1)])

    _rewrite(b, "keyed_files", 1, change)
    result = diff_snapshots(a, b)
    assert _states(result, "op") == {"seen": (1, 1), "events": (0, 1)}


def test_operators_only_on_one_side(tmp_path: Path) -> None:
    a = _gen(
        tmp_path / "a", SyntheticOperator("x", "long", 5, 1, 128), SyntheticOperator("y", "long", 5, 1, 128)
    )
    b = _gen(
        tmp_path / "b", SyntheticOperator("x", "long", 5, 2, 128), SyntheticOperator("z", "long", 5, 1, 128)
    )
    result = diff_snapshots(a, b)
    assert [(o.label, o.presence, o.same) for o in result.operators] == [
        ("x", "both", True),
        ("y", "only_in_a", False),
        ("z", "only_in_b", False),
    ]


def test_operator_state_semantics(tmp_path: Path) -> None:
    a = _gen(tmp_path / "a", SyntheticOperator("op", "long", 5, 2, 128))
    b = _gen(tmp_path / "b", SyntheticOperator("op", "long", 5, 2, 128))
    a_tables = [pq.read_table(p) for p in sorted((a / "op").glob("operator-*"))]
    union = pa.concat_tables([t.filter(pc.equal(t.column("state"), "offsets")) for t in a_tables])

    def every_subtask_gets_all_union_elements(t: pa.Table) -> pa.Table:
        rest = t.filter(pc.not_equal(t.column("state"), "offsets"))
        positions = pa.array(range(union.num_rows), pa.int32())
        copy = union.set_column(1, pa.field("position", pa.int32(), nullable=False), positions)
        return pa.concat_tables([rest, copy])

    for i in range(2):
        _rewrite(b, "operator_files", i, every_subtask_gets_all_union_elements)
    assert diff_snapshots(a, b).same  # union state: copies are layout

    def drop_first_split_element(t: pa.Table) -> pa.Table:
        return t.slice(1)

    _rewrite(b, "operator_files", 0, drop_first_split_element)
    assert _states(diff_snapshots(a, b), "op") == {"buffer": (1, 0)}


def test_broadcast_maps(tmp_path: Path) -> None:
    a = _gen(tmp_path / "a", SyntheticOperator("op", "long", 5, 2, 128))
    b = _gen(tmp_path / "b", SyntheticOperator("op", "long", 5, 7, 128))
    assert diff_snapshots(a, b).same  # seven copies of the one map

    def change_rule(t: pa.Table) -> pa.Table:
        values = t.column("value").to_pylist()
        values[-1] = b"other"
        return t.set_column(3, "value", pa.array(values, pa.binary()))

    _rewrite(b, "operator_files", 3, change_rule)
    assert _states(diff_snapshots(a, b), "op") == {"rules": (0, 1)}


def test_kind_mismatch_is_not_comparable(tmp_path: Path) -> None:
    a = _gen(tmp_path / "a", SyntheticOperator("op", "long", 5, 1, 128))
    b = _gen(tmp_path / "b", SyntheticOperator("op", "long", 5, 1, 128))
    manifest = json.loads((b / "_manifest.json").read_text())
    manifest["operators"][0]["states"][0]["kind"] = "list"
    (b / "_manifest.json").write_text(json.dumps(manifest))
    op = diff_snapshots(a, b).operators[0]
    assert not op.same and not op.comparable and "state 'count' is value in A but list in B" in op.notes
