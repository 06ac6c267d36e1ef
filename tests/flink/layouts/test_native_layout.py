"""A canonical keyed file written as the RocksDB database of a NATIVE savepoint, read back with RocksDB
itself.

Every entry of the canonical key-group blocks must be in the database, under its state's column family,
with the same key and value bytes; the handle must name files that exist with the sizes it records.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink import open_savepoint
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.layouts.native import block_columns, build_native_handle, iter_block_entries
from keygroup_cli.flink.layouts.rocksdb import load_binding, read_options
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"


def _canonical_entries(
    path: Path, offsets: tuple[int, ...], compressed: bool
) -> dict[tuple[int, bytes], bytes]:
    data = path.read_bytes()
    starts = sorted(o for o in offsets if o)
    entries = {}
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        block = b"".join(decode_frames(data[start:end])) if compressed else data[start:end]
        for state, key, value in iter_block_entries(block, str(path)):
            entries[(state, key)] = value
    return entries


def test_every_canonical_entry_is_in_the_database_under_its_state(tmp_path):
    savepoint = open_savepoint(SAVEPOINT)
    (stream, *_) = next(streams for streams in savepoint.keyed_streams.values() if streams)
    keyed_file = SAVEPOINT / stream.handle.delegate.relative_path
    want = _canonical_entries(keyed_file, stream.handle.offsets, stream.header.compressed)
    assert want, "the fixture's first keyed subtask holds entries"

    handle = build_native_handle(
        keyed_file, stream.handle.key_group_start, stream.handle.offsets, tmp_path, checkpoint_id=7
    )
    assert handle.checkpoint_id == 7 and handle.key_group_start == stream.handle.key_group_start
    for private in handle.private:
        assert (tmp_path / private.handle.relative_path).stat().st_size == private.handle.size
    database = tmp_path / "db"
    database.mkdir()
    for private in handle.private:
        (database / private.local_path).write_bytes((tmp_path / private.handle.relative_path).read_bytes())

    rocksdict = load_binding()
    names = [info.name for info in stream.header.states]
    families = rocksdict.Rdict.list_cf(str(database))
    assert set(names) <= set(families)
    db = rocksdict.Rdict(
        str(database),
        options=read_options(rocksdict),
        column_families={name: read_options(rocksdict) for name in families},
        access_type=rocksdict.AccessType.read_only(),
    )
    try:
        got = {}
        for state, name in enumerate(names):
            family = db.get_column_family(name)
            for key, value in family.items():
                got[(state, bytes(key))] = bytes(value)
    finally:
        db.close()
    assert got == want


def _blocks(path: Path, offsets: tuple[int, ...], compressed: bool) -> list[bytes]:
    data = path.read_bytes()
    starts = sorted(o for o in offsets if o)
    ends = [*starts[1:], len(data)]
    return [
        b"".join(decode_frames(data[a:b])) if compressed else data[a:b]
        for a, b in zip(starts, ends, strict=True)
    ]


def test_block_columns_are_the_reference_entries_grouped_by_state():
    """The NATIVE build's loop gives, per state and in order, exactly what ``iter_block_entries`` yields."""
    checked = 0
    for fixture in (SAVEPOINT, FIXTURES / "flink" / "2.3" / "typed-heap-canonical-p2"):
        savepoint = open_savepoint(fixture)
        for streams in savepoint.keyed_streams.values():
            for stream in streams:
                path = fixture / stream.handle.delegate.relative_path
                states = len(stream.header.states)
                for block in _blocks(path, stream.handle.offsets, stream.header.compressed):
                    want: list[list[tuple[bytes, bytes]]] = [[] for _ in range(states)]
                    for state, key, value in iter_block_entries(block, "t"):
                        want[state].append((key, value))
                    assert block_columns(block, states, "t") == want
                    checked += 1
    assert checked > 100


def test_block_columns_refuse_a_truncated_block_and_an_unknown_state():
    savepoint = open_savepoint(SAVEPOINT)
    stream = next(s for streams in savepoint.keyed_streams.values() for s in streams)
    path = SAVEPOINT / stream.handle.delegate.relative_path
    block = _blocks(path, stream.handle.offsets, stream.header.compressed)[0]
    states = len(stream.header.states)
    for damaged, count in ((block[:-7], states), (block[: len(block) // 2], states), (block, 0)):
        with pytest.raises(InvalidInputError) as caught:
            block_columns(damaged, count, "t")
        assert caught.value.code == "FLINK_STATE_CORRUPT"
