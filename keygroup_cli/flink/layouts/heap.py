"""Read the HashMap backend's own snapshot layout and rewrite it as canonical key-group blocks.

Retained HashMap checkpoints (``chk-N``) and NATIVE HashMap savepoints hold ``KeyGroupsStateHandle``s
(tag 12, or 3) whose stream is written by ``HeapSnapshotStrategy`` (Flink 1.x and 2.x alike), not by
``FullSnapshotAsyncWriter``. After the same ``KeyedBackendSerializationProxy`` header, *every* key group of
the range has a block (so no offset is 0):

- int ``keyGroupId`` (never compressed)
- for each registered state, in the order of a Java ``HashMap`` of the states (not by id), a stream of its
  own (snappy-framed when the header says so) holding short ``stateId`` and the state's key-group payload:
  - key/value states (``CopyOnWriteStateMapSnapshot.writeState``): int count, then count ×
    (namespace, key, state), each written by its serializer with no lengths; a list state's value is
    ``ListSerializer`` (int size, elements), a map state's ``MapSerializer`` (int size, then per entry the
    key, boolean isNull and the value when not null);
  - priority queues, i.e. timers (``KeyGroupPartitioner.PartitioningResultImpl.writeStateInKeyGroup``):
    int count, then the elements (``TimerSerializer``: flipped timestamp, key, namespace).

Restore reads it with ``StateTableByKeyGroupReaders`` (``readMappingsInKeyGroup``) and
``HeapPriorityQueueSnapshotRestoreWrapper``. Entries carry no lengths, so each one is delimited by walking
its serializers (``skip_serialized``); a serializer kg cannot walk is refused (exit 4), never guessed.

``canonical_view`` turns such a snapshot into a canonical savepoint in a scratch directory: each keyed file
becomes the same header (compression flag cleared) followed by canonical blocks (composite keys with the
key-group prefix, list elements joined by ``,``, one entry per map key, timers as keys with empty values),
and every other file is referenced where it is. Everything kg does with canonical savepoints (decode,
rescale with or without a maxParallelism change, write) then applies unchanged.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.keygroups import key_group_prefix_bytes
from keygroup_cli.flink.io.paths import local_path, view_directory
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_handles import FileHandle, KeyGroupsHandle, RelativeFileHandle, StreamHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.encode import encode_block
from keygroup_cli.flink.keyed.header import KeyedStateHeader, read_keyed_header
from keygroup_cli.flink.keyed.layout import kg_kind
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle, OperatorStateHandle
from keygroup_cli.flink.metadata.locate import FlinkCheckpoint
from keygroup_cli.flink.metadata.reader import (
    CheckpointMetadata,
    OperatorState,
    SubtaskState,
    describe_properties,
)
from keygroup_cli.flink.metadata.writer import CANONICAL_SAVEPOINT_PROPERTIES
from keygroup_cli.flink.types.avro import AvroDecodeError, AvroSchemaError, avro_reader, read_value
from keygroup_cli.flink.types.serializer_snapshots import AVRO_SERIALIZER_SNAPSHOT, SerializerSnapshot
from keygroup_cli.flink.types.serializers import (
    FIXED_SIZES,
    STRING_SERIALIZER_SNAPSHOT,
    read_string,
    variable_int_bytes,
)
from keygroup_cli.storage.locations import Location

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")

_BASE = "org.apache.flink.api.common.typeutils.base."
LIST_SERIALIZER_SNAPSHOT = f"{_BASE}ListSerializerSnapshot"
MAP_SERIALIZER_SNAPSHOT = f"{_BASE}MapSerializerSnapshot"
TIMER_SERIALIZER_SNAPSHOT = "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot"
TTL_SERIALIZER_SNAPSHOT = "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
BYTES_SERIALIZER_SNAPSHOT = f"{_BASE}array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot"
#: Serializers written as their nested serializers one after the other (``CompositeSerializer``).
_SEQUENCES = frozenset({TTL_SERIALIZER_SNAPSHOT})

#: Key-group handle tags whose stream may be in the heap layout (``KeyGroupsStateHandle``).
HEAP_TAGS = (3, 12)


def _corrupt(source: str, what: str) -> InvalidInputError:
    return InvalidInputError(f"{source}: {what}", code="FLINK_STATE_CORRUPT")


def skip_serialized(snap: SerializerSnapshot, data: bytes, pos: int, source: str) -> int:
    """Return where the value written by the serializer of ``snap`` at ``pos`` ends.

    Mirrors the ``serialize`` methods of ``StringSerializer``, the fixed-size base serializers,
    ``BytePrimitiveArraySerializer``, ``ListSerializer``, ``MapSerializer``, ``TimerSerializer``,
    ``TtlSerializer`` and flink-avro's ``AvroSerializer`` (read with its writer schema, ``flink/types/avro``).

    Raises:
        UnsupportedFormatError: A serializer kg cannot walk.
        InvalidInputError: The bytes end inside the value.
    """
    name = snap.class_name
    try:
        if name == STRING_SERIALIZER_SNAPSHOT:
            return read_string(data, pos, source)[1]
        size = FIXED_SIZES.get(name)
        if size is not None:
            end = pos + size
        elif name == BYTES_SERIALIZER_SNAPSHOT:
            length = _INT.unpack_from(data, pos)[0]
            if length < 0:
                # A negative length would move the walk backwards: an entry count of 2^31 would then
                # loop (and append entries) without ever reaching the end of the block.
                raise _corrupt(source, f"a {snap.serializer_name} value has negative length {length}")
            end = pos + 4 + length
        elif name == LIST_SERIALIZER_SNAPSHOT and len(snap.nested) == 1:
            count = _INT.unpack_from(data, pos)[0]
            end = pos + 4
            for _ in range(count):
                end = skip_serialized(snap.nested[0], data, end, source)
        elif name == MAP_SERIALIZER_SNAPSHOT and len(snap.nested) == 2:
            count = _INT.unpack_from(data, pos)[0]
            end = pos + 4
            for _ in range(count):
                end = skip_serialized(snap.nested[0], data, end, source)
                is_null = data[end]
                end += 1
                if not is_null:
                    end = skip_serialized(snap.nested[1], data, end, source)
        elif name == TIMER_SERIALIZER_SNAPSHOT and len(snap.nested) == 2:
            end = skip_serialized(
                snap.nested[1], data, skip_serialized(snap.nested[0], data, pos + 8, source), source
            )
        elif name == AVRO_SERIALIZER_SNAPSHOT:
            end = _skip_avro(snap, data, pos, source)
        elif name in _SEQUENCES and snap.nested:
            end = pos
            for nested in snap.nested:
                end = skip_serialized(nested, data, end, source)
        else:
            raise _unknown_serializer(snap, source)
    except (struct.error, IndexError):
        raise _corrupt(source, f"a {snap.serializer_name} value runs past the end of its block") from None
    if end > len(data):
        raise _corrupt(source, f"a {snap.serializer_name} value runs past the end of its block")
    return end


def _skip_avro(snap: SerializerSnapshot, data: bytes, pos: int, source: str) -> int:
    """Return where the Avro value at ``pos`` ends, read with the writer schema ``snap`` holds."""
    try:
        end: int = read_value(avro_reader(snap.raw, snap.version), data, pos)[1]
    except AvroSchemaError as exc:
        raise UnsupportedFormatError(
            f"{source}: heap-layout Avro state whose writer schema kg cannot read ({exc}); take a "
            "canonical savepoint",
            code="FLINK_HEAP_SERIALIZER_UNKNOWN",
        ) from None
    except AvroDecodeError as exc:
        raise _corrupt(source, f"an Avro value does not read ({exc})") from None
    return end


def _unknown_serializer(snap: SerializerSnapshot, source: str) -> UnsupportedFormatError:
    return UnsupportedFormatError(
        f"{source}: heap-layout state written by {snap.serializer_name}: kg cannot find where its "
        "entries end (the layout stores no lengths); take a canonical savepoint",
        code="FLINK_HEAP_SERIALIZER_UNKNOWN",
    )


class _StateWalker:
    """Turn one state's heap payload into canonical ``(state id, composite key, value)`` entries."""

    def __init__(self, header: KeyedStateHeader, state_id: int, source: str) -> None:
        assert header.states is not None and header.key_serializer is not None
        info = header.states[state_id]
        self.state_id = state_id
        self.kind = kg_kind(info)
        self.source = source
        self.key = header.key_serializer
        value = info.serializer("VALUE_SERIALIZER")
        namespace = info.serializer("NAMESPACE_SERIALIZER")
        if value is None or (namespace is None and self.kind != "timer"):
            raise UnsupportedFormatError(
                f"{source}: state {info.name!r} has no value or namespace serializer in its header",
                code="FLINK_STATE_HEADER_UNKNOWN",
            )
        self.value = value
        self.namespace = namespace
        # Key length and namespace length follow them only when both serializers are variable-length
        # (``CompositeKeySerializationUtils``, as in ``keyed_encode._entries_of_group``).
        self.both_variable = FIXED_SIZES.get(self.key.class_name) is None and (
            namespace is None or FIXED_SIZES.get(namespace.class_name) is None
        )

    def entries(self, data: bytes, pos: int, out: list[tuple[int, bytes, bytes]]) -> int:
        """Append the entries of the payload at ``pos`` to ``out``; return where the payload ends."""
        try:
            count = _INT.unpack_from(data, pos)[0]
        except struct.error:
            raise _corrupt(self.source, "state payload ends before its entry count") from None
        pos += 4
        sid, src = self.state_id, self.source
        for _ in range(count):
            if self.kind == "timer":
                end = skip_serialized(self.value, data, pos, src)
                out.append((sid, data[pos:end], b""))
                pos = end
                continue
            assert self.namespace is not None
            ns_end = skip_serialized(self.namespace, data, pos, src)
            key_end = skip_serialized(self.key, data, ns_end, src)
            value_end = skip_serialized(self.value, data, key_end, src)
            namespace, key, value = data[pos:ns_end], data[ns_end:key_end], data[key_end:value_end]
            pos = value_end
            composite = self._composite(key, namespace)
            if self.kind == "list":
                self._list(composite, value, out)
            elif self.kind == "map":
                self._map(composite, value, out)
            else:
                out.append((sid, composite, value))
        return pos

    def _composite(self, key: bytes, namespace: bytes) -> bytes:
        if not self.both_variable:
            return key + namespace
        return key + variable_int_bytes(len(key)) + namespace + variable_int_bytes(len(namespace))

    def _list(self, composite: bytes, value: bytes, out: list[tuple[int, bytes, bytes]]) -> None:
        # ListSerializer → ListDelimitedSerializer: the elements joined by ',' (an empty list is no entry).
        element = self.value.nested[0]
        count = _INT.unpack_from(value, 0)[0]
        pos, parts = 4, []
        for _ in range(count):
            end = skip_serialized(element, value, pos, self.source)
            parts.append(value[pos:end])
            pos = end
        if parts:
            out.append((self.state_id, composite, b",".join(parts)))

    def _map(self, composite: bytes, value: bytes, out: list[tuple[int, bytes, bytes]]) -> None:
        # MapSerializer → one entry per map key: composite + user key, value = isNull flag (+ value).
        user_key, user_value = self.value.nested
        count = _INT.unpack_from(value, 0)[0]
        pos = 4
        for _ in range(count):
            key_end = skip_serialized(user_key, value, pos, self.source)
            end = key_end + 1
            if not value[key_end]:
                end = skip_serialized(user_value, value, end, self.source)
            out.append((self.state_id, composite + value[pos:key_end], value[key_end:end]))
            pos = end


