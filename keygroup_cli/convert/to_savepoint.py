"""Write a kg snapshot that carries the ``flink`` extension back as a canonical Flink savepoint.

``snapshot_to_savepoint`` writes a canonical savepoint from a kg snapshot made by
``keygroup_cli.convert.from_savepoint.savepoint_to_snapshot`` (maybe rescaled since), for the snapshot's
parallelism and maxParallelism: one keyed file per subtask with key-group offsets and prefixes for the target
maxParallelism, one operator-state file per subtask, and a ``_metadata`` in the source's version that
references every file relatively (``RelativeFileStateHandle``), so the directory can be moved. It writes
into a staging directory, checks the result (``_verify_written``) and commits by atomic rename.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from keygroup_cli.convert.from_savepoint import EXTENSION, METADATA_FILE, ConvertResult, _unb64
from keygroup_cli.core.errors import ExecutionError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.keygroups import key_group_range_for_operator_index
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.core.progress import no_progress as _noop
from keygroup_cli.flink import (
    CANONICAL_SAVEPOINT_PROPERTIES,
    ByteStreamHandle,
    CheckpointMetadata,
    KeyedLayout,
    KeyGroupsHandle,
    MasterState,
    OperatorState,
    OperatorStateHandle,
    OperatorStateHeader,
    RelativeFileHandle,
    SubtaskState,
    declared_states,
    finished_before,
    finished_markers,
    keep_one_union_copy,
    pick_header,
    read_keyed_header,
    read_operator_header,
    seal_savepoint,
    to_native,
    write_keyed_file,
    write_operator_file,
)
from keygroup_cli.snapshot import Manifest, Operator, Snapshot, open_snapshot
from keygroup_cli.snapshot.model import KeyedFile, OperatorFile
from keygroup_cli.snapshot.parquet import iter_keyed_batches, read_operator_file
from keygroup_cli.storage.staging import staged_directory

H = TypeVar("H")


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


def _saved_headers(
    groups: list[dict[str, Any]],
    subtask: int,
    same_parallelism: bool,
    parse: Callable[[bytes], H],
    where: str,
) -> Iterator[tuple[bytes, H]]:
    """Yield the saved headers a subtask may take, each parsed when it is reached.

    Its own first at an unchanged parallelism, then every one in the order they were saved.
    """
    if same_parallelism:
        for g in groups:
            if subtask in g.get("subtasks", []):
                raw = _unb64(g["bytes"], where)
                yield raw, parse(raw)
    for g in groups:
        raw = _unb64(g["bytes"], where)
        yield raw, parse(raw)


class StateSource(Protocol):
    """What a savepoint is written from: a manifest with the ``flink`` extension and the rows it lists.

    A kg snapshot on disk (``SnapshotSource``) or a savepoint's operator state held in memory
    (``flink.operator_tables.OperatorTables``).
    """

    @property
    def manifest(self) -> Manifest:
        """The manifest of the state, ``flink`` extension included."""
        ...

    @property
    def label(self) -> str:
        """Where the state was read from, for messages."""
        ...

    def operator_table(self, operator_file: OperatorFile) -> pa.Table:
        """Return one subtask's operator-state rows."""
        ...

    def keyed_batches(self, keyed_file: KeyedFile) -> Iterator[pa.RecordBatch]:
        """Return one subtask's keyed rows, in key-group order."""
        ...


class SnapshotSource:
    """A kg snapshot on disk as a ``StateSource``."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.manifest = snapshot.manifest
        self.label = str(snapshot.path)

    def operator_table(self, operator_file: OperatorFile) -> pa.Table:
        """Read one subtask's operator-state file."""
        return read_operator_file(self.snapshot, operator_file)

    def keyed_batches(self, keyed_file: KeyedFile) -> Iterator[pa.RecordBatch]:
        """Stream one subtask's keyed file."""
        return iter_keyed_batches(self.snapshot, keyed_file)


