"""Operator migration on a savepoint, planned: rename a uid, give a hashed operator a uid, drop state.

``plan_migration(savepoint, request)`` is a pure function of an opened savepoint's ``_metadata`` and a
``MigrationRequest``: it validates every change, computes each operator's new OperatorID the way Flink's
``StreamGraphHasherV2`` does for a uid (``core.keygroups.operator_id_for_uid``), and returns the complete
``CheckpointMetadata`` of the new savepoint together with the state files to copy. Nothing is read from or
written to storage here; ``execution.routes.migrate`` copies the files and commits.

``apply_migration(savepoint, request)`` is the same migration for ``kg rescale --rename/--assign-uid/--drop``:
the changed ``_metadata`` (``apply_changes``, handles untouched) on the savepoint the rescale opened, which
the rescale then plans on and writes anew in its one pass.

Flink matches savepoint state to a job's operators by OperatorID alone, so a rename is a new id (and, in
``_metadata`` V5+, the recorded uid and a name that was the uid). The checkpoint id is kept: sinks'
committables (Kafka transactions) are tied to it. Every state file the kept operators name becomes a
``RelativeFileStateHandle`` beside the new ``_metadata``: relative handles stay relative, absolute ones (a
retained checkpoint's ``file:/…/chk-N/…`` and ``shared/…`` files) are copied in and made relative, and
inline handles stay inline. The new savepoint therefore depends on nothing outside its directory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from keygroup_cli.core.errors import InvalidArgumentError, UnsupportedFormatError
from keygroup_cli.core.keygroups import names_operator, operator_id_for_uid
from keygroup_cli.flink import (
    CheckpointMetadata,
    FileHandle,
    OperatorState,
    RelativeFileHandle,
    Savepoint,
    SegmentFileHandle,
)

#: The three changes, in the order a plan lists them.
RENAME, ASSIGN, DROP = "rename", "assign-uid", "drop"


@dataclass(frozen=True, slots=True)
class MigrationRequest:
    """What to change: ``(old uid or id, new uid)`` renames, ``(operator id, uid)`` assignments, drops."""

    renames: tuple[tuple[str, str], ...] = ()
    assignments: tuple[tuple[str, str], ...] = ()
    drops: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """Return whether the request changes nothing."""
        return not (self.renames or self.assignments or self.drops)


@dataclass(frozen=True, slots=True)
class OperatorChange:
    """One operator's change: its old identity and, unless dropped, its new one."""

    action: str
    operator_id: str
    uid: str | None
    new_operator_id: str | None
    new_uid: str | None
    has_state: bool
    #: The stateless entry of the same new id that the change replaces (None when there was none).
    replaces: str | None = None


@dataclass(frozen=True, slots=True)
class FileCopy:
    """One state file of the new savepoint: the handle it is read through, and its name beside _metadata."""

    source: FileHandle | RelativeFileHandle
    target: str
    size: int


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    """Everything a migration writes, decided before anything is staged."""

    changes: tuple[OperatorChange, ...]
    #: The new savepoint's ``_metadata`` (handles already pointing at ``files``' targets).
    metadata: CheckpointMetadata
    files: tuple[FileCopy, ...]

    @property
    def bytes(self) -> int:
        """Return the bytes of the state files to copy."""
        return sum(f.size for f in self.files)


def parse_pair(value: str, flag: str) -> tuple[str, str]:
    """Split an ``OLD=NEW`` option value; both sides non-empty (the last ``=`` separates them).

    Raises:
        InvalidArgumentError: ``INVALID_OPTION`` for a value without ``=`` or with an empty side.
    """
    old, sep, new = value.rpartition("=")
    if not sep or not old or not new:
        raise InvalidArgumentError(f"{flag} {value}: expected OLD=NEW", code="INVALID_OPTION")
    return old, new


