"""``kg export``: keyed states of one operator as Parquet files with typed columns, committed atomically.

One Parquet file per state (``state_tables``' typed schema), written batch by batch with one
``ParquetWriter`` per state, so memory follows a batch of rows, not the state. With one ``--state`` the
output is that file; else a directory of ``<state>.parquet`` files (a ``/`` in a state name, as in
``_timer_state/event_user-timers``, becomes ``%2F``). Either is written in a staging directory beside the
output and renamed into place when every file is complete (``storage.staging``).
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from keygroup_cli.core.errors import ExecutionError, InvalidArgumentError, InvalidInputError
from keygroup_cli.core.findings import fails_verify_error
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.flink.data.lookup import find_operator
from keygroup_cli.flink.data.tables import (
    BatchReader,
    TypedState,
    open_canonical,
    state_batches,
    typed_states,
)
from keygroup_cli.flink.io.stream_handles import key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.savepoint import Savepoint
from keygroup_cli.storage import background
from keygroup_cli.storage.locations import is_remote
from keygroup_cli.storage.staging import (
    fsync_directory,
    require_absent,
    scratch_directory,
    staged_directory,
)


@dataclass(frozen=True, slots=True)
class ExportedState:
    """One state written: its file, rows, columns and notes."""

    name: str
    kind: str
    file: str
    rows: int
    columns: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What ``export_states`` wrote."""

    out: str
    operator: str
    states: tuple[ExportedState, ...]


def state_file_name(state: str) -> str:
    """Return the file name of a state's Parquet file in an export directory."""
    return urllib.parse.quote(state, safe="-_.") + ".parquet"


def export_states(
    source: str | os.PathLike[str],
    operator: str,
    out: str | os.PathLike[str],
    state: str | None = None,
    on_progress: OnProgress | None = None,
    reader: BatchReader = state_batches,
) -> ExportResult:
    """Write the keyed states of ``operator`` (or only ``state``) as Parquet at ``out``; say what was written.

    ``reader`` decodes the typed batches (``state_batches``, or the Spark engine's: its tasks decode the
    keyed files, this process writes their batches in file order, so the files are those written here).

    The input is refused where ``kg verify`` rejects it (``INPUT_FAILS_VERIFY``, exit 3, nothing written):
    its files' sizes, ranges, offsets and headers and its operator-state streams before anything is read
    (``open_canonical``), every key-group block of the operator as it is read (``state_batches``). Each
    Parquet file is read back (footer, schema, row count) before the commit.

    Raises:
        InvalidArgumentError: ``out`` exists or is on an object store, no such operator or state.
        InvalidInputError: The input fails ``kg verify`` (``INPUT_FAILS_VERIFY``) or cannot be read.
        UnsupportedFormatError: The operator holds no keyed state, a state kg cannot decode, or a layout
            kg reads only locally.
        ExecutionError: A file written does not read back; nothing is committed.
    """
    if is_remote(str(out)):
        raise InvalidArgumentError(
            f"{out}: kg export writes to local disk; copy the files to the object store after",
            code="DESTINATION_NOT_LOCAL",
        )
    dest = Path(out)
    require_absent(dest)
    with open_canonical(source) as savepoint:
        typed = _chosen_states(savepoint, operator, state)
        # Nothing is exported from an input kg verify rejects: the other operators' blocks are checked
        # too (the exported operator's are checked as they are read, in ``state_batches``).
        _require_other_operators_intact(
            savepoint, operator, str(source.directory if isinstance(source, Savepoint) else source)
        )
        staging_context = scratch_directory(dest) if state is not None else staged_directory(dest)
        with staging_context as staging:
            rows = _write_states(savepoint, operator, typed, staging, reader, on_progress)
            for t in typed:  # what is committed is read back first: its footer, schema and row count
                reread(staging / state_file_name(t.name), t.schema, rows[t.name])
            if state is not None:
                _commit_file(staging / state_file_name(state), dest)
    exported = tuple(
        ExportedState(
            t.name,
            t.kind,
            str(dest) if state is not None else str(dest / state_file_name(t.name)),
            rows[t.name],
            tuple(t.schema.names),
            t.notes,
        )
        for t in typed
    )
    return ExportResult(str(dest), operator, exported)


