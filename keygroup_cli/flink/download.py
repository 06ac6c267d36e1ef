"""A local copy of a Flink savepoint or checkpoint on an object store: ``_metadata`` and its state files.

Flink's metadata commands do not need one: they read ``_metadata`` and headers where they are
(``flink.metadata.locate``, ``flink.io``). A command that reads every byte anyway can work on a copy:
``copy_savepoint`` downloads ``_metadata`` and every state file it references, relative or absolute
(absolute object-store paths of a checkpoint's ``shared/`` files are placed beside ``_metadata``, where
kg's handle resolution finds copies).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterator
from pathlib import Path

from keygroup_cli.core.progress import OnProgress
from keygroup_cli.flink.io.stream_handles import FileHandle, SegmentFileHandle
from keygroup_cli.flink.metadata.locate import FlinkCheckpoint, find_metadata, read_metadata_bytes
from keygroup_cli.flink.savepoint import Savepoint, open_savepoint
from keygroup_cli.storage import remote, transfer
from keygroup_cli.storage.containment import contain
from keygroup_cli.storage.locations import Location, is_remote

METADATA = "_metadata"


def copy_savepoint(
    target: Location,
    local: Path,
    *,
    everything: bool = True,
    on_progress: OnProgress | None = None,
    opened: Savepoint | None = None,
) -> None:
    """Download the savepoint, ``chk-N`` or checkpoint root at ``target`` into the new directory ``local``.

    Args:
        target: Anything ``find_metadata`` accepts, on a store.
        local: A local directory to create.
        everything: Every state file too; else ``_metadata`` alone.
        on_progress: ``(stage, done, total)`` as files arrive.
        opened: ``target`` opened already (with the bytes it was read from): ``_metadata`` is written
            from those, not fetched again.

    Raises:
        InvalidInputError: Nothing there, or a referenced file is missing.
    """
    snapshot = opened if opened is not None and opened.raw else None
    metadata = snapshot.metadata_path if snapshot is not None else find_metadata(target)
    directory = metadata.parent
    assert isinstance(directory, Location)
    local.mkdir(parents=True)
    if everything:
        snapshot = snapshot or open_savepoint(metadata)
        inside = [name for name, _size in directory.walk_files() if name != METADATA]
        transfer.download(directory, inside, local, on_progress)
        outside = _absolute_files(snapshot, directory)
        # Beside _metadata, where handle resolution looks for copies of absolute paths.
        for _size in transfer.in_flight(
            lambda uri: outside[uri].download_to(local / Path(uri).name), sorted(outside), ordered=False
        ):
            pass
    raw = snapshot.raw if snapshot is not None else read_metadata_bytes(metadata)
    (local / METADATA).write_bytes(raw)


def _absolute_files(snapshot: FlinkCheckpoint, directory: Location) -> dict[str, Location]:
    """Return the state files a checkpoint names outside its own directory, by URI.

    Each is where ``storage.containment`` resolves it (``..`` normalized; the job's ``shared/`` or a
    prefix named in ``KG_STATE_ROOTS``); one that leads anywhere else is refused.

    Raises:
        InvalidInputError: ``STATE_FILE_OUTSIDE``.
    """
    found: dict[str, Location] = {}
    prefix = directory.uri.rstrip("/") + "/"
    seen: set[int] = set()

    def visit(value: object) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, (FileHandle, SegmentFileHandle)) and "://" in value.path:
            resolved = contain(value.path, directory)
            if isinstance(resolved, Location) and not _same_place(resolved.uri, prefix):
                found[resolved.uri] = resolved
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):
                visit(getattr(value, field.name))
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    visit(snapshot.metadata)
    return found


def _same_place(uri: str, prefix: str) -> bool:
    # s3p://bucket/x and s3://bucket/x name the same object.
    def strip(text: str) -> str:
        return text.split("://", 1)[-1]

    return strip(uri).startswith(strip(prefix))


@contextlib.contextmanager
def readable_savepoint(
    target: str | os.PathLike[str], *, everything: bool = True, on_progress: OnProgress | None = None
) -> Iterator[str | os.PathLike[str]]:
    """Yield the savepoint ``target`` itself when it is local, else a local copy (``copy_savepoint``)."""
    if not is_remote(target):
        yield target
        return
    copy = functools.partial(copy_savepoint, everything=everything, on_progress=on_progress)
    with remote.local_copy(str(target), copy) as local:
        yield local


__all__ = ["copy_savepoint", "readable_savepoint"]
