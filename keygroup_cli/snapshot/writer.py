"""Write a kg snapshot: its state files, then its manifest, into a staging directory that becomes DEST.

``SnapshotWriter`` writes the state files and finally the manifest of a kg snapshot into a directory;
``snapshot_writer(dest)`` runs it in ``storage.staging.staged_directory(dest)`` for ``kg generate`` and the
rescale engines, so the snapshot appears at DEST complete or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.core.findings import first_error
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.snapshot.manifest import write_manifest
from keygroup_cli.snapshot.model import KeyedFile, Manifest, OperatorFile
from keygroup_cli.snapshot.parquet import (
    DEFAULT_ROW_GROUP_ROWS,
    KeyedData,
    write_keyed_file,
    write_operator_file,
)
from keygroup_cli.snapshot.verify import verify_snapshot
from keygroup_cli.storage.staging import staged_directory


def operator_dir_name(uid: str | None, operator_id: str) -> str:
    """Return a filesystem-safe directory name for an operator: its uid, or its id when there is none.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``; a name that had to change, or that starts with
    ``.`` or ``_`` (hidden / reserved for kg), gets ``-<first 8 hex of the operator id>`` so distinct
    uids never share a directory.
    """
    if not uid:
        return operator_id
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", uid)[:80]
    if safe != uid or safe.startswith((".", "_")):
        safe = f"op{safe}" if safe.startswith((".", "_")) else safe
        safe = f"{safe}-{operator_id[:8]}"
    return safe


class SnapshotWriter:
    """Write the files of a kg snapshot, then its manifest, into one directory (usually a staging one).

    Paths follow the contract: ``<operator-dir>/keyed-<NNNNN>.parquet`` and
    ``<operator-dir>/operator-<NNNNN>.parquet``, relative to the directory.
    """

    def __init__(self, directory: Path | str, *, row_group_rows: int = DEFAULT_ROW_GROUP_ROWS) -> None:
        self.directory = Path(directory)
        self.row_group_rows = row_group_rows
        self.committed = False
        self._dirs: dict[str, str] = {}
        self._used: set[str] = set()

    def operator_dir(self, uid: str | None, operator_id: str) -> str:
        """Return (and create) the directory name of an operator, unique within this snapshot."""
        if operator_id in self._dirs:
            return self._dirs[operator_id]
        name = operator_dir_name(uid, operator_id)
        # Case-insensitive filesystems would merge "Counter" and "counter".
        if name.lower() in self._used:
            name = f"{name}-{operator_id[:8]}"
        if name.lower() in self._used:
            name = operator_id
        self._used.add(name.lower())
        self._dirs[operator_id] = name
        (self.directory / name).mkdir(parents=True, exist_ok=True)
        return name

    def write_keyed(
        self,
        operator_dir: str,
        subtask: int,
        data: KeyedData,
        *,
        key_type: str,
        key_groups: KeyGroupRange,
        state_names: Sequence[str] | None = None,
    ) -> KeyedFile:
        """Write subtask ``subtask``'s keyed file and return its manifest entry (see ``write_keyed_file``)."""
        relative = f"{operator_dir}/keyed-{subtask:05d}.parquet"
        written = write_keyed_file(
            self.directory / relative,
            data,
            key_type=key_type,
            key_groups=key_groups,
            state_names=state_names,
            row_group_rows=self.row_group_rows,
        )
        return written.keyed_file(subtask, relative, key_groups)

    def write_operator(
        self, operator_dir: str, subtask: int, data: pa.Table | pa.RecordBatch
    ) -> OperatorFile:
        """Write subtask ``subtask``'s operator state file and return its manifest entry."""
        relative = f"{operator_dir}/operator-{subtask:05d}.parquet"
        return write_operator_file(self.directory / relative, data).operator_file(subtask, relative)

    def commit(self, manifest: Manifest) -> Path:
        """Write ``_manifest.json`` (validated, atomic) and verify what was written: the last step.

        The staged snapshot is read back as ``kg verify`` reads it (checksums, schema, every row's key
        group), so ``kg generate`` and ``kg convert`` never publish an output kg would reject.

        Raises:
            ExecutionError: ``OUTPUT_FAILS_VERIFY``: what was written fails ``kg verify`` (a bug in kg or
                a disk that returned other bytes); the staging is removed by its owner.
        """
        path = write_manifest(self.directory, manifest)
        problem = first_error(verify_snapshot(self.directory).findings)
        if problem is not None:
            raise ExecutionError(
                f"{self.directory}: the snapshot kg wrote fails kg verify: {problem}; nothing committed",
                code="OUTPUT_FAILS_VERIFY",
            )
        self.committed = True
        return path


@contextmanager
def snapshot_writer(
    dest: Path | str, *, row_group_rows: int = DEFAULT_ROW_GROUP_ROWS
) -> Iterator[SnapshotWriter]:
    """Yield a ``SnapshotWriter`` on a staging directory that becomes ``dest`` once the manifest is committed.

    Raises:
        ExecutionError: The block ended without ``commit`` (nothing is published).
    """
    with staged_directory(dest) as staging:
        writer = SnapshotWriter(staging, row_group_rows=row_group_rows)
        yield writer
        if not writer.committed:
            raise ExecutionError(f"{dest}: no manifest was written; nothing committed", code="NOT_COMMITTED")


__all__ = ["SnapshotWriter", "operator_dir_name", "snapshot_writer"]