def heap_layout_handles(snapshot: FlinkCheckpoint) -> bool:
    """Return whether any keyed handle of ``snapshot`` is a ``KeyGroupsStateHandle`` in the heap layout.

    Tags 3/12 are also written by full (non-incremental) RocksDB checkpoints, in the canonical layout; the
    heap layout is told apart by its blocks: every offset is set and each block starts with its key group.
    """
    for op in snapshot.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if isinstance(handle, KeyGroupsHandle) and handle.tag in HEAP_TAGS:
                return is_heap_layout(snapshot, handle)
    return False


def is_heap_layout(snapshot: FlinkCheckpoint, handle: KeyGroupsHandle) -> bool:
    """Return whether one key-groups handle's stream is in the heap layout (see ``heap_layout_handles``)."""
    if handle.tag not in HEAP_TAGS or not handle.offsets or 0 in handle.offsets:
        return False
    with StreamSource(handle.delegate, snapshot.directory) as src:
        for group, offset in enumerate(handle.offsets, handle.key_group_start):
            raw = src.read(offset, offset + 4)
            if len(raw) < 4 or _INT.unpack(raw)[0] != group:
                return False
    return True


def transcode_keyed_file(
    src: StreamSource, handle: KeyGroupsHandle, max_parallelism: int, write: Callable[[bytes], object]
) -> tuple[int, ...]:
    """Write the canonical form of one heap-layout keyed stream through ``write``; return its offsets.

    Raises:
        UnsupportedFormatError: The header or a serializer kg cannot walk.
        InvalidInputError: Corrupt blocks (a wrong key group id, an unknown state id, truncated data).
    """
    first = min(handle.offsets)
    raw_header = src.read(0, first)
    header = read_keyed_header(raw_header, src.source, first)
    if header.states is None or header.key_serializer is None:
        raise UnsupportedFormatError(
            f"{src.source}: the keyed-state header holds a serializer snapshot kg cannot delimit",
            code="FLINK_STATE_HEADER_UNKNOWN",
        )
    walkers = [_StateWalker(header, i, src.source) for i in range(len(header.states))]
    prefix_bytes = key_group_prefix_bytes(max_parallelism)
    # The canonical stream is written uncompressed: the header's boolean after the int version says so.
    canonical_header = raw_header[:4] + b"\x00" + raw_header[5:]
    write(canonical_header)
    position = len(canonical_header)
    ends = [*handle.offsets[1:], src.size]
    offsets = []
    for group, (start, end) in enumerate(zip(handle.offsets, ends, strict=True), handle.key_group_start):
        block = src.read(start, end)
        where = f"{src.source} key group {group}"
        if len(block) < 4 or _INT.unpack_from(block, 0)[0] != group:
            raise _corrupt(where, "block does not start with its key group id")
        data = decode_frames(block[4:], where) if header.compressed else block[4:]
        entries = _group_entries(data, walkers, where)
        if not entries:
            offsets.append(0)
            continue
        encoded = encode_block(group, entries, prefix_bytes)
        offsets.append(position)
        write(encoded)
        position += len(encoded)
    return tuple(offsets)


