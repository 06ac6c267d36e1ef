"""The files a Flink ``_metadata`` names, checked without reading them: ``kg check``'s gate.

``state_file_findings`` confirms that every file ``_metadata`` references exists, is a regular file kg
can open and has the size its handles need, and that every key-group and operator-state offset lies
inside its stream. That is one ``stat`` (and one ``open``) per local file and one listing per object-store
prefix; no state byte is read, and neither pyarrow nor numpy is imported (``kg check`` stays light). The
deep walk (``flink.check.verify``) uses the same size and offset checks, so both word a problem alike and
``kg check --deep`` reports it once.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.flink.io.paths import handle_reference, local_path
from keygroup_cli.flink.io.stream_handles import (
    ByteStreamHandle,
    EmptySegmentFileHandle,
    KeyGroupsHandle,
    SegmentFileHandle,
    StreamHandle,
    stream_size,
)
from keygroup_cli.flink.metadata import handles as h
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import FlinkCheckpoint
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, SubtaskState
from keygroup_cli.storage.containment import contain, input_roots
from keygroup_cli.storage.locations import Location


def size_finding(delegate: StreamHandle | None, size: int, where: str, subject: str) -> Finding | None:
    """``FLINK_STATE_FILE_SIZE`` if a stream's bytes differ from its handle's."""
    recorded = stream_size(delegate)
    if recorded == size:
        return None
    return _finding("FLINK_STATE_FILE_SIZE", subject, f"{where}: {size} bytes, its handle records {recorded}")


def offsets_finding(
    handle: KeyGroupsHandle | OperatorStateHandle, size: int, where: str, subject: str
) -> Finding | None:
    """The first offset outside a stream of ``size`` bytes, as a finding.

    A key group's block starts inside the stream (``FLINK_KEY_GROUP_OFFSETS``; offset 0 is "no data");
    an operator-state element starts after the header, at most at the end (``FLINK_OPERATOR_STATE_CORRUPT``).
    """
    if isinstance(handle, KeyGroupsHandle):
        for i, off in enumerate(handle.offsets):
            if off != 0 and not 0 < off < size:
                return _finding(
                    "FLINK_KEY_GROUP_OFFSETS",
                    subject,
                    f"{where}: key group {handle.key_group_start + i} at offset {off} is outside the stream "
                    f"({size} bytes)",
                )
        return None
    bad = [o for e in handle.states for o in e.offsets if not 0 < o <= size]
    if not bad:
        return None
    return _finding(
        "FLINK_OPERATOR_STATE_CORRUPT",
        subject,
        f"{where}: element offset {bad[0]} outside the stream ({size} bytes)",
    )


def state_file_findings(savepoint: FlinkCheckpoint) -> list[Finding]:
    """Check every file ``_metadata`` references without reading it: ``kg check``'s gate.

    Each file must exist, be a regular file kg can open, and have the size its handle records (a segment:
    ``start + size`` within its file), and every key-group and operator-state offset must lie inside its
    stream: what ``kg inspect``, ``kg verify`` and ``kg rescale`` refuse, Flink's restore fails on too.
    Locally that is one ``stat`` (and one ``open``) per file; on an object store one listing per prefix
    (readability cannot be known there before a read). Keyed, operator-state and unaligned-checkpoint
    channel-state handles are checked, nested changelog and RocksDB (shared, private, metadata) files too.

    Returns:
        ``FLINK_STATE_FILE_MISSING``, ``FLINK_STATE_FILE_UNREADABLE``, ``FLINK_STATE_FILE_SIZE``,
        ``FLINK_KEY_GROUP_OFFSETS`` and ``FLINK_OPERATOR_STATE_CORRUPT`` errors, worded as ``verify_flink``
        words them; ``FLINK_NOT_VERIFIED`` warnings for files on a file system kg cannot reach.
    """
    sizes = _FileSizes()
    findings: dict[Finding, None] = {}  # a file several handles share is reported once per subtask
    for op in savepoint.metadata.operators:
        for sub in op.subtasks:
            subject = f"{op.label} subtask {sub.index}"
            for owner, stream in _streams(sub):
                findings.update(
                    dict.fromkeys(_stream_findings(owner, stream, savepoint.directory, sizes, subject))
                )
    return list(findings)


def contain_references(metadata: CheckpointMetadata, directory: Path | Location) -> None:
    """Judge every file ``_metadata`` names by the input's roots (``storage.containment``), opening none.

    Run when a savepoint or checkpoint is opened, so that every command refuses an input that names a
    file outside it alike, whether or not that command would read the file.

    Raises:
        InvalidInputError: ``STATE_FILE_OUTSIDE``, for the first reference that leads outside.
    """
    roots = input_roots(directory)
    for op in metadata.operators:
        for sub in op.subtasks:
            for _owner, stream in _streams(sub):
                reference = handle_reference(stream)
                if reference is None:
                    continue
                try:
                    contain(reference[0], directory, relative=reference[1], roots=roots, locate=False)
                except UnsupportedFormatError:
                    continue  # a file system kg does not know: reported by whatever reads the file


def state_references(metadata: CheckpointMetadata) -> Iterator[tuple[str, bool]]:
    """Yield every file reference ``_metadata`` holds, as ``(reference, relative)``: what ``kg gc`` keeps.

    Every stream of every subtask (keyed, operator, channel state; RocksDB shared, private and metadata
    files; changelog files; file-merging segments, whose whole physical file is named); inline and empty
    handles name no file. ``relative`` is True for a path relative to the ``_metadata``'s directory.

    Raises:
        UnsupportedFormatError: A stream handle kg does not know (``UNSUPPORTED_HANDLE``): a caller that
            decides what may be deleted must not guess.
    """
    for op in metadata.operators:
        for sub in op.subtasks:
            for _owner, stream in _streams(sub):
                while isinstance(stream, KeyGroupsHandle):
                    stream = stream.delegate
                if stream is None or isinstance(stream, (ByteStreamHandle, EmptySegmentFileHandle)):
                    continue
                reference = handle_reference(stream)
                if reference is None:
                    raise UnsupportedFormatError(
                        f"{op.label} subtask {sub.index}: a state handle kg does not know "
                        f"({type(stream).__name__})",
                        code="UNSUPPORTED_HANDLE",
                    )
                yield reference


_Owner = KeyGroupsHandle | OperatorStateHandle | str | None

#: The owner of a changelog backend's file: Flink's handle of one can record fewer bytes than the file has
#: (a real Flink 2.3 changelog checkpoint: 8,786 recorded, 8,787 on disk), so only a shorter file is wrong.
_CHANGELOG = "changelog"


def _streams(sub: SubtaskState) -> Iterator[tuple[_Owner, StreamHandle | None]]:
    """Yield every stream handle of a subtask, each with the handle whose offsets point into it."""
    for op_handle in (sub.managed_operator_state, sub.raw_operator_state):
        if op_handle is not None:
            yield op_handle, op_handle.delegate
    for keyed in (sub.managed_keyed_state, sub.raw_keyed_state):
        yield from _keyed_streams(keyed)
    for channel in (*sub.input_channel_state, *sub.result_subpartition_state):
        yield None, channel.delegate


def _keyed_streams(keyed: h.KeyedHandle | None) -> Iterator[tuple[_Owner, StreamHandle | None]]:
    if isinstance(keyed, KeyGroupsHandle):
        yield keyed, keyed.delegate
    elif isinstance(keyed, h.IncrementalKeyedHandle):
        yield None, keyed.metadata
        for file in (*keyed.shared, *keyed.private):
            yield None, file.handle
    elif isinstance(keyed, h.ChangelogBackendHandle):
        for nested in (*keyed.materialized, *keyed.non_materialized):
            yield from _keyed_streams(nested)
    elif isinstance(keyed, h.ChangelogStreamHandle):
        for _offset, stream in keyed.handles:
            yield _CHANGELOG, stream


def _stream_findings(
    owner: _Owner,
    stream: StreamHandle | None,
    directory: Path | Location,
    sizes: _FileSizes,
    subject: str,
) -> list[Finding]:
    while isinstance(stream, KeyGroupsHandle):  # a legacy key-groups handle nested as a stream handle
        owner, stream = stream, stream.delegate
    if stream is None or isinstance(stream, EmptySegmentFileHandle):
        size = 0
        where = "<empty>"
    elif isinstance(stream, ByteStreamHandle):
        size = stream.size
        where = f"inline state {stream.handle_name}"
    else:
        try:
            path = local_path(stream, directory)
        except UnsupportedFormatError as exc:
            return [_finding("FLINK_NOT_VERIFIED", subject, exc.message, severity=Severity.WARNING)]
        except InvalidInputError as exc:  # a handle leading outside the savepoint
            return [_finding("FLINK_STATE_FILE_UNREADABLE", subject, exc.message)]
        assert path is not None  # only inline and empty handles have none
        where = str(path)
        total = sizes.size_of(path)
        if isinstance(total, tuple):
            return [_finding(total[0], subject, total[1])]
        size = total
        if isinstance(stream, SegmentFileHandle):
            # As StreamSource reads a segment: the part of [start, start + size) the file holds.
            size = max(0, min(stream.size, total - min(max(stream.start_pos, 0), total)))
    if owner == _CHANGELOG:
        short = size < stream_size(stream)
        return [f for f in [size_finding(stream, size, where, subject)] if f is not None and short]
    found = [size_finding(stream, size, where, subject)]
    if owner is not None and not isinstance(owner, str):
        found.append(offsets_finding(owner, size, where, subject))
    return [f for f in found if f is not None]


#: Why a state file has no size: a finding code and its message.
_Problem = tuple[str, str]


class _FileSizes:
    """Each state file's size, or why it has none: one look per local file, one listing per prefix."""

    def __init__(self) -> None:
        self._local: dict[Path, int | _Problem] = {}
        self._listings: dict[str, dict[str, int]] = {}

    def size_of(self, path: Path | Location) -> int | _Problem:
        if isinstance(path, Location):
            if path.local_path is None:
                return self._remote(path)
            path = path.local_path
        if path not in self._local:
            self._local[path] = _local_size(path)
        return self._local[path]

    def _remote(self, path: Location) -> int | _Problem:
        parent = path.parent
        if parent.uri not in self._listings:
            # Direct children are what this needs; a recursive listing of a prefix is one listing too.
            self._listings[parent.uri] = dict(parent.walk_files())
        size = self._listings[parent.uri].get(path.name)
        if size is None:
            return "FLINK_STATE_FILE_MISSING", f"{path}: state file is missing"
        return size


def _local_size(path: Path) -> int | _Problem:
    """Return the size of a local state file kg can open, else why not (worded as ``StreamSource``'s)."""
    unreadable = "FLINK_STATE_FILE_UNREADABLE"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "FLINK_STATE_FILE_MISSING", f"{path}: state file is missing"
    except OSError as exc:
        return unreadable, f"{path}: cannot read state file: {exc.strerror}"
    if not stat.S_ISREG(info.st_mode):
        why = os.strerror(errno.EISDIR) if stat.S_ISDIR(info.st_mode) else "not a regular file"
        return unreadable, f"{path}: cannot read state file: {why}"
    try:
        # Permissions, ACLs: only opening tells (root opens a chmod 000 file, as a Flink run as root would).
        os.close(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)))
    except OSError as exc:
        return unreadable, f"{path}: cannot read state file: {exc.strerror}"
    return info.st_size


def _finding(code: str, subject: str, message: str, *, severity: Severity = Severity.ERROR) -> Finding:
    return Finding(code, severity, subject, message)


__all__ = ["offsets_finding", "size_finding", "state_file_findings", "state_references"]
