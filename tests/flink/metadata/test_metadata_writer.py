"""The _metadata writer: every handle type round-trips through the reader, in every version."""

from __future__ import annotations

import pytest

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
    CheckpointMetadata,
    MasterState,
    OperatorState,
    SubtaskState,
    parse_metadata,
)
from keygroup_cli.flink.metadata.writer import CANONICAL_SAVEPOINT_PROPERTIES, write_metadata

STREAMS: list[StreamHandle | None] = [
    None,
    ByteStreamHandle("inline-\u00fc", b"\x00\x01\x02"),
    FileHandle("file:/tmp/x/state", 123),
    RelativeFileHandle("uuid-file", 77),
    SegmentFileHandle(10, 20, 1, "file:/tmp/merged", "logical-1"),
    EmptySegmentFileHandle(),
    KeyGroupsHandle(3, 4, (10, 0, 30), RelativeFileHandle("nested", 40)),
]


def _model(version: int) -> CheckpointMetadata:
    keyed: list[h.KeyedHandle] = [
        KeyGroupsHandle(7, 0, (100, 0, 200), RelativeFileHandle("a", 300)),
        KeyGroupsHandle(12, 3, (50,), FileHandle("file:/x", 60), "handle-id"),
        KeyGroupsHandle(3, 8, (), None),
        h.IncrementalKeyedHandle(
            11,
            9,
            "uuid",
            0,
            64,
            999,
            STREAMS[1],
            (h.LocalHandle("000001.sst", STREAMS[3]),),
            (h.LocalHandle("MANIFEST", STREAMS[1]),),
            "id-11",
        ),
        h.IncrementalKeyedHandle(5, 9, "legacy", 0, 64, None, None, (), (), None),
        h.InMemoryChangelogHandle(0, 8, 1, 5, ((3, b"abc"), (-1, b"")), "mem"),
        h.ChangelogStreamHandle(13, 0, 8, ((0, STREAMS[2]), (12, STREAMS[4])), 99, 98, "cs", "filesystem"),
        h.ChangelogStreamHandle(10, 0, 8, (), 1, 2, "cs1", None),
    ]
    keyed.append(h.ChangelogBackendHandle(14, 0, 8, 500, (keyed[0], None), (keyed[5],), 3, 4, "cb"))
    keyed.append(h.ChangelogBackendHandle(8, 0, 8, 500, (), (), 3, None, "cb8"))
    operator_handle = h.OperatorStateHandle(
        4, (h.OperatorStateEntry("split", 0, (1, 2)), h.OperatorStateEntry("b", 2, (9,))), STREAMS[3]
    )
    merged = h.OperatorStateHandle(17, (), STREAMS[4], "file:/own", "file:/shared", True)
    typed = version >= 6
    inputs: tuple[h.AnyChannelHandle, ...] = (h.ChannelStateHandle(1, 0, (1, 2), (5, 6), 7, STREAMS[3]),)
    outputs: tuple[h.AnyChannelHandle, ...] = (h.ChannelStateHandle(2, 0, (3, 4), (), 0, None),)
    if typed:
        inputs += (h.MergedChannelStateHandle(3, 0, 10, STREAMS[2], b"\x01\x02"),)
    subtasks = [
        SubtaskState(i, managed_keyed_state=k, managed_operator_state=operator_handle if i % 2 else merged)
        for i, k in enumerate(keyed)
    ]
    subtasks.append(SubtaskState(len(keyed), input_channel_state=inputs, result_subpartition_state=outputs))
    subtasks.append(SubtaskState(len(keyed) + 1, finished=True))
    subtasks.append(SubtaskState(len(keyed) + 2, raw_keyed_state=keyed[0], managed_operator_flag=True))
    named = version >= 5
    operators = (
        OperatorState(
            "0123456789abcdef" * 2,
            16,
            128,
            "op" if named else None,
            "uid" if named else None,
            ByteStreamHandle("coord", b"\x05"),
            tuple(subtasks),
        ),
        OperatorState("f" * 32, 2, 4, None, None, None, (), True),
    )
    trailer = CANONICAL_SAVEPOINT_PROPERTIES if version >= 4 else None
    return CheckpointMetadata(version, 5, (MasterState("hook", 2, b"payload"),), operators, trailer)


@pytest.mark.parametrize("version", [3, 4, 5, 6])
def test_every_handle_round_trips(version: int) -> None:
    model = _model(version)
    raw = write_metadata(model)
    parsed = parse_metadata(raw)
    assert parsed.operators == model.operators
    assert parsed.master_states == model.master_states
    assert write_metadata(parsed) == raw


@pytest.mark.parametrize("stream", STREAMS, ids=lambda s: type(s).__name__)
def test_stream_handles_round_trip_as_coordinator_bytes(stream: StreamHandle | None) -> None:
    op = OperatorState(
        "a" * 32, 1, 1, subtasks=(SubtaskState(0, raw_operator_state=h.OperatorStateHandle(4, (), stream)),)
    )
    model = CheckpointMetadata(6, 1, (), (op,))
    assert parse_metadata(write_metadata(model)).operators == (op,)
