"""The kg snapshot writer: operator directories, files, then the manifest, published by one rename."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import KeyGroupRange, key_group_for_hash
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.model import Manifest, Operator, StateDescriptor
from keygroup_cli.snapshot.writer import SnapshotWriter, operator_dir_name, snapshot_writer

OP_ID = "35a9f8ef506cec52320f30f0582ce304"


def test_operator_dir_names() -> None:
    assert operator_dir_name("counter", OP_ID) == "counter"
    assert operator_dir_name(None, OP_ID) == OP_ID
    assert operator_dir_name("a/b c", OP_ID) == "a_b_c-35a9f8ef"
    assert operator_dir_name("..", OP_ID) == "op..-35a9f8ef"
    assert operator_dir_name("_manifest.json", OP_ID) == "op_manifest.json-35a9f8ef"


def test_snapshot_writer_round_trip(tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    with snapshot_writer(dest) as w:
        d = w.operator_dir("my-keyed-op", OP_ID)
        assert w.operator_dir("my-keyed-op", OP_ID) == d == "my-keyed-op"
        keyed = w.write_keyed(
            d,
            0,
            pa.table(
                {
                    "key_group": pa.array(sorted(_key_groups(["x", "y"], 2)), pa.int32()),
                    "state": ["c", "c"],
                    "key": [k for _g, k in sorted(zip(_key_groups(["x", "y"], 2), ["x", "y"], strict=True))],
                    "namespace": [b"\0", b"\0"],
                    "value": [b"1", b"2"],
                }
            ),
            key_type="string",
            key_groups=KeyGroupRange(0, 1),
            state_names=["c"],
        )
        op = w.write_operator(d, 0, pa.table({"state": ["b"], "position": [0], "value": [b"v"]}))
        w.commit(
            Manifest(
                1,
                "t",
                "t",
                {"kind": "generated"},
                (
                    Operator(
                        "my-keyed-op",
                        OP_ID,
                        None,
                        1,
                        2,
                        "string",
                        (StateDescriptor("c", "value"), StateDescriptor("b", "operator-split")),
                        (keyed,),
                        (op,),
                    ),
                ),
            )
        )
    snap = open_snapshot(dest)
    assert snap.manifest.operators[0].keyed_files[0].path == "my-keyed-op/keyed-00000.parquet"
    assert snap.manifest.operators[0].keyed_files[0].key_group_rows == (1, 1)


def test_snapshot_writer_without_commit_publishes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    with pytest.raises(ExecutionError), snapshot_writer(dest) as w:
        w.operator_dir("x", OP_ID)
    assert sorted(p.name for p in dest.parent.iterdir()) == []


def test_case_insensitive_collisions_get_distinct_dirs(tmp_path: Path) -> None:
    w = SnapshotWriter(tmp_path)
    assert w.operator_dir("Counter", "0" * 32) == "Counter"
    assert w.operator_dir("counter", "1" * 32) == "counter-11111111"


def test_a_written_snapshot_that_fails_verify_is_not_published(tmp_path: Path) -> None:
    # Rows stored under a key group their key does not hash to: what a bug in a writer (or a disk that
    # returned other bytes) would leave. The commit reads the staging back as kg verify does and refuses.
    keys = ["x", "y", "z", "w"]
    dest = tmp_path / "snap"
    with pytest.raises(ExecutionError) as refused, snapshot_writer(dest) as w:
        d = w.operator_dir("op", OP_ID)
        wrong = [1 - g for g in _key_groups(keys, 2)]
        keyed = w.write_keyed(
            d,
            0,
            pa.table(
                {
                    "key_group": pa.array(sorted(wrong), pa.int32()),
                    "state": ["c"] * len(keys),
                    "key": [k for _g, k in sorted(zip(wrong, keys, strict=True))],
                    "namespace": [b"\0"] * len(keys),
                    "value": [b"v"] * len(keys),
                }
            ),
            key_type="string",
            key_groups=KeyGroupRange(0, 1),
            state_names=["c"],
        )
        w.commit(
            Manifest(
                1,
                "t",
                "t",
                {"kind": "generated"},
                (
                    Operator(
                        "op", OP_ID, None, 1, 2, "string", (StateDescriptor("c", "value"),), (keyed,), ()
                    ),
                ),
            )
        )
    assert refused.value.code == "OUTPUT_FAILS_VERIFY" and "KEY_GROUP" in refused.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no DEST, no staging


def _key_groups(keys: list[str], max_parallelism: int) -> list[int]:
    return [key_group_for_hash(hash_code(k, "string"), max_parallelism) for k in keys]
