"""The HashMap backend's snapshot layout (heap checkpoints, NATIVE HashMap savepoints), on Flink 2.3 bytes."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.layouts.heap import (
    LIST_SERIALIZER_SNAPSHOT,
    MAP_SERIALIZER_SNAPSHOT,
    canonical_view,
    heap_layout_handles,
    is_heap_layout,
    skip_serialized,
)
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.types.serializer_snapshots import SerializerSnapshot
from keygroup_cli.flink.types.serializers import (
    LONG_SERIALIZER_SNAPSHOT,
    STRING_SERIALIZER_SNAPSHOT,
    write_string,
)

FLINK = Path(__file__).resolve().parents[3] / "fixtures" / "flink"
CHECKPOINT = FLINK / "2.3" / "heap-checkpoint-p2-maxp128-string"


def _snap(name: str, *nested: SerializerSnapshot) -> SerializerSnapshot:
    return SerializerSnapshot(name, 3, b"", nested)


LONG = _snap(LONG_SERIALIZER_SNAPSHOT)
STRING = _snap(STRING_SERIALIZER_SNAPSHOT)


def test_skip_walks_lists_and_maps_with_null_values() -> None:
    values = struct.pack(">i", 2) + struct.pack(">qq", 1, 2)
    assert skip_serialized(_snap(LIST_SERIALIZER_SNAPSHOT, LONG), values + b"tail", 0, "t") == len(values)
    entries = struct.pack(">i", 2) + write_string("a") + b"\x01" + write_string("bé") + b"\x00" + b"\x00" * 8
    assert skip_serialized(_snap(MAP_SERIALIZER_SNAPSHOT, STRING, LONG), entries + b"x", 0, "t") == len(
        entries
    )


def test_skip_refuses_what_it_cannot_walk_and_what_is_cut_short() -> None:
    pojo = _snap("org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot")
    with pytest.raises(UnsupportedFormatError) as info:
        skip_serialized(pojo, b"\x00" * 8, 0, "t")
    assert info.value.code == "FLINK_HEAP_SERIALIZER_UNKNOWN"
    with pytest.raises(InvalidInputError):
        skip_serialized(_snap(LIST_SERIALIZER_SNAPSHOT, LONG), struct.pack(">i", 3) + b"\x00" * 16, 0, "t")


def test_heap_checkpoint_is_told_apart_from_canonical_key_groups() -> None:
    assert heap_layout_handles(read_flink_metadata(CHECKPOINT))
    assert not heap_layout_handles(read_flink_metadata(FLINK / "2.3" / "heap-files-p3-maxp128-long"))
    # A canonical stream under a tag-12 handle (as full RocksDB checkpoints write) is not the heap layout.
    canonical = read_flink_metadata(FLINK / "2.3" / "heap-files-p3-maxp128-long")
    handle = next(
        s.managed_keyed_state
        for op in canonical.metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed_state, KeyGroupsHandle)
    )
    as_checkpoint = KeyGroupsHandle(12, handle.key_group_start, handle.offsets, handle.delegate, "id")
    assert not is_heap_layout(canonical, as_checkpoint)


def test_canonical_view_keeps_every_non_keyed_file_where_it_is(tmp_path: Path) -> None:
    source = read_flink_metadata(CHECKPOINT)
    view = canonical_view(source, tmp_path / "view")
    assert view.metadata.properties is not None and view.metadata.properties.format_type == "CANONICAL"
    written = {p.name for p in (tmp_path / "view").iterdir()}
    keyed = 0
    for op in view.metadata.operators:
        for sub in op.subtasks:
            if isinstance(sub.managed_keyed_state, KeyGroupsHandle):
                keyed += 1
                assert sub.managed_keyed_state.tag == 7
                path = local_path(sub.managed_keyed_state, view.directory)
                assert path is not None and Path(str(path)).name in written
            if sub.managed_operator_state is not None:
                path = local_path(sub.managed_operator_state.delegate, view.directory)  # type: ignore[arg-type]
                assert path is None or Path(str(path)).parent == source.directory.resolve()  # type: ignore[union-attr]
    # Only the rewritten keyed files: the view is read through the object canonical_view returns, and
    # no _metadata is written for it.
    assert keyed == 4 and len(written) == keyed and "_metadata" not in written


def test_a_corrupt_block_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "chk"
    shutil.copytree(CHECKPOINT, copy)
    snap = read_flink_metadata(copy)
    handle = next(
        s.managed_keyed_state
        for op in snap.metadata.operators
        if op.uid == "keyed-state"
        for s in op.subtasks
    )
    assert isinstance(handle, KeyGroupsHandle)
    path = local_path(handle, snap.directory)
    assert path is not None
    data = bytearray(Path(str(path)).read_bytes())
    second = handle.offsets[1]
    data[second + 4 : second + 6] = b"\x00\x63"  # an unknown state id in key group start+1
    Path(str(path)).write_bytes(bytes(data))
    with pytest.raises(InvalidInputError, match="unexpected state id 99"):
        canonical_view(snap, tmp_path / "view")
