"""Convert a canonical Flink savepoint into a kg snapshot.

``savepoint_to_snapshot`` decodes every operator's keyed state (``keyed_decode``) and operator state
(``operator_state``) into the kg Parquet layout and keeps everything else a savepoint needs in an additive
``flink`` manifest extension (``docs/reference/flink-extension.md``): metadata version, checkpoint id,
properties trailer and master states on the manifest; per operator the coordinator state, the keyed-state
header (key serializer snapshot and state meta infos) and the operator-state headers, base64-encoded. It
writes into a staging directory and commits by atomic rename. The way back, a kg snapshot with that
extension to a savepoint, is ``keygroup_cli.convert.to_savepoint``.

HashMap checkpoints and NATIVE HashMap savepoints (the heap layout) are first rewritten as canonical key
groups (``keygroup_cli.flink.layouts.heap``). RocksDB NATIVE savepoints and incremental / changelog
checkpoints are refused: their keyed state is not in a key-group stream format, and kg does not guess.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from keygroup_cli import __version__
from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.findings import fails_verify_error
from keygroup_cli.core.keygroups import KeyGroupRange, key_group_range_for_operator_index
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.flink import (
    CANONICAL_SAVEPOINT_PROPERTIES,
    KIND_BY_MODE,
    ChangelogBackendHandle,
    CheckpointMetadata,
    FlinkCheckpoint,
    IncrementalKeyedHandle,
    KeyedLayout,
    KeyGroupsHandle,
    OperatorState,
    OperatorStateHandle,
    OperatorStateHeader,
    Savepoint,
    StreamSource,
    canonical_view,
    decode_keyed_file,
    decode_operator_file,
    is_flink_savepoint,
    keyed_header,
    needs_canonical_view,
    open_savepoint,
    operator_header_end,
    read_operator_header,
    require_keys_in_groups,
)
from keygroup_cli.snapshot import Manifest, Operator, OperatorFile, StateDescriptor
from keygroup_cli.snapshot.model import KeyedFile
from keygroup_cli.snapshot.writer import SnapshotWriter
from keygroup_cli.storage.staging import scratch_directory, staged_directory

#: Name of the manifest / operator extension this module writes (``savepoint_writer`` reads it back).
EXTENSION = "flink"
#: Version of the extension's own layout (bumped only on incompatible changes).
EXTENSION_VERSION = 1
METADATA_FILE = "_metadata"


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
    #: For a savepoint written (``to-flink``): its ``_metadata`` as written.
    metadata: CheckpointMetadata | None = None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise InvalidInputError(f"{where}: not valid base64", code="FLINK_EXTENSION_INVALID") from None


# -- savepoint -> kg ----------------------------------------------------------------------------------------


def require_convertible(snapshot: FlinkCheckpoint, *, raw_keyed: bool = False) -> None:
    """Refuse savepoints/checkpoints whose state is not in Flink's canonical format.

    ``raw_keyed``: the caller redistributes raw keyed state itself (a savepoint rescale: timers kept there,
    ``flink.write.raw_timers``), so only raw operator state is refused.

    Raises:
        UnsupportedFormatError: NATIVE savepoint, incremental/changelog keyed handles, heap-checkpoint
            (``KeyGroupsStateHandle``) layout, raw keyed/operator state or unaligned channel state.
    """
    require_no_channel_state(snapshot)
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
                if isinstance(keyed, ChangelogBackendHandle):
                    # A job's savepoint never holds the changelog: the backend writes its materialized state.
                    # A retained checkpoint sits in <job id>/chk-N: name the job when the path shows it.
                    job = Path(str(snapshot.metadata_path)).parent.parent.name
                    job = job if re.fullmatch(r"[0-9a-f]{32}", job) else "<job id>"
                    raise UnsupportedFormatError(
                        f"{where}: a checkpoint of the changelog state backend (state.changelog.enabled: "
                        f"operator {op.label!r} has a {kind}), whose state changelog kg does not replay; "
                        f"take a savepoint of the job instead: flink savepoint --type canonical {job}",
                        code="FLINK_NOT_CANONICAL",
                    )
                raise UnsupportedFormatError(
                    f"{where}: operator {op.label!r} subtask {sub.index} has a {kind} (tag "
                    f"{getattr(keyed, 'tag', '?')}), not a canonical savepoint's key groups; take a "
                    "canonical savepoint (flink savepoint --type canonical)",
                    code="FLINK_NOT_CANONICAL",
                )
            if (sub.raw_keyed_state is not None and not raw_keyed) or sub.raw_operator_state is not None:
                raise UnsupportedFormatError(
                    f"{where}: operator {op.label!r} subtask {sub.index} has raw keyed/operator state, "
                    "which kg does not convert",
                    code="FLINK_RAW_STATE",
                )


def require_no_channel_state(snapshot: FlinkCheckpoint) -> None:
    """Refuse an unaligned checkpoint holding in-flight data (channel state), reading ``_metadata`` only.

    Called before anything else is read or rewritten (``rescale`` and ``convert`` check it before a heap
    checkpoint's canonical rewrite), so the message names the input. kg never redistributes in-flight
    data: Flink restores it itself (``StateAssignmentOperation.reDistributeInputChannelStates`` /
    ``reDistributeResultSubpartitionStates``), at the old parallelism or a new one.

    Raises:
        UnsupportedFormatError: ``FLINK_CHANNEL_STATE``: a subtask has input-channel or
            result-subpartition handles.
    """
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            if sub.input_channel_state or sub.result_subpartition_state:
                raise UnsupportedFormatError(
                    f"{snapshot.metadata_path}: operator {op.label!r} holds in-flight data of an unaligned "
                    "checkpoint (channel state), which kg does not redistribute; restore it with Flink and "
                    "take a savepoint",
                    code="FLINK_CHANNEL_STATE",
                )


def native_savepoint_kind(snapshot: FlinkCheckpoint) -> str:
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


def operator_stream(
    snapshot: Savepoint, operator_id: str, subtask: int, handle: OperatorStateHandle
) -> tuple[bytes, OperatorStateHeader, pa.Table]:
    """Return one operator-state stream's header bytes, header and rows, as the opened savepoint has them.

    A stream that did not decode when it was opened is decoded here again, for its own error.
    """
    opened = snapshot.operator_streams.get((operator_id, subtask))
    if opened is not None and opened.table is not None:
        assert opened.raw_header is not None and opened.header is not None
        return opened.raw_header, opened.header, opened.table
    with StreamSource(handle.delegate, snapshot.directory) as src:
        offsets = [o for e in handle.states for o in e.offsets]
        first = min([o for o in offsets if o > 0] or [src.size])
        prefix = src.read(0, first)
        end = operator_header_end(prefix, offsets, src.size)
        assert end is not None
        raw = prefix[:end]
        header = read_operator_header(raw, src.source, end)
        return raw, header, decode_operator_file(src, handle, header)


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
    between savepoints itself, ``keygroup_cli.flink.write.regroup``); the result then holds no keyed state.

    Raises:
        UnsupportedFormatError: Not a canonical savepoint (see ``require_convertible``), or state kg cannot
            delimit (an unknown serializer in a header, a map state under an opaque key serializer).
        InvalidInputError: Missing or corrupt state files.
        InvalidArgumentError: ``dest`` exists.
    """
    from keygroup_cli.assess.integrity import require_intact

    report = on_progress or no_progress
    snapshot = open_savepoint(source)
    # The gate: what kg verify checks without reading key-group blocks; the blocks are checked as they
    # are decoded (``_decode_keyed``), so the input is read once.
    require_intact(snapshot, blocks=False, label=str(source))
    require_no_channel_state(snapshot)
    if needs_canonical_view(snapshot):
        # A HashMap checkpoint / NATIVE HashMap savepoint: decode its canonical rewrite (heap_layout).
        with scratch_directory(dest) as scratch:
            view = Savepoint.rewritten(canonical_view(snapshot, scratch / "canonical"), snapshot)
            return _savepoint_to_snapshot(view, dest, keyed, report, origin=snapshot)
    return _savepoint_to_snapshot(snapshot, dest, keyed, report, origin=snapshot)


def _savepoint_to_snapshot(
    snapshot: FlinkCheckpoint, dest: str | Path, keyed: bool, report: OnProgress, *, origin: FlinkCheckpoint
) -> ConvertResult:
    require_convertible(snapshot)
    with staged_directory(dest) as staging:
        writer = SnapshotWriter(staging)
        manifest, result = decode_savepoint(snapshot, writer, keyed=keyed, report=report, origin=origin)
        writer.commit(manifest)
    return replace(result, destination=str(dest))


class StateSink(Protocol):
    """Where ``decode_savepoint`` puts what it decodes: a ``SnapshotWriter``, or memory."""

    def operator_dir(self, uid: str | None, operator_id: str) -> str:
        """Return the directory name of an operator's files, unique within the snapshot."""
        ...

    def write_keyed(
        self,
        operator_dir: str,
        subtask: int,
        data: Iterator[pa.RecordBatch],
        *,
        key_type: str,
        key_groups: KeyGroupRange,
        state_names: list[str] | None = None,
    ) -> KeyedFile:
        """Keep one subtask's keyed rows; return their manifest entry."""
        ...

    def write_operator(self, operator_dir: str, subtask: int, data: pa.Table) -> OperatorFile:
        """Keep one subtask's operator-state rows; return their manifest entry."""
        ...


def decode_savepoint(
    snapshot: FlinkCheckpoint,
    sink: StateSink,
    *,
    keyed: bool = True,
    report: OnProgress = no_progress,
    origin: FlinkCheckpoint | None = None,
) -> tuple[Manifest, ConvertResult]:
    """Decode the canonical savepoint ``snapshot`` into ``sink``; return kg's manifest of it and the counts.

    ``origin`` is the savepoint the user named when ``snapshot`` is its canonical rewrite. With
    ``keyed=False`` only operator state is decoded. The caller checked ``require_convertible``. Operator
    state comes from the opened savepoint's streams (``Savepoint.operator_streams``), decoded once.
    """
    snapshot = Savepoint.of(snapshot)
    origin = origin or snapshot
    meta = snapshot.metadata
    progress = _Decoded(total=sum(len(op.subtasks) for op in meta.operators), report=report)
    operators = tuple(_decode_operator(snapshot, op, sink, keyed, progress) for op in meta.operators)
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
        operators=operators,
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
    return manifest, ConvertResult(
        "to-kg",
        str(origin.directory),
        "",
        len(operators),
        progress.keyed_files,
        progress.keyed_rows,
        progress.operator_files,
        progress.operator_rows,
        progress.bytes,
    )


@dataclass
class _Decoded:
    """What ``decode_savepoint`` decoded so far, and its progress callback."""

    total: int
    report: OnProgress
    done: int = 0
    keyed_files: int = 0
    keyed_rows: int = 0
    operator_files: int = 0
    operator_rows: int = 0
    bytes: int = 0


@dataclass
class _OperatorDecode:
    """One operator's decode under way: its files, states and the headers to save."""

    op: OperatorState
    where: str
    directory: str | None = None
    keyed_headers: list[tuple[int, bytes]] = field(default_factory=list)
    operator_headers: list[tuple[int, bytes]] = field(default_factory=list)
    keyed_files: list[KeyedFile] = field(default_factory=list)
    operator_files: list[OperatorFile] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)
    key_type: str | None = None
    key_serializer: str | None = None
    keyed_compressed: bool = False
    operator_compressed: bool = False

    def operator_dir(self, sink: StateSink) -> str:
        self.directory = self.directory or sink.operator_dir(self.op.uid, self.op.operator_id)
        return self.directory


