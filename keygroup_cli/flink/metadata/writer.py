"""Write a ``CheckpointMetadata`` model back to ``_metadata`` bytes (the inverse of ``parse_metadata``).

Mirrors ``MetadataV3Serializer.serialize`` … ``MetadataV6Serializer`` and the handle serializers of
``MetadataV2V3SerializerBase`` (Flink 2.3). Fed a model parsed from a real file, it reproduces the file
byte for byte; the V4+ properties trailer is written from its raw bytes, or from
``CANONICAL_SAVEPOINT_PROPERTIES`` when a synthesised model has none.
"""

from __future__ import annotations

import base64

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.flink.io.binary import DataOutput
from keygroup_cli.flink.io.stream_handles import (
    ByteStreamHandle,
    EmptySegmentFileHandle,
    FileHandle,
    KeyGroupsHandle,
    RelativeFileHandle,
    SegmentFileHandle,
    StreamHandle,
)
from keygroup_cli.flink.metadata import handles as h
from keygroup_cli.flink.metadata.reader import (
    HEADER_MAGIC_NUMBER,
    MASTER_STATE_MAGIC_NUMBER,
    SUPPORTED_VERSIONS,
    CheckpointMetadata,
    OperatorState,
    SubtaskState,
)

#: The ``CheckpointProperties`` trailer Flink 2.3 writes for a CANONICAL savepoint (``SavepointType``
#: "Savepoint", postCheckpointAction NONE, forced), copied byte for byte from a real savepoint. Used for
#: synthesised models, which have no trailer of their own.
CANONICAL_SAVEPOINT_PROPERTIES = base64.b64decode(
    "rO0ABXNyADhvcmcuYXBhY2hlLmZsaW5rLnJ1bnRpbWUuY2hlY2twb2ludC5DaGVja3BvaW50UHJvcGVydGllcwAAAAAAAAACAgAI"
    "WgAQZGlzY2FyZENhbmNlbGxlZFoADWRpc2NhcmRGYWlsZWRaAA9kaXNjYXJkRmluaXNoZWRaAA9kaXNjYXJkU3Vic3VtZWRaABBk"
    "aXNjYXJkU3VzcGVuZGVkWgAGZm9yY2VkWgAJdW5jbGFpbWVkTAAOY2hlY2twb2ludFR5cGV0ADJMb3JnL2FwYWNoZS9mbGluay9y"
    "dW50aW1lL2NoZWNrcG9pbnQvU25hcHNob3RUeXBlO3hwAAAAAAABAHNyADFvcmcuYXBhY2hlLmZsaW5rLnJ1bnRpbWUuY2hlY2tw"
    "b2ludC5TYXZlcG9pbnRUeXBloIfTCKRYFLgCAANMAApmb3JtYXRUeXBldAA1TG9yZy9hcGFjaGUvZmxpbmsvY29yZS9leGVjdXRp"
    "b24vU2F2ZXBvaW50Rm9ybWF0VHlwZTtMAARuYW1ldAASTGphdmEvbGFuZy9TdHJpbmc7TAAUcG9zdENoZWNrcG9pbnRBY3Rpb250"
    "AEhMb3JnL2FwYWNoZS9mbGluay9ydW50aW1lL2NoZWNrcG9pbnQvU2F2ZXBvaW50VHlwZSRQb3N0Q2hlY2twb2ludEFjdGlvbjt4"
    "cH5yADNvcmcuYXBhY2hlLmZsaW5rLmNvcmUuZXhlY3V0aW9uLlNhdmVwb2ludEZvcm1hdFR5cGUAAAAAAAAAABIAAHhyAA5qYXZh"
    "LmxhbmcuRW51bQAAAAAAAAAAEgAAeHB0AAlDQU5PTklDQUx0AAlTYXZlcG9pbnR+cgBGb3JnLmFwYWNoZS5mbGluay5ydW50aW1l"
    "LmNoZWNrcG9pbnQuU2F2ZXBvaW50VHlwZSRQb3N0Q2hlY2twb2ludEFjdGlvbgAAAAAAAAAAEgAAeHEAfgAJdAAETk9ORQ=="
)


