"""Any input kg reads, a kg snapshot or a Flink savepoint / checkpoint, made local or made a kg snapshot.

- ``readable(target)`` yields ``target`` itself when it is local, else a local copy of it: a kg snapshot's
  (``snapshot.download``) or a savepoint's (``flink.download``), whichever the store holds.
- ``as_snapshot(target)`` yields a local kg snapshot of ``target``: itself, its download, or a savepoint
  decoded into a scratch directory (``from_savepoint``), removed afterwards.
- ``diff_inputs(a, b)`` is ``kg diff``: ``snapshot.diff`` on two inputs of either format.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.flink import Savepoint, copy_savepoint, is_flink_savepoint
from keygroup_cli.snapshot.diff import SnapshotDiff, diff_snapshots
from keygroup_cli.snapshot.download import copy_snapshot, is_snapshot_at
from keygroup_cli.storage import remote
from keygroup_cli.storage.locations import Location, is_remote, location


@contextlib.contextmanager
def readable(
    target: str | os.PathLike[str],
    *,
    everything: bool = True,
    operator_state: bool = False,
    on_progress: OnProgress | None = None,
    opened: Savepoint | None = None,
) -> Iterator[str | os.PathLike[str]]:
    """Yield ``target`` itself when it is local, else a local copy of the snapshot or savepoint there.

    Args:
        target: A kg snapshot, or a Flink savepoint / ``chk-N`` / checkpoint root.
        everything: Every state file too; else only the manifest (kg) or ``_metadata`` (Flink).
        operator_state: Without ``everything``: a kg snapshot's operator-state files too.
        on_progress: ``(stage, done, total)`` as files arrive.
        opened: ``target`` opened already as a savepoint: its ``_metadata`` is not fetched again.

    Raises:
        InvalidInputError: Nothing there, or a listed file is missing.
    """
    if not is_remote(target):
        yield target
        return
    copy: Callable[[Location, Path], None]
    if opened is not None:
        copy = functools.partial(
            copy_savepoint, everything=everything, on_progress=on_progress, opened=opened
        )
    elif is_snapshot_at(location(str(target))):
        copy = functools.partial(
            copy_snapshot, everything=everything, operator_state=operator_state, on_progress=on_progress
        )
    else:
        copy = functools.partial(copy_savepoint, everything=everything, on_progress=on_progress)
    with remote.local_copy(str(target), copy) as local:
        yield local


@contextlib.contextmanager
def as_snapshot(
    target: Path | str, on_progress: OnProgress | None = None
) -> Iterator[str | os.PathLike[str]]:
    """Yield a local kg snapshot of ``target``: itself, its download, or a savepoint's conversion.

    A savepoint or checkpoint (local or remote) is decoded into a kg snapshot in a scratch directory under
    ``$KG_SCRATCH_DIR`` (else the temp directory), removed when the block ends.
    """
    if not is_flink_savepoint(target):
        with readable(target, on_progress=on_progress) as local:
            yield local
        return
    scratch = Path(tempfile.mkdtemp(prefix="kg-diff-", dir=remote.scratch_root()))
    try:
        with readable(target, on_progress=on_progress) as local:
            savepoint_to_snapshot(Path(local), scratch / "snapshot", on_progress=on_progress)
        yield scratch / "snapshot"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def diff_inputs(a: Path | str, b: Path | str, *, on_progress: OnProgress | None = None) -> SnapshotDiff:
    """Compare the logical state of ``a`` and ``b``: kg snapshots, Flink savepoints or checkpoints.

    Each is made a local kg snapshot first (``as_snapshot``), so both are compared through the same Arrow
    rows (``snapshot.diff``).

    Raises:
        InvalidInputError: Either input cannot be opened or read (a savepoint's entries included).
        UnsupportedFormatError: An unknown ``format_version``, or a savepoint layout kg does not read.
        MissingDependencyError: A RocksDB layout without the binding that reads it.
    """
    with as_snapshot(a, on_progress) as local_a, as_snapshot(b, on_progress) as local_b:
        result = diff_snapshots(local_a, local_b, on_progress=on_progress)
    return replace(result, a=result.a if local_a == a else str(a), b=result.b if local_b == b else str(b))


__all__ = ["as_snapshot", "diff_inputs", "readable"]