def _decode_operator(
    snapshot: Savepoint, op: OperatorState, sink: StateSink, keyed: bool, progress: _Decoded
) -> Operator:
    """Decode one operator's subtasks into ``sink``; return its manifest entry, ``flink`` extension too."""
    decode = _OperatorDecode(op, f"{snapshot.metadata_path}: operator {op.label!r}")
    for sub in op.subtasks:
        handle = sub.managed_keyed_state
        if keyed and isinstance(handle, KeyGroupsHandle):
            entry = _decode_keyed(snapshot, decode, sub.index, handle, sink)
            decode.keyed_files.append(entry)
            progress.keyed_rows += entry.rows
            progress.bytes += entry.bytes
        op_handle = sub.managed_operator_state
        if op_handle is not None:
            entry_op = _decode_operator_state(snapshot, decode, sub.index, op_handle, sink)
            decode.operator_files.append(entry_op)
            progress.operator_rows += entry_op.rows
            progress.bytes += entry_op.bytes
        progress.done += 1
        progress.report("convert", progress.done, progress.total)
    progress.keyed_files += len(decode.keyed_files)
    progress.operator_files += len(decode.operator_files)
    return Operator(
        uid=op.uid,
        operator_id=op.operator_id,
        name=op.name,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
        key_type=decode.key_type,
        states=tuple(StateDescriptor(n, k) for n, k in decode.states.items()),
        keyed_files=tuple(decode.keyed_files),
        operator_files=tuple(decode.operator_files),
        extensions={EXTENSION: _operator_extension(decode)},
    )


