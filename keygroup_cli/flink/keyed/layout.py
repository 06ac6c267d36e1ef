"""The layout of a canonical keyed-state file: which state is which, and how its composite keys split.

A keyed file (``KeyGroupsSavepointStateHandle``) is the ``KeyedBackendSerializationProxy`` header followed
by one block per non-empty key group, each at its recorded offset and, when the header's compression flag is
set, inside its own snappy framed stream. A block is: short ``kvStateId``, entries
``int keyLen, key, int valueLen, value``; bit ``0x80`` of ``key[0]`` marks the last entry of a state and is
followed by the next state id or ``END_OF_KEY_GROUP_MARK`` (``0xFFFF``). This module holds what both
``keyed_decode`` and ``keyed_encode`` need to know about that layout: the constants, the per-state layout
taken from the header, and which states the column-wise paths cover.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from keygroup_cli.core.errors import UnsupportedFormatError
from keygroup_cli.core.keygroups import key_group_prefix_bytes
from keygroup_cli.flink.keyed.header import KeyedStateHeader
from keygroup_cli.flink.types.serializer_snapshots import StateMetaInfo
from keygroup_cli.flink.types.serializers import (
    KeyCodec,
    key_codec,
    namespace_size,
)

#: ``FullSnapshotUtil.END_OF_KEY_GROUP_MARK``.
END_OF_KEY_GROUP_MARK = 0xFFFF
#: ``FullSnapshotUtil.FIRST_BIT_IN_BYTE_MASK``: set in ``key[0]`` on the last entry of a state.
FIRST_BIT_IN_BYTE_MASK = 0x80
#: Rows per emitted record batch (batches end at key-group boundaries, so one group may exceed it).
DEFAULT_BATCH_ROWS = 1 << 16

_INT = struct.Struct(">i")
_USHORT = struct.Struct(">H")
_LONG = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class StateLayout:
    """How one state's entries are laid out: kg kind and the namespace serializer's byte size."""

    name: str
    kind: str
    namespace_class: str | None

    @property
    def namespace_size(self) -> int | None:
        """Return the fixed namespace size, None for variable / unknown namespace serializers."""
        return namespace_size(self.namespace_class)


def kg_kind(info: StateMetaInfo) -> str:
    """Return kg's keyed kind for a state: value/list/map/timer (reducing and aggregating are values)."""
    kind = info.kind
    if kind in ("reducing", "aggregating"):
        return "value"
    if kind not in ("value", "list", "map", "timer"):
        raise UnsupportedFormatError(
            f"keyed state {info.name!r} has unsupported type {kind!r}", code="FLINK_STATE_TYPE_UNSUPPORTED"
        )
    return kind


def _namespace_class(info: StateMetaInfo) -> str | None:
    if info.backend_type_name == "PRIORITY_QUEUE":
        # TimerSerializer's nested snapshots are (key, namespace).
        timer = info.serializer("VALUE_SERIALIZER")
        if timer is not None and len(timer.nested) == 2:
            return timer.nested[1].class_name
        return None
    snapshot = info.serializer("NAMESPACE_SERIALIZER")
    return snapshot.class_name if snapshot is not None else None


@dataclass(frozen=True, slots=True)
class KeyedLayout:
    """Everything needed to split and build composite keys of one keyed file (state id = tuple index)."""

    codec: KeyCodec
    prefix_bytes: int
    states: tuple[StateLayout, ...]

    @classmethod
    def from_header(cls, header: KeyedStateHeader, max_parallelism: int, source: str) -> KeyedLayout:
        """Build the layout from a parsed header and the operator's maxParallelism.

        Raises:
            UnsupportedFormatError: The header could not be fully parsed (an unknown serializer snapshot).
        """
        if header.states is None or header.key_serializer is None:
            raise UnsupportedFormatError(
                f"{source}: the keyed-state header holds a serializer snapshot kg cannot delimit",
                code="FLINK_STATE_HEADER_UNKNOWN",
            )
        states = tuple(StateLayout(i.name, kg_kind(i), _namespace_class(i)) for i in header.states)
        return cls(
            key_codec(header.key_serializer.class_name), key_group_prefix_bytes(max_parallelism), states
        )

    def state_ids(self) -> dict[str, int]:
        """Return state name → state id (its index in the header)."""
        return {s.name: i for i, s in enumerate(self.states)}


#: Key types whose serialized keys the column-wise paths can cut and build.
_VECTOR_KEY_TYPES = ("string", "long", "int", "boolean")
#: Longest ASCII String key whose StringValue length (chars + 1) fits one varint byte.
_MAX_SHORT_STRING = 126


@lru_cache(maxsize=64)
def _vector_states(layout: KeyedLayout) -> frozenset[int]:
    """Return the ids of the states whose entries the column-wise paths handle for ``layout``.

    Value, list and map states need a fixed-size namespace (it is cut by size); a timer's namespace is the
    rest of its element after the (self-delimiting) key, whatever its serializer.
    """
    if layout.codec.key_type not in _VECTOR_KEY_TYPES or layout.prefix_bytes not in (1, 2):
        return frozenset()
    return frozenset(
        i
        for i, s in enumerate(layout.states)
        if s.kind == "timer" or (s.kind in ("value", "list", "map") and s.namespace_size is not None)
    )


__all__ = [
    "DEFAULT_BATCH_ROWS",
    "END_OF_KEY_GROUP_MARK",
    "FIRST_BIT_IN_BYTE_MASK",
    "KeyedLayout",
    "StateLayout",
    "kg_kind",
]
