"""Timers in raw keyed state: one key group's ``InternalTimerServiceSerializationProxy``, read and written.

A keyed operator whose backend does not hold its timers (Flink 2.x's ForSt backend under the async state
API, ``enableAsyncState()``; RocksDB with ``timer-service.factory: HEAP``) has them written by the operator
into its *raw* keyed-state stream (``StreamOperatorStateHandler.snapshotState`` ->
``InternalTimeServiceManagerImpl.snapshotToRawKeyedState``): for every key group of the subtask's range, in
order, one section at the key group's offset of a ``KeyGroupsStateHandle``. A section (Flink 1.4.1+,
proxy version 2) is

    magic 0xF1CD859F, int version 2          (PostVersionedIOReadableWritable)
    int number of timer services
    per service: UTF name (e.g. "user-timers"),
        key serializer snapshot, namespace serializer snapshot (writeVersionedSnapshot)
        int n, n event-time timers; int m, m processing-time timers
    a timer: key, namespace (their serializers), long timestamp   (LegacyTimerSerializer, no sign flip)

Every registered service is written in every key group, with no timer where it has none. Restoring, Flink
reads the section of each key group of the new subtask's range from whichever handle holds it
(``InternalTimeServiceManagerImpl.create``), and adds each timer to the queue of its own key's key group.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from keygroup_cli.core.errors import UnsupportedFormatError
from keygroup_cli.flink.io.binary import decode_modified_utf8, encode_modified_utf8
from keygroup_cli.flink.types.serializer_snapshots import SerializerSnapshot, read_serializer_snapshot
from keygroup_cli.flink.types.serializers import key_codec, value_end

#: ``PostVersionedIOReadableWritable.VERSIONED_IDENTIFIER``.
MAGIC = bytes((0xF1, 0xCD, 0x85, 0x9F))
#: ``InternalTimerServiceSerializationProxy.VERSION``: the only one kg reads (Flink 1.4.1 on).
PROXY_VERSION = 2
_INT = struct.Struct(">i")
_USHORT = struct.Struct(">H")


class NotTimers(Exception):
    """The bytes are not a timer section kg can split (the caller says what that means for it)."""


@dataclass(frozen=True, slots=True)
class TimerService:
    """One timer service of a key group's section.

    Attributes:
        name: The service's name (``user-timers`` for a ``ProcessFunction``'s timers).
        key_serializer: The keys' serializer snapshot (its bytes are written back unchanged).
        namespace_serializer: The namespaces' serializer snapshot.
        event: Each event-time timer's bytes (key, namespace, timestamp), in stream order.
        processing: Each processing-time timer's bytes.
        event_keys: The key of each event-time timer (decoded, for its key group).
        processing_keys: The key of each processing-time timer.
    """

    name: str
    key_serializer: SerializerSnapshot
    namespace_serializer: SerializerSnapshot
    event: tuple[bytes, ...] = ()
    processing: tuple[bytes, ...] = ()
    event_keys: tuple[object, ...] = ()
    processing_keys: tuple[object, ...] = ()

    @property
    def key_type(self) -> str:
        """Return kg's key type of the service's keys (``binary`` for a serializer kg cannot decode)."""
        return key_codec(self.key_serializer.class_name).key_type

    def empty(self) -> TimerService:
        """Return the service with no timer: what Flink writes for it in a key group without any."""
        return TimerService(self.name, self.key_serializer, self.namespace_serializer)


def read_timer_section(data: bytes, source: str) -> tuple[TimerService, ...]:
    """Parse one key group's section, which must fill ``data`` exactly; decode every timer's key.

    Raises:
        NotTimers: Not a version-2 timer section, or a key or namespace kg cannot find the end of.
    """
    if data[:4] != MAGIC:
        raise NotTimers(f"{source}: no timer-service header (magic {MAGIC.hex()})")
    if len(data) < 12 or _INT.unpack_from(data, 4)[0] != PROXY_VERSION:
        raise NotTimers(f"{source}: not a version {PROXY_VERSION} timer-service section")
    count = _INT.unpack_from(data, 8)[0]
    pos = 12
    services = []
    try:
        for _ in range(count):
            n = _USHORT.unpack_from(data, pos)[0]
            name = decode_modified_utf8(data[pos + 2 : pos + 2 + n])
            pos += 2 + n
            key, pos = _serializer_snapshot(data, pos, source)
            namespace, pos = _serializer_snapshot(data, pos, source)
            event, event_keys, pos = _timers(data, pos, key, namespace, source)
            processing, processing_keys, pos = _timers(data, pos, key, namespace, source)
            services.append(
                TimerService(name, key, namespace, event, processing, event_keys, processing_keys)
            )
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        raise NotTimers(f"{source}: timer section ends early (at byte {pos})") from None
    if pos != len(data) or count < 0:
        raise NotTimers(f"{source}: {len(data) - pos} bytes after the timer services")
    return tuple(services)


def write_timer_section(services: tuple[TimerService, ...]) -> bytes:
    """Encode one key group's section as ``InternalTimerServiceSerializationProxy.write`` does."""
    out = bytearray(MAGIC + _INT.pack(PROXY_VERSION) + _INT.pack(len(services)))
    for service in services:
        name = encode_modified_utf8(service.name)
        out += _USHORT.pack(len(name)) + name
        out += service.key_serializer.raw + service.namespace_serializer.raw
        for timers in (service.event, service.processing):
            out += _INT.pack(len(timers))
            for timer in timers:
                out += timer
    return bytes(out)


def _serializer_snapshot(data: bytes, pos: int, source: str) -> tuple[SerializerSnapshot, int]:
    found = read_serializer_snapshot(data, pos, len(data))
    if found is None:
        raise NotTimers(f"{source}: a timer serializer snapshot kg cannot find the end of (at byte {pos})")
    return found


def _timers(
    data: bytes, pos: int, key: SerializerSnapshot, namespace: SerializerSnapshot, source: str
) -> tuple[tuple[bytes, ...], tuple[object, ...], int]:
    count = _INT.unpack_from(data, pos)[0]
    pos += 4
    if count < 0 or count > len(data):
        raise NotTimers(f"{source}: {count} timers")
    if count == 0:
        return (), (), pos
    codec = key_codec(key.class_name)
    if not codec.self_delimiting:
        raise NotTimers(f"{source}: timers of keys written by {key.class_name}, whose end kg cannot find")
    timers, keys = [], []
    for _ in range(count):
        start = pos
        value, pos = codec.read(data, pos, source)
        end = value_end(namespace.class_name, data, pos, source)
        if end is None:
            raise NotTimers(f"{source}: timer namespaces written by {namespace.class_name}")
        pos = end + 8
        if pos > len(data):
            raise NotTimers(f"{source}: timer runs past the section's end")
        timers.append(data[start:pos])
        keys.append(value)
    return tuple(timers), tuple(keys), pos


def timer_keys(services: tuple[TimerService, ...]) -> Iterator[object]:
    """Yield the key of every timer of a section (event-time, then processing-time, per service)."""
    for service in services:
        yield from service.event_keys
        yield from service.processing_keys


def raw_state_error(message: str) -> UnsupportedFormatError:
    """Return the one-line refusal of raw keyed state kg does not redistribute (``FLINK_RAW_STATE``)."""
    return UnsupportedFormatError(message, code="FLINK_RAW_STATE")


__all__ = [
    "MAGIC",
    "PROXY_VERSION",
    "NotTimers",
    "TimerService",
    "read_timer_section",
    "raw_state_error",
    "timer_keys",
    "write_timer_section",
]
