"""The header of an operator-state stream: ``OperatorBackendSerializationProxy.read`` (Flink 2.3).

The serializer snapshots and meta infos inside it are parsed by ``flink.types.serializer_snapshots``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.metadata.handles import DISTRIBUTION_MODES, OperatorStateHandle
from keygroup_cli.flink.types.serializer_snapshots import (
    LIST_DISTRIBUTION_MODES,
    MODE_OPTION,
    PLAUSIBLE_VERSIONS,
    GiveUp,
    Grammar,
    StateMetaInfo,
    first_alternative,
    implausible_version,
    invalid_enum,
    parser,
    require_unique,
)

_INT = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class OperatorStateHeader:
    """The ``OperatorBackendSerializationProxy`` at the start of an operator-state stream."""

    version: int
    compressed: bool
    states: tuple[StateMetaInfo, ...] | None
    broadcast_states: tuple[StateMetaInfo, ...] | None
    end: int | None


def read_operator_header(data: bytes, source: str, end: int | None = None) -> OperatorStateHeader:
    """Parse an ``OperatorBackendSerializationProxy`` from the first bytes of an operator-state stream.

    Args:
        data: The stream's first bytes (at least the header).
        source: The file, for error messages.
        end: Where the header ends, if known (see ``operator_header_end``).

    Raises:
        UnsupportedFormatError: A proxy version below 5.
        InvalidInputError: The bytes are not an operator-state header.
    """
    if len(data) < 4:
        raise InvalidInputError(
            f"{source}: operator-state header truncated", code="FLINK_STATE_HEADER_CORRUPT"
        )
    version = _INT.unpack_from(data, 0)[0]
    if not 0 < version < PLAUSIBLE_VERSIONS:
        raise implausible_version(source, "operator-state", version)
    if version not in (5, 6):
        raise UnsupportedFormatError(
            f"{source}: unsupported operator-state proxy version {version} (kg reads 5 and 6, Flink 1.8+)",
            code="FLINK_STATE_HEADER_VERSION",
        )
    # The compression flag exists from proxy version 6 (meta-info format 7) on.
    compressed = version >= 6 and len(data) > 4 and data[4] != 0
    start = 5 if version >= 6 else 4
    grammar = Grammar(data, min(len(data), end) if end is not None else len(data))

    @parser
    def header(pos: int) -> Iterator[tuple[tuple[tuple[StateMetaInfo, ...], tuple[StateMetaInfo, ...]], int]]:
        count = grammar.short_at(pos)
        if count < 0:
            return
        for states, p in grammar.meta_infos(pos + 2, count):
            n_broadcast = grammar.short_at_or(p, -1)
            if n_broadcast < 0:
                continue
            for broadcast, q in grammar.meta_infos(p + 2, n_broadcast):
                yield (states, broadcast), q

    try:
        found = first_alternative(header(start), end)
    except GiveUp:
        return OperatorStateHeader(version, compressed, None, None, end)
    if found is None:
        raise InvalidInputError(
            f"{source}: cannot parse the operator-state header (OperatorBackendSerializationProxy)",
            code="FLINK_STATE_HEADER_CORRUPT",
        )
    (states, broadcast), pos = found
    _require_operator_states_valid(states, broadcast, source)
    return OperatorStateHeader(version, compressed, states, broadcast, pos)


def _require_operator_states_valid(
    states: tuple[StateMetaInfo, ...], broadcast: tuple[StateMetaInfo, ...], source: str
) -> None:
    """Refuse what Flink's restore refuses in an operator-state header's meta infos.

    ``RegisteredOperatorStateBackendMetaInfo`` reads ``OperatorStateHandle.Mode.valueOf`` of the
    distribution-mode option: list states are ``OPERATOR`` states in ``SPLIT_DISTRIBUTE`` or ``UNION``
    mode, broadcast states ``BROADCAST`` states in ``BROADCAST`` mode, every name once.

    Raises:
        InvalidInputError: ``FLINK_STATE_META_INFO_INVALID``.
    """
    for infos, backend, modes in (
        (states, "OPERATOR", LIST_DISTRIBUTION_MODES),
        (broadcast, "BROADCAST", ("BROADCAST",)),
    ):
        for info in infos:
            if info.backend_type_name != backend:
                raise invalid_enum(
                    source,
                    f"operator state {info.name!r} has backend state type {info.backend_type_name} among "
                    f"the {backend} states",
                )
            if info.option(MODE_OPTION) not in modes:
                raise invalid_enum(
                    source,
                    f"operator state {info.name!r} has distribution mode {info.option(MODE_OPTION)!r} "
                    f"(expected {' or '.join(modes)})",
                )
    require_unique([i.name for i in (*states, *broadcast)], source)


#: The snappy framing-format stream identifier chunk a compressed operator-state stream starts with.
SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"


def operator_header_end(data: bytes, offsets: list[int], size: int) -> int | None:
    """Return where an operator-state header ends, from the element offsets and the stream bytes.

    Uncompressed, the first element starts right after the header. Compressed
    (``CompressibleFSDataOutputStream``), one snappy frame stream starts after the header, so its 10-byte
    stream identifier sits between the header and the first element (or at the end, with no elements).
    """
    first = min((o for o in offsets if o > 0), default=size)
    marker = first - len(SNAPPY_STREAM_IDENTIFIER)
    if marker >= 0 and data[marker:first] == SNAPPY_STREAM_IDENTIFIER:
        return marker
    return first


def mode_ordinal(mode: str | None, source: str, name: str) -> int:
    """Return the ``OperatorStateHandle.Mode`` ordinal of a mode name, as Flink's ``Mode.valueOf`` reads it.

    Raises:
        InvalidInputError: Not one of the three names, exactly (``FLINK_STATE_META_INFO_INVALID``).
    """
    if mode not in DISTRIBUTION_MODES:
        raise invalid_enum(source, f"operator state {name!r} has distribution mode {mode!r}")
    return DISTRIBUTION_MODES.index(mode)


def require_states_declared(handle: OperatorStateHandle, header: OperatorStateHeader, source: str) -> None:
    """Refuse a handle whose states are not exactly those its stream's header declares, in the same modes.

    Flink writes one handle entry per state of the header (``DefaultOperatorStateBackendSnapshotStrategy``),
    in the header's mode, and its restore fails on a handle state the header does not declare ("Found state
    without corresponding meta info"). A difference is damage to ``_metadata`` (a name, or the mode ordinal
    a rescale redistributes by) or to the stream's header: kg would drop, mislabel or redistribute the state
    in the wrong mode. A header kg could not resolve (``states`` None) is not compared.

    Raises:
        InvalidInputError: ``FLINK_OPERATOR_STATE_INCONSISTENT``.
    """
    if header.states is None or header.broadcast_states is None:
        return
    declared = {i.name: mode_ordinal(i.option(MODE_OPTION), source, i.name) for i in header.states}
    declared.update((i.name, DISTRIBUTION_MODES.index("BROADCAST")) for i in header.broadcast_states)
    named: set[str] = set()
    for entry in handle.states:
        if entry.name in named:
            raise _inconsistent(source, f"_metadata names operator state {entry.name!r} twice")
        named.add(entry.name)
        mode = declared.get(entry.name)
        if mode is None:
            raise _inconsistent(
                source, f"operator state {entry.name!r} in _metadata is not declared by the stream's header"
            )
        if mode != entry.mode:
            raise _inconsistent(
                source,
                f"operator state {entry.name!r} is {entry.mode_name} in _metadata and "
                f"{DISTRIBUTION_MODES[mode]} in the stream's header",
            )
    missing = [name for name in declared if name not in named]
    if missing:
        raise _inconsistent(
            source, f"the stream's header declares operator state {missing[0]!r}, _metadata does not"
        )


def _inconsistent(source: str, what: str) -> InvalidInputError:
    return InvalidInputError(f"{source}: {what}", code="FLINK_OPERATOR_STATE_INCONSISTENT")
