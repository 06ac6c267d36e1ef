"""Write a rescaled savepoint's operator-state streams and describe its ``_metadata``, from the opened input.

The savepoint -> savepoint rescale's writer. Everything it writes comes from the opened savepoint
(``flink.savepoint.Savepoint``): the operator-state header bytes each stream starts with (read once, when the
input was opened), coordinator and master state, finished markers, the properties trailer. The plan hands it
each operator's new parallelism and maxParallelism, the redistributed operator-state rows of every new
subtask, and the keyed files another step wrote (key groups copied as bytes, or an engine's write tasks). It
returns the ``CheckpointMetadata`` of what it wrote; encoding and writing ``_metadata`` is the commit's
(``flink.write.commit.seal_savepoint``). Nothing passes through a kg snapshot manifest, and no header is
encoded to text and back.

Every operator is written, those without state included, each with the parallelism and maxParallelism the
plan gave it, as Flink writes every operator of a job. Leaving one out is not the same as writing it empty:
``StateAssignmentOperation.assignStates`` gives a missing operator an empty ``OperatorState`` with its
vertex's *current* maxParallelism, which in a job that sets none is Flink's default for the new parallelism,
and ``checkParallelismPreconditions`` then moves the vertex to each of its states' maxParallelism in turn.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle, OperatorStateHandle
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, OperatorState, SubtaskState
from keygroup_cli.flink.metadata.writer import CANONICAL_SAVEPOINT_PROPERTIES
from keygroup_cli.flink.operator.codec import write_operator_file
from keygroup_cli.flink.operator.header import OperatorStateHeader
from keygroup_cli.flink.savepoint import Savepoint
from keygroup_cli.flink.write.finished import finished_markers
from keygroup_cli.flink.write.regroup import RegroupedFile

if TYPE_CHECKING:
    import pyarrow as pa

H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class RescaledOperator:
    """One operator of the new savepoint, as the plan leaves it."""

    operator_id: str
    parallelism: int
    max_parallelism: int
    #: Operator-state rows (``core.schema.OPERATOR_SCHEMA``) by new subtask; a subtask absent here gets no
    #: stream.
    tables: Mapping[int, pa.Table]
    #: Union states every new subtask now holds whole (redistributed): one copy is written.
    replicated: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class WrittenState:
    """What ``write_rescaled`` wrote: the new ``_metadata``'s content and the counts of the streams."""

    metadata: CheckpointMetadata
    keyed_files: int
    operator_files: int
    operator_rows: int
    bytes: int
    compressed: bool | None


def write_rescaled(
    savepoint: Savepoint,
    operators: Sequence[RescaledOperator],
    keyed: Mapping[str, Sequence[RegroupedFile]],
    staging: Path,
    *,
    compression: bool | None = None,
    keyed_root: str | None = None,
    raw_keyed: Mapping[str, Sequence[KeyGroupsHandle]] | None = None,
    on_progress: OnProgress | None = None,
) -> WrittenState:
    """Write every operator-state stream of the rescaled ``savepoint`` into ``staging``; describe them all.

    Args:
        savepoint: The opened input (its canonical view when a layout was rewritten).
        operators: Every operator of the input, in its order, as the plan leaves it.
        keyed: Keyed files already written, by operator id, one per new subtask. Each block of them was
            checked already (encoded by ``keyed_encode``, or copied from an input that passed the gate).
        staging: The directory the savepoint is staged in (new streams get a random name there).
        compression: Snappy-compress operator state; None keeps what each operator's input streams used.
        keyed_root: Where the ``keyed`` files are when not in ``staging`` (an object-store prefix).
        raw_keyed: Raw keyed-state streams already written into ``staging`` (timers,
            ``flink.write.raw_timers``), by operator id, one per new subtask.
        on_progress: ``(stage, completed, total)`` callback.

    Raises:
        InvalidInputError: Rows that name a state no input header declares.
        InvalidArgumentError: ``FINISHED_SUBTASK_NOT_KEPT`` (``flink.write.finished``).
    """
    report = on_progress or no_progress
    by_id = {op.operator_id: op for op in savepoint.metadata.operators}
    total = sum(op.parallelism for op in operators)
    counter = _Counter()
    written = []
    for op in operators:
        old = by_id[op.operator_id]
        files = keyed.get(op.operator_id)
        raw = (raw_keyed or {}).get(op.operator_id)
        written.append(_operator(savepoint, old, op, files, raw, staging, compression, keyed_root, counter))
        counter.subtasks += op.parallelism
        report("write savepoint", counter.subtasks, total)
    meta = savepoint.metadata
    metadata = CheckpointMetadata(
        version=meta.version,
        checkpoint_id=meta.checkpoint_id,
        master_states=meta.master_states,
        operators=tuple(written),
        properties_bytes=canonical_properties(meta) if meta.version >= 4 else None,
    )
    return WrittenState(
        metadata, counter.keyed, counter.streams, counter.rows, counter.bytes, counter.compressed
    )