def write_metadata(metadata: CheckpointMetadata) -> bytes:
    """Return the ``_metadata`` bytes of ``metadata`` in its own version's layout.

    Raises:
        InvalidArgumentError: The version is not 3–6.
    """
    version = metadata.version
    if version not in SUPPORTED_VERSIONS:
        raise InvalidArgumentError(f"cannot write _metadata version {version}", code="FLINK_METADATA_VERSION")
    out = DataOutput()
    out.write_uint(HEADER_MAGIC_NUMBER)
    out.write_int(version)
    out.write_long(metadata.checkpoint_id)
    out.write_int(len(metadata.master_states))
    for master in metadata.master_states:
        inner = DataOutput()
        inner.write_int(master.version)
        inner.write_utf(master.name)
        inner.write_int(len(master.payload))
        inner.write_bytes(master.payload)
        out.write_uint(MASTER_STATE_MAGIC_NUMBER)
        out.write_int(len(inner))
        out.write_bytes(inner.getvalue())
    out.write_int(len(metadata.operators))
    for operator in metadata.operators:
        _write_operator(out, operator, version)
    if version >= 4:
        trailer = metadata.properties_bytes
        out.write_bytes(CANONICAL_SAVEPOINT_PROPERTIES if trailer is None else trailer)
    return out.getvalue()


def _write_operator(out: DataOutput, operator: OperatorState, version: int) -> None:
    if version >= 5:
        out.write_utf(operator.name or "")
        out.write_utf(operator.uid or "")
    out.write_bytes(bytes.fromhex(operator.operator_id))
    out.write_int(operator.parallelism)
    out.write_int(operator.max_parallelism)
    write_stream_handle(out, operator.coordinator_state)
    if operator.fully_finished:
        out.write_int(-1)
        return
    out.write_int(len(operator.subtasks))
    for subtask in operator.subtasks:
        if subtask.finished:
            out.write_int(-subtask.index - 1)
        else:
            out.write_int(subtask.index)
            _write_subtask(out, subtask, version)


def _write_subtask(out: DataOutput, subtask: SubtaskState, version: int) -> None:
    for handle, flag in (
        (subtask.managed_operator_state, subtask.managed_operator_flag),
        (subtask.raw_operator_state, subtask.raw_operator_flag),
    ):
        if handle is None and not flag:
            out.write_int(0)
        else:
            out.write_int(1)
            write_operator_handle(out, handle)
    write_keyed_handle(out, subtask.managed_keyed_state)
    write_keyed_handle(out, subtask.raw_keyed_state)
    for channels in (subtask.input_channel_state, subtask.result_subpartition_state):
        out.write_int(len(channels))
        for channel in channels:
            _write_channel_handle(out, channel, typed=version >= 6)


def write_stream_handle(out: DataOutput, handle: StreamHandle | None) -> None:
    """Write a stream handle (``serializeStreamStateHandle``)."""
    if handle is None:
        out.write_byte(h.NULL_HANDLE)
    elif isinstance(handle, RelativeFileHandle):
        out.write_byte(h.RELATIVE_STREAM_STATE_HANDLE)
        out.write_utf(handle.relative_path)
        out.write_long(handle.size)
    elif isinstance(handle, SegmentFileHandle):
        out.write_byte(h.SEGMENT_FILE_HANDLE)
        out.write_long(handle.start_pos)
        out.write_long(handle.size)
        out.write_int(handle.scope)
        out.write_utf(handle.path)
        out.write_utf(handle.logical_file_id)
    elif isinstance(handle, EmptySegmentFileHandle):
        out.write_byte(h.EMPTY_SEGMENT_FILE_HANDLE)
    elif isinstance(handle, FileHandle):
        out.write_byte(h.FILE_STREAM_STATE_HANDLE)
        out.write_long(handle.size)
        out.write_utf(handle.path)
    elif isinstance(handle, ByteStreamHandle):
        out.write_byte(h.BYTE_STREAM_STATE_HANDLE)
        out.write_utf(handle.handle_name)
        out.write_int(len(handle.data))
        out.write_bytes(handle.data)
    else:
        # A KeyGroupsHandle nested as a stream handle is always written with the legacy tag 3.
        out.write_byte(h.KEY_GROUPS_HANDLE)
        _write_offsets(out, handle.key_group_start, handle.offsets)
        write_stream_handle(out, handle.delegate)


def _write_offsets(out: DataOutput, start: int, offsets: tuple[int, ...]) -> None:
    out.write_int(start)
    out.write_int(len(offsets))
    out.write_longs(offsets)


def _write_locals(out: DataOutput, files: tuple[h.LocalHandle, ...]) -> None:
    out.write_int(len(files))
    for f in files:
        out.write_utf(f.local_path)
        write_stream_handle(out, f.handle)


