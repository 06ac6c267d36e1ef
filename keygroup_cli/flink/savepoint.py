"""Open a Flink savepoint or checkpoint once: ``open_savepoint(path) -> Savepoint``.

A ``Savepoint`` is the one object every command that reads a savepoint works on. It holds the parsed
``_metadata`` (read from storage once), and, the first time they are asked for, each keyed file's raw and
parsed header (``keyed_streams``) and each operator-state stream's header, check findings and decoded rows
(``operator_streams``). Each is read from storage once and then kept: nothing on the rescale path reads a
header or decodes an operator-state stream a second time. The object is immutable; the two lazily read
parts are computed at most once per object (``functools.cached_property``).

Keyed headers are read only for the canonical layout: a heap or RocksDB layout is first rewritten as a
canonical view (``flink.layouts``), and that view is opened with ``Savepoint.of``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.findings import Finding
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.header import KeyedStateHeader, read_keyed_header
from keygroup_cli.flink.keyed.layout import KeyedLayout
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import (
    FlinkCheckpoint,
    find_metadata,
    flink_metadata_file,
    read_metadata_bytes,
)
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, parse_metadata
from keygroup_cli.flink.metadata.state_files import contain_references
from keygroup_cli.flink.operator.header import OperatorStateHeader
from keygroup_cli.storage.locations import Location

if TYPE_CHECKING:
    import pyarrow as pa

    from keygroup_cli.flink.operator.streams import OperatorStreamCheck


@dataclass(frozen=True, slots=True)
class KeyedStream:
    """One subtask's canonical keyed file: its handle and its header, read once."""

    operator_id: str
    subtask: int
    handle: KeyGroupsHandle
    #: Everything before the file's first key-group block (what a copy of its key groups starts with).
    raw_header: bytes
    header: KeyedStateHeader
    layout: KeyedLayout


@dataclass(frozen=True, slots=True)
class OperatorStream:
    """One subtask's operator-state stream, checked as ``kg verify`` checks it and decoded, once."""

    operator_id: str
    subtask: int
    handle: OperatorStateHandle
    #: The stream's header bytes and header (None when the check stopped before them).
    raw_header: bytes | None
    header: OperatorStateHeader | None
    #: What ``kg verify`` finds wrong with the stream (errors and warnings).
    findings: tuple[Finding, ...]
    #: The stream's elements in ``core.schema.OPERATOR_SCHEMA`` (None when they do not decode).
    table: pa.Table | None
    #: Whether the stream's file could be opened at all.
    opened: bool