def snapshot_to_savepoint(
    source: str | Path | StateSource,
    dest: str | Path,
    *,
    compression: bool | None = None,
    on_progress: OnProgress | None = None,
    output_format: str = "canonical",
) -> ConvertResult:
    """Write the kg snapshot at ``source`` as a Flink savepoint directory ``dest`` (staged, atomic).

    ``output_format="native"`` writes its keyed state as RocksDB databases (``flink.write.native``), which
    Flink's RocksDB and ForSt backends restore; the default is the canonical format every backend restores.

    ``kg convert``'s way back: ``write_savepoint`` into a staging directory,
    ``flink.write.commit.seal_savepoint`` (``_metadata`` encoded once, checked, written last), then the
    rename.

    Raises:
        UnsupportedFormatError: The snapshot has no ``flink`` extension.
        InvalidInputError: Rows that do not fit the saved headers, unreadable files, or a snapshot
            ``kg verify`` rejects (``INPUT_FAILS_VERIFY``).
        InvalidArgumentError: ``dest`` exists.
        ExecutionError: The output fails its check; nothing is committed.
    """
    if isinstance(source, (str, Path)):
        from keygroup_cli.assess.integrity import require_intact

        # The gate, as a kg snapshot's rescale has it: kg verify's checks (digests, rows, replicas) read
        # every file once before the conversion reads it again; nothing is written from what it rejects.
        require_intact(source, on_progress=on_progress, label=str(source))
    state = SnapshotSource(open_snapshot(source)) if isinstance(source, (str, Path)) else source
    require_finished_markers_kept(state)
    with staged_directory(dest) as staging:
        written = write_savepoint(state, staging, compression=compression, on_progress=on_progress)
        metadata = written.metadata
        assert metadata is not None
        if output_format == "native":
            metadata = to_native(staging, metadata)
            written = replace(written, metadata=metadata)
        seal_savepoint(staging, metadata)
    return replace(written, destination=str(dest))


def require_finished_markers_kept(state: StateSource) -> None:
    """Refuse, before anything is staged, a finished subtask the snapshot's rows show is not kept.

    Raises:
        InvalidArgumentError: ``FINISHED_SUBTASK_NOT_KEPT``.
    """
    _finished_markers(state)


def write_savepoint(
    state: StateSource,
    staging: Path,
    *,
    compression: bool | None = None,
    on_progress: OnProgress | None = None,
) -> ConvertResult:
    """Write the state files of the kg snapshot ``state`` as a canonical savepoint into ``staging``.

    Returns the counts and the ``CheckpointMetadata`` of what was written; ``_metadata`` itself is the
    commit's (``flink.write.commit.seal_savepoint``). Every operator is written, those without state included,
    each with the snapshot's parallelism and maxParallelism, as Flink writes every operator of a job (why
    that matters: ``flink.write.rescaled``, which writes a rescaled savepoint straight from the opened input).

    Args:
        state: A kg snapshot carrying the ``flink`` extension (made by ``savepoint_to_snapshot``, maybe
            rescaled since).
        staging: The directory the savepoint is staged in.
        compression: Snappy-compress keyed and operator state; None keeps what the source savepoint used.
        on_progress: ``(stage, completed, total)`` callback.

    Raises:
        UnsupportedFormatError: The snapshot has no ``flink`` extension.
        InvalidInputError: Rows that do not fit the saved headers, unreadable files, or a snapshot
            ``kg verify`` rejects (``INPUT_FAILS_VERIFY``).
        ExecutionError: The keyed entries written do not add up to the snapshot's.
    """
    report = on_progress or _noop
    manifest = state.manifest
    counts = _Counts(total=sum(op.parallelism for op in manifest.operators))
    markers = _finished_markers(state)
    operators = [
        _operator(state, op, markers.get(op.operator_id, ()), compression, staging, counts, report)
        for op in manifest.operators
    ]
    metadata = _metadata(state, tuple(operators))
    _require_keyed_rows_written(staging, counts.keyed_rows, manifest)
    return ConvertResult(
        "to-flink",
        state.label,
        str(staging),
        len(operators),
        counts.keyed_files,
        counts.keyed_rows,
        counts.operator_files,
        counts.operator_rows,
        counts.bytes,
        counts.compressed,
        metadata,
    )


def _metadata(state: StateSource, operators: tuple[OperatorState, ...]) -> CheckpointMetadata:
    """Return the new ``_metadata``'s content: ``operators`` and what the ``flink`` extension saved."""
    manifest = state.manifest
    root = _extension(manifest.extensions, f"{state.label}: manifest")
    version = int(root.get("metadata_version", 6))
    properties = root.get("properties")
    properties_bytes = _unb64(properties, "properties") if properties else None
    if version >= 4 and properties_bytes is None:
        properties_bytes = CANONICAL_SAVEPOINT_PROPERTIES
    masters = tuple(
        MasterState(m["name"], int(m["version"]), _unb64(m["payload"], "master state"))
        for m in root.get("master_states", [])
    )
    return CheckpointMetadata(
        version=version,
        checkpoint_id=int(root.get("checkpoint_id", manifest.snapshot_id)),
        master_states=masters,
        operators=operators,
        properties_bytes=properties_bytes if version >= 4 else None,
    )