def _decode_keyed(
    snapshot: Savepoint, decode: _OperatorDecode, index: int, handle: KeyGroupsHandle, sink: StateSink
) -> KeyedFile:
    """Decode one subtask's keyed file into ``sink`` (its header kept for the way back)."""
    op, where = decode.op, decode.where
    with StreamSource(handle.delegate, snapshot.directory) as src:
        raw, header = keyed_header(src, handle)
        layout = KeyedLayout.from_header(header, op.max_parallelism, src.source)
        if decode.key_type is not None and layout.codec.key_type != decode.key_type:
            raise InvalidInputError(
                f"{where}: subtasks disagree on the key serializer", code="FLINK_STATE_INCONSISTENT"
            )
        decode.key_type = layout.codec.key_type
        decode.key_serializer = layout.codec.serializer_class
        decode.keyed_compressed = header.compressed
        decode.keyed_headers.append((index, raw))
        for s in layout.states:
            decode.states.setdefault(s.name, s.kind)
        expected = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, index)
        if (handle.key_group_start, handle.key_group_end) != (expected.start, expected.end):
            raise InvalidInputError(
                f"{where}: subtask {index} holds key groups [{handle.key_group_start}, "
                f"{handle.key_group_end}], not Flink's range [{expected.start}, {expected.end}]",
                code="KEY_GROUP_RANGE_MISMATCH",
            )
        batches = _checked(
            # Every block as kg verify checks it (snappy CRCs, nothing after the END mark).
            decode_keyed_file(src, handle, layout, compressed=header.compressed, strict=True),
            layout.codec.key_type,
            op.max_parallelism,
            src.source,
            str(snapshot.directory),
        )
        return sink.write_keyed(
            decode.operator_dir(sink),
            index,
            batches,
            key_type=layout.codec.key_type,
            key_groups=expected,
            state_names=[s.name for s in layout.states],
        )