def _chosen_states(savepoint: Savepoint, operator: str, state: str | None) -> list[TypedState]:
    """Return the typed states of ``operator`` to export: all, or ``state``.

    Raises:
        InvalidArgumentError: ``operator`` has no state ``state`` (``STATE_NOT_FOUND``).
    """
    typed = [t for t in typed_states(savepoint, operator) if state is None or t.name == state]
    if state is not None and not typed:
        known = ", ".join(t.name for t in typed_states(savepoint, operator))
        raise InvalidArgumentError(
            f"operator {operator!r} has no state {state!r} (states: {known})", code="STATE_NOT_FOUND"
        )
    return typed


def _write_states(
    savepoint: Savepoint,
    operator: str,
    typed: list[TypedState],
    staging: Path,
    reader: BatchReader,
    on_progress: OnProgress | None,
) -> dict[str, int]:
    """Write each state's batches, as ``reader`` yields them, into its Parquet file; return its rows.

    Raises:
        InvalidInputError: Keyed files disagree on a state's serializers (``FLINK_STATE_INCONSISTENT``).
    """
    wanted = frozenset(t.name for t in typed)
    schemas = {t.name: t.schema for t in typed}
    rows = dict.fromkeys(wanted, 0)
    writers = {t.name: pq.ParquetWriter(staging / state_file_name(t.name), t.schema) for t in typed}
    try:
        for name, batch in reader(savepoint, operator, wanted, on_progress):
            if not batch.schema.equals(schemas[name]):
                raise InvalidInputError(
                    f"{savepoint.metadata_path}: operator {operator!r}: subtasks disagree on state "
                    f"{name!r}'s serializers (its keyed files' headers differ)",
                    code="FLINK_STATE_INCONSISTENT",
                )
            writers[name].write_batch(batch)
            rows[name] += batch.num_rows
    finally:
        for writer in writers.values():
            writer.close()
    return rows


def _commit_file(path: Path, dest: Path) -> None:
    """Rename a single state's file, made durable, to ``dest`` (still absent), and make that durable too."""
    background.fsync_file(path)
    require_absent(dest)
    os.rename(path, dest)
    fsync_directory(dest.parent)


def _require_other_operators_intact(savepoint: Savepoint, operator: str, label: str) -> None:
    """Check every key-group block of the operators not exported as ``kg verify`` does (read once each).

    Raises:
        InvalidInputError: ``INPUT_FAILS_VERIFY``, the first problem found.
    """
    from keygroup_cli.flink.check.verify import block_finding

    exported = find_operator(savepoint, operator).operator_id
    operators = {op.operator_id: op for op in savepoint.metadata.operators}
    for operator_id, streams in savepoint.keyed_streams.items():
        op = operators.get(operator_id)
        if operator_id == exported or op is None:
            continue
        for stream in streams:
            subject = f"{op.label} subtask {stream.subtask}"
            with StreamSource(stream.handle.delegate, savepoint.directory) as src:
                for group, start, end in key_group_extents(stream.handle, src.size):
                    raw = src.read(start, end)
                    compressed = stream.header.compressed
                    problem = block_finding(
                        raw, group, compressed, stream.layout, op.max_parallelism, src.source, subject
                    )
                    if problem is not None:
                        raise fails_verify_error(label, problem)


def reread(path: Path, schema: pa.Schema, rows: int) -> None:
    """Read a Parquet file just written back: its footer must parse and hold ``schema`` and ``rows``.

    Raises:
        ExecutionError: It does not (``EXPORT_REREAD_FAILED``); nothing is committed.
    """
    try:
        metadata = pq.read_metadata(path)
        written = metadata.schema.to_arrow_schema()
    except (OSError, pa.ArrowException) as exc:
        raise ExecutionError(
            f"{path.name}: the Parquet file written does not read back ({exc}); nothing was committed",
            code="EXPORT_REREAD_FAILED",
        ) from None
    if metadata.num_rows != rows or not written.equals(schema, check_metadata=False):
        raise ExecutionError(
            f"{path.name}: the Parquet file written reads back as {metadata.num_rows} rows of "
            f"{written}, not {rows} rows of {schema}; nothing was committed",
            code="EXPORT_REREAD_FAILED",
        )


__all__ = ["ExportResult", "ExportedState", "export_states", "reread", "state_file_name"]