def _group_entries(data: bytes, walkers: list[_StateWalker], where: str) -> list[tuple[int, bytes, bytes]]:
    """Parse one key group's per-state streams (each state once, in file order) into canonical entries."""
    pos = 0
    seen: set[int] = set()
    runs: list[list[tuple[int, bytes, bytes]]] = []
    for _ in walkers:
        try:
            state_id = _SHORT.unpack_from(data, pos)[0]
        except struct.error:
            raise _corrupt(where, f"block ends after {len(seen)} of {len(walkers)} states") from None
        if state_id >= len(walkers) or state_id in seen:
            raise _corrupt(where, f"unexpected state id {state_id}")
        seen.add(state_id)
        run: list[tuple[int, bytes, bytes]] = []
        pos = walkers[state_id].entries(data, pos + 2, run)
        if run:
            runs.append(run)
    if pos != len(data):
        raise _corrupt(where, f"{len(data) - pos} bytes after the last state")
    return [entry for run in runs for entry in run]


def needs_canonical_view(snapshot: FlinkCheckpoint) -> bool:
    """Return whether ``snapshot``'s keyed state must be rewritten (``canonical_view``) before kg reads it.

    True for the heap layout and for RocksDB database files (``keygroup_cli.flink.layouts.rocksdb``).
    """
    if any(
        isinstance(sub.managed_keyed_state, IncrementalKeyedHandle)
        for op in snapshot.metadata.operators
        for sub in op.subtasks
    ):
        return True
    return heap_layout_handles(snapshot)