def write_keyed_handle(out: DataOutput, handle: h.KeyedHandle | None) -> None:
    """Write a keyed-state handle with the tag it was read with (``serializeKeyedStateHandle``)."""
    if handle is None:
        out.write_byte(h.NULL_HANDLE)
    elif isinstance(handle, KeyGroupsHandle):
        out.write_byte(handle.tag)
        _write_offsets(out, handle.key_group_start, handle.offsets)
        write_stream_handle(out, handle.delegate)
        if handle.tag == h.KEY_GROUPS_HANDLE_V2:
            out.write_utf(handle.handle_id or "")
    elif isinstance(handle, h.IncrementalKeyedHandle):
        _write_incremental(out, handle)
    elif isinstance(handle, h.ChangelogBackendHandle):
        _write_changelog(out, handle)
    elif isinstance(handle, h.InMemoryChangelogHandle):
        _write_changelog_bytes(out, handle)
    else:
        _write_changelog_files(out, handle)


def _write_incremental(out: DataOutput, handle: h.IncrementalKeyedHandle) -> None:
    v2 = handle.tag == h.INCREMENTAL_KEY_GROUPS_HANDLE_V2
    out.write_byte(handle.tag)
    out.write_long(handle.checkpoint_id)
    out.write_utf(handle.backend_identifier)
    out.write_int(handle.key_group_start)
    out.write_int(handle.num_key_groups)
    if v2:
        out.write_long(handle.checkpointed_size or 0)
    write_stream_handle(out, handle.metadata)
    _write_locals(out, handle.shared)
    _write_locals(out, handle.private)
    if v2:
        out.write_utf(handle.handle_id or "")


def _write_changelog(out: DataOutput, handle: h.ChangelogBackendHandle) -> None:
    out.write_byte(handle.tag)
    out.write_int(handle.key_group_start)
    out.write_int(handle.num_key_groups)
    out.write_long(handle.checkpointed_size)
    for part in (handle.materialized, handle.non_materialized):
        out.write_int(len(part))
        for nested in part:
            write_keyed_handle(out, nested)
    out.write_long(handle.materialization_id)
    if handle.tag == h.CHANGELOG_HANDLE_V2:
        out.write_long(handle.checkpoint_id or 0)
    out.write_utf(handle.handle_id)


def _write_changelog_bytes(out: DataOutput, handle: h.InMemoryChangelogHandle) -> None:
    out.write_byte(h.CHANGELOG_BYTE_INCREMENT_HANDLE)
    out.write_int(handle.key_group_start)
    out.write_int(handle.num_key_groups)
    out.write_long(handle.sequence_from)
    out.write_long(handle.sequence_to)
    out.write_int(len(handle.changes))
    for key_group, change in handle.changes:
        out.write_int(key_group)
        out.write_int(len(change))
        out.write_bytes(change)
    out.write_utf(handle.handle_id)


def _write_changelog_files(out: DataOutput, handle: h.ChangelogStreamHandle) -> None:
    out.write_byte(handle.tag)
    out.write_int(handle.key_group_start)
    out.write_int(handle.num_key_groups)
    out.write_int(len(handle.handles))
    for offset, stream in handle.handles:
        out.write_long(offset)
        write_stream_handle(out, stream)
    out.write_long(handle.state_size)
    out.write_long(handle.checkpointed_size)
    out.write_utf(handle.handle_id)
    if handle.tag == h.CHANGELOG_FILE_INCREMENT_HANDLE_V2:
        out.write_utf(handle.storage_identifier or "filesystem")


def write_operator_handle(out: DataOutput, handle: h.OperatorStateHandle | None) -> None:
    """Write an operator-state handle (``serializeOperatorStateHandle``)."""
    if handle is None:
        out.write_byte(h.NULL_HANDLE)
        return
    out.write_byte(handle.tag)
    out.write_int(len(handle.states))
    for entry in handle.states:
        out.write_utf(entry.name)
        out.write_byte(entry.mode)
        out.write_int(len(entry.offsets))
        out.write_longs(entry.offsets)
    if handle.tag == h.SEGMENT_PARTITIONABLE_OPERATOR_STATE_HANDLE:
        out.write_utf(handle.task_owned_dir or "")
        out.write_utf(handle.shared_dir or "")
        out.write_bool(handle.is_empty)
    write_stream_handle(out, handle.delegate)


def _write_channel_handle(out: DataOutput, handle: h.AnyChannelHandle, *, typed: bool) -> None:
    if typed:
        out.write_byte(handle.kind)
    if isinstance(handle, h.MergedChannelStateHandle):
        out.write_int(handle.subtask_index)
        out.write_long(handle.state_size)
        write_stream_handle(out, handle.delegate)
        out.write_int(len(handle.serialized_offsets))
        out.write_bytes(handle.serialized_offsets)
        return
    out.write_int(handle.subtask_index)
    out.write_int(handle.info[0])
    out.write_int(handle.info[1])
    out.write_int(len(handle.offsets))
    out.write_longs(handle.offsets)
    out.write_long(handle.state_size)
    write_stream_handle(out, handle.delegate)
