from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.core.schema import OPERATOR_SCHEMA, keyed_schema
from keygroup_cli.snapshot.checksums import file_digest
from keygroup_cli.snapshot.model import Manifest, Snapshot
from keygroup_cli.snapshot.parquet import (
    iter_keyed_batches,
    read_keyed_file,
    read_operator_file,
    write_keyed_file,
    write_operator_file,
)

STATES = ["count", "seen", "_timer_state/event_user-timers"]


def _rows(n: int, groups: KeyGroupRange, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    kg = rng.integers(groups.start, groups.end + 1, n).astype(np.int32)
    return pa.table(
        {
            "key_group": kg,
            "state": pa.array([STATES[i % 2] for i in range(n)]),
            "key": pa.array([f"k{i}" for i in range(n)]),
            "namespace": pa.array([b"\x00"] * n, pa.binary()),
            "value": pa.array([rng.bytes(24) for _ in range(n)], pa.binary()),
        }
    )


def _snapshot(tmp_path: Path) -> Snapshot:
    return Snapshot(tmp_path, Manifest(1, "t", "t", {}, ()))


def test_schema_matches_the_contract() -> None:
    s = keyed_schema("long")
    assert [(f.name, str(f.type), f.nullable) for f in s] == [
        ("key_group", "int32", False),
        ("state", "dictionary<values=string, indices=int32, ordered=0>", False),
        ("key", "int64", False),
        ("namespace", "binary", False),
        ("user_key", "binary", True),
        ("value", "binary", True),
        ("timestamp", "int64", True),
    ]
    assert {k: str(keyed_schema(k).field("key").type) for k in ("string", "int", "boolean", "binary")} == {
        "string": "string",
        "int": "int32",
        "boolean": "bool",
        "binary": "binary",
    }
    assert [(f.name, str(f.type), f.nullable) for f in OPERATOR_SCHEMA] == [
        ("state", "string", False),
        ("position", "int32", False),
        ("entry_key", "binary", True),
        ("value", "binary", False),
    ]
    with pytest.raises(InvalidArgumentError):
        keyed_schema("double")


def test_write_sorts_counts_and_digests(tmp_path: Path) -> None:
    groups = KeyGroupRange(10, 19)
    data = _rows(500, groups)
    written = write_keyed_file(
        tmp_path / "k.parquet", data, key_type="string", key_groups=groups, state_names=STATES
    )
    assert written.rows == 500 and (written.bytes, written.xxh64) == file_digest(tmp_path / "k.parquet")
    expected = np.bincount(data.column("key_group").to_numpy() - 10, minlength=10)
    assert written.key_group_rows == tuple(expected)
    # Plain pyarrow, no kg: the file is sorted by key group and keeps the contract schema.
    back = pq.read_table(tmp_path / "k.parquet")
    assert back.schema == keyed_schema("string")
    kg = back.column("key_group").to_numpy()
    assert (np.diff(kg) >= 0).all()
    assert back.column("state").chunk(0).dictionary.to_pylist() == STATES
    # Stable sort: within a key group the input order survives.
    assert back.sort_by("key").column("value") == data.sort_by("key").column("value")


def test_output_is_byte_identical_whatever_the_input_chunking(tmp_path: Path) -> None:
    groups = KeyGroupRange(0, 99)
    data = _rows(3000, groups).sort_by("key_group")
    a = write_keyed_file(tmp_path / "a", data, key_type="string", key_groups=groups, row_group_rows=700)
    b = write_keyed_file(tmp_path / "b", data, key_type="string", key_groups=groups, row_group_rows=700)
    rechunked = iter(data.to_batches(max_chunksize=333))
    c = write_keyed_file(
        tmp_path / "c",
        rechunked,
        key_type="string",
        key_groups=groups,
        state_names=STATES[:2],
        row_group_rows=700,
    )
    assert a == b == c
    assert (tmp_path / "a").read_bytes() == (tmp_path / "c").read_bytes()


def test_row_groups_end_at_key_group_boundaries(tmp_path: Path) -> None:
    groups = KeyGroupRange(0, 49)
    data = _rows(2000, groups)
    write_keyed_file(tmp_path / "k", data, key_type="string", key_groups=groups, row_group_rows=300)
    meta = pq.ParquetFile(tmp_path / "k").metadata
    assert meta.num_row_groups > 5
    seen_max = -1
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        stats = rg.column(0).statistics
        assert rg.num_rows <= 300
        assert stats.min > seen_max  # no key group spans two row groups
        seen_max = stats.max


def test_one_huge_key_group_is_split(tmp_path: Path) -> None:
    groups = KeyGroupRange(5, 5)
    written = write_keyed_file(
        tmp_path / "k", _rows(1000, groups), key_type="string", key_groups=groups, row_group_rows=300
    )
    assert written.key_group_rows == (1000,)
    assert [pq.ParquetFile(tmp_path / "k").metadata.row_group(i).num_rows for i in range(4)] == [
        300,
        300,
        300,
        100,
    ]


def test_iter_keyed_batches_selects_key_groups(tmp_path: Path) -> None:
    groups = KeyGroupRange(0, 49)
    data = _rows(2000, groups)
    written = write_keyed_file(tmp_path / "k", data, key_type="string", key_groups=groups, row_group_rows=300)
    entry = written.keyed_file(0, "k", groups)
    snap = _snapshot(tmp_path)
    got = pa.Table.from_batches(
        list(
            iter_keyed_batches(
                snap, entry, ["key", "value"], key_groups=KeyGroupRange(10, 12), batch_rows=100
            )
        )
    )
    assert got.column_names == ["key", "value"]
    assert got.num_rows == sum(written.key_group_rows[10:13])
    assert read_keyed_file(snap, entry).num_rows == 2000


def test_out_of_range_and_unsorted_stream_are_refused(tmp_path: Path) -> None:
    data = _rows(50, KeyGroupRange(0, 9))
    with pytest.raises(InvalidInputError) as info:
        write_keyed_file(tmp_path / "k", data, key_type="string", key_groups=KeyGroupRange(0, 4))
    assert info.value.code == "KEY_GROUP_OUT_OF_RANGE" and not (tmp_path / "k").exists()
    with pytest.raises(InvalidInputError) as info:
        write_keyed_file(
            tmp_path / "k",
            iter([data]),
            key_type="string",
            key_groups=KeyGroupRange(0, 9),
            state_names=STATES,
        )
    assert info.value.code == "ROWS_NOT_SORTED" and not (tmp_path / "k").exists()


def test_unknown_state_and_null_key_are_refused(tmp_path: Path) -> None:
    data = _rows(10, KeyGroupRange(0, 9))
    with pytest.raises(InvalidArgumentError, match="not among"):
        write_keyed_file(
            tmp_path / "k", data, key_type="string", key_groups=KeyGroupRange(0, 9), state_names=["x"]
        )
    nulls = data.set_column(2, "key", pa.array([None] * 10, pa.string()))
    with pytest.raises(InvalidArgumentError, match="'key' holds nulls"):
        write_keyed_file(tmp_path / "k", nulls, key_type="string", key_groups=KeyGroupRange(0, 9))


def test_empty_file_is_still_a_valid_parquet(tmp_path: Path) -> None:
    empty = keyed_schema("int").empty_table()
    written = write_keyed_file(
        tmp_path / "k", empty, key_type="int", key_groups=KeyGroupRange(0, 2), state_names=STATES
    )
    assert written.rows == 0 and written.key_group_rows == (0, 0, 0)
    assert pq.read_table(tmp_path / "k").schema.field("key").type == pa.int32()


def test_operator_file_round_trip(tmp_path: Path) -> None:
    data = pa.table(
        {
            "state": ["buf", "buf", "rules"],
            "position": [0, 1, 0],
            "entry_key": [None, None, b"k"],
            "value": [b"a", b"b", b"c"],
        }
    )
    written = write_operator_file(tmp_path / "o", data)
    assert written.rows == 3
    back = read_operator_file(_snapshot(tmp_path), written.operator_file(0, "o"))
    assert back.schema == OPERATOR_SCHEMA and back.to_pylist() == data.to_pylist()


def test_corrupt_file_reads_as_invalid_snapshot(tmp_path: Path) -> None:
    (tmp_path / "k").write_bytes(b"PAR1 definitely not parquet")
    entry = write_keyed_file(
        tmp_path / "ok", _rows(5, KeyGroupRange(0, 0)), key_type="string", key_groups=KeyGroupRange(0, 0)
    ).keyed_file(0, "k", KeyGroupRange(0, 0))
    with pytest.raises(InvalidInputError) as info:
        read_keyed_file(_snapshot(tmp_path), entry)
    assert info.value.code == "FILE_UNREADABLE" and "k:" in info.value.message
