"""The local (pyarrow) engine: keyed rows, timers and operator state land where Flink would put them."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from keygroup_cli.core.keygroups import operator_index_for_key_group
from keygroup_cli.execution.engines.local import LocalExecutor
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.diff import diff_snapshots
from tests.execution.snapshots import generate, keyed_rows, operator_rows


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return generate(
        tmp_path_factory.mktemp("local") / "in",
        ("counter", "string", 1500, 3, 10),
        ("ids", "long", 800, 3, 128),
        ("blob", "binary", 300, 2, 128),
    )


@pytest.mark.parametrize("new_p", [4, 1, 7, 3])
def test_keyed_rows_move_to_key_group_owner(source, tmp_path, new_p):
    result = rescale(source, tmp_path / "out", new_p, engine="local", operators=["counter", "ids"])
    snap = open_snapshot(result.output)
    for uid in ("counter", "ids"):
        op = snap.manifest.operator(uid)
        assert op.parallelism == new_p
        for f in op.keyed_files:
            kg = pq.read_table(snap.resolve(f.path), columns=["key_group"]).column("key_group").to_pylist()
            assert kg == sorted(kg)
            assert {operator_index_for_key_group(op.max_parallelism, new_p, g) for g in kg} == {f.subtask}
        assert keyed_rows(result.output, uid).equals(keyed_rows(source, uid))
    # Not named: kept byte for byte.
    blob_in, blob_out = (open_snapshot(p).manifest.operator("blob") for p in (source, result.output))
    assert blob_out == blob_in


def test_move_matches_a_snapshot_generated_at_the_new_parallelism(source, tmp_path):
    # The generator's rows depend only on the keys; parallelism only decides where they go.
    # Written with the rescale writer's row-group policy, so equal rows give equal bytes.
    truth = generate(
        tmp_path / "truth",
        ("counter", "string", 1500, 4, 10),
        ("ids", "long", 800, 4, 128),
        ("blob", "binary", 300, 4, 128),
        row_group_rows=1 << 20,
    )
    result = rescale(source, tmp_path / "out", 4, engine="local")
    for uid in ("counter", "ids", "blob"):
        new = result.manifest.operator(uid)
        expected = open_snapshot(truth).manifest.operator(uid)
        assert [f.xxh64 for f in new.keyed_files] == [f.xxh64 for f in expected.keyed_files]


def test_rehash_recomputes_key_groups_like_a_snapshot_generated_at_the_new_max_parallelism(source, tmp_path):
    truth = generate(
        tmp_path / "truth",
        ("counter", "string", 1500, 7, 64),
        ("ids", "long", 800, 7, 1024),
        ("blob", "binary", 300, 2, 128),
    )
    out = tmp_path / "out"
    rescale(source, out, 7, engine="local", operators=["counter"], new_max_parallelism=64)
    out2 = tmp_path / "out2"
    rescale(source, out2, 7, engine="local", operators=["ids"], new_max_parallelism=1024)
    assert keyed_rows(out, "counter").equals(keyed_rows(truth, "counter"))
    assert keyed_rows(out2, "ids").equals(keyed_rows(truth, "ids"))
    snap = open_snapshot(out)
    op = snap.manifest.operator("counter")
    assert (op.parallelism, op.max_parallelism) == (7, 64)
    assert not (out / ".kg-spill").exists()


def test_rehash_keeps_input_order_within_a_key_group(source, tmp_path):
    # Small batches force many spill appends; the result must not depend on the batch size.
    a = rescale(source, tmp_path / "a", 5, engine="local", new_max_parallelism=64, operators=["counter"])
    b = rescale(
        source,
        tmp_path / "b",
        5,
        new_max_parallelism=64,
        operators=["counter"],
        executor=LocalExecutor(batch_rows=97),
    )
    op_id = a.plan.operators[0].operator_id
    assert [f.xxh64 for f in a.operator(op_id).keyed_files] == [
        f.xxh64 for f in b.operator(op_id).keyed_files
    ]


def test_timers_move_with_their_key(source, tmp_path):
    result = rescale(
        source, tmp_path / "out", 7, engine="local", new_max_parallelism=64, operators=["counter"]
    )
    rows = keyed_rows(result.output, "counter")
    timers = rows.filter([s.startswith("_timer_state/") for s in rows.column("state").to_pylist()])
    assert timers.num_rows > 0
    values = rows.filter([s == "count" for s in rows.column("state").to_pylist()])
    owner = dict(zip(values.column("key").to_pylist(), values.column("key_group").to_pylist(), strict=True))
    for key, group in zip(
        timers.column("key").to_pylist(), timers.column("key_group").to_pylist(), strict=True
    ):
        assert owner[key] == group


def test_operator_state_is_redistributed_as_flink_does(source, tmp_path):
    result = rescale(source, tmp_path / "out", 4, engine="local", operators=["counter"])
    before, after = operator_rows(source, "counter"), operator_rows(result.output, "counter")

    def of(rows, state):
        return [r for r in rows if r[0] == state]

    # Split: the concatenation in subtask order is unchanged, dealt out as 3, 3, 2, 2 (one extra first).
    old_split = [r[3] for s in sorted(before) for r in of(before[s], "buffer")]
    new_split = [[r[3] for r in of(after.get(s, []), "buffer")] for s in range(4)]
    assert sum(new_split, []) == old_split
    assert [len(x) for x in new_split] == [3, 3, 2, 2]
    # Union: every new subtask holds every old element, old subtasks in order.
    old_union = [r[3] for s in sorted(before) for r in of(before[s], "offsets")]
    assert all([r[3] for r in of(after[s], "offsets")] == old_union for s in range(4))
    # Broadcast: new i holds old i % 3's entries.
    for s in range(4):
        assert of(after[s], "rules") == of(before[s % 3], "rules")
    for s in range(4):
        for state in ("buffer", "offsets", "rules"):
            assert [r[1] for r in of(after[s], state)] == list(range(len(of(after[s], state))))


def test_same_parallelism_with_union_state_spreads_the_union(source, tmp_path):
    result = rescale(source, tmp_path / "out", 3, engine="local", operators=["counter"])
    before, after = operator_rows(source, "counter"), operator_rows(result.output, "counter")
    old_union = [r[3] for s in sorted(before) for r in before[s] if r[0] == "offsets"]
    for s in range(3):
        assert [r for r in after[s] if r[0] == "buffer"] == [r for r in before[s] if r[0] == "buffer"]
        assert [r[3] for r in after[s] if r[0] == "offsets"] == old_union
    # Keyed files are copied unchanged.
    old_op = open_snapshot(source).manifest.operator("counter")
    assert result.manifest.operator("counter").keyed_files == old_op.keyed_files


@pytest.mark.parametrize("chain", [(4, 2), (3, 3), (1, 5)])
def test_rescaling_twice_keeps_each_union_element_once(source, tmp_path, chain):
    first = rescale(source, tmp_path / "a", chain[0], engine="local", operators=["counter"])
    second = rescale(first.output, tmp_path / "b", chain[1], engine="local", operators=["counter"])
    before = operator_rows(source, "counter")
    old_union = [r[3] for s in sorted(before) for r in before[s] if r[0] == "offsets"]
    for result in (first, second):
        (offsets,) = (s for s in result.operator("counter").states if s.name == "offsets")
        assert offsets.replicated
        after = operator_rows(result.output, "counter")
        for s in range(result.operator("counter").parallelism):
            assert [r[3] for r in after[s] if r[0] == "offsets"] == old_union
    assert diff_snapshots(source, second.output).same


def test_a_bucket_read_back_in_full_is_removed_and_the_others_stay(tmp_path):
    from keygroup_cli.execution.engines.local import _PartSpill

    spill = _PartSpill(tmp_path)
    files = spill.files()
    began = {}
    for key, payload in (((0, 1), b"first"), ((0, 2), b"second")):
        out = spill.open(*key)
        began[key] = out.tell()
        out.write(payload)
    spill.record(0, began)
    spill.close()
    assert bytes(spill.read(0, 1)) == b"first"
    spill.release(0, 1)
    spill.settle()
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(files[(0, 2)].name).name]
    assert bytes(spill.read(0, 2)) == b"second"
