"""Frozen model of a kg snapshot (format v1): the manifest and the files it names.

These types are what ``manifest.py`` parses into and serialises from; nothing here touches the disk.
See ``docs/reference/snapshot-format.md`` for the contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keygroup_cli.core.keygroups import KeyGroupRange

FORMAT_NAME = "kg-snapshot"
FORMAT_VERSION = 1
MANIFEST_NAME = "_manifest.json"

KEYED_KINDS = ("value", "list", "map", "timer")
OPERATOR_KINDS = ("operator-split", "operator-union", "operator-broadcast")
STATE_KINDS = KEYED_KINDS + OPERATOR_KINDS


@dataclass(frozen=True, slots=True)
class StateDescriptor:
    """A named state of an operator and its kind (one of ``STATE_KINDS``).

    ``extensions`` here, on ``KeyedFile`` and on ``OperatorFile`` keeps unknown additive manifest fields,
    written back unchanged, as on ``Operator`` and ``Manifest``.
    """

    name: str
    kind: str
    extensions: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_keyed(self) -> bool:
        """Return whether the state lives in keyed files."""
        return self.kind in KEYED_KINDS

    @property
    def replicated(self) -> bool:
        """Return whether this union state is marked replicated (``"replicated": true``).

        A replicated union state holds the same, complete list on every subtask that has it (what
        ``kg rescale`` writes: the list Flink hands each subtask at restore), so one copy is the state.
        """
        return self.kind == "operator-union" and self.extensions.get("replicated") is True


@dataclass(frozen=True, slots=True)
class KeyedFile:
    """The keyed state of one subtask: a Parquet file covering one key-group range."""

    subtask: int
    key_group_start: int
    key_group_end: int
    path: str
    rows: int
    bytes: int
    xxh64: str
    key_group_rows: tuple[int, ...]
    extensions: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key_groups(self) -> KeyGroupRange:
        """Return the file's key-group range."""
        return KeyGroupRange(self.key_group_start, self.key_group_end)


@dataclass(frozen=True, slots=True)
class OperatorFile:
    """The operator (non-keyed) state of one subtask."""

    subtask: int
    path: str
    rows: int
    bytes: int
    xxh64: str
    extensions: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Operator:
    """One operator's state: identity, parallelism, states and files.

    ``key_type`` is None for an operator without keyed state. ``extensions`` keeps additive manifest
    fields kg does not interpret (for example the ``flink`` block that lets a snapshot become a savepoint
    again); they are written back unchanged.
    """

    uid: str | None
    operator_id: str
    name: str | None
    parallelism: int
    max_parallelism: int
    key_type: str | None
    states: tuple[StateDescriptor, ...]
    keyed_files: tuple[KeyedFile, ...] = ()
    operator_files: tuple[OperatorFile, ...] = ()
    extensions: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Return the uid if there is one, else the operator id."""
        return self.uid if self.uid else self.operator_id

    @property
    def keyed_rows(self) -> int:
        """Return the total number of keyed rows."""
        return sum(f.rows for f in self.keyed_files)

    @property
    def files(self) -> tuple[KeyedFile | OperatorFile, ...]:
        """Return every file of the operator: keyed files, then operator files."""
        return (*self.keyed_files, *self.operator_files)

    @property
    def total_bytes(self) -> int:
        """Return the size of all the operator's files."""
        return sum(f.bytes for f in self.files)

    def state(self, name: str) -> StateDescriptor | None:
        """Return the state with that name, if any."""
        return next((s for s in self.states if s.name == name), None)


@dataclass(frozen=True, slots=True)
class Manifest:
    """The parsed ``_manifest.json`` of a kg snapshot."""

    snapshot_id: int
    created_by: str
    created_at: str
    origin: Mapping[str, Any]
    operators: tuple[Operator, ...]
    format_version: int = FORMAT_VERSION
    extensions: Mapping[str, Any] = field(default_factory=dict)

    def operator(self, label: str) -> Operator | None:
        """Return the operator whose uid or operator id is ``label``."""
        return next((o for o in self.operators if label in (o.uid, o.operator_id)), None)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A committed kg snapshot on disk: its directory and its manifest."""

    path: Path
    manifest: Manifest

    def resolve(self, relative: str) -> Path:
        """Return the absolute path of a file named in the manifest."""
        return self.path / relative