def canonical_view(snapshot: FlinkCheckpoint, target: Path) -> FlinkCheckpoint:
    """Write ``snapshot`` (heap layout or RocksDB files) as a canonical savepoint in the new ``target``.

    Keyed files are rewritten into ``target``; every other file stays where it is, referenced by an absolute
    ``FileStateHandle``, so ``target`` is a scratch view for kg to read (not a savepoint to keep). The
    properties become a canonical savepoint's.

    Raises:
        UnsupportedFormatError: A serializer kg cannot walk, or a handle on an object store.
        InvalidInputError: Corrupt keyed blocks or missing files.
    """
    target.mkdir(parents=True)
    directory = snapshot.directory
    meta = snapshot.metadata

    def absolute(handle: StreamHandle | None) -> StreamHandle | None:
        if isinstance(handle, RelativeFileHandle):
            path = local_path(handle, directory)
            if isinstance(path, Location):
                path = path.local_path
            if path is None:
                raise UnsupportedFormatError(
                    f"{handle.relative_path}: a state file kg reads only from local disk",
                    code="REMOTE_STATE_FILE",
                )
            return FileHandle(Path(path).resolve().as_uri(), handle.size)
        return handle

    def operator_handle(handle: OperatorStateHandle | None) -> OperatorStateHandle | None:
        return None if handle is None else replace(handle, delegate=absolute(handle.delegate))

    operators = []
    for op in meta.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, KeyGroupsHandle) and is_heap_layout(snapshot, keyed):
                keyed = _transcode(snapshot, op, keyed, target)
            elif isinstance(keyed, IncrementalKeyedHandle):
                # Imported here: the RocksDB path is the only one that needs the optional binding.
                from keygroup_cli.flink.layouts.rocksdb import transcode_incremental

                keyed = transcode_incremental(snapshot, op, keyed, target)
            elif isinstance(keyed, KeyGroupsHandle):
                keyed = replace(keyed, delegate=absolute(keyed.delegate))
            subtasks.append(_with_handles(sub, keyed, operator_handle))
        operators.append(replace(op, subtasks=tuple(subtasks)))
    canonical: CheckpointMetadata = replace(
        meta,
        operators=tuple(operators),
        properties_bytes=CANONICAL_SAVEPOINT_PROPERTIES if meta.version >= 4 else None,
        properties=describe_properties(CANONICAL_SAVEPOINT_PROPERTIES) if meta.version >= 4 else None,
    )
    # The view is read through this object alone: no _metadata is written for it (nor encoded, nor read).
    # Its directory may read where the original may: its absolute handles name the original's files.
    return FlinkCheckpoint(target / "_metadata", canonical, view=view_directory(target, directory))


def _with_handles(
    sub: SubtaskState,
    keyed: object,
    operator_handle: Callable[[OperatorStateHandle | None], OperatorStateHandle | None],
) -> SubtaskState:
    return replace(
        sub,
        managed_keyed_state=keyed,  # type: ignore[arg-type]
        managed_operator_state=operator_handle(sub.managed_operator_state),
        raw_operator_state=operator_handle(sub.raw_operator_state),
    )


def _transcode(
    snapshot: FlinkCheckpoint, op: OperatorState, handle: KeyGroupsHandle, target: Path
) -> KeyGroupsHandle:
    name = str(uuid.uuid4())
    with StreamSource(handle.delegate, snapshot.directory) as src, open(target / name, "wb") as out:
        offsets = transcode_keyed_file(src, handle, op.max_parallelism, out.write)
        size = out.tell()
    return KeyGroupsHandle(7, handle.key_group_start, offsets, RelativeFileHandle(name, size))


__all__ = [
    "canonical_view",
    "heap_layout_handles",
    "is_heap_layout",
    "needs_canonical_view",
    "skip_serialized",
    "transcode_keyed_file",
]