@dataclass(frozen=True, slots=True)
class ChangedMetadata:
    """The changes of a request, validated, and the ``_metadata`` they give, its file handles untouched."""

    changes: tuple[OperatorChange, ...]
    metadata: CheckpointMetadata

    def operator_labels(self, labels: Sequence[str], original: CheckpointMetadata) -> tuple[str, ...]:
        """Return ``labels`` (``--operator`` values) as they name operators after the changes.

        A label that names an operator of the changed metadata stays; one that names only an operator
        as it was before (its old uid or id) becomes that operator's new id.

        Raises:
            InvalidArgumentError: ``OPERATOR_DROPPED`` for a label that names a dropped operator only.
        """
        changed = {c.operator_id: c for c in self.changes}
        named = []
        for label in labels:
            if any(names_operator(label, op.uid, op.operator_id) for op in self.metadata.operators):
                named.append(label)
                continue
            old = next(
                (op for op in original.operators if names_operator(label, op.uid, op.operator_id)), None
            )
            change = None if old is None else changed.get(old.operator_id)
            if change is None:
                named.append(label)  # the plan refuses it as it refuses any unknown operator
            elif change.new_operator_id is None:
                raise InvalidArgumentError(
                    f"--operator {label}: the operator is dropped (--drop)", code="OPERATOR_DROPPED"
                )
            else:
                named.append(change.new_operator_id)
        return tuple(named)


def apply_changes(metadata: CheckpointMetadata, request: MigrationRequest) -> ChangedMetadata:
    """Validate ``request`` against ``metadata`` and return the changed ``_metadata`` (handles as they were).

    What a rescale plans on: its files are all written anew, so no handle needs to move.

    Raises:
        InvalidArgumentError: An option names no operator (``OPERATOR_NOT_IN_SAVEPOINT``), two options name
            the same one (``OPERATOR_CHANGED_TWICE``), an assignment names an operator with a uid
            (``OPERATOR_HAS_UID``), or a new id is another operator's with state (``OPERATOR_ID_TAKEN``);
            all exit 2.
    """
    changes: dict[str, OperatorChange] = {}
    for old, new_uid in request.renames:
        op = _find(metadata, old, "--rename")
        _add(changes, op, RENAME, new_uid)
    for operator_id, uid in request.assignments:
        op = _find(metadata, operator_id, "--assign-uid", by_id_only=True)
        if op.uid is not None:
            raise InvalidArgumentError(
                f"--assign-uid {operator_id}={uid}: operator {op.operator_id} has uid {op.uid!r}; "
                f"use --rename {op.uid}={uid}",
                code="OPERATOR_HAS_UID",
            )
        _add(changes, op, ASSIGN, uid)
    for label in request.drops:
        _add(changes, _find(metadata, label, "--drop"), DROP, None)
    changes = _settle_targets(metadata, changes)
    operators = tuple(
        _changed(op, changes.get(op.operator_id), metadata.version)
        for op in metadata.operators
        if _kept(op, changes)
    )
    order = {op.operator_id: i for i, op in enumerate(metadata.operators)}
    listed = sorted(changes.values(), key=lambda c: order[c.operator_id])
    return ChangedMetadata(tuple(listed), replace(metadata, operators=operators))


def plan_migration(metadata: CheckpointMetadata, request: MigrationRequest) -> MigrationPlan:
    """Validate ``request`` against ``metadata`` and plan the new savepoint (see the module docstring).

    Raises:
        InvalidArgumentError: What ``apply_changes`` refuses (exit 2).
        UnsupportedFormatError: State in file-merging segments (``MIGRATE_SEGMENT_HANDLE``).
    """
    changed = apply_changes(metadata, request)
    relocated, files = _relocate(changed.metadata.operators)
    return MigrationPlan(changed.changes, replace(changed.metadata, operators=relocated), files)


@dataclass(frozen=True, slots=True)
class MigratedSavepoint:
    """An opened savepoint with operator migration applied (``apply_migration``), for a rescale to plan on."""

    savepoint: Savepoint
    changes: tuple[OperatorChange, ...]
    #: The rescale's ``--operator`` labels as they name operators after the changes (None: every operator).
    operators: tuple[str, ...] | None


