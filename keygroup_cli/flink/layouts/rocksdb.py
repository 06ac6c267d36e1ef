"""Read RocksDB NATIVE savepoints and incremental checkpoints, and rewrite them as canonical key groups.

Their keyed state is an ``IncrementalRemoteKeyedStateHandle`` (tag 11, or 5) per subtask: the RocksDB
database's own files (``*.sst``, ``MANIFEST-*``, ``CURRENT``, ``OPTIONS-*``), listed under the names RocksDB
gives them (``localPath``) in a *shared* list (``shared/`` files an incremental checkpoint reuses from
earlier ones) and a *private* list, plus a metadata stream holding the ``KeyedBackendSerializationProxy``
header (key serializer, one meta info per state). Each state is one column family named after it, and a
column family's entries are exactly the canonical format's (``RocksDBFullSnapshotResources`` copies them
into a canonical savepoint as they are): key-group prefix + key + namespace (+ map user key), and the value
(a list's elements joined by ``,``, a map value behind its null flag, timers with an empty value).

``transcode_incremental`` opens the files read-only with the ``rocksdict`` binding (the optional
``[rocksdb]`` extra) and writes one canonical keyed file: the header with compression off, then one block
per key group of the handle's range (a database restored after a rescale may hold other groups: clipped).

Known limit of that binding: ``rocksdict`` cannot register Flink's merge operator
(``StringAppendTESTOperator``), and RocksDB refuses to read a key whose value is still a chain of merge
operands ("merge_operator_ must be set"; its iterator just stops, so kg checks every iterator's status).
Flink writes list state with ``merge``, so list entries not yet compacted need that operator: kg then
reads the database again with ``aimrocks`` (the ``[rocksdb-merge]`` extra), registering a Python port of
the operator (operands joined by ``,``, exactly Flink's list encoding), or, without it, refuses (exit 4)
rather than dropping the entries.
"""

from __future__ import annotations

import importlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from keygroup_cli.errors import InvalidSnapshotError, MissingDependencyError, UnsupportedFormatError
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import FlinkSnapshot
from keygroup_cli.flink.metadata.reader import OperatorState
from keygroup_cli.flink.state.keyed_encode import encode_block
from keygroup_cli.flink.state.keyed_header import read_keyed_header
from keygroup_cli.keygroups import key_group_prefix_bytes
from keygroup_cli.storage.locations import Location

#: What to install for reading RocksDB files.
INSTALL_HINT = (
    "pip install -e '.[rocksdb]' in kg's checkout, or the kg wheel with [rocksdb] "
    "(docs/how-to/install.md#extras); or: pip install rocksdict"
)
#: What to install for list state RocksDB still holds as merge operands.
MERGE_HINT = (
    "pip install -e '.[rocksdb-merge]' in kg's checkout, or the kg wheel with [rocksdb-merge] "
    "(docs/how-to/install.md#extras): aimrocks, which runs Flink's merge operator"
)


def load_binding() -> Any:
    """Import ``rocksdict``, the RocksDB binding kg reads Flink's database files with.

    Raises:
        MissingDependencyError: The binding is not installed or cannot load.
    """
    try:
        rocksdict = importlib.import_module("rocksdict")
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading RocksDB NATIVE savepoints and incremental checkpoints needs the rocksdict binding "
            f"({exc}); {INSTALL_HINT}",
            code="ROCKSDB_BINDING_MISSING",
        ) from None
    return rocksdict


def has_rocksdb_files(snapshot: FlinkSnapshot) -> bool:
    """Return whether any keyed handle of ``snapshot`` holds RocksDB database files (tag 11/5)."""
    return any(
        isinstance(sub.managed_keyed_state, IncrementalKeyedHandle)
        for op in snapshot.metadata.operators
        for sub in op.subtasks
    )


