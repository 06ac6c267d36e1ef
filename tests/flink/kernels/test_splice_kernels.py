"""The splice's kernels (``kernels.splice``) edit a block's bytes exactly as ``edit_copy``'s numpy code does.

Hypothesis builds key-group blocks framed as Flink frames them (runs of states, each run's last entry
flagged, then the next run's id, the END mark), some framed otherwise (two runs of one state next to each
other), with Int or Long keys, namespaces and a 1- or 2-byte key-group prefix; an upsert or a delete of
some keys (some absent, some matched on key and namespace) is spliced into them with ``KG_NATIVE=1`` and
``KG_NATIVE=0``: the same block, entry count and counts, or the same refusal. Likewise ``--expired-ttl``
on such blocks (``_filtered``): TTL values of some states, last accesses around ``now`` and at the ends
of a long, some values too short to hold one.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keygroup_cli.flink.kernels import native as native_kernels
from keygroup_cli.flink.kernels import splice as splice_kernels
from keygroup_cli.flink.keyed.layout import END_OF_KEY_GROUP_MARK, FIRST_BIT_IN_BYTE_MASK
from keygroup_cli.flink.write.edit import CompactRule, EditCounts, KeyedEdit
from keygroup_cli.flink.write.edit_copy import _filtered, _rebuilt, _Splice

SID = 1
GROUP = 5


def _entry(prefix: int, key: bytes, value: bytes, last: bool) -> bytes:
    head = bytearray(GROUP.to_bytes(prefix, "big"))
    if last:
        head[0] |= FIRST_BIT_IN_BYTE_MASK
    whole = bytes(head) + key
    return struct.pack(">i", len(whole)) + whole + struct.pack(">i", len(value)) + value


def _block(runs: list[tuple[int, list[tuple[bytes, bytes]]]], prefix: int) -> tuple[bytes, Any]:
    """Frame ``runs`` (state id, its entries' key and value bytes) as a block; return it and its entries."""
    out = bytearray(runs[0][0].to_bytes(2, "big"))
    key_starts, key_ends, value_ends, ids = [], [], [], []
    for r, (sid, entries) in enumerate(runs):
        for e, (key, value) in enumerate(entries):
            last = e == len(entries) - 1
            key_starts.append(len(out) + 4)
            key_ends.append(len(out) + 4 + prefix + len(key))
            out += _entry(prefix, key, value, last)
            value_ends.append(len(out))
            ids.append(sid)
        following = runs[r + 1][0] if r + 1 < len(runs) else END_OF_KEY_GROUP_MARK
        out += following.to_bytes(2, "big")
    found = SimpleNamespace(
        key_starts=np.asarray(key_starts, dtype=np.int64),
        key_ends=np.asarray(key_ends, dtype=np.int64),
        value_ends=np.asarray(value_ends, dtype=np.int64),
        state_ids=np.asarray(ids, dtype=np.int32),
    )
    return bytes(out), found


@st.composite
def _cases(draw: st.DrawFn) -> tuple[_Splice, bytes, Any, bool]:
    width = draw(st.sampled_from([4, 8]))
    prefix = draw(st.sampled_from([1, 2]))
    namespace = draw(st.integers(0, 2))
    match_ns = namespace > 0 and draw(st.booleans())
    keys = st.integers(-3, 12).map(lambda k: k.to_bytes(width, "big", signed=True))
    names = st.binary(min_size=namespace, max_size=namespace).filter(lambda b: len(set(b)) <= 1)

    def cell(other_state: bool) -> bytes:
        # Now and then an entry of the state with a key of another length: the splice is refused.
        odd = not other_state and draw(st.integers(0, 40)) == 0
        return draw(keys) + draw(names) + (b"!" if odd else b"")

    ids = draw(st.lists(st.integers(0, 3), min_size=1, max_size=5))
    # Next to each other, runs of one state are merged, except where the case asks for two runs.
    split = draw(st.booleans())
    runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
    for sid in ids:
        entries = [(cell(sid != SID), draw(st.binary(max_size=5))) for _ in range(draw(st.integers(1, 6)))]
        if runs and runs[-1][0] == sid and not split:
            runs[-1][1].extend(entries)
        else:
            runs.append((sid, entries))
    block, found = _block(runs, prefix)
    present = [k for sid, entries in runs if sid == SID for k, _ in entries]
    size = width + (namespace if match_ns else 0)
    wanted = draw(st.lists(st.sampled_from(present), max_size=6)) if present else []
    wanted = [k[:size] for k in wanted] + [draw(keys) + draw(names)[: size - width] for _ in range(2)]
    wanted = list(dict.fromkeys(w for w in wanted if len(w) == size))
    inserts = [
        struct.pack(">i", prefix + width + namespace)
        + GROUP.to_bytes(prefix, "big")
        + draw(keys)
        + draw(names)
        + struct.pack(">i", 3)
        + draw(st.binary(min_size=3, max_size=3))
        for _ in range(draw(st.integers(0, 4)))
    ]
    offsets = np.concatenate(([0], np.cumsum([len(i) for i in inserts]))).astype(np.int64)
    splice = _Splice(
        SID,
        "s",
        width,
        prefix,
        namespace,
        match_ns,
        np.full(len(wanted), GROUP, dtype=np.int64),
        np.asarray(wanted, dtype=f"S{size}"),
        np.full(len(inserts), GROUP, dtype=np.int64),
        b"".join(inserts),
        offsets,
    )
    return splice, block, found, split


def _spliced(splice: _Splice, block: bytes, found: Any) -> tuple[Any, EditCounts]:
    counts = EditCounts()
    step = splice.block(GROUP, (block, block, found), None, False, counts)  # type: ignore[arg-type]
    if step is not None:
        step = (step[0], bytes(step[1]), step[2], step[3])
    return step, counts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_cases())
