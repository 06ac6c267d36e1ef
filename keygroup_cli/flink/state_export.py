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

import pyarrow.parquet as pq

from keygroup_cli.errors import InvalidArgumentError
from keygroup_cli.flink.state_tables import (
    BatchReader,
    OnProgress,
    open_canonical,
    state_batches,
    typed_states,
)
from keygroup_cli.storage.locations import is_remote
from keygroup_cli.storage.staging import refuse_existing, scratch_directory, staged_directory


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

    Raises:
        InvalidArgumentError: ``out`` exists or is on an object store, no such operator or state.
        UnsupportedFormatError: The operator holds no keyed state, or a layout kg reads only locally.
    """
    if is_remote(str(out)):
        raise InvalidArgumentError(
            f"{out}: kg export writes to local disk; copy the files to the object store after",
            code="DESTINATION_NOT_LOCAL",
        )
    dest = Path(out)
    refuse_existing(dest)
    with open_canonical(source) as savepoint:
        typed = [t for t in typed_states(savepoint, operator) if state is None or t.name == state]
        if state is not None and not typed:
            known = ", ".join(t.name for t in typed_states(savepoint, operator))
            raise InvalidArgumentError(
                f"operator {operator!r} has no state {state!r} (states: {known})", code="STATE_NOT_FOUND"
            )
        wanted = frozenset(t.name for t in typed)
        staging_context = scratch_directory(dest) if state is not None else staged_directory(dest)
        with staging_context as staging:
            rows = dict.fromkeys(wanted, 0)
            writers = {t.name: pq.ParquetWriter(staging / state_file_name(t.name), t.schema) for t in typed}
            try:
                for name, batch in reader(savepoint, operator, wanted, on_progress):
                    writers[name].write_batch(batch)
                    rows[name] += batch.num_rows
            finally:
                for writer in writers.values():
                    writer.close()
            if state is not None:
                refuse_existing(dest)
                os.rename(staging / state_file_name(state), dest)
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


__all__ = ["ExportResult", "ExportedState", "export_states", "state_file_name"]