def canonical_properties(meta: CheckpointMetadata) -> bytes:
    """Return the properties trailer of a canonical savepoint: the input's when it is one, else Flink's.

    kg always writes canonical savepoints, so a checkpoint's or a NATIVE savepoint's trailer is replaced.
    """
    props = meta.properties
    if meta.properties_bytes is not None and props is not None:
        if props.is_savepoint and props.format_type == "CANONICAL":
            return meta.properties_bytes
    return CANONICAL_SAVEPOINT_PROPERTIES


@dataclass
class _Counter:
    subtasks: int = 0
    keyed: int = 0
    streams: int = 0
    rows: int = 0
    bytes: int = 0
    compressed: bool | None = None


def _operator(
    savepoint: Savepoint,
    old: OperatorState,
    new: RescaledOperator,
    keyed: Sequence[RegroupedFile] | None,
    raw: Sequence[KeyGroupsHandle] | None,
    staging: Path,
    compression: bool | None,
    keyed_root: str | None,
    counter: _Counter,
) -> OperatorState:
    """Write one operator's streams and return its ``OperatorState`` in the new savepoint."""
    if old.fully_finished:
        # FullyFinishedOperatorState at any parallelism: Flink deploys its subtasks FINISHED_ON_RESTORE.
        return OperatorState(
            old.operator_id, new.parallelism, new.max_parallelism, old.name, old.uid, None, (), True
        )
    where = f"{savepoint.directory}: operator {old.label!r}"
    tables = keep_one_union_copy(new.tables, new.replicated, where)
    markers = _markers(old, new, keyed, tables)
    headers = _input_headers(savepoint, old)
    same_parallelism = new.parallelism == old.parallelism
    subtasks = []
    for index in range(new.parallelism):
        if index in markers:
            # FinishedOperatorSubtaskState: this subtask gets no state, so no file either.
            subtasks.append(SubtaskState(index, finished=True))
            if keyed_root is None:
                _discard(keyed, index, staging)
            written = raw[index].delegate if raw is not None else None
            if isinstance(written, RelativeFileHandle):
                (staging / written.relative_path).unlink(missing_ok=True)
            continue
        keyed_handle = None
        if keyed is not None:
            keyed_handle = keyed[index].handle
            counter.keyed += 1
            counter.bytes += keyed[index].size
        op_handle = None
        if index in tables:
            own = headers.get(index) if same_parallelism else None
            op_handle = _write_stream(tables[index], own, headers, compression, staging, where, counter)
        subtasks.append(
            SubtaskState(
                index,
                managed_operator_state=op_handle,
                managed_keyed_state=keyed_handle,
                raw_keyed_state=raw[index] if raw is not None else None,
            )
        )
    return OperatorState(
        old.operator_id,
        new.parallelism,
        new.max_parallelism,
        old.name,
        old.uid,
        old.coordinator_state,
        tuple(subtasks),
    )


def _input_headers(savepoint: Savepoint, op: OperatorState) -> dict[int, tuple[bytes, OperatorStateHeader]]:
    """Return the operator-state headers of ``op``'s input streams by old subtask (read when opened)."""
    found = {}
    for sub in op.subtasks:
        stream = savepoint.operator_streams.get((op.operator_id, sub.index))
        if stream is not None and stream.raw_header is not None and stream.header is not None:
            found[sub.index] = (stream.raw_header, stream.header)
    return found


def _write_stream(
    table: pa.Table,
    own: tuple[bytes, OperatorStateHeader] | None,
    headers: Mapping[int, tuple[bytes, OperatorStateHeader]],
    compression: bool | None,
    staging: Path,
    where: str,
    counter: _Counter,
) -> OperatorStateHandle:
    """Write one new subtask's operator-state stream under a header that declares all its states."""
    needed = set(table.column("state").to_pylist())
    raw, header = pick_header([*([own] if own else []), *headers.values()], needed, declared_states, where)
    use = header.compressed if compression is None else compression
    counter.compressed = use if counter.compressed is None else counter.compressed or use
    name = str(uuid.uuid4())
    with open(staging / name, "wb") as out:
        encoded = write_operator_file(out, raw, header, table, compressed=use)
    counter.streams += 1
    counter.rows += table.num_rows
    counter.bytes += encoded.size
    return OperatorStateHandle(4, encoded.states, RelativeFileHandle(name, encoded.size))


