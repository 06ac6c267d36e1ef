from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.keygroups import KeyGroupRange, operator_id_for_uid
from keygroup_cli.core.schema import keyed_schema
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.parquet import write_keyed_file
from keygroup_cli.snapshot.synthetic import (
    KEYED_STATES,
    SyntheticOperator,
    generate_snapshot,
    key_groups_for_keys,
    parse_operator_spec,
)

CREATED_AT = "2026-01-01T00:00:00Z"


def _gen(dest: Path, *ops: SyntheticOperator, **kw: Any) -> Any:
    return generate_snapshot(dest, ops, created_at=CREATED_AT, **kw)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _logical(root: Path, uid: str) -> pa.Table:
    snap = open_snapshot(root)
    op = snap.manifest.operator(uid)
    assert op is not None
    t = pa.concat_tables([pq.read_table(snap.resolve(f.path)) for f in op.keyed_files])
    t = t.drop_columns(["key_group"]).set_column(0, "state", t.column("state").cast(pa.string()))
    return t.sort_by([(c, "ascending") for c in t.column_names])


@pytest.mark.parametrize("key_type", ["string", "long", "int", "boolean"])
def test_written_key_groups_are_flinks(
    tmp_path: Path, key_vectors: list[dict[str, Any]], key_type: str
) -> None:
    vectors = [v for v in key_vectors if v["type"] == key_type]
    keys = pa.array([v["key"] for v in vectors], keyed_schema(key_type).field("key").type)
    for max_p in ("10", "128", "4096", "32768"):
        m = int(max_p)
        table = pa.table(
            {
                "key_group": key_groups_for_keys(keys, key_type, m),
                "state": pa.array(["count"] * len(keys)),
                "key": keys,
                "namespace": pa.array([b"\0"] * len(keys)),
            }
        )
        path = tmp_path / f"{key_type}-{m}.parquet"
        write_keyed_file(path, table, key_type=key_type, key_groups=KeyGroupRange(0, m - 1))
        back = pq.read_table(path)  # plain pyarrow, no kg
        got = dict(zip(back.column("key").to_pylist(), back.column("key_group").to_pylist(), strict=True))
        assert got == {v["key"]: v["key_groups"][max_p] for v in vectors}


def test_generated_snapshot_is_valid_and_has_every_state_kind(tmp_path: Path) -> None:
    m = _gen(tmp_path / "s", SyntheticOperator("counter", "string", 300, 3, 128), seed=5)
    snap = open_snapshot(tmp_path / "s")
    assert snap.manifest == m and m.origin == {"kind": "generated", "seed": 5, "value_bytes": 24}
    op = m.operators[0]
    assert op.operator_id == operator_id_for_uid("counter")
    assert [f.subtask for f in op.keyed_files] == [0, 1, 2] and len(op.operator_files) == 3
    rows = pa.concat_tables([pq.read_table(snap.resolve(f.path)) for f in op.keyed_files])
    by_state = {
        s.name: rows.filter(pc.equal(rows.column("state").cast(pa.string()), s.name)) for s in KEYED_STATES
    }
    assert all(t.num_rows for t in by_state.values())
    assert by_state["count"].num_rows == by_state["events"].num_rows == 300
    seen = by_state["seen"]
    assert seen.column("user_key").null_count == 0 and seen.num_rows > 300
    assert (
        len(set(zip(seen.column("key").to_pylist(), seen.column("user_key").to_pylist(), strict=True)))
        == seen.num_rows
    )
    for name in ("_timer_state/event_user-timers", "_timer_state/event_window-timers"):
        timers = by_state[name]
        assert (
            timers.column("timestamp").null_count == 0
            and timers.column("value").null_count == timers.num_rows
        )
    windows = by_state["window-contents"]
    assert set(pc.binary_length(windows.column("namespace")).to_pylist()) == {16}
    assert set(by_state["count"].column("namespace").to_pylist()) == {b"\x00"}
    assert set(pc.binary_length(by_state["count"].column("value")).to_pylist()) == {24}
    # Timers of a window fire at its end - 1: the namespace's last 8 bytes, big-endian, minus one.
    wt = by_state["_timer_state/event_window-timers"]
    ns = wt.column("namespace").to_pylist()
    assert wt.column("timestamp").to_pylist() == [int.from_bytes(n[8:], "big") - 1 for n in ns]
    for f in op.keyed_files:
        assert pq.read_table(snap.resolve(f.path)).column("key_group").to_pylist() == sorted(
            pq.read_table(snap.resolve(f.path)).column("key_group").to_pylist()
        )


