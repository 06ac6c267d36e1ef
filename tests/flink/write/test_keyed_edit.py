"""``flink.write.edit``: an edit applied to the rows a keyed file decodes into, key group by key group."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.flink import find_operator, open_savepoint, state_codecs
from keygroup_cli.flink.write.edit import CompactRule, EditCounts, KeyedEdit, _stale, edited_batches, is_ttl
from keygroup_cli.flink.write.keyed_tasks import KeyedReadTask, read_keyed_task
from tests.kg_fixture_state import FLINK_FIXTURES

HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"
TYPED = FLINK_FIXTURES / "typed-heap-canonical-p2"


def _file(path, operator, index=0):  # type: ignore[no-untyped-def]
    sp = open_savepoint(path)
    stream = sorted(
        sp.keyed_streams[find_operator(sp, operator).operator_id], key=lambda s: s.handle.key_group_start
    )[index]
    names = tuple(s.name for s in stream.layout.states)
    h = stream.handle
    task = KeyedReadTask(
        str(sp.directory),
        h,
        find_operator(sp, operator).max_parallelism,
        KeyGroupRange(h.key_group_start, h.key_group_end),
        0,
        h.size,
        stream.raw_header,
    )
    return (
        list(read_keyed_task(task, names, batch_rows=37)),
        state_codecs(stream),
        stream.layout.codec.key_type,
        names,
    )


def test_inserts_merge_in_key_group_order_and_counts_add_up() -> None:
    rows, codecs, key_type, names = _file(HEAP, "keyed-state")
    table = pa.Table.from_batches(rows)
    groups = sorted(set(table.column("key_group").to_pylist()))
    inserts = pa.table(
        {
            "key_group": pa.array([groups[0], groups[5], groups[-1] + 1], pa.int32()),
            "state": ["sum"] * 3,
            "key": ["i0", "i1", "i2"],
            "namespace": [b"\x00"] * 3,
            "value": [b"\x00" * 8] * 3,
        }
    )
    matches = pa.table({"key_group": pa.array([0], pa.int32()), "state": ["sum"], "key": ["key-165"]})
    edit = KeyedEdit(frozenset({"sum"}), matches=matches, inserts=inserts)
    counts = EditCounts()
    # Batches of 37 rows cut key groups in two: the inserted rows must still come after the group's kept rows.
    out = pa.concat_tables(
        edited_batches(rows, pickle.loads(pickle.dumps(edit)), codecs, key_type, names, counts)
    )
    g = np.asarray(out.column("key_group").to_numpy())
    assert bool((np.diff(g) >= 0).all())
    assert out.num_rows == table.num_rows + 3 - 1
    assert sum(counts.inserted.values()) == 3 and sum(counts.removed.values()) == 1
    assert (
        sum(counts.before.values())
        == table.filter(pc.equal(table.column("state").cast(pa.string()), "sum")).num_rows
    )
    assert (
        "key-165"
        not in out.filter(pc.equal(out.column("state").cast(pa.string()), "sum")).column("key").to_pylist()
    )
    for key, group in (("i0", groups[0]), ("i1", groups[5])):
        block = out.filter(pc.equal(out.column("key_group"), group)).column("key").to_pylist()
        assert block[-1] == key


def test_expired_ttl_trims_lists_and_saturates_like_flink() -> None:
    rows, codecs, key_type, names = _file(TYPED, "typed-state")
    assert is_ttl(codecs["ttl-list"].value) and not is_ttl(codecs["pojo"].value)
    table = pa.Table.from_batches(rows)
    lists = table.filter(pc.equal(table.column("state").cast(pa.string()), "ttl-list"))
    stamps = sorted({struct.unpack_from(">q", v, 0)[0] for v in lists.column("value").to_pylist()})
    rule = CompactRule(
        ttl_ms=1, now_ms=stamps[0] + 1
    )  # elements stamped at stamps[0] expire, later ones stay
    out = pa.concat_tables(
        edited_batches(rows, KeyedEdit(frozenset({"ttl-list"}), rule=rule), codecs, key_type, names)
    )
    kept = out.filter(pc.equal(out.column("state").cast(pa.string()), "ttl-list")).column("value").to_pylist()
    for raw in kept:
        elements = codecs["ttl-list"].list_elements(raw)
        assert elements and all(e.last_access > stamps[0] for e in elements)
    assert _stale(struct.pack(">q", 2**62), 0, 2**62, 2**63 - 1)  # ts + ttl overflows: Long.MAX_VALUE
    assert not _stale(struct.pack(">q", 2**62), 0, 2**62, 2**63 - 2)


def test_rows_of_other_states_pass_untouched() -> None:
    rows, codecs, key_type, names = _file(HEAP, "keyed-state", 2)
    edit = KeyedEdit(frozenset({"sum"}), replace=True)
    out = pa.concat_tables(edited_batches(rows, edit, codecs, key_type, names))
    table = pa.Table.from_batches(rows)
    other = pc.not_equal(table.column("state").cast(pa.string()), "sum")
    assert out.to_pylist() == table.filter(other).to_pylist()
