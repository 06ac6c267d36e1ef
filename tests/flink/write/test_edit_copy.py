"""The byte-copying edit (``flink.write.edit_copy``) writes what the reference decode/encode path writes.

On every canonical heap and RocksDB fixture of Flink 2.3 (snappy included), for every keyed file: a write
(matches and inserts in some key groups) and a rule (TTL expiry, early timers) on one state, run both ways.
Uncompressed files must be equal byte for byte; in snappy files every block must hold the reference's
content, and be stored either as the input stored it (copied) or as the reference encoded it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.flink import open_savepoint, state_codecs
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.kernels.native import NATIVE_ENV
from keygroup_cli.flink.write.edit import CompactRule, EditCounts, KeyedEdit, edited_batches, is_ttl
from keygroup_cli.flink.write.edit_copy import copies_key_groups, edit_copying, touched_groups
from keygroup_cli.flink.write.keyed_tasks import (
    KeyedReadTask,
    KeyedWriteTask,
    read_keyed_task,
    write_keyed_task,
)
from tests.kg_fixture_state import FLINK_FIXTURES

CANONICAL = sorted(
    p.name
    for p in FLINK_FIXTURES.iterdir()
    if p.is_dir() and "native" not in p.name and re.search(r"heap-(files|inline|snappy)|canonical", p.name)
)


def _blocks(directory: Path, handle: KeyGroupsHandle) -> dict[int, bytes]:
    with StreamSource(handle.delegate, directory) as src:
        return {g: src.read(a, b) for g, a, b in key_group_extents(handle, src.size)}


def _edits(table: pa.Table, codecs: dict, names: tuple[str, ...]) -> list[KeyedEdit]:  # type: ignore[type-arg]
    """Writes (the biggest state, the biggest value state) and rules (TTL, timers) to run both ways."""
    state = table.column("state").cast(pa.string())
    sizes = {n: int(pc.sum(pc.equal(state, n)).as_py() or 0) for n in names}
    present = [n for n in names if sizes[n]]
    biggest = max(present, key=lambda n: sizes[n])
    rows = table.filter(pc.equal(state, biggest))
    groups = np.unique(np.asarray(rows.column("key_group").to_numpy()))
    chosen = rows.filter(pc.is_in(rows.column("key_group"), pa.array(groups[::3], pa.int32())))
    chosen = chosen.set_column(
        chosen.schema.get_field_index("state"), "state", chosen.column("state").cast(pa.string())
    )
    write = KeyedEdit(
        frozenset({biggest}), matches=chosen.select(["key_group", "state", "key"]), inserts=chosen
    )
    smallest = min(present, key=lambda n: sizes[n])
    rule_states = {smallest} | {n for n in present if is_ttl(codecs[n].value) or codecs[n].kind == "timer"}
    stamps = table.column("timestamp").drop_null()
    median = int(np.median(stamps.to_numpy())) if len(stamps) else 0
    rule = KeyedEdit(frozenset(rule_states), rule=CompactRule(timers_before=median, ttl_ms=1, now_ms=2**62))
    edits = [write, rule]
    value_states = [n for n in present if codecs[n].kind == "value"]
    if value_states:
        name = max(value_states, key=lambda n: sizes[n])
        rows = table.filter(pc.equal(state, name))
        groups = np.unique(np.asarray(rows.column("key_group").to_numpy()))
        chosen = rows.filter(pc.is_in(rows.column("key_group"), pa.array(groups[1::2], pa.int32())))
        chosen = chosen.set_column(
            chosen.schema.get_field_index("state"), "state", chosen.column("state").cast(pa.string())
        )
        half = chosen.slice(0, chosen.num_rows // 2)
        changed = half.set_column(
            half.schema.get_field_index("value"),
            "value",
            pa.array([v + b"!" for v in half.column("value").to_pylist()], pa.binary()),
        )
        # An upsert (new values for half the chosen keys, the other half deleted), and a delete alone.
        edits.append(
            KeyedEdit(
                frozenset({name}),
                matches=chosen.select(["key_group", "state", "key", "namespace"]),
                inserts=changed,
            )
        )
        edits.append(KeyedEdit(frozenset({name}), matches=chosen.select(["key_group", "state", "key"])))
    ttl_values = [n for n in present if is_ttl(codecs[n].value) and codecs[n].kind == "value"]
    if ttl_values:
        # Only --expired-ttl, at the median last access: some values expire, some stay.
        values = table.filter(pc.is_in(state, pa.array(ttl_values))).column("value").to_pylist()
        last = sorted(int.from_bytes(v[:8], "big", signed=True) for v in values)
        now = last[len(last) // 2] + 1000
        named = frozenset(ttl_values) | {smallest} | {n for n in present if codecs[n].kind == "timer"}
        edits.append(KeyedEdit(named, rule=CompactRule(ttl_ms=1000, now_ms=now)))
    return edits


def _run_both(
    tmp: Path, read: KeyedReadTask, write: KeyedWriteTask, edit: KeyedEdit, codecs, key_type, names
):  # type: ignore[no-untyped-def]
    ref_counts, fast_counts = EditCounts(), EditCounts()
    (tmp / "ref").mkdir(exist_ok=True)
    (tmp / "fast").mkdir(exist_ok=True)
    ref_task, fast_task = replace(write, root=str(tmp / "ref")), replace(write, root=str(tmp / "fast"))
    ref = write_keyed_task(
        ref_task, edited_batches(read_keyed_task(read, names), edit, codecs, key_type, names, ref_counts)
    )
    copied: list[int] = []
    filtered: list[int] = []
    fast = edit_copying(
        read, fast_task, edit, codecs, key_type, names, fast_counts, copied=copied, filtered=filtered
    )
    assert fast is not None
    return ref, ref_counts, fast, fast_counts, copied, filtered


@pytest.mark.parametrize("native", ["0", "1"])
@pytest.mark.parametrize("fixture", CANONICAL)
def test_copied_key_groups_write_what_the_reference_path_writes(
    fixture: str, native: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KG_NATIVE=1: the splice's kernels (``kernels.splice``) match and frame the blocks; 0: numpy does.
    monkeypatch.setenv(NATIVE_ENV, native)
    sp = open_savepoint(FLINK_FIXTURES / fixture)
    runs = copied_total = filtered_total = 0
    for op in sp.metadata.operators:
        for n, stream in enumerate(sp.keyed_streams.get(op.operator_id, ())):
            h = stream.handle
            names = tuple(s.name for s in stream.layout.states)
            span = KeyGroupRange(h.key_group_start, h.key_group_end)
            read = KeyedReadTask(str(sp.directory), h, op.max_parallelism, span, 0, h.size, stream.raw_header)
            batches = list(read_keyed_task(read, names))
            if not sum(b.num_rows for b in batches):
                continue
            table = pa.Table.from_batches(batches)
            codecs = state_codecs(stream)
            key_type = stream.layout.codec.key_type
            for e, edit in enumerate(_edits(table, codecs, names)):
                write = KeyedWriteTask(
                    "",
                    f"{op.operator_id}-{n}-{e}",
                    stream.subtask,
                    stream.raw_header,
                    op.max_parallelism,
                    span,
                    stream.header.compressed,
                )
                assert copies_key_groups(read, replace(write, root=str(tmp_path)))
                ref, ref_counts, fast, fast_counts, copied, filtered = _run_both(
                    tmp_path, read, write, edit, codecs, key_type, names
                )
                runs += 1
                copied_total += len(copied)
                filtered_total += len(filtered)
                if edit.rule is not None and edit.rule.timers_before is None and key_type == "int":
                    # --expired-ttl alone on Int keys: the TTL values are dropped as bytes, not decoded.
                    assert filtered and sum(ref_counts.removed.values()) > 0
                assert (ref.rows, ref.size > 0) == (fast.rows, fast.size > 0)
                assert ref_counts.before == fast_counts.before
                assert ref_counts.removed == fast_counts.removed
                assert ref_counts.inserted == fast_counts.inserted
                assert ref_counts.removed_bytes == fast_counts.removed_bytes
                assert [o > 0 for o in ref.handle.offsets] == [o > 0 for o in fast.handle.offsets]
                spliced = key_type in ("int", "long") and codecs[min(edit.states)].kind == "value"
                if edit.rule is None and spliced:
                    # A write of a value state keyed by Int or Long: its key groups are spliced as bytes.
                    assert set(filtered) | set(copied) >= touched_groups(edit)
                ref_bytes = (tmp_path / "ref" / write.name).read_bytes()
                fast_bytes = (tmp_path / "fast" / write.name).read_bytes()
                if not stream.header.compressed:
                    assert fast_bytes == ref_bytes, (fixture, op.label, n, e)
                    continue
                before = _blocks(sp.directory, h)
                ref_blocks = _blocks(tmp_path / "ref", ref.handle)
                fast_blocks = _blocks(tmp_path / "fast", fast.handle)
                assert fast_bytes[: len(stream.raw_header)] == ref_bytes[: len(stream.raw_header)]
                assert ref_blocks.keys() == fast_blocks.keys()
                for g, raw in fast_blocks.items():
                    assert decode_frames(raw) == decode_frames(ref_blocks[g]), (fixture, g)
                    assert raw == (before[g] if g in copied else ref_blocks[g]), (fixture, g)
    assert runs >= 2
    assert copied_total > 0  # some key groups were copied, not re-encoded
