"""A local copy of a kg snapshot on an object store: its manifest, and the files a command needs.

``readable_snapshot(target)`` yields ``target`` itself when it is local, else a scratch directory (removed
afterwards, see ``storage.remote.local_copy``) holding the manifest alone (inspect, check, plan), the
manifest and its operator-state files (plan), or everything it lists (verify, diff, rescale).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path

from keygroup_cli.core.progress import OnProgress
from keygroup_cli.snapshot.manifest import parse_manifest
from keygroup_cli.snapshot.model import MANIFEST_NAME
from keygroup_cli.storage import remote, transfer
from keygroup_cli.storage.locations import Location, is_remote


def is_snapshot_at(target: Location) -> bool:
    """Return whether the remote ``target`` is a kg snapshot (a directory with ``_manifest.json``)."""
    return target.name == MANIFEST_NAME or (target / MANIFEST_NAME).is_file()


def copy_snapshot(
    target: Location,
    local: Path,
    *,
    everything: bool = True,
    operator_state: bool = False,
    on_progress: OnProgress | None = None,
) -> None:
    """Download the kg snapshot at ``target`` (its directory or manifest) into the new directory ``local``.

    Args:
        target: The snapshot's directory or its ``_manifest.json`` on a store.
        local: A local directory to create.
        everything: Every file the manifest lists; else the manifest alone.
        operator_state: Without ``everything``: the operator-state files too (small; a plan counts their
            elements).
        on_progress: ``(stage, done, total)`` as files arrive.

    Raises:
        InvalidInputError: No manifest there, or a listed file is missing.
    """
    if target.name == MANIFEST_NAME:
        target = target.parent
    raw = (target / MANIFEST_NAME).read_bytes()
    manifest = parse_manifest(raw, source=str(target / MANIFEST_NAME))
    local.mkdir(parents=True)
    files = [f.path for op in manifest.operators for f in op.keyed_files] if everything else []
    if everything or operator_state:
        files += [f.path for op in manifest.operators for f in op.operator_files]
    if files:
        transfer.download(target, files, local, on_progress)
    # The manifest goes last, as in a commit: a copy interrupted before it is not a snapshot.
    (local / MANIFEST_NAME).write_bytes(raw)


@contextlib.contextmanager
def readable_snapshot(
    target: str | os.PathLike[str],
    *,
    everything: bool = True,
    operator_state: bool = False,
    on_progress: OnProgress | None = None,
) -> Iterator[str | os.PathLike[str]]:
    """Yield the kg snapshot ``target`` itself when it is local, else a local copy (``copy_snapshot``)."""
    if not is_remote(target):
        yield target
        return
    copy = functools.partial(
        copy_snapshot, everything=everything, operator_state=operator_state, on_progress=on_progress
    )
    with remote.local_copy(str(target), copy) as local:
        yield local


__all__ = ["copy_snapshot", "is_snapshot_at", "readable_snapshot"]