def test_a_block_is_spliced_by_the_kernels_as_numpy_splices_it(
    case: tuple[_Splice, bytes, Any, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    splice, block, found, _split = case
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
    assert native_kernels.kernels() is not None
    native, native_counts = _spliced(splice, block, found)
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "0")
    reference, reference_counts = _spliced(splice, block, found)
    assert native == reference
    assert native_counts == reference_counts


def test_a_block_framed_otherwise_is_left_to_the_reference_framing() -> None:
    key = (7).to_bytes(4, "big")
    # Two runs of state 1 next to each other: _rebuilt makes them one; the kernel does not frame that.
    block, found = _block([(1, [(key + b"\0", b"a")]), (1, [(key[:3] + b"\1\0", b"b")])], 1)
    ids = np.asarray(found.state_ids, dtype=np.int64)
    starts, ends = found.key_starts - 4, found.value_ends
    raw = np.frombuffer(block, dtype=np.uint8)
    framed, _ = splice_kernels.splice_block(
        raw, ids, starts, ends, np.zeros(0, np.int64), 1, np.zeros(0, np.uint8), np.zeros(1, np.int64)
    )
    assert framed == 0
    # Framed as Flink frames it, a block with nothing dropped or added comes out as it went in.
    block, found = _block([(0, [(key + b"\0", b"a")]), (1, [(key + b"\0", b"b"), (key + b"\0", b"")])], 1)
    ids = np.asarray(found.state_ids, dtype=np.int64)
    raw = np.frombuffer(block, dtype=np.uint8)
    framed, out = splice_kernels.splice_block(
        raw,
        ids,
        found.key_starts - 4,
        found.value_ends,
        np.zeros(0, np.int64),
        1,
        np.zeros(0, np.uint8),
        np.zeros(1, np.int64),
    )
    assert framed == 1
    assert bytes(out) == block == bytes(_rebuilt(raw, ids, found.key_starts - 4, found.value_ends))


def test_keys_are_matched_on_all_their_bytes_beyond_eight(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Long key and a namespace (9 bytes): the kernel matches the first 8, the rest is compared after.
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
    key = (3).to_bytes(8, "big")
    block, found = _block([(SID, [(key + b"\0", b"x"), (key + b"\1", b"y")])], 1)
    wanted = np.asarray([key + b"\1"], dtype="S9")
    splice = _Splice(
        SID,
        "s",
        8,
        1,
        1,
        True,
        np.full(1, GROUP, np.int64),
        wanted,
        np.zeros(0, np.int64),
        b"",
        np.zeros(1, np.int64),
    )
    step, counts = _spliced(splice, block, found)
    assert step is not None
    assert counts.removed == {("s", GROUP): 1}
    kept, _found = _block([(SID, [(key + b"\0", b"x")])], 1)
    assert step == (GROUP, kept, 1, False)


@st.composite
def _ttl_cases(draw: st.DrawFn) -> tuple[bytes, Any, dict[int, int], int, int]:
    long_max = 2**63 - 1
    now = draw(st.sampled_from([0, 1000, long_max]))
    ttl = draw(st.sampled_from([0, 1, 500, long_max]))
    trimmed = draw(st.sets(st.integers(0, 3), min_size=1))
    stamps = st.one_of(
        st.integers(now - 1500, now + 10).map(lambda v: max(-(2**63), min(long_max, v))),
        st.sampled_from([-(2**63), long_max, long_max - 400]),
    )

    def value(sid: int) -> bytes:
        if sid in trimmed and draw(st.integers(0, 60)) == 0:
            return draw(st.binary(max_size=7))  # too short for a last-access time: refused both ways
        return struct.pack(">q", draw(stamps)) + draw(st.binary(max_size=4))

    ids = draw(st.lists(st.integers(0, 3), min_size=1, max_size=6))
    runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
    split = draw(st.booleans())
    for sid in ids:
        entries = [((draw(st.integers(0, 9))).to_bytes(4, "big") + b"\0", value(sid)) for _ in range(4)]
        if runs and runs[-1][0] == sid and not split:
            runs[-1][1].extend(entries)
        else:
            runs.append((sid, entries))
    block, found = _block(runs, 1)
    return block, found, dict.fromkeys(trimmed, 1), ttl, now


def _expired(block: bytes, found: Any, filters: dict[int, int], ttl: int, now: int) -> tuple[Any, EditCounts]:
    layout = SimpleNamespace(
        states=[SimpleNamespace(name=f"s{i}") for i in range(4)], codec=SimpleNamespace(key_type="int")
    )
    edit = KeyedEdit(frozenset(f"s{i}" for i in filters), rule=CompactRule(ttl_ms=ttl, now_ms=now))
    counts = EditCounts()
    step = _filtered(GROUP, block, block, found, filters, edit, layout, False, counts)  # type: ignore[arg-type]
    if step is not None:
        step = (step[0], bytes(step[1]), step[2], step[3])
    return step, counts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_ttl_cases())
def test_expired_ttl_values_are_dropped_by_the_kernels_as_numpy_drops_them(
    case: tuple[bytes, Any, dict[int, int], int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
    assert native_kernels.kernels() is not None
    native, native_counts = _expired(*case)
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "0")
    reference, reference_counts = _expired(*case)
    assert native == reference
    assert native_counts == reference_counts
