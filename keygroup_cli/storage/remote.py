"""Run kg's file-based work on object stores: local copies of remote inputs, remote outputs committed last.

- ``local_copy(uri, everything=...)`` downloads what a command needs into a scratch directory that is
  removed afterwards: a kg snapshot's manifest alone (inspect, check, plan) or the manifest and every file
  it lists (verify, diff, rescale); a Flink savepoint's or checkpoint's ``_metadata`` and every state
  file it references, relative or absolute (absolute object-store paths of a checkpoint's ``shared/``
  files are placed beside ``_metadata``, where kg's handle resolution finds copies). Flink metadata
  commands do not use it: they read ``_metadata`` and headers where they are (``keygroup_cli.flink``).
- ``remote_output(uri, commit_file)`` gives a local staging directory for a command's output and, when
  the command has committed it there (verified), uploads it with ``transfer.commit_upload``: every state
  file first, each checked, then ``commit_file`` last. The target must hold no object beforehand.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from keygroup_cli.errors import InvalidSnapshotError
from keygroup_cli.storage import transfer
from keygroup_cli.storage.locations import Location, is_remote, location

MANIFEST = "_manifest.json"
METADATA = "_metadata"

OnProgress = Callable[[str, int, "int | None"], None]


def scratch_root() -> Path:
    """Return where downloads and staged outputs go: ``$KG_SCRATCH_DIR``, else the temp directory."""
    return Path(os.environ.get("KG_SCRATCH_DIR") or tempfile.gettempdir())


def is_kg_snapshot_at(target: Location) -> bool:
    """Return whether the remote ``target`` is a kg snapshot (a directory with ``_manifest.json``)."""
    return target.name == MANIFEST or (target / MANIFEST).is_file()


@contextlib.contextmanager
def local_copy(
    target: str | Location,
    *,
    everything: bool = True,
    operator_state: bool = False,
    on_progress: OnProgress | None = None,
) -> Iterator[Path]:
    """Yield a local directory holding a copy of the remote snapshot or savepoint ``target``.

    Args:
        target: A kg snapshot directory or a Flink savepoint / ``chk-N`` / checkpoint root on a store.
        everything: Every state file too; else only the manifest (kg) or ``_metadata`` (Flink).
        operator_state: Without ``everything``: a kg snapshot's operator-state files too (small; a plan
            counts their elements).
        on_progress: ``(stage, done, total)`` as files arrive.

    Raises:
        InvalidSnapshotError: Nothing there, or a listed file is missing.
    """
    remote = location(target)
    scratch = Path(tempfile.mkdtemp(prefix="kg-download-", dir=scratch_root()))
    try:
        local = scratch / (remote.name or "input")
        if remote.name == MANIFEST:
            remote = remote.parent
        if is_kg_snapshot_at(remote):
            _copy_kg(remote, local, everything, operator_state, on_progress)
        else:
            _copy_flink(remote, local, everything, on_progress)
        yield local
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _copy_kg(
    remote: Location, local: Path, everything: bool, operator_state: bool, on_progress: OnProgress | None
) -> None:
    from keygroup_cli.snapshot.manifest import parse_manifest

    raw = (remote / MANIFEST).read_bytes()
    manifest = parse_manifest(raw, source=str(remote / MANIFEST))
    local.mkdir(parents=True)
    files = [f.path for op in manifest.operators for f in op.keyed_files] if everything else []
    if everything or operator_state:
        files += [f.path for op in manifest.operators for f in op.operator_files]
    if files:
        transfer.download(remote, files, local, on_progress)
    # The manifest goes last, as in a commit: a copy interrupted before it is not a snapshot.
    (local / MANIFEST).write_bytes(raw)


def _copy_flink(remote: Location, local: Path, everything: bool, on_progress: OnProgress | None) -> None:
    from keygroup_cli.flink.metadata.locate import find_metadata, read_flink_metadata

    metadata = find_metadata(remote)
    directory = metadata.parent
    assert isinstance(directory, Location)
    local.mkdir(parents=True)
    if everything:
        snapshot = read_flink_metadata(metadata)
        inside = [name for name, _size in directory.walk_files() if name != METADATA]
        transfer.download(directory, inside, local, on_progress)
        outside = sorted(_absolute_files(snapshot, directory))
        # Beside _metadata, where handle resolution looks for copies of absolute paths.
        for _size in transfer.in_flight(
            lambda uri: location(uri).download_to(local / Path(uri).name), outside, ordered=False
        ):
            pass
    (local / METADATA).write_bytes(metadata.read_bytes())


def _absolute_files(snapshot: object, directory: Location) -> set[str]:
    """Return the object-store URIs of state files a checkpoint names outside its own directory."""
    import dataclasses

    from keygroup_cli.flink.metadata import handles as h

    found: set[str] = set()
    prefix = directory.uri.rstrip("/") + "/"
    seen: set[int] = set()

    def visit(value: object) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, (h.FileHandle, h.SegmentFileHandle)):
            if "://" in value.path and not _same_place(value.path, prefix):
                found.add(value.path)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):
                visit(getattr(value, field.name))
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    visit(snapshot.metadata)  # type: ignore[attr-defined]
    return found


def _same_place(uri: str, prefix: str) -> bool:
    # s3p://bucket/x and s3://bucket/x name the same object.
    def strip(text: str) -> str:
        return text.split("://", 1)[-1]

    return strip(uri).startswith(strip(prefix))


@contextlib.contextmanager
def readable(
    target: str | os.PathLike[str],
    *,
    everything: bool = True,
    operator_state: bool = False,
    on_progress: OnProgress | None = None,
) -> Iterator[str | os.PathLike[str]]:
    """Yield ``target`` itself when it is local, else a local copy of it (see ``local_copy``)."""
    if not is_remote(target):
        yield target
        return
    with local_copy(
        str(target), everything=everything, operator_state=operator_state, on_progress=on_progress
    ) as local:
        yield local


@contextlib.contextmanager
def remote_output(
    target: str | Location, commit_file: str, on_progress: OnProgress | None = None
) -> Iterator[Path]:
    """Yield a local path for a command to commit its output at; then upload it, ``commit_file`` last.

    The target prefix must hold no object (checked before the command runs, so a refusal writes
    nothing). If the command fails, nothing is uploaded; if the upload fails, what was written is deleted
    where possible, and there is no ``commit_file`` at the target in any case.

    Raises:
        InvalidArgumentError: The target holds objects already.
        ExecutionError: The upload failed.
    """
    remote = location(target)
    transfer.require_empty(remote, commit_file)
    scratch = Path(tempfile.mkdtemp(prefix="kg-upload-", dir=scratch_root()))
    try:
        local = scratch / (remote.name or "output")
        yield local
        if not (local / commit_file).is_file():
            raise InvalidSnapshotError(f"{local}: nothing was committed to upload", code="UPLOAD_FAILED")
        transfer.commit_upload(local, remote, commit_file, on_progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


__all__ = ["is_kg_snapshot_at", "local_copy", "readable", "remote_output", "scratch_root"]
