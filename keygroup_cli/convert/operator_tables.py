"""A savepoint's operator state held in memory: what the savepoint -> savepoint rescale redistributes.

Operator state is small (source offsets, split assignments, broadcast rules), so the rescale of a savepoint
decodes it on the driver into Arrow tables in the kg operator schema, redistributes those tables as Flink
does, and encodes the new savepoint's operator-state streams from them. No kg snapshot is written on the
way (keyed state takes the task pipeline of ``execution.keyed_pipeline``, or is copied as bytes).

``OperatorTables`` pairs kg's manifest of the savepoint, keyed state left out (``convert.decode_savepoint``
with ``keyed=False``: states, parallelism, the ``flink`` extension with the operator-state headers), with
one table per operator-state entry of that manifest. The entries name no file: their ``path`` is the key
of their table, ``bytes`` the table's Arrow size and ``xxh64`` empty. The savepoint writer reads them
through the same two calls as a kg snapshot on disk (``operator_table``, ``keyed_batches``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.convert.from_savepoint import OnProgress, _noop, decode_savepoint
from keygroup_cli.errors import InvalidSnapshotError
from keygroup_cli.findings import first_error
from keygroup_cli.flink.metadata.locate import FlinkSnapshot
from keygroup_cli.flink.savepoint import Savepoint
from keygroup_cli.keygroups import KeyGroupRange
from keygroup_cli.snapshot import Manifest
from keygroup_cli.snapshot.model import KeyedFile, OperatorFile
from keygroup_cli.snapshot.parquet import conform_operator


@dataclass(frozen=True, slots=True)
class OperatorTables:
    """kg's manifest of a savepoint's operator state and its rows, one table per operator-state entry."""

    manifest: Manifest
    #: Rows by ``OperatorFile.path``, in ``OPERATOR_SCHEMA``.
    tables: Mapping[str, pa.Table]
    #: What the rows were read from, for messages.
    label: str

    def operator_table(self, operator_file: OperatorFile) -> pa.Table:
        """Return the rows of one subtask's operator state."""
        return self.tables[operator_file.path]

    def keyed_batches(self, keyed_file: KeyedFile) -> Iterator[pa.RecordBatch]:
        """Keyed state is never held here (see the module docstring)."""
        raise AssertionError(f"{self.label}: operator tables hold no keyed state ({keyed_file.path})")

    def state_counts(self) -> dict[str, list[dict[str, int]]]:
        """Return, by operator id, per old subtask, how many elements each operator state holds."""
        counts: dict[str, list[dict[str, int]]] = {}
        for op in self.manifest.operators:
            per_subtask: list[dict[str, int]] = [{} for _ in range(op.parallelism)]
            for f in op.operator_files:
                column = self.tables[f.path].column("state")
                for item in pc.value_counts(column).to_pylist():
                    per_subtask[f.subtask][str(item["values"])] = int(item["counts"])
            counts[op.operator_id] = per_subtask
        return counts


def table_entry(operator_dir: str, subtask: int, table: pa.Table) -> OperatorFile:
    """Return the in-memory manifest entry of ``table`` (conformed), subtask ``subtask`` of an operator."""
    return OperatorFile(subtask, f"{operator_dir}/operator-{subtask:05d}", table.num_rows, table.nbytes, "")


class _MemorySink:
    """Keeps what ``decode_savepoint`` decodes in memory; operator state only."""

    def __init__(self) -> None:
        self.tables: dict[str, pa.Table] = {}

    def operator_dir(self, uid: str | None, operator_id: str) -> str:
        return operator_id

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
        raise AssertionError("operator tables are decoded with keyed=False")

    def write_operator(self, operator_dir: str, subtask: int, data: pa.Table) -> OperatorFile:
        table = conform_operator(data)
        entry = table_entry(operator_dir, subtask, table)
        self.tables[entry.path] = table
        return entry


def read_operator_tables(
    snapshot: FlinkSnapshot, *, origin: FlinkSnapshot | None = None, on_progress: OnProgress | None = None
) -> OperatorTables:
    """Decode every operator-state stream of the canonical savepoint ``snapshot`` into memory.

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
    sink = _MemorySink()
    manifest, _ = decode_savepoint(savepoint, sink, keyed=False, report=on_progress or _noop, origin=origin)
    return OperatorTables(manifest, sink.tables, str((origin or snapshot).directory))


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
