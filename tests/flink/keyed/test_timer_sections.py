"""Timer sections of raw keyed state (``flink.keyed.timers``), on the bytes Flink 2.3 wrote.

``fixtures/flink/2.3/async-forst-native-p3`` (AsyncJob on ForSt, async state API) holds its 300 event-time and
200 processing-time timers in each subtask's raw keyed-state stream, one section per key group.
"""

from __future__ import annotations

import struct

import pytest

from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import key_group_for_hash
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.timers import NotTimers, read_timer_section, write_timer_section
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.conftest import FIXTURES

CASE = FIXTURES / "flink" / "2.3" / "async-forst-native-p3"


def _sections() -> list[tuple[int, bytes]]:
    snapshot = read_flink_metadata(CASE)
    found = []
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            handle = sub.raw_keyed_state
            if handle is None:
                continue
            with StreamSource(handle.delegate, snapshot.directory) as src:
                data = src.read(0, src.size)
            ends = [*handle.offsets[1:], len(data)]
            for i, (start, end) in enumerate(zip(handle.offsets, ends, strict=True)):
                found.append((handle.key_group_start + i, data[start:end]))
    return found


def test_every_section_parses_and_writes_back_byte_for_byte() -> None:
    sections = _sections()
    assert [group for group, _ in sections] == list(range(128))
    event = processing = 0
    for group, data in sections:
        services = read_timer_section(data, f"key group {group}")
        assert [s.name for s in services] == ["user-timers"]
        assert write_timer_section(services) == data
        service = services[0]
        assert service.key_type == "string"
        event += len(service.event)
        processing += len(service.processing)
        for key in (*service.event_keys, *service.processing_keys):
            assert key_group_for_hash(hash_code(key, "string"), 128) == group
        for timer, key in zip(service.event, service.event_keys, strict=True):
            # LegacyTimerSerializer: key, VoidNamespace (one byte), the timestamp as a plain long.
            timestamp = struct.unpack(">q", timer[-8:])[0]
            assert (timestamp - 4_102_444_800_000) % 120 == int(str(key).split("-")[1])
    assert (event, processing) == (300, 200)


def test_empty_service_is_the_header_flink_writes_for_a_key_group_without_timers() -> None:
    empty = [
        (g, d) for g, d in _sections() if not any(s.event or s.processing for s in read_timer_section(d, "x"))
    ]
    assert empty
    for group, data in empty:
        services = read_timer_section(data, f"key group {group}")
        assert write_timer_section(tuple(s.empty() for s in services)) == data


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: b"\x00\x00\x00\x00" + d[4:],  # no PostVersionedIOReadableWritable magic
        lambda d: d[:4] + struct.pack(">i", 1) + d[8:],  # proxy version 1 (Flink 1.4.0)
        lambda d: d[:-1],  # cut short
        lambda d: d + b"\x00",  # trailing bytes
    ],
)
def test_what_is_not_a_timer_section_is_refused(damage: object) -> None:
    _group, data = _sections()[1]
    with pytest.raises(NotTimers):
        read_timer_section(damage(data), "raw")  # type: ignore[operator]