def _materialize(snapshot: FlinkSnapshot, handle: IncrementalKeyedHandle, db_dir: Path) -> None:
    """Put every database file under its RocksDB name in ``db_dir``: inline ones written, others linked."""
    db_dir.mkdir(parents=True)
    for entry in (*handle.shared, *handle.private):
        name = entry.local_path
        if "/" in name or name in ("", ".", ".."):
            raise InvalidSnapshotError(f"bad RocksDB file name {name!r}", code="FLINK_STATE_CORRUPT")
        if isinstance(entry.handle, ByteStreamHandle):
            (db_dir / name).write_bytes(entry.handle.data)
            continue
        path = local_path(entry.handle, snapshot.directory) if entry.handle is not None else None
        if isinstance(path, Location):
            path = path.local_path
        if path is None or not Path(path).is_file():
            raise InvalidSnapshotError(
                f"{snapshot.metadata_path}: RocksDB file {name} ({entry.handle!r}) is missing",
                code="STATE_FILE_MISSING",
            )
        try:
            os.symlink(Path(path).resolve(), db_dir / name)
        except OSError:
            shutil.copyfile(path, db_dir / name)


class _MergeOperands(Exception):
    """A column family holds merge operands rocksdict cannot resolve."""

    def __init__(self, state: str, status: str) -> None:
        super().__init__(state, status)
        self.state = state
        self.status = status


def _merge_binding() -> Any | None:
    """Return ``aimrocks`` (a binding that can register a merge operator written in Python), or None."""
    try:
        return importlib.import_module("aimrocks")
    except ImportError:
        return None


def _read_rocksdict(
    rocksdict: Any, db_dir: Path, names: list[str], where: str
) -> list[list[tuple[bytes, bytes]]]:
    """Return every state's ``(key, value)`` entries in key order, one list per header state (read-only).

    Raises:
        _MergeOperands: A key's value is a chain of merge operands (RocksDB refuses it without the operator).
    """
    try:
        families = set(rocksdict.Rdict.list_cf(str(db_dir)))
        db = rocksdict.Rdict(
            str(db_dir),
            options=rocksdict.Options(raw_mode=True),
            column_families={name: rocksdict.Options(raw_mode=True) for name in families},
            access_type=rocksdict.AccessType.read_only(),
        )
    except Exception as exc:  # the binding raises plain Exception with RocksDB's status text
        raise UnsupportedFormatError(
            f"{where}: rocksdict cannot open the database: {exc}", code="ROCKSDB_UNREADABLE"
        ) from None
    columns: list[list[tuple[bytes, bytes]]] = []
    try:
        for name in names:
            entries: list[tuple[bytes, bytes]] = []
            columns.append(entries)
            if name not in families:
                continue
            it = db.get_column_family(name).iter()
            it.seek_to_first()
            while it.valid():
                entries.append((it.key(), it.value()))
                it.next()
            # An iterator stops early on an error (merge operands without the operator): never trust
            # its end without its status.
            try:
                it.status()
            except Exception as exc:
                raise _MergeOperands(name, str(exc)) from None
    finally:
        db.close()
    return columns


def _read_aimrocks(
    aimrocks: Any, db_dir: Path, names: list[str], where: str
) -> list[list[tuple[bytes, bytes]]]:
    """Like ``_read_rocksdict``, with Flink's list merge operator registered (``aimrocks``)."""

    class StringAppend(aimrocks.IMergeOperator):  # type: ignore[misc]
        """RocksDB's ``StringAppendTESTOperator`` (delimiter ``,``): Flink's operator for list state."""

        def full_merge(
            self, _key: bytes, existing: bytes | None, operands: list[bytes]
        ) -> tuple[bool, bytes]:
            return True, b",".join(([existing] if existing is not None else []) + list(operands))

        def partial_merge(self, _key: bytes, left: bytes, right: bytes) -> tuple[bool, bytes]:
            return True, left + b"," + right

        def name(self) -> bytes:
            return b"StringAppendTESTOperator"

    rocksdict = importlib.import_module("rocksdict")  # lists the column families either way

    families = set(rocksdict.Rdict.list_cf(str(db_dir)))
    # The options (and the Python merge operators in them) must outlive the database handle.
    options = aimrocks.Options()
    family_options = {
        f.encode(): aimrocks.ColumnFamilyOptions(merge_operator=StringAppend()) for f in families
    }
    try:
        db = aimrocks.DB(str(db_dir), options, column_families=family_options, read_only=True)
    except Exception as exc:
        raise UnsupportedFormatError(
            f"{where}: aimrocks cannot open the database: {exc}", code="ROCKSDB_UNREADABLE"
        ) from None
    columns: list[list[tuple[bytes, bytes]]] = []
    try:
        for name in names:
            entries: list[tuple[bytes, bytes]] = []
            columns.append(entries)
            if name in families:
                it = db.iteritems(db.get_column_family(name.encode()))
                it.seek_to_first()
                entries.extend(it)
    except Exception as exc:
        raise UnsupportedFormatError(
            f"{where}: aimrocks cannot read the database: {exc}", code="ROCKSDB_UNREADABLE"
        ) from None
    # No db.close(): aimrocks 0.5.2 aborts the process ("pthread lock: Invalid argument") when a closed
    # handle is collected; dropping the last reference closes the database cleanly.
    return columns


