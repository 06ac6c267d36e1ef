"""Keyed entries re-keyed as bytes give the blocks, and the refusals, of rows decoded and encoded again.

``keyed_entries`` is the byte-level re-key route; the row route (``keyed_decode`` rows, hashed, sorted,
``keyed_encode``) is its reference. Generated rows cover what Flink's fixtures do not: long and non-ASCII
String keys (supplementary characters too), Int and Boolean keys, windowed namespaces, null map values,
timers, 1- and 2-byte key-group prefixes both ways, batches cut anywhere; damaged blocks are refused as
the row route refuses them.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keygroup_cli.core.errors import KgError
from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.core.javahash import hash_codes, string_hash_code, unit_run_hash_codes
from keygroup_cli.core.keygroups import KeyGroupRange, key_groups_for_hashes
from keygroup_cli.core.schema import keyed_schema
from keygroup_cli.flink.check.verify import _keyed_block, block_finding
from keygroup_cli.flink.keyed.decode import decode_block_batches
from keygroup_cli.flink.keyed.encode import _Rows, write_keyed_file
from keygroup_cli.flink.keyed.entries import ENTRY_SCHEMA, Entries, Rekey, check_entries
from keygroup_cli.flink.keyed.layout import KeyedLayout
from keygroup_cli.flink.types.serializers import (
    BOOLEAN_SERIALIZER_SNAPSHOT,
    INT_SERIALIZER_SNAPSHOT,
    LONG_SERIALIZER_SNAPSHOT,
    STRING_SERIALIZER_SNAPSHOT,
)
from keygroup_cli.flink.write.keyed_tasks import require_stored_key_groups
from tests.flink.keyed.test_block_check import _damage
from tests.flink.keyed.test_keyed_state_columns import STATES, _layout

_KEYS = {
    "string": (STRING_SERIALIZER_SNAPSHOT, st.text(max_size=300)),
    "long": (LONG_SERIALIZER_SNAPSHOT, st.integers(-(2**63), 2**63 - 1)),
    "int": (INT_SERIALIZER_SNAPSHOT, st.integers(-(2**31), 2**31 - 1)),
    "boolean": (BOOLEAN_SERIALIZER_SNAPSHOT, st.booleans()),
}
NAMES = tuple(s.name for s in STATES)
HEADER = bytes(8)  # write_keyed_file patches byte 4 (compression); the layout is given apart


def _prefix(max_parallelism: int) -> int:
    return 1 if max_parallelism <= 128 else 2


@st.composite
def _savepoint_rows(draw: st.DrawFn) -> tuple[KeyedLayout, int, int, pa.RecordBatch]:
    key_type = draw(st.sampled_from(sorted(_KEYS)))
    serializer, keys = _KEYS[key_type]
    old_max, new_max = draw(st.sampled_from([(128, 300), (300, 64), (10, 37), (1000, 129)]))
    layout = _layout(serializer, _prefix(old_max), *STATES)
    count = draw(st.integers(1, 60))
    out: dict[str, list[Any]] = {c: [] for c in keyed_schema(key_type).names}
    for _ in range(count):
        state = draw(st.sampled_from(STATES))
        out["state"].append(state.name)
        out["key"].append(draw(keys))
        out["namespace"].append(
            draw(st.binary(min_size=16, max_size=16)) if state.namespace_size == 16 else b"\x00"
        )
        out["user_key"].append(draw(st.binary(max_size=6)) if state.kind == "map" else None)
        timer = state.kind == "timer"
        out["timestamp"].append(draw(st.integers(-(2**63), 2**63 - 1)) if timer else None)
        value = (
            draw(st.none() | st.binary(max_size=8)) if state.kind == "map" else draw(st.binary(max_size=8))
        )
        out["value"].append(None if timer else value)
    groups = key_groups_for_hashes(hash_codes(pa.array(out["key"]), key_type), old_max)
    order = np.argsort(groups, kind="stable").tolist()
    sorted_rows = {c: [v[i] for i in order] for c, v in out.items() if c != "key_group"}
    sorted_rows["key_group"] = [int(groups[i]) for i in order]
    return layout, old_max, new_max, pa.RecordBatch.from_pydict(sorted_rows, schema=keyed_schema(key_type))


def _blocks(layout: KeyedLayout, batch: pa.RecordBatch) -> list[tuple[int, bytes]]:
    return [(b.key_group, bytes(b.block)) for b in _Rows.of(batch, layout.state_ids()).blocks(layout)]


def _file(layout: KeyedLayout, new_max: int, parts: list[pa.Table], compressed: bool, encoding: Any) -> bytes:
    out = io.BytesIO()
    new_layout = KeyedLayout(layout.codec, _prefix(new_max), layout.states)
    table = pa.concat_tables(parts)
    groups = table.column("key_group").to_numpy()
    table = table.take(pa.array(np.argsort(groups, kind="stable")))
    batches = table.to_batches(max_chunksize=7)
    write_keyed_file(
        out,
        HEADER,
        new_layout,
        batches,
        KeyGroupRange(0, new_max - 1),
        compressed=compressed,
        encoding=encoding,
    )
    return out.getvalue()


def _by_rows(
    layout: KeyedLayout, old_max: int, new_max: int, blocks: list[tuple[int, bytes]]
) -> list[pa.Table]:
    parts = []
    for group, block in blocks:
        for batch in decode_block_batches(block, group, layout, "t", 5, whole=True):
            table = pa.Table.from_batches([batch])
            codes = hash_codes(table.column("key"), layout.codec.key_type)
            require_stored_key_groups(table, key_groups_for_hashes(codes, old_max), "t")
            new = pa.array(key_groups_for_hashes(codes, new_max), type=pa.int32())
            parts.append(table.set_column(0, table.schema.field(0), new))
    return parts


def _by_bytes(
    layout: KeyedLayout, old_max: int, new_max: int, blocks: list[tuple[int, bytes]]
) -> list[pa.Table]:
    rekey = Rekey(old_max, new_max, NAMES, tuple(range(len(NAMES))), "t")
    return [
        pa.Table.from_batches([batch], schema=ENTRY_SCHEMA)
        for group, block in blocks
        for batch in decode_block_batches(block, group, layout, "t", 5, whole=True, cutter=rekey)
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_savepoint_rows(), st.booleans())
def test_entries_re_keyed_as_bytes_are_the_rows_re_encoded(
    case: tuple[KeyedLayout, int, int, pa.RecordBatch], compressed: bool
) -> None:
    layout, old_max, new_max, batch = case
    blocks = _blocks(layout, batch)
    by_rows = _file(layout, new_max, _by_rows(layout, old_max, new_max, blocks), compressed, None)
    by_bytes = _file(layout, new_max, _by_bytes(layout, old_max, new_max, blocks), compressed, Entries)
    assert by_bytes == by_rows and len(by_bytes) > len(HEADER)


def _outcome(run: Any) -> tuple[str, str, str] | None:
    try:
        run()
    except KgError as exc:
        return type(exc).__name__, exc.code, exc.message
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_savepoint_rows(), st.data())
def test_damaged_blocks_are_refused_as_the_row_route_refuses_them(
    case: tuple[KeyedLayout, int, int, pa.RecordBatch], data: st.DataObject
) -> None:
    layout, old_max, new_max, batch = case
    group, block = data.draw(st.sampled_from(_blocks(layout, batch)))
    damaged = [(group, _damage(block, data, 1, 3))]
    by_rows = _outcome(lambda: _by_rows(layout, old_max, new_max, damaged))
    by_bytes = _outcome(lambda: _by_bytes(layout, old_max, new_max, damaged))
    if by_rows is not None and by_rows[1] == "FLINK_KEY_NOT_UNICODE":
        # A lone UTF-16 surrogate: Java hashes it, Arrow cannot hold it as text; bytes need not.
        assert by_bytes is None or by_bytes[1] in ("KEY_GROUP_MISMATCH", "FLINK_STATE_CORRUPT")
    else:
        assert by_bytes == by_rows


def test_a_key_in_the_wrong_key_group_is_named_as_the_row_route_names_it() -> None:
    layout = _layout(STRING_SERIALIZER_SNAPSHOT, 1, *STATES)
    keys = ["alpha", "beta", "gamma"]
    groups = key_groups_for_hashes(hash_codes(pa.array(keys), "string"), 128)
    rows = {c: [] for c in keyed_schema("string").names}  # type: dict[str, list[Any]]
    for key in keys:
        rows["key_group"].append(int(groups[0]))  # all stored in alpha's key group
        rows["state"].append("v")
        rows["key"].append(key)
        rows["namespace"].append(b"\x00")
        rows["user_key"].append(None)
        rows["value"].append(b"x")
        rows["timestamp"].append(None)
    blocks = _blocks(layout, pa.RecordBatch.from_pydict(rows, schema=keyed_schema("string")))
    by_rows = _outcome(lambda: _by_rows(layout, 128, 256, blocks))
    assert by_rows is not None and by_rows[1] == "KEY_GROUP_MISMATCH"
    assert _outcome(lambda: _by_bytes(layout, 128, 256, blocks)) == by_rows


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(max_codepoint=127), max_size=600), max_size=20))
def test_hash_codes_of_units_in_place_are_string_hash_codes(texts: list[str]) -> None:
    data = np.frombuffer(b"".join(t.encode() for t in texts) or b"\x00", dtype=np.uint8)
    lengths = np.asarray([len(t) for t in texts], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if texts else lengths
    assert unit_run_hash_codes(data, starts, lengths).tolist() == [string_hash_code(t) for t in texts]


@pytest.mark.parametrize("key_type", ["long", "int", "boolean"])
def test_fixed_size_keys_are_hashed_from_their_bytes(key_type: str) -> None:
    serializer, _keys = _KEYS[key_type]
    layout = _layout(serializer, 1, *STATES)
    keys = {"long": [0, -1, 2**63 - 1, -(2**63), 12345678901], "int": [0, -1, 2**31 - 1, -(2**31), 7]}.get(
        key_type, [True, False]
    )
    groups = key_groups_for_hashes(hash_codes(pa.array(keys), key_type), 128)
    order = np.argsort(groups, kind="stable")
    rows = {
        "key_group": [int(groups[i]) for i in order],
        "state": ["v"] * len(keys),
        "key": [keys[i] for i in order],
        "namespace": [b"\x00"] * len(keys),
        "user_key": [None] * len(keys),
        "value": [b"v"] * len(keys),
        "timestamp": [None] * len(keys),
    }
    blocks = _blocks(layout, pa.RecordBatch.from_pydict(rows, schema=keyed_schema(key_type)))
    entries = pa.concat_tables(_by_bytes(layout, 128, 300, blocks))
    expected = key_groups_for_hashes(hash_codes(pa.array(rows["key"]), key_type), 300)
    assert entries.column("key_group").to_pylist() == expected.tolist()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_savepoint_rows(), st.data())
def test_a_copied_block_is_refused_as_kg_verify_refuses_it(
    case: tuple[KeyedLayout, int, int, pa.RecordBatch], data: st.DataObject
) -> None:
    # The copy's one-pass check (check_entries, else verify's reference check) against verify's check.
    layout, old_max, _new_max, batch = case
    group, block = data.draw(st.sampled_from(_blocks(layout, batch)))
    damaged = _damage(block, data, 0, 3)
    reference = [
        f.code
        for f in _keyed_block(damaged, group, False, layout, old_max, "w", "s")
        if isinstance(f, Finding) and f.severity is Severity.ERROR
    ]
    found = block_finding(damaged, group, False, layout, old_max, "w", "s")
    assert (found.code if found is not None else None) == (reference[0] if reference else None)
    if check_entries(damaged, group, layout, old_max) is not None:
        assert not reference
