"""Convert a canonical Flink savepoint into a kg snapshot, and a kg snapshot back into a savepoint.

``savepoint_to_snapshot`` decodes every operator's keyed state (``keyed_decode``) and operator state
(``operator_state``) into the kg Parquet layout and keeps everything else a savepoint needs in an additive
``flink`` manifest extension (``docs/reference/flink-extension.md``): metadata version, checkpoint id,
properties trailer and master states on the manifest; per operator the coordinator state, the keyed-state
header (key serializer snapshot and state meta infos) and the operator-state headers, base64-encoded.

``snapshot_to_savepoint`` writes a canonical savepoint from a kg snapshot with that extension, for the
snapshot's (possibly rescaled) parallelism and maxParallelism: one keyed file per subtask with key-group
offsets and prefixes for the target maxParallelism, one operator-state file per subtask, and a ``_metadata``
in the source's version that references every file relatively (``RelativeFileStateHandle``), so the
directory can be moved. Both directions write into a staging directory and commit by atomic rename.

HashMap checkpoints and NATIVE HashMap savepoints (the heap layout) are first rewritten as canonical key
groups (``keygroup_cli.flink.heap_layout``). RocksDB NATIVE savepoints and incremental / changelog checkpoints
are refused: their keyed state is not in a key-group stream format, and kg does not guess.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli import __version__
from keygroup_cli.errors import (
    ExecutionError,
    InvalidArgumentError,
    InvalidSnapshotError,
    UnsupportedFormatError,
)
from keygroup_cli.flink import FlinkSnapshot, is_flink_savepoint, read_flink_metadata
from keygroup_cli.flink.handles import (
    ByteStreamHandle,
    IncrementalKeyedHandle,
    KeyGroupsHandle,
    OperatorStateHandle,
    RelativeFileHandle,
)
from keygroup_cli.flink.heap_layout import canonical_view, needs_canonical_view
from keygroup_cli.flink.keyed_decode import decode_keyed_file
from keygroup_cli.flink.keyed_encode import write_keyed_file
from keygroup_cli.flink.keyed_header import (
    KeyedStateHeader,
    OperatorStateHeader,
    operator_header_end,
    read_keyed_header,
    read_operator_header,
)
from keygroup_cli.flink.keyed_layout import KeyedLayout
from keygroup_cli.flink.metadata import (
    CheckpointMetadata,
    MasterState,
    OperatorState,
    SubtaskState,
    parse_metadata,
)
from keygroup_cli.flink.metadata_writer import CANONICAL_SAVEPOINT_PROPERTIES, write_metadata
from keygroup_cli.flink.operator_state import KIND_BY_MODE, decode_operator_file, write_operator_file
from keygroup_cli.flink.regroup import RegroupedFile
from keygroup_cli.flink.stream_source import StreamSource
from keygroup_cli.integrity import require_readable_output
from keygroup_cli.javahash import HASHABLE_KEY_TYPES, hash_codes
from keygroup_cli.keygroups import key_group_range_for_operator_index, key_groups_for_hashes
from keygroup_cli.snapshot import Manifest, Operator, OperatorFile, Snapshot, StateDescriptor, open_snapshot
from keygroup_cli.snapshot.model import KeyedFile
from keygroup_cli.snapshot.parquet import iter_keyed_batches, read_operator_file
from keygroup_cli.snapshot.staging import SnapshotWriter, scratch_directory, staged_directory
from keygroup_cli.storage.locations import location

#: Name of the manifest / operator extension this module reads and writes.
EXTENSION = "flink"
#: Version of the extension's own layout (bumped only on incompatible changes).
EXTENSION_VERSION = 1
METADATA_FILE = "_metadata"

OnProgress = Callable[[str, int, "int | None"], None]


@dataclass(frozen=True, slots=True)
class ConvertResult:
    """What a conversion wrote: direction, destination, operators and rows/bytes per kind."""

    direction: str
    source: str
    destination: str
    operators: int
    keyed_files: int
    keyed_rows: int
    operator_files: int
    operator_rows: int
    bytes: int
    compressed: bool | None = None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise InvalidSnapshotError(f"{where}: not valid base64", code="FLINK_EXTENSION_INVALID") from None


def _noop(_stage: str, _done: int, _total: int | None) -> None:
    return None


# -- savepoint -> kg ----------------------------------------------------------------------------------------


def check_convertible(snapshot: FlinkSnapshot) -> None:
    """Refuse savepoints/checkpoints whose state is not in Flink's canonical format.

    Raises:
        UnsupportedFormatError: NATIVE savepoint, incremental/changelog keyed handles, heap-checkpoint
            (``KeyGroupsStateHandle``) layout, raw keyed/operator state or unaligned channel state.
    """
    where = str(snapshot.metadata_path)
    props = snapshot.metadata.properties
    native = props is not None and props.format_type == "NATIVE"
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            # Any key-groups handle in the canonical layout converts: tag 7 (canonical savepoints) and
            # tags 3/12 written by the canonical writer (full RocksDB checkpoints; Flink 1.15's NATIVE
            # savepoints of a non-incremental RocksDB backend). The heap layout is rewritten before this.
            if keyed is not None and not isinstance(keyed, KeyGroupsHandle):
                kind = type(keyed).__name__
                if native:
                    raise UnsupportedFormatError(
                        f"{where}: {native_savepoint_kind(snapshot)}, not the canonical format kg converts; "
                        "take a canonical savepoint (flink savepoint --type canonical, or "
                        "SavepointFormatType.CANONICAL)",
                        code="FLINK_NATIVE_SAVEPOINT",
                    )
                raise UnsupportedFormatError(
                    f"{where}: operator {op.label!r} subtask {sub.index} has a {kind} (tag "
                    f"{getattr(keyed, 'tag', '?')}), not a canonical savepoint's key groups; take a "
                    "canonical savepoint (flink savepoint --type canonical)",
                    code="FLINK_NOT_CANONICAL",
                )
            if sub.raw_keyed_state is not None or sub.raw_operator_state is not None:
                raise UnsupportedFormatError(
                    f"{where}: operator {op.label!r} subtask {sub.index} has raw keyed/operator state, "
                    "which kg does not convert",
                    code="FLINK_RAW_STATE",
                )
            if sub.input_channel_state or sub.result_subpartition_state:
                raise UnsupportedFormatError(
                    f"{where}: operator {op.label!r} holds unaligned-checkpoint channel state; "
                    "take a savepoint",
                    code="FLINK_CHANNEL_STATE",
                )


def native_savepoint_kind(snapshot: FlinkSnapshot) -> str:
    """Say what a NATIVE savepoint's keyed state is, from its handles: each backend snapshots its own way.

    RocksDB writes its database files (``IncrementalRemoteKeyedStateHandle``, tag 11/5); the HashMap
    backend writes key-group streams in its checkpoint layout (``HeapSnapshotStrategy``,
    ``KeyGroupsStateHandle``, tag 12/3: per key group and state, a count and the entries written by the
    state's serializers without lengths), which is not the canonical layout (``FullSnapshotAsyncWriter``:
    length-prefixed key/value entries) that kg reads and writes.
    """
    kinds = set()
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, IncrementalKeyedHandle):
                kinds.add("RocksDB database files")
            elif isinstance(keyed, KeyGroupsHandle):
                kinds.add("HashMap (heap) backend key-group streams in its checkpoint layout")
            elif keyed is not None:
                kinds.add(f"{type(keyed).__name__} (tag {getattr(keyed, 'tag', '?')}) keyed state")
    if not kinds:
        return "a NATIVE savepoint (no keyed state)"
    return "a NATIVE savepoint holding " + " and ".join(sorted(kinds))


def key_types(snapshot: FlinkSnapshot) -> dict[str, str]:
    """Return the kg key type of every operator with keyed state, by operator id (one header read each).

    Keys of Flink's String, Long, Integer and Boolean serializers can be re-hashed; any other key
    serializer is ``binary``.
    """
    found: dict[str, str] = {}
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if isinstance(handle, KeyGroupsHandle):
                with StreamSource(handle.delegate, snapshot.directory) as src:
                    _raw, header = _keyed_header(src, handle)
                    layout = KeyedLayout.from_header(header, op.max_parallelism, src.source)
                found[op.operator_id] = layout.codec.key_type
                break
    return found


def _keyed_header(src: StreamSource, handle: KeyGroupsHandle) -> tuple[bytes, KeyedStateHeader]:
    first = min([o for o in handle.offsets if o] or [src.size])
    raw = src.read(0, first)
    return raw, read_keyed_header(raw, src.source, first)


def _operator_header(src: StreamSource, handle: OperatorStateHandle) -> tuple[bytes, OperatorStateHeader]:
    offsets = [o for e in handle.states for o in e.offsets]
    first = min([o for o in offsets if o > 0] or [src.size])
    prefix = src.read(0, first)
    end = operator_header_end(prefix, offsets, src.size)
    assert end is not None
    raw = prefix[:end]
    return raw, read_operator_header(raw, src.source, end)


def _check_key_groups(batch: pa.RecordBatch, key_type: str, max_parallelism: int, where: str) -> None:
    """Check that every decoded key hashes to the key group whose prefix it was stored under."""
    if key_type not in HASHABLE_KEY_TYPES or batch.num_rows == 0:
        return
    groups = key_groups_for_hashes(hash_codes(batch.column("key"), key_type), max_parallelism)
    stored = np.asarray(batch.column("key_group").to_numpy(zero_copy_only=False))
    bad = np.flatnonzero(groups != stored)
    if bad.size:
        i = int(bad[0])
        raise InvalidSnapshotError(
            f"{where}: key {batch.column('key')[i].as_py()!r} is stored in key group {int(stored[i])} but "
            f"Flink assigns it to {int(groups[i])} (wrong key serializer or maxParallelism?)",
            code="KEY_GROUP_MISMATCH",
        )


def _dedupe(headers: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    """Group identical header bytes: ``[{"subtasks": [...], "bytes": b64}]`` in first-seen order."""
    groups: dict[bytes, list[int]] = {}
    for subtask, raw in headers:
        groups.setdefault(raw, []).append(subtask)
    return [{"subtasks": subtasks, "bytes": _b64(raw)} for raw, subtasks in groups.items()]


def savepoint_to_snapshot(
    source: str | Path,
    dest: str | Path,
    *,
    keyed: bool = True,
    on_progress: OnProgress | None = None,
) -> ConvertResult:
    """Convert the canonical savepoint at ``source`` into a kg snapshot at ``dest`` (staged, atomic).

    With ``keyed=False`` only operator state is converted (the savepoint rescale copies keyed state
    between savepoints itself, ``keygroup_cli.flink.regroup``); the result then holds no keyed state.

    Raises:
        UnsupportedFormatError: Not a canonical savepoint (see ``check_convertible``), or state kg cannot
            delimit (an unknown serializer in a header, a map state under an opaque key serializer).
        InvalidSnapshotError: Missing or corrupt state files.
        InvalidArgumentError: ``dest`` exists.
    """
    report = on_progress or _noop
    snapshot = read_flink_metadata(source)
    if needs_canonical_view(snapshot):
        # A HashMap checkpoint / NATIVE HashMap savepoint: decode its canonical rewrite (heap_layout).
        with scratch_directory(dest) as scratch:
            view = canonical_view(snapshot, scratch / "canonical")
            return _savepoint_to_snapshot(view, dest, keyed, report, origin=snapshot)
    return _savepoint_to_snapshot(snapshot, dest, keyed, report, origin=snapshot)


def _savepoint_to_snapshot(
    snapshot: FlinkSnapshot, dest: str | Path, keyed: bool, report: OnProgress, *, origin: FlinkSnapshot
) -> ConvertResult:
    check_convertible(snapshot)
    meta = snapshot.metadata
    total = sum(len(op.subtasks) for op in meta.operators)
    done = 0
    keyed_rows = operator_rows = keyed_count = operator_count = size = 0
    operators: list[Operator] = []
    with staged_directory(dest) as staging:
        writer = SnapshotWriter(staging)
        for op in meta.operators:
            where = f"{snapshot.metadata_path}: operator {op.label!r}"
            op_dir: str | None = None
            keyed_headers: list[tuple[int, bytes]] = []
            operator_headers: list[tuple[int, bytes]] = []
            keyed_files: list[KeyedFile] = []
            operator_files: list[OperatorFile] = []
            states: dict[str, str] = {}
            key_type: str | None = None
            key_serializer: str | None = None
            keyed_compressed = operator_compressed = False
            for sub in op.subtasks:
                handle = sub.managed_keyed_state
                if keyed and isinstance(handle, KeyGroupsHandle):
                    op_dir = op_dir or writer.operator_dir(op.uid, op.operator_id)
                    with StreamSource(handle.delegate, snapshot.directory) as src:
                        raw, header = _keyed_header(src, handle)
                        layout = KeyedLayout.from_header(header, op.max_parallelism, src.source)
                        if key_type is not None and layout.codec.key_type != key_type:
                            raise InvalidSnapshotError(
                                f"{where}: subtasks disagree on the key serializer",
                                code="FLINK_STATE_INCONSISTENT",
                            )
                        key_type = layout.codec.key_type
                        key_serializer = layout.codec.serializer_class
                        keyed_compressed = header.compressed
                        keyed_headers.append((sub.index, raw))
                        for s in layout.states:
                            states.setdefault(s.name, s.kind)
                        expected = key_group_range_for_operator_index(
                            op.max_parallelism, op.parallelism, sub.index
                        )
                        if (handle.key_group_start, handle.key_group_end) != (expected.start, expected.end):
                            raise InvalidSnapshotError(
                                f"{where}: subtask {sub.index} holds key groups [{handle.key_group_start}, "
                                f"{handle.key_group_end}], not Flink's range "
                                f"[{expected.start}, {expected.end}]",
                                code="KEY_GROUP_RANGE_MISMATCH",
                            )
                        batches = _checked(
                            decode_keyed_file(src, handle, layout, compressed=header.compressed),
                            layout.codec.key_type,
                            op.max_parallelism,
                            src.source,
                        )
                        entry = writer.write_keyed(
                            op_dir,
                            sub.index,
                            batches,
                            key_type=layout.codec.key_type,
                            key_groups=expected,
                            state_names=[s.name for s in layout.states],
                        )
                    keyed_files.append(entry)
                    keyed_rows += entry.rows
                    size += entry.bytes
                op_handle = sub.managed_operator_state
                if op_handle is not None:
                    op_dir = op_dir or writer.operator_dir(op.uid, op.operator_id)
                    with StreamSource(op_handle.delegate, snapshot.directory) as src:
                        raw, op_header = _operator_header(src, op_handle)
                        table = decode_operator_file(src, op_handle, op_header)
                    operator_compressed = op_header.compressed
                    operator_headers.append((sub.index, raw))
                    for e in op_handle.states:
                        states.setdefault(e.name, KIND_BY_MODE[e.mode])
                    for info in (op_header.states or ()) + (op_header.broadcast_states or ()):
                        states.setdefault(info.name, info.kind)
                    entry_op = writer.write_operator(op_dir, sub.index, table)
                    operator_files.append(entry_op)
                    operator_rows += entry_op.rows
                    size += entry_op.bytes
                done += 1
                report("convert", done, total)
            extension: dict[str, Any] = {
                "source_parallelism": op.parallelism,
                "source_max_parallelism": op.max_parallelism,
                "coordinator_state": None
                if op.coordinator_state is None
                else {
                    "handle_name": op.coordinator_state.handle_name,
                    "bytes": _b64(op.coordinator_state.data),
                },
            }
            if op.fully_finished:
                extension["fully_finished"] = True
            finished = [s.index for s in op.subtasks if s.finished]
            if finished:
                extension["finished_subtasks"] = finished
            if keyed_headers:
                extension["keyed"] = {
                    "key_serializer": key_serializer,
                    "compressed": keyed_compressed,
                    "headers": _dedupe(keyed_headers),
                }
            if operator_headers:
                extension["operator_state"] = {
                    "compressed": operator_compressed,
                    "headers": _dedupe(operator_headers),
                }
            keyed_count += len(keyed_files)
            operator_count += len(operator_files)
            operators.append(
                Operator(
                    uid=op.uid,
                    operator_id=op.operator_id,
                    name=op.name,
                    parallelism=op.parallelism,
                    max_parallelism=op.max_parallelism,
                    key_type=key_type,
                    states=tuple(StateDescriptor(n, k) for n, k in states.items()),
                    keyed_files=tuple(keyed_files),
                    operator_files=tuple(operator_files),
                    extensions={EXTENSION: extension},
                )
            )
        manifest = Manifest(
            snapshot_id=meta.checkpoint_id,
            created_by=f"kg {__version__}",
            created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            origin={
                "kind": "flink-savepoint" if origin.is_savepoint else "flink-checkpoint",
                "path": str(origin.directory),
                "metadata_version": meta.version,
                "savepoint_format": origin.metadata.properties.format_type
                if origin.metadata.properties
                else None,
            },
            operators=tuple(operators),
            extensions={
                EXTENSION: {
                    "version": EXTENSION_VERSION,
                    "metadata_version": meta.version,
                    "checkpoint_id": meta.checkpoint_id,
                    "properties": _canonical_properties(meta),
                    "master_states": [
                        {"name": m.name, "version": m.version, "payload": _b64(m.payload)}
                        for m in meta.master_states
                    ],
                }
            },
        )
        writer.commit(manifest)
    return ConvertResult(
        "to-kg",
        str(origin.directory),
        str(dest),
        len(operators),
        keyed_count,
        keyed_rows,
        operator_count,
        operator_rows,
        size,
    )


def _canonical_properties(meta: CheckpointMetadata) -> str | None:
    """Return the properties trailer to keep: the source's if it is a canonical savepoint's, else one.

    kg always writes canonical savepoints, so a checkpoint's or a NATIVE savepoint's trailer is replaced.
    """
    if meta.properties_bytes is None:
        return None
    props = meta.properties
    if props is not None and props.is_savepoint and props.format_type == "CANONICAL":
        return _b64(meta.properties_bytes)
    return _b64(CANONICAL_SAVEPOINT_PROPERTIES)


def _checked(
    batches: Iterator[pa.RecordBatch], key_type: str, max_parallelism: int, where: str
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        _check_key_groups(batch, key_type, max_parallelism, where)
        yield batch


# -- kg -> savepoint ----------------------------------------------------------------------------------------


def _extension(mapping: Mapping[str, Any], where: str) -> dict[str, Any]:
    ext = mapping.get(EXTENSION)
    if not isinstance(ext, dict):
        raise UnsupportedFormatError(
            f"{where}: no '{EXTENSION}' extension: this kg snapshot was not converted from a Flink "
            "savepoint, so kg has no serializer snapshots to write one (convert a savepoint with "
            "`kg convert SAVEPOINT --out`)",
            code="FLINK_EXTENSION_MISSING",
        )
    return ext


def _pick_header(
    groups: list[dict[str, Any]],
    subtask: int,
    same_parallelism: bool,
    needed: set[str],
    parse: Callable[[bytes], Any],
    names: Callable[[Any], set[str]],
    where: str,
) -> tuple[bytes, Any]:
    """Return a saved header for ``subtask``: its own at unchanged parallelism, else one naming all states."""
    candidates: list[bytes] = []
    if same_parallelism:
        candidates += [_unb64(g["bytes"], where) for g in groups if subtask in g.get("subtasks", [])]
    candidates += [_unb64(g["bytes"], where) for g in groups]
    for raw in candidates:
        header = parse(raw)
        if needed <= names(header):
            return raw, header
    raise InvalidSnapshotError(
        f"{where}: no saved state header declares all of {sorted(needed)}", code="FLINK_STATE_UNKNOWN"
    )


#: ``regroup(staging) -> {operator id: one RegroupedFile per subtask}``: keyed files written elsewhere.
Regroup = Callable[[Path], Mapping[str, Sequence[RegroupedFile]]]


def snapshot_to_savepoint(
    source: str | Path,
    dest: str | Path,
    *,
    compression: bool | None = None,
    on_progress: OnProgress | None = None,
    regroup: Regroup | None = None,
    keyed_root: str | None = None,
) -> ConvertResult:
    """Write the kg snapshot at ``source`` as a canonical Flink savepoint directory ``dest`` (staged, atomic).

    Operators that hold no state of any kind (no keyed, operator or coordinator state, no finished
    subtasks; channel state is never converted) are left out of ``_metadata``. Flink restores an operator
    missing from the savepoint exactly as an empty one (``StateAssignmentOperation.assignStates`` gives it
    an empty ``OperatorState`` with its vertex's parallelism and maxParallelism), but it checks the
    maxParallelism of *every* operator listed (``Checkpoints.loadAndValidateCheckpoint``): an empty operator
    chained with a rescaled one would keep its old maxParallelism and fail the restore, and kg cannot see
    chains in ``_metadata``.

    Args:
        source: A kg snapshot carrying the ``flink`` extension (made by ``savepoint_to_snapshot``, maybe
            rescaled since).
        dest: The savepoint directory to create.
        compression: Snappy-compress keyed and operator state; None keeps what the source savepoint used.
        on_progress: ``(stage, completed, total)`` callback.
        regroup: Called once with the staging directory; the keyed files it writes there (by operator id)
            are used instead of encoding the snapshot's keyed rows, for operators that have none.
        keyed_root: Where ``regroup``'s files are when not in the staging directory: an object-store
            prefix its write tasks wrote to directly. Their sizes are checked there; decoding every
            stream of the output is then the caller's job, once the rest is beside them
            (``integrity.require_readable_output`` of the parsed ``_metadata``).

    Raises:
        UnsupportedFormatError: The snapshot has no ``flink`` extension.
        InvalidSnapshotError: Rows that do not fit the saved headers, or unreadable files.
        InvalidArgumentError: ``dest`` exists.
    """
    report = on_progress or _noop
    snapshot = open_snapshot(source)
    manifest = snapshot.manifest
    root = _extension(manifest.extensions, f"{snapshot.path}: manifest")
    version = int(root.get("metadata_version", 6))
    properties = root.get("properties")
    properties_bytes = _unb64(properties, "properties") if properties else None
    if version >= 4 and properties_bytes is None:
        properties_bytes = CANONICAL_SAVEPOINT_PROPERTIES
    masters = tuple(
        MasterState(m["name"], int(m["version"]), _unb64(m["payload"], "master state"))
        for m in root.get("master_states", [])
    )
    total = sum(op.parallelism for op in manifest.operators)
    done = 0
    keyed_rows = operator_rows = keyed_count = operator_count = size = 0
    compressed_any: bool | None = None
    operators: list[OperatorState] = []
    with staged_directory(dest) as staging:
        regrouped = regroup(staging) if regroup is not None else {}
        for op in manifest.operators:
            where = f"{snapshot.path}: operator {op.label!r}"
            ext = _extension(op.extensions, where)
            same_p = int(ext.get("source_parallelism", -1)) == op.parallelism
            keyed_ext = ext.get("keyed")
            op_ext = ext.get("operator_state")
            keyed_by_subtask = {f.subtask: f for f in op.keyed_files}
            op_by_subtask = {f.subtask: f for f in op.operator_files}
            if keyed_by_subtask and not keyed_ext:
                raise InvalidSnapshotError(
                    f"{where}: keyed files but no saved keyed-state header", code="FLINK_EXTENSION_INVALID"
                )
            if op_by_subtask and not op_ext:
                raise InvalidSnapshotError(
                    f"{where}: operator files but no saved operator-state header",
                    code="FLINK_EXTENSION_INVALID",
                )
            tables = {i: read_operator_file(snapshot, f) for i, f in op_by_subtask.items()}
            tables = _collapse_union_state(op, tables, where)
            subtasks: list[SubtaskState] = []
            for index in range(op.parallelism):
                keyed_handle = op_handle = None
                if op.operator_id in regrouped and not keyed_ext:
                    spliced = regrouped[op.operator_id][index]
                    keyed_handle = spliced.handle
                    keyed_count += 1
                    size += spliced.size
                elif keyed_ext:
                    use = bool(keyed_ext.get("compressed")) if compression is None else compression
                    compressed_any = use if compressed_any is None else compressed_any or use
                    keyed_handle, rows, nbytes = _write_keyed(
                        snapshot,
                        op,
                        index,
                        keyed_by_subtask.get(index),
                        keyed_ext,
                        same_p,
                        use,
                        staging,
                        where,
                    )
                    keyed_rows += rows
                    keyed_count += 1
                    size += nbytes
                if op_ext and index in op_by_subtask:
                    use = bool(op_ext.get("compressed")) if compression is None else compression
                    compressed_any = use if compressed_any is None else compressed_any or use
                    op_handle, rows, nbytes = _write_operator(
                        tables[index], op_ext, index, same_p, use, staging, where
                    )
                    operator_rows += rows
                    operator_count += 1
                    size += nbytes
                finished = same_p and index in ext.get("finished_subtasks", [])
                subtasks.append(
                    SubtaskState(
                        index,
                        finished=finished,
                        managed_operator_state=op_handle,
                        managed_keyed_state=keyed_handle,
                    )
                )
                done += 1
                report("convert", done, total)
            coordinator = ext.get("coordinator_state")
            fully_finished = bool(ext.get("fully_finished")) and same_p
            if not (coordinator or fully_finished or any(s.has_state or s.finished for s in subtasks)):
                # No state of any kind: not written (see the docstring).
                continue
            operators.append(
                OperatorState(
                    operator_id=op.operator_id,
                    parallelism=op.parallelism,
                    max_parallelism=op.max_parallelism,
                    name=op.name,
                    uid=op.uid,
                    coordinator_state=None
                    if not coordinator
                    else ByteStreamHandle(coordinator["handle_name"], _unb64(coordinator["bytes"], where)),
                    subtasks=() if fully_finished else tuple(subtasks),
                    fully_finished=fully_finished,
                )
            )
        metadata = CheckpointMetadata(
            version=version,
            checkpoint_id=int(root.get("checkpoint_id", manifest.snapshot_id)),
            master_states=masters,
            operators=tuple(operators),
            properties_bytes=properties_bytes if version >= 4 else None,
        )
        encoded = write_metadata(metadata)
        (staging / METADATA_FILE).write_bytes(encoded)
        _verify_written(staging, encoded, keyed_rows, manifest, keyed_root)
        if keyed_root is None:
            # Every block written (or copied as bytes) must decode: kg never commits what its reader rejects.
            require_readable_output(staging)
    return ConvertResult(
        "to-flink",
        str(source),
        str(dest),
        len(operators),
        keyed_count,
        keyed_rows,
        operator_count,
        operator_rows,
        size,
        compressed_any,
    )


def _verify_written(
    staging: Path, encoded: bytes, keyed_rows: int, manifest: Manifest, keyed_root: str | None = None
) -> None:
    """Check the savepoint before it is committed: what Flink will read is what kg meant to write.

    The ``_metadata`` on disk parses back and re-encodes to the same bytes; every operator's subtasks cover
    Flink's key-group ranges for its parallelism and maxParallelism; every referenced file exists with
    the size its handle records and the offsets fall inside it; and the keyed entries written add up to
    the snapshot's keyed rows.

    Raises:
        ExecutionError: Any of these differ (``OUTPUT_VERIFICATION_FAILED``); nothing is committed.
    """
    where = f"output verification failed: {staging / METADATA_FILE}"
    on_disk = (staging / METADATA_FILE).read_bytes()
    metadata = parse_metadata(on_disk, where)
    if on_disk != encoded or write_metadata(metadata) != encoded:
        raise ExecutionError(f"{where}: does not read back as written", code="OUTPUT_VERIFICATION_FAILED")
    for op in metadata.operators:
        for sub in op.subtasks:
            subject = f"{where}: operator {op.label!r} subtask {sub.index}"
            keyed = sub.managed_keyed_state
            if isinstance(keyed, KeyGroupsHandle):
                want = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, sub.index)
                if (keyed.key_group_start, keyed.key_group_end) != (want.start, want.end):
                    raise ExecutionError(
                        f"{subject} covers key groups [{keyed.key_group_start}, {keyed.key_group_end}], "
                        f"not [{want.start}, {want.end}]",
                        code="OUTPUT_VERIFICATION_FAILED",
                    )
                _check_written_file(keyed_root or staging, keyed.delegate, keyed.offsets, subject)
            op_handle = sub.managed_operator_state
            if isinstance(op_handle, OperatorStateHandle):
                offsets = [o for e in op_handle.states for o in e.offsets]
                _check_written_file(staging, op_handle.delegate, offsets, subject)
    if keyed_rows != sum(op.keyed_rows for op in manifest.operators):
        raise ExecutionError(
            f"{where}: {keyed_rows} keyed entries written, the snapshot holds "
            f"{sum(op.keyed_rows for op in manifest.operators)}",
            code="OUTPUT_VERIFICATION_FAILED",
        )


def _check_written_file(root: Path | str, file: Any, offsets: Sequence[int], subject: str) -> None:
    assert isinstance(file, RelativeFileHandle), "kg writes every state file beside _metadata"
    if isinstance(root, Path):
        path = root / file.relative_path
        size = path.stat().st_size if path.is_file() else -1
    else:
        stored = location(root) / file.relative_path
        size = stored.size() if stored.is_file() else -1
    if size != file.size or any(not 0 <= o < size for o in offsets):
        raise ExecutionError(
            f"{subject}: {file.relative_path} has {size} bytes; its handle records {file.size} "
            f"and offsets up to {max(offsets, default=0)}",
            code="OUTPUT_VERIFICATION_FAILED",
        )


def _new_file(staging: Path) -> tuple[str, Path]:
    name = str(uuid.uuid4())
    return name, staging / name


def _write_keyed(
    snapshot: Snapshot,
    op: Operator,
    index: int,
    keyed_file: KeyedFile | None,
    keyed_ext: dict[str, Any],
    same_p: bool,
    compressed: bool,
    staging: Path,
    where: str,
) -> tuple[KeyGroupsHandle, int, int]:
    needed = {s.name for s in op.states if s.is_keyed}
    raw, header = _pick_header(
        keyed_ext.get("headers", []),
        index,
        same_p,
        needed,
        lambda b: read_keyed_header(b, where, len(b)),
        lambda hd: {s.name for s in hd.states or ()},
        where,
    )
    layout = KeyedLayout.from_header(header, op.max_parallelism, where)
    key_groups = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, index)
    if keyed_file is not None and (keyed_file.key_group_start, keyed_file.key_group_end) != (
        key_groups.start,
        key_groups.end,
    ):
        raise InvalidSnapshotError(
            f"{where}: keyed file {keyed_file.path} does not cover subtask {index}'s range",
            code="KEY_GROUP_RANGE_MISMATCH",
        )
    batches: Iterator[pa.RecordBatch] = (
        iter(()) if keyed_file is None else iter_keyed_batches(snapshot, keyed_file)
    )
    name, path = _new_file(staging)
    with open(path, "wb") as out:
        written = write_keyed_file(out, raw, layout, batches, key_groups, compressed=compressed)
    handle = KeyGroupsHandle(7, key_groups.start, written.offsets, RelativeFileHandle(name, written.size))
    return handle, written.rows, written.size


def _collapse_union_state(op: Operator, tables: dict[int, pa.Table], where: str) -> dict[int, pa.Table]:
    """Keep each replicated union state's list on the lowest subtask that holds it.

    ``kg rescale`` gives every new subtask every union element (the list Flink hands each subtask at
    restore) and marks the state ``replicated``; a savepoint stores union state as per-subtask partitions
    that Flink concatenates when it restores, so one copy restores exactly the list every subtask held.

    Raises:
        InvalidSnapshotError: A replicated state's copies differ (``UNION_REPLICAS_DIFFER``).
    """
    replicated = [s.name for s in op.states if s.replicated]
    if not replicated or len(tables) < 2:
        return tables
    first: dict[str, int] = {}
    for name in replicated:
        holders = {i: rows for i, t in sorted(tables.items()) if (rows := _state_rows(t, name))}
        copies = list(holders.values())
        if any(rows != copies[0] for rows in copies[1:]):
            raise InvalidSnapshotError(
                f"{where}: union state {name!r} is marked replicated but its subtasks hold different lists",
                code="UNION_REPLICAS_DIFFER",
            )
        first[name] = min(holders, default=-1)
    out = {}
    for index, table in tables.items():
        drop = [name for name in replicated if index != first[name]]
        if drop:
            keep = pc.invert(pc.is_in(table.column("state"), value_set=pa.array(drop, type=pa.string())))
            table = table.filter(keep)
        out[index] = table
    return out


def _state_rows(table: pa.Table, name: str) -> list[tuple[Any, ...]]:
    rows = table.filter(pc.equal(table.column("state"), name)).sort_by("position")
    return list(zip(rows.column("position").to_pylist(), rows.column("value").to_pylist(), strict=True))


def _write_operator(
    table: pa.Table,
    op_ext: dict[str, Any],
    index: int,
    same_p: bool,
    compressed: bool,
    staging: Path,
    where: str,
) -> tuple[OperatorStateHandle, int, int]:
    needed = set(table.column("state").to_pylist())

    def parse(raw: bytes) -> OperatorStateHeader:
        return read_operator_header(raw, where, len(raw))

    def names(header: OperatorStateHeader) -> set[str]:
        return {i.name for i in (header.states or ()) + (header.broadcast_states or ())}

    raw, header = _pick_header(op_ext.get("headers", []), index, same_p, needed, parse, names, where)
    name, path = _new_file(staging)
    with open(path, "wb") as out:
        written = write_operator_file(out, raw, header, table, compressed=compressed)
    handle = OperatorStateHandle(4, written.states, RelativeFileHandle(name, written.size))
    return handle, table.num_rows, written.size


def check_destination(dest: str | Path) -> None:
    """Refuse an existing destination before any work (the staging commit checks again)."""
    if Path(dest).exists():
        raise InvalidArgumentError(
            f"destination exists: {dest} (kg never overwrites; choose a new path or remove it)",
            code="DESTINATION_EXISTS",
        )


__all__ = [
    "EXTENSION",
    "EXTENSION_VERSION",
    "ConvertResult",
    "Regroup",
    "check_convertible",
    "check_destination",
    "is_flink_savepoint",
    "key_types",
    "savepoint_to_snapshot",
    "snapshot_to_savepoint",
]
