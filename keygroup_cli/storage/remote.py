"""Run kg's file-based work on object stores: local copies of remote inputs, remote outputs committed last.

- ``local_copy(uri, copy)`` downloads what a command needs into a scratch directory that is removed
  afterwards. What that is depends on the format, which this package does not know: ``copy`` decides
  (``snapshot.download`` for a kg snapshot, ``flink.download`` for a savepoint or checkpoint;
  ``convert.inputs.readable`` tells them apart).
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

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.storage import transfer
from keygroup_cli.storage.locations import Location, location


def scratch_root() -> Path:
    """Return where downloads and staged outputs go: ``$KG_SCRATCH_DIR``, else the temp directory."""
    return Path(os.environ.get("KG_SCRATCH_DIR") or tempfile.gettempdir())


@contextlib.contextmanager
def local_copy(target: str | Location, copy: Callable[[Location, Path], None]) -> Iterator[Path]:
    """Yield a local directory into which ``copy(remote, local)`` downloaded what a command needs.

    ``local`` is a directory for ``copy`` to create, named like ``target``, in a scratch directory under
    ``scratch_root()`` that is removed afterwards, whatever happens. Which files ``copy`` fetches is the
    format's business: ``snapshot.download.copy_snapshot``, ``flink.download.copy_savepoint``.
    """
    remote = location(target)
    scratch = Path(tempfile.mkdtemp(prefix="kg-download-", dir=scratch_root()))
    try:
        local = scratch / (remote.name or "input")
        copy(remote, local)
        yield local
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
            raise InvalidInputError(f"{local}: nothing was committed to upload", code="UPLOAD_FAILED")
        transfer.commit_upload(local, remote, commit_file, on_progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


__all__ = ["local_copy", "remote_output", "scratch_root"]