@dataclass(frozen=True, eq=False)
class Savepoint(FlinkCheckpoint):
    """A Flink savepoint or checkpoint opened once (see the module docstring)."""

    #: The ``_metadata`` bytes as read (empty when opened from an already parsed ``FlinkCheckpoint``).
    raw: bytes = b""

    @classmethod
    def of(cls, snapshot: FlinkCheckpoint) -> Savepoint:
        """Return ``snapshot`` (already parsed) as an opened savepoint, reading nothing more now."""
        if isinstance(snapshot, Savepoint):
            return snapshot
        return cls(snapshot.metadata_path, snapshot.metadata, snapshot.view)

    @classmethod
    def rewritten(cls, view: FlinkCheckpoint, origin: Savepoint) -> Savepoint:
        """Return the canonical rewrite ``view`` of ``origin`` (``flink.layouts``) as an opened savepoint.

        A rewrite changes keyed files only: its operator-state streams are the origin's, so what the
        origin read of them is kept, not read again.
        """
        opened = cls(view.metadata_path, view.metadata, view.view)
        known = origin.__dict__.get("operator_streams")
        if known is not None:
            opened.__dict__["operator_streams"] = known
        return opened

    def with_operators(self, metadata: CheckpointMetadata, ids: Mapping[str, str]) -> Savepoint:
        """Return this savepoint as ``metadata`` describes it: operators renamed or left out, same files.

        ``ids`` maps the id of every operator ``metadata`` keeps to its id there (operator migration planned
        on the opened savepoint, ``planning.migration.apply_changes``). What was read already (keyed headers,
        operator-state streams) is kept under the new ids, not read again; the ``_metadata`` bytes are
        not, since they no longer describe the result.
        """
        changed = Savepoint(self.metadata_path, metadata, self.view)
        keyed = self.keyed_streams_read()
        if keyed is not None:
            changed.__dict__["keyed_streams"] = MappingProxyType(
                {
                    ids[op_id]: tuple(replace(s, operator_id=ids[op_id]) for s in streams)
                    for op_id, streams in keyed.items()
                    if op_id in ids
                }
            )
        known = self.__dict__.get("operator_streams")
        if known is not None:
            changed.__dict__["operator_streams"] = MappingProxyType(
                {
                    (ids[op_id], sub): replace(s, operator_id=ids[op_id])
                    for (op_id, sub), s in known.items()
                    if op_id in ids
                }
            )
        return changed

    @cached_property
    def keyed_streams(self) -> Mapping[str, tuple[KeyedStream, ...]]:
        """Return every canonical keyed file's header, by operator id, in subtask order (read once).

        Raises:
            InvalidInputError: A keyed file is missing, or its header is corrupt.
            UnsupportedFormatError: A header kg cannot read.
        """
        found: dict[str, tuple[KeyedStream, ...]] = {}
        for op in self.metadata.operators:
            streams = []
            for sub in op.subtasks:
                handle = sub.managed_keyed_state
                if not isinstance(handle, KeyGroupsHandle):
                    continue
                with StreamSource(handle.delegate, self.directory) as src:
                    first = min([o for o in handle.offsets if o] or [src.size])
                    raw = src.read(0, first)
                    header = read_keyed_header(raw, src.source, first)
                    layout = KeyedLayout.from_header(header, op.max_parallelism, src.source)
                streams.append(KeyedStream(op.operator_id, sub.index, handle, raw, header, layout))
            if streams:
                found[op.operator_id] = tuple(streams)
        return MappingProxyType(found)

    def keyed_streams_read(self) -> Mapping[str, tuple[KeyedStream, ...]] | None:
        """Return ``keyed_streams`` if they were read already, else None (reading nothing)."""
        value = self.__dict__.get("keyed_streams")
        return value if isinstance(value, Mapping) else None

    @cached_property
    def key_types(self) -> Mapping[str, str]:
        """Return the kg key type of every operator with keyed state, by operator id.

        Keys of Flink's String, Long, Integer and Boolean serializers can be re-hashed; any other key
        serializer is ``binary``.
        """
        return MappingProxyType(
            {op_id: streams[0].layout.codec.key_type for op_id, streams in self.keyed_streams.items()}
        )

    @cached_property
    def operator_streams(self) -> Mapping[tuple[str, int], OperatorStream]:
        """Return every operator-state stream, checked and decoded once, by (operator id, subtask)."""
        found = {}
        for op in self.metadata.operators:
            for sub in op.subtasks:
                handle = sub.managed_operator_state
                if not isinstance(handle, OperatorStateHandle):
                    continue
                subject = f"{op.label} subtask {sub.index}"
                checked = _check_stream(handle, self.directory, subject)
                found[(op.operator_id, sub.index)] = OperatorStream(
                    op.operator_id, sub.index, handle, *checked
                )
        return MappingProxyType(found)

    @cached_property
    def with_state(self) -> frozenset[str]:
        """Return the ids of the operators whose subtasks hold state (what decides chain followers)."""
        return frozenset(
            op.operator_id for op in self.metadata.operators if any(s.has_state for s in op.subtasks)
        )


def _check_stream(
    handle: OperatorStateHandle, directory: Path | Location, subject: str
) -> OperatorStreamCheck:
    """Check and decode one operator-state stream, turning a missing or unreadable file into a finding."""
    # Imported here: decoding loads pyarrow, which opening a savepoint for kg inspect or kg check never
    # does (their metadata-only paths stay light, tests/cli/test_inspect.py).
    from keygroup_cli.flink.operator.streams import OperatorStreamCheck, check_operator_stream, stream_finding

    opened = False
    try:
        with StreamSource(handle.delegate, directory) as src:
            opened = True
            return check_operator_stream(handle, src, subject)
    except (InvalidInputError, UnsupportedFormatError) as exc:
        return OperatorStreamCheck(None, None, (stream_finding(exc, subject),), None, opened)


def open_savepoint(path: str | os.PathLike[str] | Location, *, contained: bool = True) -> Savepoint:
    """Find and parse a savepoint's or checkpoint's ``_metadata`` (``find_metadata``), reading it once.

    Every file it names is judged by the input's roots before anything reads one
    (``state_files.contain_references``). ``contained=False`` leaves that to each read (which judges
    its own file all the same): for the ``_metadata`` kg wrote of a scratch view it opens again in a
    Spark task, whose absolute handles name the files of the input the driver opened and judged.

    Raises:
        InvalidInputError: Missing, truncated or corrupt metadata; a file named outside the input's
            roots (``STATE_FILE_OUTSIDE``).
        UnsupportedFormatError: A metadata version kg does not read.
    """
    metadata_path = find_metadata(path)
    raw = read_metadata_bytes(metadata_path)
    metadata = parse_metadata(raw, str(metadata_path))
    if contained:
        contain_references(metadata, metadata_path.parent)
    return Savepoint(metadata_path, metadata, raw=raw)


def try_open_savepoint(path: str | os.PathLike[str] | Location) -> Savepoint | None:
    """Open ``path`` if it is a Flink savepoint or checkpoint (``is_flink_savepoint``), else return None.

    Raises:
        InvalidInputError: It is one, but its ``_metadata`` is truncated or corrupt.
        UnsupportedFormatError: A metadata version kg does not read.
    """
    found = flink_metadata_file(path if isinstance(path, Location) else str(path))
    return None if found is None else open_savepoint(found)


__all__ = ["KeyedStream", "OperatorStream", "Savepoint", "open_savepoint", "try_open_savepoint"]
