"""Run an operator surgery (``kg migrate``): open once, plan (``migration.plan_migration``), copy, commit.

The spine of every write: ``open_savepoint`` reads ``_metadata`` once; the plan is complete before anything
is staged; the state files the kept operators name are copied as bytes into a staging directory beside
DEST (each checked against the size its handle records); ``flink.commit.seal_savepoint`` encodes the new
``_metadata`` once, parses it back, checks every handle against the copied files, decodes every
operator-state stream of the output and writes ``_metadata`` last; ``storage.staging`` renames the staging
directory into place. An object-store DEST is committed locally first and uploaded with ``_metadata``
last (``storage.remote.remote_output``); files are copied through this machine, not server-side. The
input is only read.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from keygroup_cli.errors import ExecutionError, InvalidSnapshotError
from keygroup_cli.flink.commit import seal_savepoint
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.savepoint import Savepoint, open_savepoint
from keygroup_cli.migration import MigrationPlan, MigrationRequest, plan_migration
from keygroup_cli.storage.locations import Location, is_remote
from keygroup_cli.storage.remote import remote_output
from keygroup_cli.storage.staging import refuse_existing, refuse_inside_input, staged_directory
from keygroup_cli.storage.transfer import OnProgress

#: How state files reach DEST (reported by ``kg migrate``).
LOCAL_COPY = "local copy"
UPLOAD = "copied through this machine, _metadata uploaded last"


@dataclass(frozen=True)
class MigrationResult:
    """What ``run_migration`` planned and, unless a dry run, committed."""

    source: str
    destination: str
    checkpoint_id: int
    plan: MigrationPlan
    dry_run: bool
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
        InvalidArgumentError: A change the savepoint refuses (``migration.plan_migration``), or DEST exists
            or lies inside the input; nothing written.
        InvalidSnapshotError: A state file is missing or not of its recorded size; nothing committed.
        ExecutionError: The output failed its verification; nothing committed.
    """
    started = time.monotonic()
    if not is_remote(source):
        source = Path(source).absolute()
    if not is_remote(dest):
        dest = Path(dest).absolute()
    refuse_inside_input(source, dest)
    if not is_remote(dest) and not dry_run:
        refuse_existing(Path(dest))
    savepoint = open_savepoint(source)
    plan = plan_migration(savepoint.metadata, request)
    mode = UPLOAD if is_remote(dest) else LOCAL_COPY
    if not dry_run:
        with _output(dest, on_progress) as local:
            _commit(savepoint, plan, local, on_progress)
    return MigrationResult(
        str(source),
        str(dest),
        savepoint.metadata.checkpoint_id,
        plan,
        dry_run,
        mode,
        time.monotonic() - started,
    )


@contextlib.contextmanager
def _output(dest: str | Path, on_progress: OnProgress | None) -> Iterator[Path]:
    if is_remote(dest):
        with remote_output(str(dest), "_metadata", on_progress) as local:
            yield local
    else:
        yield Path(dest)


def _commit(savepoint: Savepoint, plan: MigrationPlan, dest: Path, on_progress: OnProgress | None) -> None:
    """Copy every planned file into staging, seal ``_metadata`` last, rename the staging into place."""
    report = on_progress or _ignore
    with staged_directory(dest) as staging:
        total = len(plan.files)
        report("copy state files", 0, total)
        for done, copy in enumerate(plan.files, 1):
            source = local_path(copy.source, savepoint.directory)
            assert source is not None, "the plan lists file handles only"
            target = staging / copy.target
            target.parent.mkdir(parents=True, exist_ok=True)
            if not source.is_file():
                raise InvalidSnapshotError(
                    f"{source}: state file is missing (operator state named in {savepoint.metadata_path})",
                    code="FILE_MISSING",
                )
            if isinstance(source, Location):
                written = source.download_to(target)
            else:
                shutil.copyfile(source, target)
                written = target.stat().st_size
            if written != copy.size:
                raise ExecutionError(
                    f"{source}: {written} bytes copied, its handle records {copy.size}; nothing was committed",
                    code="OUTPUT_VERIFICATION_FAILED",
                )
            report("copy state files", done, total)
        seal_savepoint(staging, plan.metadata)


def _ignore(_stage: str, _completed: int, _total: int | None) -> None:
    pass


__all__ = ["LOCAL_COPY", "UPLOAD", "MigrationResult", "run_migration"]
