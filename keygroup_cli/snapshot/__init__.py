"""The kg snapshot format: ``open_snapshot()`` and the model types.

A kg snapshot is a directory of Parquet files plus ``_manifest.json`` (the commit point); see
``docs/reference/snapshot-format.md``.
"""

from __future__ import annotations

import os
from pathlib import Path

from keygroup_cli.core.errors import InvalidInputError, no_input_error
from keygroup_cli.snapshot.manifest import read_manifest, require_paths_inside
from keygroup_cli.snapshot.model import (
    FORMAT_NAME,
    FORMAT_VERSION,
    KEYED_KINDS,
    MANIFEST_NAME,
    OPERATOR_KINDS,
    STATE_KINDS,
    KeyedFile,
    Manifest,
    Operator,
    OperatorFile,
    Snapshot,
    StateDescriptor,
)
from keygroup_cli.storage.containment import contain_file


def open_snapshot(path: Path | str | os.PathLike[str]) -> Snapshot:
    """Open the committed kg snapshot at ``path`` (its directory or its ``_manifest.json``).

    Raises:
        InvalidInputError: The path does not exist, holds no ``_manifest.json`` (``SNAPSHOT_NOT_FOUND``:
            not a snapshot, or an uncommitted write), or the manifest is invalid or names a path outside
            the directory.
        UnsupportedFormatError: The manifest's ``format_version`` is unknown.
    """
    path = Path(path)
    if path.is_dir():
        directory, manifest_path = path, path / MANIFEST_NAME
        if not manifest_path.is_file():
            raise no_input_error(path)
    elif path.is_file():
        directory, manifest_path = path.parent, path
    else:
        raise InvalidInputError(f"no such snapshot: {path}", code="SNAPSHOT_NOT_FOUND")
    contain_file(manifest_path)  # a _manifest.json that is a link leading outside is not read
    manifest = read_manifest(manifest_path)
    require_paths_inside(directory, manifest, source=str(manifest_path))
    return Snapshot(path=directory, manifest=manifest)


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KEYED_KINDS",
    "MANIFEST_NAME",
    "OPERATOR_KINDS",
    "STATE_KINDS",
    "KeyedFile",
    "Manifest",
    "Operator",
    "OperatorFile",
    "Snapshot",
    "StateDescriptor",
    "open_snapshot",
]
