"""A savepoint's operator state held in memory: what the savepoint -> savepoint rescale redistributes.

Operator state is small (source offsets, split assignments, broadcast rules), so the rescale of a savepoint
takes it, decoded once when the savepoint was opened (``Savepoint.operator_streams``), as Arrow tables in
``core.schema.OPERATOR_SCHEMA``, redistributes those tables as Flink does
(``execution.routes.operator_state``) and encodes the new savepoint's operator-state streams from them
(``flink.write.rescaled``). No kg snapshot, manifest or kg operator model is made on the way, and headers
stay the bytes they were read as.

``OperatorStateTables`` holds, per operator, its ``_metadata`` entry, its operator states named by the
handles' modes and the headers, and the rows of every old subtask.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.convert.from_savepoint import operator_stream
from keygroup_cli.core.findings import fails_verify_error, first_error
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.core.progress import no_progress as _noop
from keygroup_cli.core.schema import OPERATOR_SCHEMA
from keygroup_cli.flink import KIND_BY_MODE, FlinkCheckpoint, OperatorState, OperatorStateHandle, Savepoint
from keygroup_cli.planning.redistribution import OperatorStateName


@dataclass(frozen=True, slots=True)
class OperatorStateTables:
    """One operator's operator state as the opened savepoint holds it: its states and its rows."""

    #: The operator as ``_metadata`` records it.
    operator: OperatorState
    #: Its operator states, named by the handles' entries (mode) and the headers, subtask by subtask, in
    #: the order first seen: the order a new subtask's rows take (``planning.redistribution``).
    states: tuple[OperatorStateName, ...]
    #: Rows (``core.schema.OPERATOR_SCHEMA``) of every old subtask that has an operator-state handle.
    tables: Mapping[int, pa.Table]

    @property
    def operator_id(self) -> str:
        """The operator's id."""
        return self.operator.operator_id

    def counts(self) -> list[dict[str, int]]:
        """Return, per old subtask, how many elements each operator state holds."""
        per_subtask: list[dict[str, int]] = [{} for _ in range(self.operator.parallelism)]
        for subtask, table in self.tables.items():
            for item in pc.value_counts(table.column("state")).to_pylist():
                per_subtask[subtask][str(item["values"])] = int(item["counts"])
        return per_subtask


def operator_rows(table: pa.Table) -> pa.Table:
    """Return operator-state rows in ``OPERATOR_SCHEMA``, one chunk (what ``write_operator_file`` encodes)."""
    columns = [table.column(f.name).cast(f.type) for f in OPERATOR_SCHEMA]
    return pa.Table.from_arrays(columns, schema=OPERATOR_SCHEMA).combine_chunks()


def read_operator_state(
    snapshot: FlinkCheckpoint, *, origin: FlinkCheckpoint | None = None, on_progress: OnProgress | None = None
) -> dict[str, OperatorStateTables]:
    """Take every operator-state stream of the canonical savepoint ``snapshot``, decoded when it was opened.

    Returns every operator of ``_metadata``, in its order, by id. ``origin`` is the savepoint the user
    named when ``snapshot`` is its canonical rewrite (heap layouts). The caller checked
    ``convert.require_convertible``. Each stream is checked as ``kg verify`` checks it (sizes, offsets,
    headers, snappy CRCs, every element, the header's states against ``_metadata``'s) by the same decode
    that gives its rows (``Savepoint.operator_streams``), so no rescale, through the CLI or ``rescale()``,
    commits operator state from a stream ``kg verify`` rejects, and none is decoded twice.

    Raises:
        InvalidInputError: A stream fails that check (``INPUT_FAILS_VERIFY``), is missing or does not
            decode.
        UnsupportedFormatError: A header kg cannot read.
    """
    savepoint = Savepoint.of(snapshot)
    require_operator_streams_intact(savepoint, origin or savepoint)
    report = on_progress or _noop
    found = {}
    total = sum(len(op.subtasks) for op in savepoint.metadata.operators)
    done = 0
    for op in savepoint.metadata.operators:
        found[op.operator_id] = _operator(savepoint, op)
        done += len(op.subtasks)
        report("convert", done, total)
    return found


def _operator(savepoint: Savepoint, op: OperatorState) -> OperatorStateTables:
    """Return ``op``'s operator states and its subtasks' rows."""
    states: dict[str, str] = {}
    tables = {}
    for sub in op.subtasks:
        handle = sub.managed_operator_state
        if not isinstance(handle, OperatorStateHandle):
            continue
        _raw, header, rows = operator_stream(savepoint, op.operator_id, sub.index, handle)
        for e in handle.states:
            states.setdefault(e.name, KIND_BY_MODE[e.mode])
        for info in (header.states or ()) + (header.broadcast_states or ()):
            states.setdefault(info.name, info.kind)
        tables[sub.index] = operator_rows(rows)
    named = tuple(OperatorStateName(name, kind) for name, kind in states.items())
    return OperatorStateTables(op, named, tables)


def require_operator_streams_intact(snapshot: FlinkCheckpoint, origin: FlinkCheckpoint | None = None) -> None:
    """Refuse ``snapshot`` if any of its operator-state streams fails ``kg verify``'s check of it.

    Raises:
        InvalidInputError: The first error finding, as one line (``INPUT_FAILS_VERIFY``).
    """
    streams = Savepoint.of(snapshot).operator_streams.values()
    problem = first_error(f for stream in streams for f in stream.findings)
    if problem is not None:
        raise fails_verify_error(str((origin or snapshot).directory), problem)


__all__ = ["OperatorStateTables", "operator_rows", "read_operator_state", "require_operator_streams_intact"]