@dataclass
class _Counts:
    """What ``write_savepoint`` wrote so far."""

    total: int
    done: int = 0
    keyed_files: int = 0
    keyed_rows: int = 0
    operator_files: int = 0
    operator_rows: int = 0
    bytes: int = 0
    compressed: bool | None = None

    def used(self, compressed: bool) -> None:
        self.compressed = compressed if self.compressed is None else self.compressed or compressed


def _operator(
    state: StateSource,
    op: Operator,
    markers: Sequence[int],
    compression: bool | None,
    staging: Path,
    counts: _Counts,
    report: OnProgress,
) -> OperatorState:
    """Write one operator's keyed and operator-state files; return its ``OperatorState``."""
    where = f"{state.label}: operator {op.label!r}"
    ext = _extension(op.extensions, where)
    keyed_ext, op_ext = _headers_of(op, ext, where)
    if ext.get("fully_finished"):
        # A fully finished operator stays FullyFinishedOperatorState at any parallelism: Flink deploys
        # every subtask of its vertex FINISHED_ON_RESTORE (flink.write.finished), as its own rescale does.
        counts.done += op.parallelism
        report("convert", counts.done, counts.total)
        return OperatorState(
            op.operator_id, op.parallelism, op.max_parallelism, op.name, op.uid, None, (), True
        )
    same_p = int(ext.get("source_parallelism", -1)) == op.parallelism
    keyed_by_subtask = {f.subtask: f for f in op.keyed_files}
    replicated = {s.name for s in op.states if s.replicated}
    tables = keep_one_union_copy(
        {f.subtask: state.operator_table(f) for f in op.operator_files}, replicated, where
    )
    subtasks: list[SubtaskState] = []
    for index in range(op.parallelism):
        if index in markers:
            # FinishedOperatorSubtaskState: no state (this subtask gets none) and no file.
            subtasks.append(SubtaskState(index, finished=True))
        else:
            keyed_handle = op_handle = None
            if keyed_ext:
                use = bool(keyed_ext.get("compressed")) if compression is None else compression
                keyed_handle = _write_keyed(
                    state, op, index, keyed_by_subtask.get(index), keyed_ext, same_p, use, staging, counts
                )
            if op_ext and index in tables:
                use = bool(op_ext.get("compressed")) if compression is None else compression
                op_handle = _write_operator(tables[index], op_ext, index, same_p, use, staging, where, counts)
            subtasks.append(
                SubtaskState(index, managed_operator_state=op_handle, managed_keyed_state=keyed_handle)
            )
        counts.done += 1
        report("convert", counts.done, counts.total)
    coordinator = ext.get("coordinator_state")
    return OperatorState(
        operator_id=op.operator_id,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
        name=op.name,
        uid=op.uid,
        coordinator_state=None
        if not coordinator
        else ByteStreamHandle(coordinator["handle_name"], _unb64(coordinator["bytes"], where)),
        subtasks=tuple(subtasks),
    )