def declared_states(header: OperatorStateHeader) -> set[str]:
    """Return the names of the states an operator-state header declares (broadcast states too)."""
    return {i.name for i in (header.states or ()) + (header.broadcast_states or ())}


def pick_header(
    candidates: Iterable[tuple[bytes, H]], needed: set[str], names: Callable[[H], set[str]], where: str
) -> tuple[bytes, H]:
    """Return the first ``(raw, parsed)`` header whose states include ``needed``.

    A new subtask at an unchanged parallelism puts its own input header first; otherwise any header of the
    operator that declares every state its rows name serves (they differ only in what each subtask held).

    Raises:
        InvalidInputError: No header declares them all (``FLINK_STATE_UNKNOWN``).
    """
    for raw, header in candidates:
        if needed <= names(header):
            return raw, header
    raise InvalidInputError(
        f"{where}: no saved state header declares all of {sorted(needed)}", code="FLINK_STATE_UNKNOWN"
    )


def keep_one_union_copy(
    tables: Mapping[int, pa.Table], replicated: frozenset[str] | set[str], where: str
) -> dict[int, pa.Table]:
    """Keep each replicated union state's list on the lowest subtask that holds it.

    A rescale gives every new subtask every union element (the list Flink hands each subtask at restore); a
    savepoint stores union state as per-subtask partitions that Flink concatenates when it restores, so one
    copy restores exactly the list every subtask held.

    Raises:
        InvalidInputError: A replicated state's copies differ (``UNION_REPLICAS_DIFFER``).
    """
    if not replicated or len(tables) < 2:
        return dict(tables)
    import pyarrow as pa
    import pyarrow.compute as pc

    first: dict[str, int] = {}
    for name in sorted(replicated):
        holders = {i: rows for i, t in sorted(tables.items()) if (rows := _state_rows(t, name))}
        copies = list(holders.values())
        if any(rows != copies[0] for rows in copies[1:]):
            raise InvalidInputError(
                f"{where}: union state {name!r} is marked replicated but its subtasks hold different lists",
                code="UNION_REPLICAS_DIFFER",
            )
        first[name] = min(holders, default=-1)
    out = {}
    for index, table in tables.items():
        drop = [name for name in sorted(replicated) if index != first[name]]
        if drop:
            keep = pc.invert(pc.is_in(table.column("state"), value_set=pa.array(drop, type=pa.string())))
            table = table.filter(keep)
        out[index] = table
    return out


def _state_rows(table: pa.Table, name: str) -> list[tuple[object, ...]]:
    import pyarrow.compute as pc

    rows = table.filter(pc.equal(table.column("state"), name)).sort_by("position")
    return list(zip(rows.column("position").to_pylist(), rows.column("value").to_pylist(), strict=True))


def _markers(
    old: OperatorState,
    new: RescaledOperator,
    keyed: Sequence[RegroupedFile] | None,
    tables: Mapping[int, pa.Table],
) -> tuple[int, ...]:
    """Return the new subtasks written as finished (``flink.write.finished.finished_markers``)."""
    finished = [s.index for s in old.subtasks if s.finished]
    if not finished:
        return ()
    keyed_data = {f.subtask: f.key_groups_with_data for f in keyed or ()}
    receives = [
        keyed_data.get(i, 0) > 0 or (i in tables and tables[i].num_rows > 0) for i in range(new.parallelism)
    ]
    return finished_markers(old.label, finished, receives, max_parallelism=new.max_parallelism)


def _discard(files: Sequence[RegroupedFile] | None, index: int, staging: Path) -> None:
    """Remove the (empty) keyed file or database written for a subtask that is written as finished."""
    if files is None:
        return
    handle = files[index].handle
    if isinstance(handle, IncrementalKeyedHandle):
        written = [handle.metadata, *(f.handle for f in handle.shared + handle.private)]
    else:
        written = [handle.delegate]
    for file in written:
        if isinstance(file, RelativeFileHandle):
            (staging / file.relative_path).unlink(missing_ok=True)


__all__ = [
    "RescaledOperator",
    "WrittenState",
    "canonical_properties",
    "declared_states",
    "keep_one_union_copy",
    "pick_header",
    "write_rescaled",
]