def require_savepoint_for_migration(request: MigrationRequest | None, label: str) -> None:
    """Refuse migration on a kg snapshot: Flink never reads its manifest (``MIGRATE_KG_SNAPSHOT``, exit 4)."""
    if request is not None and not request.empty:
        raise UnsupportedFormatError(
            f"{label}: a kg snapshot; --rename, --assign-uid and --drop rewrite Flink savepoints and "
            "checkpoints",
            code="MIGRATE_KG_SNAPSHOT",
        )


def apply_migration(
    savepoint: Savepoint, request: MigrationRequest | None, operators: Sequence[str] | None = None
) -> MigratedSavepoint:
    """Apply ``request`` to the opened ``savepoint`` in memory: a rescale's migration, in the rescale's pass.

    Nothing is read: the result has the changed ``_metadata`` and the same state files (a rescale writes
    every file anew), and keeps what ``savepoint`` read already (``Savepoint.with_operators``).

    Raises:
        InvalidArgumentError: What ``apply_changes`` refuses, or an ``--operator`` that names a dropped
            operator (``OPERATOR_DROPPED``); exit 2.
    """
    labels = tuple(operators) if operators else None
    if request is None or request.empty:
        return MigratedSavepoint(savepoint, (), labels)
    changed = apply_changes(savepoint.metadata, request)
    new_ids = {c.operator_id: c.new_operator_id for c in changed.changes}
    replaced = {c.replaces for c in changed.changes if c.replaces is not None}
    ids = {}
    for op in savepoint.metadata.operators:
        new_id = new_ids.get(op.operator_id, op.operator_id)
        if new_id is not None and op.operator_id not in replaced:
            ids[op.operator_id] = new_id
    if labels is not None:
        labels = changed.operator_labels(labels, savepoint.metadata)
    return MigratedSavepoint(savepoint.with_operators(changed.metadata, ids), changed.changes, labels)


def _find(metadata: CheckpointMetadata, label: str, flag: str, *, by_id_only: bool = False) -> OperatorState:
    for op in metadata.operators:
        if (label.lower() == op.operator_id) if by_id_only else names_operator(label, op.uid, op.operator_id):
            return op
    what = "operator id" if by_id_only else "uid or operator id"
    raise InvalidArgumentError(
        f"{flag} {label}: no operator with {what} {label!r} in the savepoint",
        code="OPERATOR_NOT_IN_SAVEPOINT",
    )


def _add(changes: dict[str, OperatorChange], op: OperatorState, action: str, new_uid: str | None) -> None:
    if op.operator_id in changes:
        raise InvalidArgumentError(
            f"operator {op.label} is named by more than one --rename, --assign-uid or --drop",
            code="OPERATOR_CHANGED_TWICE",
        )
    new_id = None if new_uid is None else operator_id_for_uid(new_uid)
    changes[op.operator_id] = OperatorChange(action, op.operator_id, op.uid, new_id, new_uid, op.has_state)


def _settle_targets(
    metadata: CheckpointMetadata, changes: dict[str, OperatorChange]
) -> dict[str, OperatorChange]:
    """Refuse a new id that another kept operator with state has; a stateless one is replaced."""
    moved_away = {c.operator_id for c in changes.values() if c.new_operator_id != c.operator_id}
    by_id = {op.operator_id: op for op in metadata.operators}
    claimed: dict[str, str] = {}
    settled = dict(changes)
    for change in changes.values():
        target = change.new_operator_id
        if target is None:
            continue
        if target in claimed:
            raise InvalidArgumentError(
                f"{change.new_uid!r} is the new uid of both {claimed[target]} and "
                f"{change.uid or change.operator_id}",
                code="OPERATOR_ID_TAKEN",
            )
        claimed[target] = change.uid or change.operator_id
        other = by_id.get(target)
        if other is None or target == change.operator_id or target in moved_away:
            continue
        if other.has_state:
            raise InvalidArgumentError(
                f"{change.uid or change.operator_id} -> {change.new_uid}: operator {other.label} "
                f"({target}) already has state in the savepoint; drop it first (--drop {other.label})",
                code="OPERATOR_ID_TAKEN",
            )
        settled[change.operator_id] = replace(change, replaces=target)
    return settled