def test_operator_state_is_split_union_and_broadcast(tmp_path: Path) -> None:
    m = _gen(tmp_path / "s", SyntheticOperator("c", "long", 10, 4, 8))
    snap = open_snapshot(tmp_path / "s")
    tables = [pq.read_table(snap.resolve(f.path)) for f in m.operators[0].operator_files]
    split = [t.filter(pc.equal(t.column("state"), "buffer")).num_rows for t in tables]
    assert split == [3, 3, 2, 2]  # 10 elements dealt out like RoundRobinOperatorStateRepartitioner
    rules = [t.filter(pc.equal(t.column("state"), "rules")).select(["entry_key", "value"]) for t in tables]
    assert all(r == rules[0] for r in rules) and rules[0].num_rows == 4
    for t in tables:
        for name in ("buffer", "offsets", "rules"):
            pos = t.filter(pc.equal(t.column("state"), name)).column("position").to_pylist()
            assert pos == list(range(len(pos)))


def test_same_seed_is_byte_identical(tmp_path: Path) -> None:
    ops = (SyntheticOperator("a", "string", 500, 3, 128), SyntheticOperator("b", "int", 200, 2, 10))
    _gen(tmp_path / "x", *ops, seed=9)
    _gen(tmp_path / "y", *ops, seed=9)
    assert _files(tmp_path / "x") == _files(tmp_path / "y")
    _gen(tmp_path / "z", *ops, seed=10)
    assert _files(tmp_path / "x") != _files(tmp_path / "z")


@pytest.mark.parametrize("key_type", ["string", "long", "int", "binary"])
def test_logical_state_does_not_depend_on_parallelism(tmp_path: Path, key_type: str) -> None:
    _gen(tmp_path / "a", SyntheticOperator("op", key_type, 400, 2, 128), seed=3)
    _gen(tmp_path / "b", SyntheticOperator("op", key_type, 400, 5, 256), seed=3)
    assert _logical(tmp_path / "a", "op") == _logical(tmp_path / "b", "op")


def test_zero_keys_means_operator_state_only(tmp_path: Path) -> None:
    m = _gen(tmp_path / "s", SyntheticOperator("src", "long", 0, 2, 128))
    assert m.operators[0].keyed_files == () and len(m.operators[0].operator_files) == 2


def test_interrupt_leaves_nothing_and_rerun_succeeds(tmp_path: Path) -> None:
    dest = tmp_path / "s"
    spec = SyntheticOperator("c", "string", 100, 4, 128)
    calls: list[int] = []

    def interrupt(stage: str, done: int, total: int | None) -> None:
        calls.append(done)
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _gen(dest, spec, on_progress=interrupt)
    assert calls == [1, 2] and list(tmp_path.iterdir()) == []
    _gen(dest, spec)
    assert open_snapshot(dest).manifest.operators[0].parallelism == 4


def test_parse_operator_spec() -> None:
    assert parse_operator_spec("counter:long:50:3:10") == SyntheticOperator("counter", "long", 50, 3, 10)
    assert parse_operator_spec("c", keys=7, parallelism=100) == SyntheticOperator("c", "string", 7, 100, 256)
    assert parse_operator_spec("c::9") == SyntheticOperator("c", "string", 9, 1, 128)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("c:string:x", "keys 'x' is not an integer"),
        ("c:double", "unknown key type"),
        ("c:boolean:3", "3 keys of type boolean"),
        ("c:string:5:4:3", "Maximum parallelism must not be smaller"),
        ("a:b:c:d:e:f", "6 fields"),
        (":string", "uid must not be empty"),
    ],
)
def test_bad_operator_specs(spec: str, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        parse_operator_spec(spec)


def test_duplicate_uids_are_refused(tmp_path: Path) -> None:
    op: Callable[[], SyntheticOperator] = lambda: SyntheticOperator("c", "long", 1, 1, 128)  # noqa: E731
    with pytest.raises(InvalidArgumentError, match="unique"):
        _gen(tmp_path / "s", op(), op())
    assert not (tmp_path / "s").exists()
