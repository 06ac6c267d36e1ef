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
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.convert.from_savepoint import (
    EXTENSION,
    METADATA_FILE,
    ConvertResult,
    OnProgress,
    _noop,
    _unb64,
)
from keygroup_cli.errors import ExecutionError, InvalidSnapshotError, UnsupportedFormatError
from keygroup_cli.flink.commit import seal_savepoint
from keygroup_cli.flink.finished import finished_before, finished_markers
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.reader import (
    CheckpointMetadata,
    MasterState,
    OperatorState,
    SubtaskState,
)
from keygroup_cli.flink.metadata.writer import CANONICAL_SAVEPOINT_PROPERTIES
from keygroup_cli.flink.native_output import to_native
from keygroup_cli.flink.regroup import RegroupedFile
from keygroup_cli.flink.state.keyed_encode import write_keyed_file
from keygroup_cli.flink.state.keyed_header import OperatorStateHeader, read_keyed_header, read_operator_header
from keygroup_cli.flink.state.keyed_layout import KeyedLayout
from keygroup_cli.flink.state.operator_state import write_operator_file
from keygroup_cli.keygroups import key_group_range_for_operator_index
from keygroup_cli.snapshot import Manifest, Operator, Snapshot, open_snapshot
from keygroup_cli.snapshot.model import KeyedFile, OperatorFile
from keygroup_cli.snapshot.parquet import iter_keyed_batches, read_operator_file
from keygroup_cli.storage.staging import staged_directory


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

    ``output_format="native"`` writes its keyed state as RocksDB databases (``flink.native_output``), which
    Flink's RocksDB and ForSt backends restore; the default is the canonical format every backend restores.

    ``kg convert``'s way back: ``write_savepoint`` into a staging directory, ``flink.commit.seal_savepoint``
    (``_metadata`` encoded once, checked, written last), then the rename.

    Raises:
        UnsupportedFormatError: The snapshot has no ``flink`` extension.
        InvalidSnapshotError: Rows that do not fit the saved headers, or unreadable files.
        InvalidArgumentError: ``dest`` exists.
        ExecutionError: The output fails its check; nothing is committed.
    """
    state = SnapshotSource(open_snapshot(source)) if isinstance(source, (str, Path)) else source
    check_finished(state)
    with staged_directory(dest) as staging:
        written = write_savepoint(state, staging, compression=compression, on_progress=on_progress)
        metadata = written.metadata
        assert metadata is not None
        if output_format == "native":
            metadata = to_native(staging, metadata)
            written = replace(written, metadata=metadata)
        seal_savepoint(staging, metadata)
    return replace(written, destination=str(dest))


def check_finished(state: StateSource) -> None:
    """Refuse, before anything is written, a finished subtask the rows in hand already show is not kept.

    (Keyed files written elsewhere count once written: ``write_savepoint`` checks again with them.)

    Raises:
        InvalidArgumentError: ``FINISHED_SUBTASK_NOT_KEPT``.
    """
    _finished_markers(state, None)


def write_savepoint(
    state: StateSource,
    staging: Path,
    *,
    compression: bool | None = None,
    on_progress: OnProgress | None = None,
    keyed: Mapping[str, Sequence[RegroupedFile]] | None = None,
    keyed_root: str | None = None,
) -> ConvertResult:
    """Write the state files of ``state`` as a canonical savepoint into ``staging``; describe them.

    Returns the counts and the ``CheckpointMetadata`` of what was written; ``_metadata`` itself is the
    commit's (``flink.commit.seal_savepoint``). Nothing here drives an engine: keyed files another step
    wrote (copied key groups, or an engine's write tasks) come in ``keyed``.

    Every operator is written, those without state included, each with the parallelism and
    maxParallelism the plan gave it, as Flink writes every operator of a job. Leaving one out is not the
    same as writing it empty: ``StateAssignmentOperation.assignStates`` gives a missing operator an empty
    ``OperatorState`` with its vertex's *current* maxParallelism, which in a job that sets none is Flink's
    default for the new parallelism, and ``checkParallelismPreconditions`` then moves the vertex to each of
    its states' maxParallelism in turn: a chain whose keyed state has another maxParallelism restores with
    the wrong key groups or not at all. ``planning.chain_followers`` decides which operators without state
    move with a changed maxParallelism.

    Args:
        state: A kg snapshot carrying the ``flink`` extension (made by ``savepoint_to_snapshot``, maybe
            rescaled since), or any ``StateSource`` (a savepoint's operator state held in memory).
        staging: The directory the savepoint is staged in.
        compression: Snappy-compress keyed and operator state; None keeps what the source savepoint used.
        on_progress: ``(stage, completed, total)`` callback.
        keyed: Keyed files already written (by operator id, one per subtask), used instead of encoding
            the snapshot's keyed rows for operators that have none. Every block of them must have been
            checked already: encoded by ``keyed_encode`` (which checks each block against the entries it
            encoded, as for the keyed files written here), or copied from an input that passed
            ``kg verify``. The commit does not decode keyed blocks again.
        keyed_root: Where the ``keyed`` files are when not in ``staging`` (an object-store prefix).

    Raises:
        UnsupportedFormatError: The snapshot has no ``flink`` extension.
        InvalidSnapshotError: Rows that do not fit the saved headers, or unreadable files.
        ExecutionError: The keyed entries written do not add up to the snapshot's.
    """
    report = on_progress or _noop
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
    total = sum(op.parallelism for op in manifest.operators)
    done = 0
    keyed_rows = operator_rows = keyed_count = operator_count = size = 0
    compressed_any: bool | None = None
    operators: list[OperatorState] = []
    regrouped = keyed or {}
    markers = _finished_markers(state, regrouped)
    for op in manifest.operators:
        where = f"{state.label}: operator {op.label!r}"
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
        tables = {i: state.operator_table(f) for i, f in op_by_subtask.items()}
        tables = _collapse_union_state(op, tables, where)
        subtasks: list[SubtaskState] = []
        fully_finished = bool(ext.get("fully_finished"))
        for index in range(0 if fully_finished else op.parallelism):
            keyed_handle = op_handle = None
            if index in markers.get(op.operator_id, ()):
                # FinishedOperatorSubtaskState: no state (this subtask gets none) and no file.
                subtasks.append(SubtaskState(index, finished=True))
                _discard(regrouped.get(op.operator_id), index, staging, keyed_root)
                done += 1
                report("convert", done, total)
                continue
            if op.operator_id in regrouped and not keyed_ext:
                spliced = regrouped[op.operator_id][index]
                keyed_handle = spliced.handle
                keyed_count += 1
                size += spliced.size
            elif keyed_ext:
                use = bool(keyed_ext.get("compressed")) if compression is None else compression
                compressed_any = use if compressed_any is None else compressed_any or use
                keyed_handle, rows, nbytes = _write_keyed(
                    state,
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
            subtasks.append(
                SubtaskState(index, managed_operator_state=op_handle, managed_keyed_state=keyed_handle)
            )
            done += 1
            report("convert", done, total)
        # A fully finished operator stays FullyFinishedOperatorState at any parallelism: Flink deploys
        # every subtask of its vertex FINISHED_ON_RESTORE (flink.finished), as its own rescale does.
        coordinator = None if fully_finished else ext.get("coordinator_state")
        if fully_finished:
            done += op.parallelism
            report("convert", done, total)
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
    _check_keyed_rows(staging, keyed_rows, manifest)
    return ConvertResult(
        "to-flink",
        state.label,
        str(staging),
        len(operators),
        keyed_count,
        keyed_rows,
        operator_count,
        operator_rows,
        size,
        compressed_any,
        metadata,
    )


def _finished_markers(
    state: StateSource, regrouped: Mapping[str, Sequence[RegroupedFile]] | None
) -> dict[str, tuple[int, ...]]:
    """Return, by operator id, the subtasks to write as finished (``flink.finished.finished_markers``).

    A subtask gets state if its keyed or operator-state rows are not empty: rows of the snapshot's files,
    or key groups with data in ``regroup``'s files. With ``regrouped`` None those files are not written
    yet and count as empty, so that call refuses only what the final one (with them) refuses too.

    Raises:
        InvalidArgumentError: ``FINISHED_SUBTASK_NOT_KEPT``.
    """
    markers: dict[str, tuple[int, ...]] = {}
    for op in state.manifest.operators:
        ext = op.extensions.get(EXTENSION)
        if not isinstance(ext, dict) or not (finished := finished_before(ext)):
            continue
        keyed_rows = {f.subtask: f.rows for f in op.keyed_files}
        if regrouped and op.operator_id in regrouped and not ext.get("keyed"):
            keyed_rows = {f.subtask: f.key_groups_with_data for f in regrouped[op.operator_id]}
        op_rows = {f.subtask: f.rows for f in op.operator_files}
        receives = [keyed_rows.get(i, 0) > 0 or op_rows.get(i, 0) > 0 for i in range(op.parallelism)]
        markers[op.operator_id] = finished_markers(
            op.label, finished, receives, max_parallelism=op.max_parallelism
        )
    return markers


def _discard(
    files: Sequence[RegroupedFile] | None, index: int, staging: Path, keyed_root: str | None
) -> None:
    """Remove the (empty) keyed file written for a subtask that is written as finished."""
    if files is None or keyed_root is not None:
        return
    delegate = files[index].handle.delegate
    if isinstance(delegate, RelativeFileHandle):
        (staging / delegate.relative_path).unlink(missing_ok=True)


def _check_keyed_rows(staging: Path, keyed_rows: int, manifest: Manifest) -> None:
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
    batches: Iterator[pa.RecordBatch] = iter(()) if keyed_file is None else state.keyed_batches(keyed_file)
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


__all__ = ["SnapshotSource", "StateSource", "check_finished", "snapshot_to_savepoint", "write_savepoint"]
