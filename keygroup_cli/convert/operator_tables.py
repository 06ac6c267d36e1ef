"""A savepoint's operator state held in memory: what the savepoint -> savepoint rescale redistributes.

Operator state is small (source offsets, split assignments, broadcast rules), so the rescale of a savepoint
takes it, decoded once when the savepoint was opened (``Savepoint.operator_streams``), as Arrow tables in the
kg operator schema, redistributes those tables as Flink does, and encodes the new savepoint's operator-state
streams from them (``flink.write.rescaled``). No kg snapshot or manifest is made on the way, and headers stay the
bytes they were read as (keyed state takes the task pipeline of ``execution.jobs.savepoint``, or is copied
as bytes).

``OperatorTables`` holds, per operator, the planner's view of it (``snapshot.model.Operator``: states,
parallelism, maxParallelism, and one entry per subtask's operator-state rows, keyed state left out) and the
rows of every entry. The entries name no file: their ``path`` is the key of their table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.convert.from_savepoint import operator_stream
from keygroup_cli.core.errors import InvalidSnapshotError
from keygroup_cli.core.findings import first_error
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.core.progress import no_progress as _noop
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import FlinkSnapshot
from keygroup_cli.flink.metadata.reader import OperatorState
from keygroup_cli.flink.operator.codec import KIND_BY_MODE
from keygroup_cli.flink.savepoint import Savepoint
from keygroup_cli.snapshot.model import Operator, OperatorFile, StateDescriptor
from keygroup_cli.snapshot.parquet import conform_operator


@dataclass(frozen=True, slots=True)
class OperatorTables:
    """A savepoint's operators as the planner sees them, and their operator-state rows."""

    #: The savepoint's checkpoint id (what a plan names its input by).
    snapshot_id: int
    #: Every operator of the savepoint, in ``_metadata``'s order.
    operators: tuple[Operator, ...]
    #: Rows by ``OperatorFile.path``, in ``OPERATOR_SCHEMA``.
    tables: Mapping[str, pa.Table]
    #: What the rows were read from, for messages.
    label: str

    def operator(self, label: str) -> Operator | None:
        """Return the operator with this uid or operator id."""
        return next((op for op in self.operators if label in (op.uid, op.operator_id)), None)

    def operator_table(self, operator_file: OperatorFile) -> pa.Table:
        """Return the rows of one subtask's operator state."""
        return self.tables[operator_file.path]

    def subtask_tables(self, operator_id: str) -> dict[int, pa.Table]:
        """Return one operator's rows by subtask."""
        op = self.operator(operator_id)
        assert op is not None
        return {f.subtask: self.tables[f.path] for f in op.operator_files}

    def state_counts(self) -> dict[str, list[dict[str, int]]]:
        """Return, by operator id, per old subtask, how many elements each operator state holds."""
        counts: dict[str, list[dict[str, int]]] = {}
        for op in self.operators:
            per_subtask: list[dict[str, int]] = [{} for _ in range(op.parallelism)]
            for f in op.operator_files:
                column = self.tables[f.path].column("state")
                for item in pc.value_counts(column).to_pylist():
                    per_subtask[f.subtask][str(item["values"])] = int(item["counts"])
            counts[op.operator_id] = per_subtask
        return counts


def table_entry(operator_dir: str, subtask: int, table: pa.Table) -> OperatorFile:
    """Return the in-memory entry of ``table`` (conformed), subtask ``subtask`` of an operator."""
    return OperatorFile(subtask, f"{operator_dir}/operator-{subtask:05d}", table.num_rows, table.nbytes, "")


def read_operator_tables(
    snapshot: FlinkSnapshot, *, origin: FlinkSnapshot | None = None, on_progress: OnProgress | None = None
) -> OperatorTables:
    """Take every operator-state stream of the canonical savepoint ``snapshot``, decoded when it was opened.

    ``origin`` is the savepoint the user named when ``snapshot`` is its canonical rewrite (heap layouts).
    The caller checked ``convert.check_convertible``. Each stream is checked as ``kg verify`` checks it
    (sizes, offsets, headers, snappy CRCs, every element, the header's states against ``_metadata``'s)
    by the same decode that gives its rows (``Savepoint.operator_streams``), so no rescale, through the
    CLI or ``rescale()``, commits operator state from a stream ``kg verify`` rejects, and none is decoded
    twice.

    Raises:
        InvalidSnapshotError: A stream fails that check (``INPUT_FAILS_VERIFY``), is missing or does not
            decode.
        UnsupportedFormatError: A header kg cannot read.
    """
    savepoint = Savepoint.of(snapshot)
    require_operator_streams_intact(savepoint, origin or savepoint)
    report = on_progress or _noop
    tables: dict[str, pa.Table] = {}
    operators = []
    total = sum(len(op.subtasks) for op in savepoint.metadata.operators)
    done = 0
    for op in savepoint.metadata.operators:
        operators.append(_operator(savepoint, op, tables))
        done += len(op.subtasks)
        report("convert", done, total)
    return OperatorTables(
        savepoint.metadata.checkpoint_id, tuple(operators), tables, str((origin or snapshot).directory)
    )


def _operator(savepoint: Savepoint, op: OperatorState, tables: dict[str, pa.Table]) -> Operator:
    """Return the planner's view of ``op`` and put its subtasks' operator-state rows in ``tables``."""
    states: dict[str, str] = {}
    files = []
    for sub in op.subtasks:
        handle = sub.managed_operator_state
        if not isinstance(handle, OperatorStateHandle):
            continue
        _raw, header, rows = operator_stream(savepoint, op.operator_id, sub.index, handle)
        for e in handle.states:
            states.setdefault(e.name, KIND_BY_MODE[e.mode])
        for info in (header.states or ()) + (header.broadcast_states or ()):
            states.setdefault(info.name, info.kind)
        table = conform_operator(rows)
        entry = table_entry(op.operator_id, sub.index, table)
        tables[entry.path] = table
        files.append(entry)
    return Operator(
        uid=op.uid,
        operator_id=op.operator_id,
        name=op.name,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
        key_type=None,
        states=tuple(StateDescriptor(n, k) for n, k in states.items()),
        operator_files=tuple(files),
    )


def require_operator_streams_intact(snapshot: FlinkSnapshot, origin: FlinkSnapshot | None = None) -> None:
    """Refuse ``snapshot`` if any of its operator-state streams fails ``kg verify``'s check of it.

    Raises:
        InvalidSnapshotError: The first error finding, as one line (``INPUT_FAILS_VERIFY``).
    """
    streams = Savepoint.of(snapshot).operator_streams.values()
    problem = first_error(f for stream in streams for f in stream.findings)
    if problem is not None:
        raise InvalidSnapshotError(
            f"{(origin or snapshot).directory}: input fails kg verify: {problem}", code="INPUT_FAILS_VERIFY"
        )


__all__ = ["OperatorTables", "read_operator_tables", "require_operator_streams_intact", "table_entry"]
