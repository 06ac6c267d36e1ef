"""The header of a keyed-state stream: ``KeyedBackendSerializationProxy.read`` (Flink 2.3).

The serializer snapshots and meta infos inside it are parsed by ``flink.types.serializer_snapshots``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.types.serializer_snapshots import (
    KEYED_STATE_TYPES,
    PLAUSIBLE_VERSIONS,
    TYPE_OPTION,
    GiveUp,
    Grammar,
    SerializerSnapshot,
    StateMetaInfo,
    first_alternative,
    implausible_version,
    invalid_enum,
    parser,
    require_unique,
)

_INT = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class KeyedStateHeader:
    """The ``KeyedBackendSerializationProxy`` at the start of a keyed-state stream.

    ``states`` is None when the header could not be resolved (an unknown serializer snapshot whose end
    could not be inferred); ``end`` is the byte length of the header when known.
    """

    version: int
    compressed: bool
    key_serializer: SerializerSnapshot | None
    states: tuple[StateMetaInfo, ...] | None
    end: int | None


def read_keyed_header(data: bytes, source: str, end: int | None = None) -> KeyedStateHeader:
    """Parse a ``KeyedBackendSerializationProxy`` from the first bytes of a keyed-state stream.

    Args:
        data: The stream's first bytes (at least the header).
        source: The file, for error messages.
        end: Where the header ends (the first non-zero key-group offset, or the stream size), if known.

    Raises:
        UnsupportedFormatError: A proxy version below 6 (Flink < 1.8; Flink 1.17+ refuses them too).
        InvalidInputError: The bytes are not a keyed-state header.
    """
    if len(data) < 5:
        raise InvalidInputError(f"{source}: keyed-state header truncated", code="FLINK_STATE_HEADER_CORRUPT")
    version = _INT.unpack_from(data, 0)[0]
    if not 0 < version < PLAUSIBLE_VERSIONS:
        raise implausible_version(source, "keyed-state", version)
    if version < 6:
        raise UnsupportedFormatError(
            f"{source}: Unsupported readVersion [{version}], please migrate using Flink 1.16",
            code="FLINK_STATE_HEADER_VERSION",
        )
    compressed = data[4] != 0
    grammar = Grammar(data, min(len(data), end) if end is not None else len(data))

    @parser
    def header(pos: int) -> Iterator[tuple[tuple[SerializerSnapshot, tuple[StateMetaInfo, ...]], int]]:
        for key, p in grammar.top_snapshot(pos):
            count = grammar.short_at_or(p, -1)
            if count < 0:
                continue
            for states, q in grammar.meta_infos(p + 2, count):
                yield (key, states), q

    try:
        found = first_alternative(header(5), end)
    except GiveUp:
        return KeyedStateHeader(version, compressed, None, None, end)
    if found is None:
        raise InvalidInputError(
            f"{source}: cannot parse the keyed-state header (KeyedBackendSerializationProxy)",
            code="FLINK_STATE_HEADER_CORRUPT",
        )
    (key, states), pos = found
    _require_keyed_states_valid(states, source)
    return KeyedStateHeader(version, compressed, key, states, pos)


def _require_keyed_states_valid(states: tuple[StateMetaInfo, ...], source: str) -> None:
    """Refuse what Flink's restore refuses in a keyed header's meta infos (the enums it ``valueOf``s).

    A keyed backend restores ``KEY_VALUE`` (``KEY_VALUE_V2``) and ``PRIORITY_QUEUE`` states only, and
    ``RegisteredKeyValueStateBackendMetaInfo`` reads ``StateDescriptor.Type.valueOf(KEYED_STATE_TYPE)``:
    a name that is not one (a flipped byte: ``VALUF``, ``vALUE``) or none at all fails there.

    Raises:
        InvalidInputError: ``FLINK_STATE_META_INFO_INVALID``.
    """
    for info in states:
        backend = info.backend_type_name
        if backend not in ("KEY_VALUE", "KEY_VALUE_V2", "PRIORITY_QUEUE"):
            raise invalid_enum(source, f"keyed state {info.name!r} has backend state type {backend}")
        if backend != "PRIORITY_QUEUE" and info.option(TYPE_OPTION) not in KEYED_STATE_TYPES:
            raise invalid_enum(
                source, f"keyed state {info.name!r} has state type {info.option(TYPE_OPTION)!r}"
            )
        for required in _REQUIRED_SERIALIZERS.get(backend, ()):
            if info.serializer(required) is None:
                # Registered*BackendMetaInfo(snapshot) checkNotNull's them: a flipped key name fails there.
                raise invalid_enum(
                    source,
                    f"keyed state {info.name!r} has no {required} (its serializers: "
                    f"{', '.join(k for k, _ in info.serializers) or 'none'})",
                )
    require_unique([i.name for i in states], source)


#: The serializer snapshots Flink's restore requires of a keyed state (``CommonSerializerKeys``):
#: ``RegisteredKeyValueStateBackendMetaInfo`` and ``RegisteredPriorityQueueStateBackendMetaInfo``.
_REQUIRED_SERIALIZERS = {
    "KEY_VALUE": ("NAMESPACE_SERIALIZER", "VALUE_SERIALIZER"),
    "PRIORITY_QUEUE": ("VALUE_SERIALIZER",),
}