def _decode_operator_state(
    snapshot: Savepoint, decode: _OperatorDecode, index: int, handle: OperatorStateHandle, sink: StateSink
) -> OperatorFile:
    """Put one subtask's operator-state rows (decoded when the savepoint was opened) into ``sink``."""
    raw, header, table = operator_stream(snapshot, decode.op.operator_id, index, handle)
    decode.operator_compressed = header.compressed
    decode.operator_headers.append((index, raw))
    for e in handle.states:
        decode.states.setdefault(e.name, KIND_BY_MODE[e.mode])
    for info in (header.states or ()) + (header.broadcast_states or ()):
        decode.states.setdefault(info.name, info.kind)
    return sink.write_operator(decode.operator_dir(sink), index, table)


def _operator_extension(decode: _OperatorDecode) -> dict[str, Any]:
    """Return an operator's ``flink`` extension: what the way back needs that kg's rows do not hold."""
    op = decode.op
    extension: dict[str, Any] = {
        "source_parallelism": op.parallelism,
        "source_max_parallelism": op.max_parallelism,
        "coordinator_state": None
        if op.coordinator_state is None
        else {"handle_name": op.coordinator_state.handle_name, "bytes": _b64(op.coordinator_state.data)},
    }
    if op.fully_finished:
        extension["fully_finished"] = True
    finished = [s.index for s in op.subtasks if s.finished]
    if finished:
        extension["finished_subtasks"] = finished
    if decode.keyed_headers:
        extension["keyed"] = {
            "key_serializer": decode.key_serializer,
            "compressed": decode.keyed_compressed,
            "headers": _dedupe(decode.keyed_headers),
        }
    if decode.operator_headers:
        extension["operator_state"] = {
            "compressed": decode.operator_compressed,
            "headers": _dedupe(decode.operator_headers),
        }
    return extension


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
    batches: Iterator[pa.RecordBatch], key_type: str, max_parallelism: int, where: str, label: str
) -> Iterator[pa.RecordBatch]:
    """Yield ``batches`` with every key hashed against its stored key group; refuse as the gate does."""
    try:
        for batch in batches:
            require_keys_in_groups(batch, key_type, max_parallelism, where)
            yield batch
    except InvalidInputError as exc:
        if exc.code == "INPUT_FAILS_VERIFY":
            raise
        raise fails_verify_error(label, exc) from None


def require_destination_absent(dest: str | Path) -> None:
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
    "require_convertible",
    "require_destination_absent",
    "is_flink_savepoint",
    "require_no_channel_state",
    "savepoint_to_snapshot",
]