def _headers_of(
    op: Operator, ext: Mapping[str, Any], where: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Return the saved keyed and operator-state headers of ``op``; refuse files without one.

    Raises:
        InvalidInputError: Keyed or operator files but no saved header (``FLINK_EXTENSION_INVALID``).
    """
    keyed_ext = ext.get("keyed")
    op_ext = ext.get("operator_state")
    if op.keyed_files and not keyed_ext:
        raise InvalidInputError(
            f"{where}: keyed files but no saved keyed-state header", code="FLINK_EXTENSION_INVALID"
        )
    if op.operator_files and not op_ext:
        raise InvalidInputError(
            f"{where}: operator files but no saved operator-state header", code="FLINK_EXTENSION_INVALID"
        )
    return keyed_ext, op_ext


def _finished_markers(state: StateSource) -> dict[str, tuple[int, ...]]:
    """Return, by operator id, the subtasks to write as finished (``flink.write.finished.finished_markers``).

    A subtask gets state if its keyed or operator-state rows are not empty.

    Raises:
        InvalidArgumentError: ``FINISHED_SUBTASK_NOT_KEPT``.
    """
    markers: dict[str, tuple[int, ...]] = {}
    for op in state.manifest.operators:
        ext = op.extensions.get(EXTENSION)
        if not isinstance(ext, dict) or not (finished := finished_before(ext)):
            continue
        keyed_rows = {f.subtask: f.rows for f in op.keyed_files}
        op_rows = {f.subtask: f.rows for f in op.operator_files}
        receives = [keyed_rows.get(i, 0) > 0 or op_rows.get(i, 0) > 0 for i in range(op.parallelism)]
        markers[op.operator_id] = finished_markers(
            op.label, finished, receives, max_parallelism=op.max_parallelism
        )
    return markers


def _require_keyed_rows_written(staging: Path, keyed_rows: int, manifest: Manifest) -> None:
    """Check that the keyed entries written add up to the snapshot's keyed rows.

    Raises:
        ExecutionError: They differ (``OUTPUT_VERIFICATION_FAILED``); nothing is committed.
    """
    expected = sum(op.keyed_rows for op in manifest.operators)
    if keyed_rows != expected:
        raise ExecutionError(
            f"output verification failed: {staging / METADATA_FILE}: {keyed_rows} keyed entries written, "
            f"the snapshot holds {expected}",
            code="OUTPUT_VERIFICATION_FAILED",
        )


def _new_file(staging: Path) -> tuple[str, Path]:
    name = str(uuid.uuid4())
    return name, staging / name


def _write_keyed(
    state: StateSource,
    op: Operator,
    index: int,
    keyed_file: KeyedFile | None,
    keyed_ext: dict[str, Any],
    same_p: bool,
    compressed: bool,
    staging: Path,
    counts: _Counts,
) -> KeyGroupsHandle:
    where = f"{state.label}: operator {op.label!r}"
    needed = {s.name for s in op.states if s.is_keyed}
    saved = _saved_headers(
        keyed_ext.get("headers", []), index, same_p, lambda b: read_keyed_header(b, where, len(b)), where
    )
    raw, header = pick_header(saved, needed, lambda hd: {s.name for s in hd.states or ()}, where)
    layout = KeyedLayout.from_header(header, op.max_parallelism, where)
    key_groups = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, index)
    if keyed_file is not None and (keyed_file.key_group_start, keyed_file.key_group_end) != (
        key_groups.start,
        key_groups.end,
    ):
        raise InvalidInputError(
            f"{where}: keyed file {keyed_file.path} does not cover subtask {index}'s range",
            code="KEY_GROUP_RANGE_MISMATCH",
        )
    batches: Iterator[pa.RecordBatch] = iter(()) if keyed_file is None else state.keyed_batches(keyed_file)
    name, path = _new_file(staging)
    with open(path, "wb") as out:
        written = write_keyed_file(out, raw, layout, batches, key_groups, compressed=compressed)
    counts.used(compressed)
    counts.keyed_files += 1
    counts.keyed_rows += written.rows
    counts.bytes += written.size
    return KeyGroupsHandle(7, key_groups.start, written.offsets, RelativeFileHandle(name, written.size))


def _write_operator(
    table: pa.Table,
    op_ext: dict[str, Any],
    index: int,
    same_p: bool,
    compressed: bool,
    staging: Path,
    where: str,
    counts: _Counts,
) -> OperatorStateHandle:
    needed = set(table.column("state").to_pylist())

    def parse(raw: bytes) -> OperatorStateHeader:
        return read_operator_header(raw, where, len(raw))

    saved = _saved_headers(op_ext.get("headers", []), index, same_p, parse, where)
    raw, header = pick_header(saved, needed, declared_states, where)
    name, path = _new_file(staging)
    with open(path, "wb") as out:
        written = write_operator_file(out, raw, header, table, compressed=compressed)
    counts.used(compressed)
    counts.operator_files += 1
    counts.operator_rows += table.num_rows
    counts.bytes += written.size
    return OperatorStateHandle(4, written.states, RelativeFileHandle(name, written.size))


__all__ = [
    "SnapshotSource",
    "StateSource",
    "require_finished_markers_kept",
    "snapshot_to_savepoint",
    "write_savepoint",
]
