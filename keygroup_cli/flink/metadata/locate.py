"""Find a savepoint's or checkpoint's ``_metadata`` and parse it.

What a user points at may be a directory, the file, ``chk-N`` or a job's checkpoint root.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keygroup_cli.core.errors import InvalidInputError, no_input_error
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, parse_metadata
from keygroup_cli.storage.containment import contain_file, input_roots, outside_error
from keygroup_cli.storage.locations import Location, is_remote, location

METADATA_FILE = "_metadata"
_CHECKPOINT_DIR = re.compile(r"chk-(\d+)")


@dataclass(frozen=True, slots=True)
class FlinkCheckpoint:
    """A parsed Flink savepoint or checkpoint: where its ``_metadata`` is, and what it says."""

    metadata_path: Path | Location
    metadata: CheckpointMetadata
    #: For a view kg wrote of a checkpoint: the directory object that carries the roots its absolute
    #: handles may name (``flink.io.paths.view_directory``); None for a savepoint or checkpoint itself.
    view: Path | None = None

    @property
    def directory(self) -> Path | Location:
        """Return the directory holding ``_metadata`` (relative handles resolve against it)."""
        return self.view if self.view is not None else self.metadata_path.parent

    @property
    def is_savepoint(self) -> bool:
        """Return whether this is a savepoint; V3 (no properties) falls back to the directory name."""
        flag = self.metadata.is_savepoint
        if flag is not None:
            return flag
        return _CHECKPOINT_DIR.fullmatch(self.directory.name) is None


def find_metadata(path: str | os.PathLike[str] | Location) -> Path | Location:
    """Return the ``_metadata`` file for a savepoint / checkpoint path.

    Accepts a ``_metadata`` file, a directory containing one (savepoint or ``chk-N``), or a job's checkpoint
    root: the latest *completed* ``chk-N`` (one with ``_metadata``) is chosen. A directory that holds a
    single job-id directory with ``chk-N`` inside is accepted too.

    Raises:
        InvalidInputError: Nothing there, or no completed checkpoint.
    """
    p: Path | Location = location(path) if isinstance(path, Location) or is_remote(path) else Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise InvalidInputError(f"{p}: no such file or directory", code="SNAPSHOT_NOT_FOUND")
    if (p / METADATA_FILE).is_file():
        return p / METADATA_FILE
    latest = _latest_completed(p)
    if latest is not None:
        return _below(latest, p)
    roots = [
        child for child in _subdirs(p) if any(_CHECKPOINT_DIR.fullmatch(c.name) for c in _subdirs(child))
    ]
    if len(roots) == 1:
        latest = _latest_completed(roots[0])
        if latest is not None:
            return _below(latest, p)
    if any(_CHECKPOINT_DIR.fullmatch(c.name) for c in _subdirs(p)) or roots:
        raise InvalidInputError(
            f"{p}: no completed checkpoint (no chk-N directory with a _metadata file)",
            code="NO_COMPLETED_CHECKPOINT",
        )
    raise no_input_error(p)


def _below(found: Path | Location, named: Path | Location) -> Path | Location:
    """Return the ``_metadata`` found below the directory the user named, if no link leads it elsewhere.

    Raises:
        InvalidInputError: ``STATE_FILE_OUTSIDE`` (``storage.containment``).
    """
    if isinstance(found, Path) and isinstance(named, Path) and not input_roots(named).admits_local(found):
        raise outside_error(found, os.path.realpath(found))
    return found


def _subdirs(p: Path | Location) -> list[Any]:
    try:
        return [c for c in p.iterdir() if c.is_dir()]
    except OSError:
        return []


def _latest_completed(root: Path | Location) -> Path | Location | None:
    completed = []
    for child in _subdirs(root):
        match = _CHECKPOINT_DIR.fullmatch(child.name)
        if match and (child / METADATA_FILE).is_file():
            completed.append((int(match.group(1)), child / METADATA_FILE))
    return max(completed)[1] if completed else None


def read_flink_metadata(path: str | os.PathLike[str] | Location) -> FlinkCheckpoint:
    """Find and parse the ``_metadata`` of a savepoint or checkpoint (see ``find_metadata``).

    Raises:
        InvalidInputError: Missing, truncated or corrupt metadata.
        UnsupportedFormatError: A metadata version kg does not read.
    """
    metadata_path = find_metadata(path)
    return FlinkCheckpoint(
        metadata_path, parse_metadata(read_metadata_bytes(metadata_path), str(metadata_path))
    )


def read_metadata_bytes(metadata_path: Path | Location) -> bytes:
    """Return the bytes of a ``_metadata`` file (one read from storage).

    Raises:
        InvalidInputError: It cannot be read (``SNAPSHOT_UNREADABLE``), or it is a link that leads
            outside its directory (``STATE_FILE_OUTSIDE``, ``storage.containment``).
    """
    contain_file(metadata_path)
    try:
        return metadata_path.read_bytes()
    except OSError as exc:
        raise InvalidInputError(
            f"{metadata_path}: cannot read: {exc.strerror}", code="SNAPSHOT_UNREADABLE"
        ) from None


def flink_metadata_file(path: str | Path | Location) -> Path | Location | None:
    """Return the ``_metadata`` file if ``path`` is a Flink savepoint or checkpoint, not a kg snapshot.

    A ``_metadata`` file, or a directory without ``_manifest.json`` in which ``find_metadata`` finds one (a
    savepoint, a ``chk-N`` directory or a job's checkpoint root). None for anything else.
    """
    p: Path | Location = location(path) if isinstance(path, Location) or is_remote(path) else Path(path)
    if p.is_file():
        return p if p.name == METADATA_FILE else None
    if not p.is_dir() or (p / "_manifest.json").exists():
        return None
    try:
        return find_metadata(p)
    except InvalidInputError:
        return None


def is_flink_savepoint(path: str | Path | Location) -> bool:
    """Return whether ``path`` is a Flink savepoint or checkpoint, not a kg snapshot (see above)."""
    return flink_metadata_file(path) is not None
