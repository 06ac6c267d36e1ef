"""Run ``kg migrate``: open, plan (``planning.migration.plan_migration``), gate, copy, commit.

The spine of every write: ``open_savepoint`` reads ``_metadata`` once; the plan is complete before anything
is written; nothing is written from an input ``kg verify`` rejects; then the state files the kept
operators name are copied as bytes, each checked against the size its handle records, and ``_metadata``
is written last, after it was encoded once and parsed back. The input is only read, and read once.

- A local DEST: files are copied into a staging directory beside it (a file whose size is not its
  handle's fails the input), ``flink.write.commit.seal_savepoint`` writes ``_metadata`` there, and the staged
  savepoint (the input's state files byte for byte, the new ``_metadata``) is verified as ``kg verify``
  does before ``storage.staging`` renames it into place. Every header, operator-state stream and block
  is checked in the copies just written, not by a second read of the input (nor a first read of a
  dropped operator's files); a finding fails the input, named by its own files.
- An object-store DEST: a server-side copy never passes through this machine, so the whole input is
  verified first (``assess.integrity.require_intact``, one read). Files then go straight to the prefix (which
  must be empty), under kg's writer mark: copied server-side when the input is on the same store (S3
  ``CopyObject``), uploaded otherwise; ``flink.write.commit.seal_in_place`` writes ``_metadata`` last. On any
  failure what was written is deleted.

Damage in the input is exit 3 (``InvalidInputError``, ``INPUT_FAILS_VERIFY`` or the reader's own code);
exit 5 (``ExecutionError``) is left to writing that fails.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from keygroup_cli.assess.integrity import require_intact, verify_input
from keygroup_cli.assess.summary import is_kg_snapshot
from keygroup_cli.core.errors import ExecutionError, InvalidInputError, KgError, UnsupportedFormatError
from keygroup_cli.core.findings import fails_verify_error, first_error
from keygroup_cli.core.progress import OnProgress, no_progress, staged
from keygroup_cli.flink import Savepoint, local_path, open_savepoint, seal_in_place, seal_savepoint
from keygroup_cli.planning.migration import FileCopy, MigrationPlan, MigrationRequest, plan_migration
from keygroup_cli.storage import transfer
from keygroup_cli.storage.locations import Location, is_remote, location
from keygroup_cli.storage.remote import scratch_root
from keygroup_cli.storage.staging import require_absent, require_outside_input, staged_directory

#: How state files reached DEST (``MigrationResult.copy_mode``).
LOCAL_COPY = "copied locally"
SERVER_SIDE = "copied server-side"
UPLOADED = "uploaded"
METADATA = "_metadata"


@dataclass(frozen=True)
class MigrationResult:
    """What ``run_migration`` planned and, unless a dry run, committed."""

    source: str
    destination: str
    checkpoint_id: int
    plan: MigrationPlan
    dry_run: bool
    #: How the files reached DEST: ``LOCAL_COPY``, ``SERVER_SIDE``, ``UPLOADED`` or both of the last two.
    copy_mode: str
    wall_seconds: float


def run_migration(
    source: str | Path,
    dest: str | Path,
    request: MigrationRequest,
    *,
    dry_run: bool = False,
    on_progress: OnProgress | None = None,
) -> MigrationResult:
    """Apply ``request`` to the savepoint or checkpoint ``source`` and commit the result at ``dest``.

    Raises:
        InvalidArgumentError: A change the savepoint refuses (``planning.migration.plan_migration``), or DEST
        exists,
            holds objects, or lies inside the input; nothing written.
        InvalidInputError: Not a savepoint or checkpoint, a state file is missing, or the input fails
            ``kg verify`` (``INPUT_FAILS_VERIFY``); nothing written.
        UnsupportedFormatError: A kg snapshot (``MIGRATE_KG_SNAPSHOT``), or state in file-merging segments.
        ExecutionError: A copy or the output's verification failed; nothing committed.
    """
    started = time.monotonic()
    if not is_remote(source):
        source = Path(source).absolute()
    if not is_remote(dest):
        dest = Path(dest).absolute()
    require_outside_input(source, dest)
    remote = location(str(dest)) if is_remote(dest) else None
    if remote is not None:
        transfer.require_empty(remote, METADATA)
    else:
        require_absent(Path(dest))
    if is_kg_snapshot(source):
        # A kg snapshot names operators in its manifest; Flink never reads it: migrate the savepoint.
        raise UnsupportedFormatError(
            f"{source}: a kg snapshot; kg migrate rewrites Flink savepoints and checkpoints",
            code="MIGRATE_KG_SNAPSHOT",
        )
    savepoint = open_savepoint(source)
    plan = plan_migration(savepoint.metadata, request)
    mode = _mode(savepoint, plan, remote)
    if not dry_run:
        report = on_progress or no_progress
        label = str(source)
        if remote is None:
            _commit_local(savepoint, plan, Path(dest), report, label)
        else:
            require_intact(savepoint, label=label, on_progress=staged(report, "verify input"))
            _commit_remote(savepoint, plan, remote, report, label)
    return MigrationResult(
        str(source),
        str(dest),
        savepoint.metadata.checkpoint_id,
        plan,
        dry_run,
        mode,
        time.monotonic() - started,
    )


def _mode(savepoint: Savepoint, plan: MigrationPlan, remote: Location | None) -> str:
    if remote is None:
        return LOCAL_COPY
    modes = {SERVER_SIDE if _server_side(_source(savepoint, f), remote) else UPLOADED for f in plan.files}
    return " and ".join(sorted(modes, reverse=True)) or SERVER_SIDE


def _source(savepoint: Savepoint, copy: FileCopy) -> Path | Location:
    found = local_path(copy.source, savepoint.directory)
    assert found is not None, "the plan lists file handles only"
    return found


def _server_side(source: Path | Location, remote: Location) -> bool:
    return isinstance(source, Location) and not source.is_local and source.same_store(remote)


def _commit_local(
    savepoint: Savepoint, plan: MigrationPlan, dest: Path, report: OnProgress, label: str
) -> None:
    """Copy every planned file into staging, seal ``_metadata``, verify, rename the staging into place."""
    with staged_directory(dest) as staging:
        total = len(plan.files)
        report("copy state files", 0, total)
        for done, copy in enumerate(plan.files, 1):
            source = _existing(savepoint, copy)
            target = staging / copy.target
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, Location):
                written = source.download_to(target)
            else:
                shutil.copyfile(source, target)
                written = target.stat().st_size
            _require_recorded_size(source, written, copy, label)
            report("copy state files", done, total)
        seal_savepoint(
            staging,
            plan.metadata,
            verify=lambda staged: _require_staged_intact(savepoint, plan, staged, label, report),
        )


def _require_staged_intact(
    savepoint: Savepoint, plan: MigrationPlan, staging: Path, label: str, report: OnProgress
) -> None:
    """Verify the staged copy as ``kg verify`` would; a finding fails the input its bytes came from.

    The findings name the staged files; the message names the input's files instead.

    Raises:
        InvalidInputError: ``INPUT_FAILS_VERIFY``, the first error finding in one line.
    """
    problem = first_error(verify_input(staging, on_progress=staged(report, "verify")).findings)
    if problem is None:
        return
    for copy in plan.files:
        problem = problem.replace(str(staging / copy.target), str(_source(savepoint, copy)))
    problem = problem.replace(str(staging), str(savepoint.directory))
    raise fails_verify_error(label, problem)


def _commit_remote(
    savepoint: Savepoint, plan: MigrationPlan, remote: Location, report: OnProgress, label: str
) -> None:
    """Copy every planned file to the empty prefix ``remote`` (server-side if it can), ``_metadata`` last."""
    written: list[str] = []

    def put(copy: FileCopy) -> None:
        source = _existing(savepoint, copy)
        target = remote / copy.target
        written.append(copy.target)
        if _server_side(source, remote):
            assert isinstance(source, Location)
            transfer.retrying(lambda: source.copy_to(target), str(target))
        elif isinstance(source, Location):
            # Another store: through a local file (a file at a time).
            with tempfile.TemporaryDirectory(dir=scratch_root()) as tmp:
                local = Path(tmp) / "state"
                source.download_to(local)
                transfer.retrying(lambda: target.upload_from(local), str(target))
        else:
            transfer.retrying(lambda: target.upload_from(source), str(target))
        _require_recorded_size(source, transfer.retrying(target.size, str(target)), copy, label)

    total = len(plan.files)
    report("copy state files", 0, total)
    try:
        transfer.mark_writer(remote)
        for done, _ in enumerate(transfer.in_flight(put, plan.files, ordered=False), 1):
            report("copy state files", done, total)
        seal_in_place(remote, plan.metadata)
    except BaseException:
        transfer.remove_written(remote, written)
        raise
    with contextlib.suppress(KgError, OSError):
        (remote / transfer.WRITER_MARK).delete()


def _existing(savepoint: Savepoint, copy: FileCopy) -> Path | Location:
    source = _source(savepoint, copy)
    if not source.is_file():
        raise InvalidInputError(
            f"{source}: state file is missing (named in {savepoint.metadata_path})", code="FILE_MISSING"
        )
    return source


def _require_recorded_size(source: Path | Location, written: int, copy: FileCopy, label: str) -> None:
    """Refuse a copy of other than the size its handle records: the input's fault if the file has it."""
    if written == copy.size:
        return
    actual = source.stat().st_size if isinstance(source, Path) else source.size()
    if actual != copy.size:
        # kg verify's FLINK_STATE_FILE_SIZE: the input's file is not what its _metadata says.
        raise fails_verify_error(
            label, f"FLINK_STATE_FILE_SIZE: {source}: {actual} bytes, its handle records {copy.size}"
        )
    raise ExecutionError(
        f"{source}: {written} bytes copied, its handle records {copy.size}; nothing was committed",
        code="OUTPUT_VERIFICATION_FAILED",
    )


__all__ = ["LOCAL_COPY", "SERVER_SIDE", "UPLOADED", "MigrationResult", "run_migration"]