def transcode_incremental(
    snapshot: FlinkSnapshot, op: OperatorState, handle: IncrementalKeyedHandle, target: Path
) -> KeyGroupsHandle:
    """Write one subtask's RocksDB database as a canonical keyed file in ``target``; return its handle.

    Raises:
        MissingDependencyError: ``rocksdict`` is not installed.
        UnsupportedFormatError: The binding cannot open or fully read the database (merge operands).
        InvalidSnapshotError: Missing files, or an entry whose key-group prefix is out of range.
    """
    rocksdict = load_binding()
    with StreamSource(handle.metadata, snapshot.directory) as src:
        raw_header = src.read(0, src.size)
        header = read_keyed_header(raw_header, src.source, src.size)
    if header.states is None or header.end is None:
        raise UnsupportedFormatError(
            f"{src.source}: the keyed-state header holds a serializer snapshot kg cannot delimit",
            code="FLINK_STATE_HEADER_UNKNOWN",
        )
    raw_header = raw_header[: header.end]
    db_dir = target / f"rocksdb-{uuid.uuid4()}"
    _materialize(snapshot, handle, db_dir)
    prefix_bytes = key_group_prefix_bytes(op.max_parallelism)
    start, end = handle.key_group_start, handle.key_group_start + handle.num_key_groups
    names = [info.name for info in header.states]
    where = f"{snapshot.metadata_path}: operator {op.label!r} subtask RocksDB {handle.backend_identifier}"
    try:
        try:
            columns = _read_rocksdict(rocksdict, db_dir, names, where)
        except _MergeOperands as exc:
            aimrocks = _merge_binding()
            if aimrocks is None:
                raise UnsupportedFormatError(
                    f"{where}: state {exc.state!r} cannot be read by rocksdict: {exc.status} (RocksDB keeps "
                    "list-state appends as merge operands until compaction, and rocksdict cannot register "
                    f"Flink's StringAppendTESTOperator merge operator); {MERGE_HINT}, or take a canonical "
                    "savepoint",
                    code="ROCKSDB_MERGE_OPERANDS",
                ) from None
            columns = _read_aimrocks(aimrocks, db_dir, names, where)
    finally:
        shutil.rmtree(db_dir, ignore_errors=True)
    groups: dict[int, list[tuple[int, bytes, bytes]]] = {}
    for state_id, entries in enumerate(columns):
        for key, value in entries:
            group = int.from_bytes(key[:prefix_bytes], "big")
            if start <= group < end:
                groups.setdefault(group, []).append((state_id, key[prefix_bytes:], value))
    name = str(uuid.uuid4())
    offsets = [0] * handle.num_key_groups
    canonical_header = raw_header[:4] + b"\x00" + raw_header[5:]
    with open(target / name, "wb") as out:
        out.write(canonical_header)
        for group in sorted(groups):
            # Entries of one state must form one run (each column family was read whole, in key order).
            block = sorted(groups[group], key=lambda e: e[0])
            offsets[group - start] = out.tell()
            out.write(encode_block(group, block, prefix_bytes))
        size = out.tell()
    return KeyGroupsHandle(7, start, tuple(offsets), RelativeFileHandle(name, size))


__all__ = ["INSTALL_HINT", "MERGE_HINT", "has_rocksdb_files", "load_binding", "transcode_incremental"]