def _kept(op: OperatorState, changes: dict[str, OperatorChange]) -> bool:
    change = changes.get(op.operator_id)
    if change is not None:
        return change.action != DROP
    # A stateless entry whose id a renamed operator takes over gives way to it.
    return not any(c.replaces == op.operator_id for c in changes.values())


def _changed(op: OperatorState, change: OperatorChange | None, version: int) -> OperatorState:
    if change is None or change.new_operator_id is None:
        return op
    if version < 5:
        # V3 / V4 record ids only: nothing else to update.
        return replace(op, operator_id=change.new_operator_id)
    # A name that was the old uid (UidJob's, and many jobs' ``.uid(x).name(x)``) follows it.
    name = change.new_uid if op.name is not None and op.name == op.uid else op.name
    return replace(op, operator_id=change.new_operator_id, uid=change.new_uid, name=name)


def _relocate(operators: Sequence[OperatorState]) -> tuple[tuple[OperatorState, ...], tuple[FileCopy, ...]]:
    """Point every file handle of ``operators`` at a file beside the new ``_metadata``; list the copies."""
    copies: dict[FileHandle | RelativeFileHandle, FileCopy] = {}
    taken: dict[str, FileHandle | RelativeFileHandle] = {}

    def relocate(handle: FileHandle | RelativeFileHandle | SegmentFileHandle) -> RelativeFileHandle:
        if isinstance(handle, SegmentFileHandle):
            raise UnsupportedFormatError(
                f"{handle.path}: state in a file-merging segment (execution.checkpointing.file-merging); "
                "kg migrate copies whole files only",
                code="MIGRATE_SEGMENT_HANDLE",
            )
        known = copies.get(handle)
        if known is None:
            known = FileCopy(handle, _target_name(handle, taken), handle.size)
            copies[handle] = known
            taken[known.target] = handle
        return RelativeFileHandle(known.target, handle.size)

    mapped = tuple(_map_handles(op, relocate) for op in operators)
    return mapped, tuple(copies.values())


def _target_name(handle: FileHandle | RelativeFileHandle, taken: dict[str, Any]) -> str:
    if isinstance(handle, RelativeFileHandle):
        return handle.relative_path
    path = PurePosixPath(handle.path.split(":", 1)[-1] if "://" not in handle.path else handle.path)
    # Checkpoint files have random names; a clash (chk-N/x and shared/x) takes its directory's name too.
    for name in (path.name, f"{path.parent.name}-{path.name}"):
        if name not in taken:
            return name
    n = 2
    while f"{path.name}-{n}" in taken:
        n += 1
    return f"{path.name}-{n}"


def _map_handles(value: Any, relocate: Callable[[Any], RelativeFileHandle]) -> Any:
    """Return ``value`` with every file handle in it (at any depth) replaced by ``relocate(handle)``."""
    if isinstance(value, (FileHandle, RelativeFileHandle, SegmentFileHandle)):
        return relocate(value)
    if isinstance(value, tuple):
        return tuple(_map_handles(v, relocate) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
        mapped = {k: _map_handles(v, relocate) for k, v in fields.items()}
        if any(mapped[k] is not fields[k] for k in fields):
            return replace(value, **mapped)
    return value


__all__ = [
    "ASSIGN",
    "DROP",
    "RENAME",
    "ChangedMetadata",
    "FileCopy",
    "MigrationPlan",
    "MigrationRequest",
    "MigratedSavepoint",
    "OperatorChange",
    "apply_changes",
    "apply_migration",
    "parse_pair",
    "plan_migration",
    "require_savepoint_for_migration",
]
