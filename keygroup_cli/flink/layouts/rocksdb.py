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

What RocksDB refuses is classified by its status (``Status::ToString``: the text before the first colon),
``rocksdb_status_error``: damaged files (``Corruption``: a block checksum, a table's magic number, a
MANIFEST; or a file the database names but the handle does not list) are an invalid snapshot
(``FLINK_DATABASE_CORRUPT``, exit 3), as a damaged canonical file is; no space or no memory is exit 5; only
what RocksDB does not support (``Not implemented``, ``Invalid argument``: a comparator or option kg's
binding lacks) is exit 4. Before RocksDB opens it, ``CURRENT`` must name a MANIFEST the handle lists, and
every record of that MANIFEST must hold its CRC32C: RocksDB itself stops reading a MANIFEST at a damaged
record and opens the database without what follows (column families and tables silently missing). Once
open, every table the handle lists must be live in it. Every block RocksDB reads is checked against its
checksum (``verify_checksums``, on by default), and the read is a full scan of every column family, so a
flipped byte in any data, index or properties block of a live table is found (a filter block, which a
scan does not read, is not: Flink writes none unless configured to). RocksDB opens its tables
with one thread (``max_file_opening_threads``, 16 by default): a thread it cannot start aborts the process,
so the open also refuses (exit 5) an address-space limit that leaves it too little room
(``core.allocator.require_address_space``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

from keygroup_cli.core.allocator import is_memory_failure, not_enough_memory, require_address_space
from keygroup_cli.core.errors import (
    ExecutionError,
    InvalidInputError,
    KgError,
    MissingDependencyError,
    UnsupportedFormatError,
)
from keygroup_cli.core.keygroups import key_group_prefix_bytes
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.io.snappy import crc32c
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.encode import encode_block
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import FlinkCheckpoint
from keygroup_cli.flink.metadata.reader import OperatorState
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


#: Address space a RocksDB database needs beyond what is in use when it opens: its open and a full scan of
#: a small database grew a process by 17 MiB at its peak with one table-opening thread (two background
#: threads, 8 MiB of stack each), by 137 MiB with RocksDB's default 16.
ADDRESS_SPACE_NEEDED = 48 << 20
#: The same through ``aimrocks``, which opens the tables on RocksDB's default 16 threads.
MERGE_ADDRESS_SPACE_NEEDED = 160 << 20
#: Address space loading a binding needs (rocksdict grew a process by 10 MiB, aimrocks by 16 MiB).
BINDING_ADDRESS_SPACE_NEEDED = 32 << 20


def load_binding() -> Any:
    """Import ``rocksdict``, the RocksDB binding kg reads Flink's database files with.

    Raises:
        MissingDependencyError: The binding is not installed or cannot load.
        ExecutionError: The binding is installed but could not be mapped into memory (``NOT_ENOUGH_MEMORY``).
    """
    if "rocksdict" not in sys.modules:
        # RocksDB's static initializers abort the process (std::bad_alloc) where the library's 10 MiB leave
        # them no room: refused before, as an address-space limit leaves it too little.
        require_address_space(BINDING_ADDRESS_SPACE_NEEDED, "loading the rocksdict binding")
    try:
        rocksdict = importlib.import_module("rocksdict")
    except ImportError as exc:
        if is_memory_failure(exc):  # its shared library could not be mapped: memory, not a missing binding
            raise not_enough_memory("loading the rocksdict binding") from None
        raise MissingDependencyError(
            f"reading RocksDB NATIVE savepoints and incremental checkpoints needs the rocksdict binding "
            f"({exc}); {INSTALL_HINT}",
            code="ROCKSDB_BINDING_MISSING",
        ) from None
    return rocksdict


def read_options(rocksdict: Any) -> Any:
    """Return the binding's options for a database kg reads or builds: raw keys, one table-opening thread."""
    options = rocksdict.Options(raw_mode=True)
    # RocksDB opens a database's tables on 16 threads by default, 8 MiB of stack each; one that cannot
    # start aborts the process (a C++ exception the binding cannot catch). One thread is plenty here.
    options.set_max_file_opening_threads(1)
    return options


#: ``Status::ToString`` prefixes (RocksDB's status codes) and what each means for kg.
_DAMAGED = ("Corruption",)
_UNSUPPORTED = ("Not implemented", "Invalid argument")


def rocksdb_status_error(status: str, where: str, files: dict[str, str] | None = None) -> KgError:
    """Return the error for a RocksDB status message (``Code: detail``) about the database read at ``where``.

    Args:
        status: What the binding raised (RocksDB's ``Status::ToString``; bytes from ``aimrocks`` decoded).
        where: The database, as the message names it (the savepoint, operator and subtask).
        files: The database's directory as RocksDB saw it, then RocksDB name -> the savepoint's file: the
            message names the savepoint's file instead of kg's scratch copy.

    ``Corruption`` and a file the database names but its handle lacks (``No such file``) are
    ``FLINK_DATABASE_CORRUPT`` (exit 3); no space is ``NO_SPACE_LEFT`` and no memory ``NOT_ENOUGH_MEMORY``
    (exit 5); another I/O error ``ROCKSDB_IO_ERROR`` (exit 5); ``Not implemented`` and ``Invalid argument``
    (an option, comparator or format the binding lacks) ``ROCKSDB_UNSUPPORTED`` (exit 4); anything else
    ``ROCKSDB_UNREADABLE`` (exit 4).
    """
    text, named = _clean_status(status, files or {})
    kind = text.split(":", 1)[0].strip()
    lowered = text.lower()
    if "no space left on device" in lowered:
        return ExecutionError(
            f"{where}: no space left on device (ENOSPC) for RocksDB ({text}); nothing was committed",
            code="NO_SPACE_LEFT",
        )
    if "cannot allocate memory" in lowered or "bad_alloc" in lowered or "out of memory" in lowered:
        return not_enough_memory(f"{where}: RocksDB ({text})")
    if kind in _DAMAGED or (kind == "IO error" and "no such file or directory" in lowered):
        file = f"its file {named}" if named else "its files"
        return InvalidInputError(
            f"{where}: the RocksDB database is damaged, {file}: {text}", code="FLINK_DATABASE_CORRUPT"
        )
    if kind == "IO error":
        return ExecutionError(f"{where}: RocksDB cannot read its files: {text}", code="ROCKSDB_IO_ERROR")
    if kind in _UNSUPPORTED:
        return UnsupportedFormatError(
            f"{where}: RocksDB cannot open the database with kg's binding: {text}", code="ROCKSDB_UNSUPPORTED"
        )
    return UnsupportedFormatError(
        f"{where}: RocksDB cannot read the database: {text}", code="ROCKSDB_UNREADABLE"
    )


def _clean_status(status: str, files: dict[str, str]) -> tuple[str, str | None]:
    """Return the status on one line, scratch paths replaced by RocksDB's names, and the first file named.

    ``files`` maps the scratch directory (key ``""``) and each RocksDB name to the savepoint's file; the
    first file named is returned with its savepoint file (``000019.sst (SP/7701c5a6-…)``).
    """
    text = " ".join(status.split())
    scratch = files.get("")
    named: str | None = None
    if scratch:

        def replace(match: re.Match[str]) -> str:
            nonlocal named
            name = match.group(1)
            if named is None:
                original = files.get(name)
                named = f"{name} ({original})" if original else name
            return name

        text = re.sub(re.escape(scratch.rstrip("/")) + r"/([^\s:,']+)", replace, text)
    return text, named


def _status_text(exc: BaseException) -> str:
    """Return what a binding raised as text (``aimrocks`` raises RocksDB's status as ``bytes``)."""
    if len(exc.args) == 1 and isinstance(exc.args[0], bytes):
        return exc.args[0].decode("utf-8", "replace")
    text = str(exc)
    if text.startswith(("b'", 'b"')):  # an exception built from bytes elsewhere: its repr
        text = text[2:-1]
    return text


def _require_current_valid(
    handle: IncrementalKeyedHandle, where: str, files: dict[str, str], db_dir: Path
) -> None:
    """Refuse a database whose ``CURRENT`` is not ``MANIFEST-<number>`` + newline naming a listed MANIFEST.

    RocksDB's own message for it names a file it could not open; this one names the savepoint's file.
    """
    if "CURRENT" not in files:
        raise InvalidInputError(
            f"{where}: the RocksDB database has no CURRENT file (its handle does not list one)",
            code="FLINK_DATABASE_CORRUPT",
        )
    try:
        current = (db_dir / "CURRENT").read_bytes()
    except OSError:
        return  # the open says what is wrong with it
    names = {entry.local_path for entry in (*handle.shared, *handle.private)}
    text = current.decode("ascii", "replace")
    if re.fullmatch(r"MANIFEST-\d+\n", text) is None or text[:-1] not in names:
        shown = text if len(text) <= 40 else f"{text[:40]}..."
        raise InvalidInputError(
            f"{where}: the RocksDB database is damaged, its file CURRENT ({files['CURRENT']}) holds "
            f"{shown!r}, not the name of a MANIFEST its handle lists",
            code="FLINK_DATABASE_CORRUPT",
        )


#: RocksDB's log format (``db/log_format.h``), which a MANIFEST is written in: 32 KiB blocks of records, each
#: behind a header of a masked CRC32C, a length and a type (plus a log number for the recyclable types).
_LOG_BLOCK = 32768
_LOG_HEADER = struct.Struct("<IHB")
_RECYCLABLE_TYPES = frozenset({5, 6, 7, 8, 11})
_MAX_RECORD_TYPE = 11
_CRC_MASK_DELTA = 0xA282EAD8


def log_damage(data: bytes) -> str | None:
    """Return where a RocksDB log file (a MANIFEST) is damaged, or None when every record holds its CRC.

    As ``log::Reader`` reads it: a block's last bytes too short for a header are padding, a zero header
    ends the block (preallocated space); every record must lie inside its block and hold its checksum
    (``crc32c`` of the type byte, the log number of a recyclable record, and the payload, masked).
    """
    pos, size = 0, len(data)
    while pos < size:
        left = _LOG_BLOCK - pos % _LOG_BLOCK
        if left < _LOG_HEADER.size:
            pos += left
            continue
        if size - pos < _LOG_HEADER.size:
            return f"a record header is cut off at byte {pos}"
        masked, length, kind = _LOG_HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:
            pos += left  # RocksDB skips the rest of a block a preallocating writer left zero
            continue
        if kind > _MAX_RECORD_TYPE:
            return f"the record at byte {pos} has the unknown type {kind}"
        header = _LOG_HEADER.size + (4 if kind in _RECYCLABLE_TYPES else 0)
        end = pos + header + length
        if header + length > left or end > size:
            return f"the record at byte {pos} ({length} bytes) runs past its block or the file"
        crc = (masked - _CRC_MASK_DELTA) & 0xFFFFFFFF
        crc = ((crc >> 17) | (crc << 15)) & 0xFFFFFFFF
        if crc32c(data[pos + 6 : end]) != crc:
            return f"the record at byte {pos} fails its checksum"
        pos = end
    return None


def _require_manifest_intact(where: str, files: dict[str, str], db_dir: Path) -> None:
    """Refuse a database whose MANIFEST (the one ``CURRENT`` names) has a damaged record."""
    try:
        manifest = (db_dir / "CURRENT").read_text(encoding="ascii").strip()
        data = (db_dir / manifest).read_bytes()
    except (OSError, UnicodeDecodeError):
        return  # the open says what is wrong with it
    damage = log_damage(data)
    if damage is not None:
        raise InvalidInputError(
            f"{where}: the RocksDB database is damaged, its file {manifest} ({files.get(manifest)}): "
            f"{damage}",
            code="FLINK_DATABASE_CORRUPT",
        )


def _require_live_tables(db: Any, handle: IncrementalKeyedHandle, where: str, files: dict[str, str]) -> None:
    """Refuse a database in which a table its handle lists is not live (its MANIFEST lost it)."""
    try:
        live = {str(f["name"]).lstrip("/") for f in db.live_files()}
    except Exception:  # noqa: BLE001 - a binding without the call: the scan still reads every live table
        return
    listed = sorted(e.local_path for e in (*handle.shared, *handle.private) if e.local_path.endswith(".sst"))
    lost = [name for name in listed if name not in live]
    if lost:
        raise InvalidInputError(
            f"{where}: the RocksDB database is damaged, its MANIFEST does not hold {lost[0]} "
            f"({files.get(lost[0])}) that its handle lists"
            + (f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""),
            code="FLINK_DATABASE_CORRUPT",
        )


def has_rocksdb_files(snapshot: FlinkCheckpoint) -> bool:
    """Return whether any keyed handle of ``snapshot`` holds RocksDB database files (tag 11/5)."""
    return any(
        isinstance(sub.managed_keyed_state, IncrementalKeyedHandle)
        for op in snapshot.metadata.operators
        for sub in op.subtasks
    )


def _materialize(snapshot: FlinkCheckpoint, handle: IncrementalKeyedHandle, db_dir: Path) -> dict[str, str]:
    """Put every database file under its RocksDB name in ``db_dir``: inline ones written, others linked.

    Returns ``db_dir`` (key ``""``) and each RocksDB name mapped to the savepoint's file, for messages.
    """
    db_dir.mkdir(parents=True)
    files = {"": str(db_dir)}
    for entry in (*handle.shared, *handle.private):
        name = entry.local_path
        if "/" in name or name in ("", ".", ".."):
            raise InvalidInputError(f"bad RocksDB file name {name!r}", code="FLINK_STATE_CORRUPT")
        if isinstance(entry.handle, ByteStreamHandle):
            (db_dir / name).write_bytes(entry.handle.data)
            files[name] = f"inline in {snapshot.metadata_path}"
            continue
        path = local_path(entry.handle, snapshot.directory) if entry.handle is not None else None
        if isinstance(path, Location):
            path = path.local_path
        if path is None or not Path(path).is_file():
            raise InvalidInputError(
                f"{snapshot.metadata_path}: RocksDB file {name} ({entry.handle!r}) is missing",
                code="STATE_FILE_MISSING",
            )
        files[name] = str(path)
        try:
            os.symlink(Path(path).resolve(), db_dir / name)
        except OSError:
            shutil.copyfile(path, db_dir / name)
    return files


class _MergeOperands(Exception):
    """A column family holds merge operands rocksdict cannot resolve."""

    def __init__(self, state: str, status: str) -> None:
        super().__init__(state, status)
        self.state = state
        self.status = status


def _merge_binding() -> Any | None:
    """Return ``aimrocks`` (a binding that can register a merge operator written in Python), or None."""
    if "aimrocks" not in sys.modules and importlib.util.find_spec("aimrocks") is not None:
        require_address_space(BINDING_ADDRESS_SPACE_NEEDED, "loading the aimrocks binding")
    try:
        return importlib.import_module("aimrocks")
    except ImportError as exc:
        if is_memory_failure(exc):
            raise not_enough_memory("loading the aimrocks binding") from None
        return None


def _binding_error(exc: Exception, where: str, files: dict[str, str]) -> BaseException:
    """Return what to raise for a binding's exception: memory, OS errors as they are, a status classified."""
    if is_memory_failure(exc):
        return not_enough_memory(f"reading the RocksDB database of {where}")
    if isinstance(exc, KgError | OSError):
        return exc
    return rocksdb_status_error(_status_text(exc), where, files)


def _read_rocksdict(
    rocksdict: Any,
    db_dir: Path,
    names: list[str],
    where: str,
    files: dict[str, str],
    handle: IncrementalKeyedHandle,
) -> list[list[tuple[bytes, bytes]]]:
    """Return every state's ``(key, value)`` entries in key order, one list per header state (read-only).

    Raises:
        _MergeOperands: A key's value is a chain of merge operands (RocksDB refuses it without the operator).
        KgError: What RocksDB refused, classified by ``rocksdb_status_error``.
    """
    require_address_space(ADDRESS_SPACE_NEEDED, f"opening the RocksDB database of {where}")
    try:
        families = set(rocksdict.Rdict.list_cf(str(db_dir)))
        db = rocksdict.Rdict(
            str(db_dir),
            options=read_options(rocksdict),
            column_families={name: read_options(rocksdict) for name in families},
            access_type=rocksdict.AccessType.read_only(),
        )
    except Exception as exc:  # the binding raises plain Exception with RocksDB's status text
        raise _binding_error(exc, where, files) from None
    columns: list[list[tuple[bytes, bytes]]] = []
    try:
        _require_live_tables(db, handle, where, files)
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
            # An iterator stops early on an error (merge operands without the operator, a block whose
            # checksum fails): never trust its end without its status.
            try:
                it.status()
            except Exception as exc:
                status = _status_text(exc)
                if "merge_operator" in status:
                    raise _MergeOperands(name, status) from None
                raise _binding_error(exc, where, files) from None
    finally:
        db.close()
    return columns


def _read_aimrocks(
    aimrocks: Any, db_dir: Path, names: list[str], where: str, files: dict[str, str]
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
    options = aimrocks.Options()  # no max_file_opening_threads here: RocksDB's 16 threads open the tables
    family_options = {
        f.encode(): aimrocks.ColumnFamilyOptions(merge_operator=StringAppend()) for f in families
    }
    require_address_space(MERGE_ADDRESS_SPACE_NEEDED, f"opening the RocksDB database of {where}")
    try:
        db = aimrocks.DB(str(db_dir), options, column_families=family_options, read_only=True)
    except Exception as exc:
        raise _binding_error(exc, where, files) from None
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
        raise _binding_error(exc, where, files) from None
    # No db.close(): aimrocks 0.5.2 aborts the process ("pthread lock: Invalid argument") when a closed
    # handle is collected; dropping the last reference closes the database cleanly.
    return columns


def transcode_incremental(
    snapshot: FlinkCheckpoint, op: OperatorState, handle: IncrementalKeyedHandle, target: Path
) -> KeyGroupsHandle:
    """Write one subtask's RocksDB database as a canonical keyed file in ``target``; return its handle.

    Raises:
        MissingDependencyError: ``rocksdict`` is not installed.
        UnsupportedFormatError: What the binding cannot read (merge operands without ``aimrocks``, an option
            or format RocksDB's binding does not support).
        InvalidInputError: Missing files, a damaged database (``FLINK_DATABASE_CORRUPT``), or an entry
            whose key-group prefix is out of range.
        ExecutionError: No space, no memory, or another I/O error reading the files.
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
    names = [info.name for info in header.states]
    where = f"{snapshot.metadata_path}: operator {op.label!r} subtask RocksDB {handle.backend_identifier}"
    db_dir = target / f"rocksdb-{uuid.uuid4()}"
    try:
        columns = _read_columns(rocksdict, snapshot, handle, db_dir, names, where)
    finally:
        shutil.rmtree(db_dir, ignore_errors=True)
    prefix_bytes = key_group_prefix_bytes(op.max_parallelism)
    return _write_canonical(target, raw_header[: header.end], columns, handle, prefix_bytes)


def _read_columns(
    rocksdict: Any,
    snapshot: FlinkCheckpoint,
    handle: IncrementalKeyedHandle,
    db_dir: Path,
    names: list[str],
    where: str,
) -> list[list[tuple[bytes, bytes]]]:
    """Materialize the subtask's database in ``db_dir``, check it, and read each state's column family.

    With merge operands rocksdict cannot read, ``aimrocks`` reads it where installed.
    """
    files = _materialize(snapshot, handle, db_dir)
    _require_current_valid(handle, where, files, db_dir)
    _require_manifest_intact(where, files, db_dir)
    try:
        return _read_rocksdict(rocksdict, db_dir, names, where, files, handle)
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
        return _read_aimrocks(aimrocks, db_dir, names, where, files)


def _write_canonical(
    target: Path,
    raw_header: bytes,
    columns: list[list[tuple[bytes, bytes]]],
    handle: IncrementalKeyedHandle,
    prefix_bytes: int,
) -> KeyGroupsHandle:
    """Write the columns' entries of the handle's key groups as a canonical keyed file; return its handle."""
    start, end = handle.key_group_start, handle.key_group_start + handle.num_key_groups
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


__all__ = [
    "ADDRESS_SPACE_NEEDED",
    "BINDING_ADDRESS_SPACE_NEEDED",
    "INSTALL_HINT",
    "MERGE_ADDRESS_SPACE_NEEDED",
    "MERGE_HINT",
    "has_rocksdb_files",
    "load_binding",
    "log_damage",
    "read_options",
    "rocksdb_status_error",
    "transcode_incremental",
]
