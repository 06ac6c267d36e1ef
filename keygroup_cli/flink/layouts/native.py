"""Write one subtask's canonical keyed state as the RocksDB database of a NATIVE savepoint.

The reverse of ``layouts.rocksdb``: a canonical keyed file (``KeyGroupsSavepointStateHandle``) holds, per key
group and state, exactly the entries of the state's RocksDB column family (key-group prefix + key + namespace
(+ map user key), and the value). ``build_native_handle`` puts them into a new database, one column family
per state named after it, and returns the ``IncrementalRemoteKeyedStateHandle`` (tag 11) a NATIVE savepoint
records for the subtask: the database's files as a *private* list under their RocksDB names (``*.sst``,
``MANIFEST-*``, ``CURRENT``, ``OPTIONS-*``) and the metadata stream, which is the canonical file's
``KeyedBackendSerializationProxy`` header (compression off) byte for byte.

The database is built with the ``rocksdict`` binding (the ``[rocksdb]`` extra), never by hand: one SST file
per column family from its ``SstFileWriter`` (entries sorted by key), ingested into the family, then a
RocksDB checkpoint of the database gives the consistent file set Flink's own NATIVE snapshot copies. The
file is read one key group at a time: a RocksDB key starts with its key group, so sorting each key group's
entries and writing the key groups in order gives every family's sorted order, and the memory held is one
key group's, whatever the state's size. Tables
use block-based ``format_version`` 5 and no compression, which FRocksDB 6.20 (Flink 1.x) and 8.10 (Flink 2.x)
and ForSt read. Flink 2.3's RocksDB and ForSt backends both restore these files
(tests/restore/test_native.py).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import struct
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from keygroup_cli.core.allocator import is_memory_failure, not_enough_memory, require_address_space
from keygroup_cli.core.errors import ExecutionError, InvalidInputError, KgError, UnsupportedFormatError
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_handles import RelativeFileHandle
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.layouts.rocksdb import (
    ADDRESS_SPACE_NEEDED,
    load_binding,
    read_options,
    rocksdb_status_error,
)
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle, LocalHandle

#: ``IncrementalRemoteKeyedStateHandle`` with a checkpointed size and a handle id (Flink 1.16+).
INCREMENTAL_HANDLE_TAG = 11
#: RocksDB's block-based table format every Flink RocksDB / ForSt version reads.
TABLE_FORMAT_VERSION = 5
_END_OF_KEY_GROUP = 0xFFFF
_FLAG = 0x80
_INT = struct.Struct(">i")
_USHORT = struct.Struct(">H")


def iter_block_entries(block: bytes, where: str) -> Iterator[tuple[int, bytes, bytes]]:
    """Yield ``(state id, RocksDB key, value)`` of one uncompressed canonical key-group block.

    The block is the one ``keyed_encode.encode_block`` writes: a state id, then entries of that state (the key
    carries the key-group prefix, its first bit set on the state's last entry, followed by the next state id
    or the end mark). The RocksDB key is the block's key with that bit cleared.
    """
    pos = 0
    try:
        (state,) = _USHORT.unpack_from(block, pos)
        pos += 2
        while True:
            (klen,) = _INT.unpack_from(block, pos)
            key = bytearray(block[pos + 4 : pos + 4 + klen])
            pos += 4 + klen
            (vlen,) = _INT.unpack_from(block, pos)
            value = block[pos + 4 : pos + 4 + vlen]
            pos += 4 + vlen
            if klen <= 0 or len(key) != klen or len(value) != vlen or vlen < 0:
                raise struct.error("entry truncated")
            last = bool(key[0] & _FLAG)
            key[0] &= ~_FLAG & 0xFF
            yield state, bytes(key), value
            if last:
                (state,) = _USHORT.unpack_from(block, pos)
                pos += 2
                if state == _END_OF_KEY_GROUP:
                    return
    except struct.error:
        raise InvalidInputError(f"{where}: key-group block truncated", code="FLINK_STATE_CORRUPT") from None


def block_columns(block: bytes, states: int, where: str) -> list[list[tuple[bytes, bytes]]]:
    """Return each state's ``(RocksDB key, value)`` entries of one uncompressed canonical key-group block.

    What ``iter_block_entries`` yields, grouped by state id and in block order, in one tight loop (the
    NATIVE build spends most of its time here): a key is sliced as stored, only a run's last key is copied
    to clear its flag bit.

    Raises:
        InvalidInputError: The block is truncated, or names a state id ``states`` or beyond
            (``FLINK_STATE_CORRUPT``).
    """
    columns: list[list[tuple[bytes, bytes]]] = [[] for _ in range(states)]
    unpack_int, unpack_ushort = _INT.unpack_from, _USHORT.unpack_from
    end = len(block)
    try:
        (state,) = unpack_ushort(block, 0)
        pos = 2
        while state != _END_OF_KEY_GROUP:
            if state >= states:
                raise InvalidInputError(
                    f"{where}: state id {state} beyond the header's {states}", code="FLINK_STATE_CORRUPT"
                )
            append = columns[state].append
            while True:
                (klen,) = unpack_int(block, pos)
                key_at = pos + 4
                key_end = key_at + klen
                (vlen,) = unpack_int(block, key_end)
                value_at = key_end + 4
                pos = value_at + vlen
                if klen <= 0 or vlen < 0 or pos > end:
                    raise struct.error("entry truncated")
                first = block[key_at]
                if first & _FLAG:
                    append((bytes((first & ~_FLAG,)) + block[key_at + 1 : key_end], block[value_at:pos]))
                    break
                append((block[key_at:key_end], block[value_at:pos]))
            (state,) = unpack_ushort(block, pos)
            pos += 2
    except struct.error:
        raise InvalidInputError(f"{where}: key-group block truncated", code="FLINK_STATE_CORRUPT") from None
    return columns


def _table_options(rocksdict: Any) -> Any:
    options = read_options(rocksdict)  # raw keys, one table-opening thread
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(TABLE_FORMAT_VERSION)
    options.set_block_based_table_factory(table)
    options.set_compression_type(rocksdict.DBCompressionType.none())
    return options


def build_native_handle(
    keyed_file: Path, key_group_start: int, offsets: tuple[int, ...], target: Path, *, checkpoint_id: int
) -> IncrementalKeyedHandle:
    """Build one subtask's RocksDB database from its canonical keyed file; write its files into ``target``.

    Args:
        keyed_file: The canonical keyed file with its header (key groups snappy-framed or not).
        key_group_start: The subtask's first key group.
        offsets: One offset per key group of the range into ``keyed_file`` (0: no data).
        target: The savepoint's directory; the database files and the metadata stream go there under new
            UUID names (``RelativeFileStateHandle``s, as Flink's NATIVE savepoints with threshold 0 write).
        checkpoint_id: The savepoint's checkpoint id, recorded in the handle.

    Raises:
        MissingDependencyError: ``rocksdict`` is not installed.
        UnsupportedFormatError: The binding refuses what it is asked to write (``ROCKSDB_UNWRITABLE``).
        OSError: No space left (``ENOSPC``, also inside RocksDB), or another refusal of the file system.
        ExecutionError: Not enough memory (``NOT_ENOUGH_MEMORY``), or another I/O error of RocksDB.
        InvalidInputError: A block is truncated or names a state the header lacks.
    """
    rocksdict = load_binding()
    with open(keyed_file, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        first = min((o for o in offsets if o), default=size)
        head = fh.read(first)
        header = read_keyed_header(head, str(keyed_file), first)
        if header.states is None or header.end is None:
            raise UnsupportedFormatError(
                f"{keyed_file}: the keyed-state header holds a serializer snapshot kg cannot delimit",
                code="FLINK_STATE_HEADER_UNKNOWN",
            )
        names = [info.name for info in header.states]
        key_groups = _key_group_columns(fh, size, offsets, names, str(keyed_file), head[4] != 0)
        private = _write_database_files(rocksdict, target, names, key_groups)
    meta_name = str(uuid.uuid4())
    meta = head[:4] + b"\x00" + head[5 : header.end]  # the files are RocksDB's, not snappy streams
    (target / meta_name).write_bytes(meta)
    size = len(meta) + sum(f.handle.size for f in private if isinstance(f.handle, RelativeFileHandle))
    return IncrementalKeyedHandle(
        tag=INCREMENTAL_HANDLE_TAG,
        checkpoint_id=checkpoint_id,
        backend_identifier=str(uuid.uuid4()),
        key_group_start=key_group_start,
        num_key_groups=len(offsets),
        checkpointed_size=size,
        metadata=RelativeFileHandle(meta_name, len(meta)),
        shared=(),
        private=tuple(private),
        handle_id=str(uuid.uuid4()),
    )


def _key_group_columns(
    fh: BinaryIO, size: int, offsets: tuple[int, ...], names: list[str], where: str, compressed: bool
) -> Iterator[list[list[tuple[bytes, bytes]]]]:
    """Yield, key group by key group in range order, each state's ``(RocksDB key, value)`` entries."""
    bounds = sorted({o for o in offsets if o} | {size})
    ends = dict(zip(bounds, bounds[1:], strict=False))
    for offset in offsets:
        if not offset:
            continue
        fh.seek(offset)
        block = fh.read(ends[offset] - offset)
        if compressed:  # each key group is its own snappy-framed stream
            block = decode_frames(block, where)
        yield block_columns(block, len(names), where)


def _write_database_files(
    rocksdict: Any, target: Path, names: list[str], key_groups: Iterable[list[list[tuple[bytes, bytes]]]]
) -> list[LocalHandle]:
    """Build the database and copy its files into ``target`` under UUID names; return their handles."""
    with tempfile.TemporaryDirectory(dir=target, prefix=".native-") as tmp:
        files = _build_database(rocksdict, Path(tmp), names, key_groups)
        private = []
        for name, path in files:
            stored = str(uuid.uuid4())
            shutil.copyfile(path, target / stored)
            private.append(LocalHandle(name, RelativeFileHandle(stored, path.stat().st_size)))
    return private


def _build_database(
    rocksdict: Any, work: Path, names: list[str], key_groups: Iterable[list[list[tuple[bytes, bytes]]]]
) -> list[tuple[str, Path]]:
    """Create the database in ``work`` and return its checkpoint's files as ``(RocksDB name, path)``.

    ``key_groups`` yields each key group's entries per state, in key-group order: each family's SST file is
    written key group by key group, its entries sorted within the key group.
    """
    db_dir, snapshot_dir = work / "db", work / "checkpoint"
    options = _table_options(rocksdict)
    options.create_if_missing(True)
    require_address_space(ADDRESS_SPACE_NEEDED, "building a NATIVE savepoint's RocksDB database")
    try:
        db = rocksdict.Rdict(str(db_dir), options=options)
        try:
            families = [db.create_column_family(name, _table_options(rocksdict)) for name in names]
            writers: list[Any] = [None] * len(names)
            last: list[bytes | None] = [None] * len(names)
            for columns in key_groups:
                for index, entries in enumerate(columns):
                    if not entries:
                        continue
                    entries = _sorted_unique(names[index], last[index], entries)
                    if writers[index] is None:
                        writers[index] = rocksdict.SstFileWriter(options=_table_options(rocksdict))
                        writers[index].open(str(work / f"{index}.sst"))
                    writer = writers[index]
                    for key, value in entries:
                        writer[key] = value
                    last[index] = entries[-1][0]
            for index, writer in enumerate(writers):
                if writer is not None:
                    writer.finish()
                    families[index].ingest_external_file([str(work / f"{index}.sst")])
            rocksdict.Checkpoint(db).create_checkpoint(str(snapshot_dir))
        finally:
            db.close()
    except (KgError, OSError):
        raise
    except Exception as exc:  # the binding raises plain Exception with RocksDB's status text
        raise _build_error(exc) from None
    keep = ("CURRENT", "MANIFEST-", "OPTIONS-")
    return sorted(
        (p.name, p)
        for p in snapshot_dir.iterdir()
        if p.is_file() and (p.name.endswith(".sst") or p.name.startswith(keep))
    )


def _sorted_unique(
    name: str, previous: bytes | None, entries: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    """Return one key group's entries of a state sorted by key; refuse a key held twice, or out of order.

    ``previous`` is the state's last key of the key groups before: this key group's keys must follow it.

    Raises:
        InvalidInputError: ``FLINK_STATE_CORRUPT``.
    """
    unique = dict(entries)
    if len(unique) != len(entries):
        seen: set[bytes] = set()
        twice = next(key for key, _ in entries if key in seen or seen.add(key))
        raise InvalidInputError(f"state {name!r} holds the key {twice!r} twice", code="FLINK_STATE_CORRUPT")
    ordered = sorted(unique.items())
    if previous is not None and ordered[0][0] <= previous:
        raise InvalidInputError(
            f"state {name!r} holds the key {ordered[0][0]!r} twice or outside its key group",
            code="FLINK_STATE_CORRUPT",
        )
    return ordered


#: RocksDB's I/O errors that are the file system's answer, by the text ``strerror`` gives them.
_REFUSALS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT}


def _build_error(exc: Exception) -> BaseException:
    """Return what to raise when the binding fails to build a database, by RocksDB's status.

    No space (or quota) is the ``OSError`` the file system gave RocksDB, so the staging that holds the
    database words it as every writer does (``NO_SPACE_LEFT``, exit 5, nothing committed); no memory is
    ``NOT_ENOUGH_MEMORY`` (exit 5); another status as ``rocksdb_status_error`` classifies it, except that
    what RocksDB does not support when it writes stays ``ROCKSDB_UNWRITABLE`` (exit 4), and a database it
    finds damaged as it writes is a failed write (``ROCKSDB_UNWRITABLE``, exit 5).
    """
    if is_memory_failure(exc):
        return not_enough_memory("building a NATIVE savepoint's RocksDB database")
    text = " ".join(str(exc).split())
    for reason, number in _REFUSALS.items():
        if reason in text:
            path = re.search(r": (/[^:]+): " + re.escape(reason), text)
            return OSError(number, os.strerror(number), path.group(1) if path else None)
    error = rocksdb_status_error(text, "rocksdict cannot build the NATIVE database")
    if isinstance(error, UnsupportedFormatError):
        return UnsupportedFormatError(error.message, code="ROCKSDB_UNWRITABLE")
    if isinstance(error, InvalidInputError):  # what kg writes is no input: its damage is a failed write
        return ExecutionError(
            f"rocksdict cannot build the NATIVE database: {text}", code="ROCKSDB_UNWRITABLE"
        )
    return error


__all__ = [
    "INCREMENTAL_HANDLE_TAG",
    "TABLE_FORMAT_VERSION",
    "block_columns",
    "build_native_handle",
    "iter_block_entries",
]
