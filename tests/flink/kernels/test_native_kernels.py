"""The native kernels (``KG_NATIVE=1``) give exactly what the pure-Python reference (``KG_NATIVE=0``) gives.

The largest key-group blocks of every real Flink fixture in the canonical layout are walked, proven and
re-keyed both ways (whole, and cut in windows), and taken through the byte route (packed into parts,
framed into blocks); hypothesis then fuzzes windows cut anywhere, damaged blocks, claims of entry
boundaries, String keys, and the copy and framing of entries. Equal results, or the same error with the
same message.
"""

from __future__ import annotations

import functools
import os
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keygroup_cli.core import javahash, keygroups
from keygroup_cli.core.errors import InvalidInputError, KgError, MissingDependencyError
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.kernels import native as native_kernels
from keygroup_cli.flink.keyed import decode as keyed_decode
from keygroup_cli.flink.keyed import entries as keyed_entries
from keygroup_cli.flink.keyed import entry_parts
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.keyed.layout import KeyedLayout
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.flink.keyed.test_block_check import _damage

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = sorted(p.parent for p in (ROOT / "fixtures" / "flink").glob("*/*/_metadata"))
T = TypeVar("T")


def _both(monkeypatch: pytest.MonkeyPatch, call: Callable[[], T]) -> tuple[Any, Any]:
    """Return ``call()``'s result (or the error it raised) with the kernels and with the reference."""
    out = []
    for setting in ("1", "0"):
        monkeypatch.setenv(native_kernels.NATIVE_ENV, setting)
        try:
            out.append(call())
        except KgError as exc:
            out.append((type(exc), str(exc), getattr(exc, "code", None)))
    return out[0], out[1]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and np.array_equal(a, b)
            and a.dtype == b.dtype
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__") and type(a) is type(b):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if hasattr(a, "equals"):
        return type(a) is type(b) and bool(a.equals(b))
    return bool(a == b)


def _fixture_blocks() -> Iterator[tuple[str, KeyedLayout, int, bytes]]:
    for savepoint in FIXTURES:
        name = f"{savepoint.parent.name}/{savepoint.name}"
        snapshot = read_flink_metadata(savepoint)
        for op in snapshot.metadata.operators:
            for subtask in op.subtasks:
                handle = subtask.managed_keyed_state
                if not isinstance(handle, KeyGroupsHandle):
                    continue
                with StreamSource(handle.delegate, snapshot.directory) as src:
                    data = src.read(0, src.size)
                extents = key_group_extents(handle, len(data))
                if not extents:
                    continue  # every key group of this subtask empty (a SQL fixture's few keys)
                header = read_keyed_header(data[: extents[0][1]], name, extents[0][1])
                layout = KeyedLayout.from_header(header, op.max_parallelism, name)
                for group, start, end in extents:
                    raw = data[start:end]
                    yield name, layout, group, decode_frames(raw, name) if header.compressed else raw


def _largest(per_fixture: int) -> list[tuple[str, KeyedLayout, int, bytes]]:
    """Return every fixture's ``per_fixture`` largest blocks (the rest add time, not cases)."""
    by_fixture: dict[str, list[tuple[str, KeyedLayout, int, bytes]]] = {}
    for found in _fixture_blocks():
        by_fixture.setdefault(found[0], []).append(found)
    return [
        b for blocks in by_fixture.values() for b in sorted(blocks, key=lambda b: -len(b[3]))[:per_fixture]
    ]


BLOCKS = _largest(12)


def _rekey(layout: KeyedLayout, old_max: int) -> keyed_entries.Rekey:
    names = tuple(s.name for s in layout.states)
    return keyed_entries.Rekey(old_max, 300 if old_max <= 128 else 64, names, tuple(range(len(names))), "t")


def _decoded(block: bytes, group: int, layout: KeyedLayout, old_max: int, rows: int) -> list[Any]:
    cutter = _rekey(layout, old_max) if keyed_entries.all_states(layout) else None
    return list(keyed_decode.decode_block_batches(block, group, layout, "t", rows, whole=True, cutter=cutter))


def _packed(block: bytes, group: int, layout: KeyedLayout, old_max: int, rows: int) -> list[Any]:
    """The byte route end to end on one block: cut, packed into parts, each bucket's parts framed."""
    rekey = _rekey(layout, old_max)
    cutter = entry_parts.PartCutter(*(getattr(rekey, f) for f in rekey.__dataclass_fields__))
    new_max = rekey.new_max_parallelism
    buckets: dict[tuple[int, int], bytearray] = {}
    for cut in keyed_decode.decode_block_batches(block, group, layout, "t", rows, whole=True, cutter=cutter):
        for subtask, bucket, part, _n in entry_parts.parts(cut, new_max, 3, 16):  # type: ignore[arg-type]
            buckets.setdefault((subtask, bucket), bytearray()).extend(part)
    state_ids = np.arange(len(layout.states), dtype=np.int64)
    target = KeyedLayout(layout.codec, 1 if new_max <= 128 else 2, layout.states)
    return [
        (key, [(b.key_group, bytes(b.block), b.value_ends, b.run_end) for b in blocks])
        for key in sorted(buckets)
        for blocks in [entry_parts.frame_bucket(bytes(buckets[key]), target, state_ids)]
    ]


def _max_parallelism(layout: KeyedLayout) -> int:
    return 128 if layout.prefix_bytes == 1 else 256


def test_every_fixtures_blocks_are_walked_proven_and_re_keyed_as_the_reference_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert len({name for name, *_ in BLOCKS}) > 20
    walked = packed = 0
    seen: dict[str, int] = {}
    for name, layout, group, block in BLOCKS:
        states = keyed_entries.all_states(layout) or frozenset(range(len(layout.states)))
        native, reference = _both(
            monkeypatch, lambda b=block, s=states: keyed_decode._scan_window(b, s, None)
        )
        assert _same(native, reference)
        walked += native is not None and len(native[0]) > 0
        # Windows of 50 entries (the proof cut window by window); the byte route where it applies.
        rekey = bool(keyed_entries.all_states(layout))
        a, b = _both(
            monkeypatch,
            lambda bl=block, g=group, la=layout, r=rekey: (
                _decoded(bl, g, la, _max_parallelism(la), 50)
                if r
                else list(keyed_decode.decode_block_batches(bl, g, la, "t", 50, whole=True))
            ),
        )
        assert _same(a, b)
        if rekey and seen.setdefault(name, 0) < 3:
            # The byte route's parts and framed blocks (entry_parts), in windows of 50: the three largest.
            seen[name] += 1
            a, b = _both(
                monkeypatch,
                lambda bl=block, g=group, la=layout: _packed(bl, g, la, _max_parallelism(la), 50),
            )
            assert _same(a, b)
            packed += 1
    assert walked > 200
    assert packed > 50


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_window_cut_anywhere_and_damaged_scans_as_the_reference_scans_it(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    _name, layout, _group, block = data.draw(st.sampled_from(BLOCKS))
    lo = data.draw(st.integers(0, len(block)))
    hi = data.draw(st.integers(lo, len(block)))
    window = _damage(block[lo:hi], data, 0, 3) if hi > lo else b""
    states = frozenset(data.draw(st.sets(st.integers(0, 4), max_size=4)) | {0})
    current = data.draw(st.none() | st.integers(0, 4))
    native, reference = _both(monkeypatch, lambda: keyed_decode._scan_window(window, states, current))
    assert _same(native, reference)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_block_is_refused_or_read_as_the_reference_does(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    _name, layout, group, block = data.draw(st.sampled_from(BLOCKS))
    damaged = _damage(block, data, 1, 4)
    rows = data.draw(st.sampled_from([1, 3, 1000]))
    native, reference = _both(
        monkeypatch, lambda: _decoded(damaged, group, layout, _max_parallelism(layout), rows)
    )
    assert _same(native, reference)
    if keyed_entries.all_states(layout):
        native, reference = _both(
            monkeypatch, lambda: _packed(damaged, group, layout, _max_parallelism(layout), rows)
        )
        assert _same(native, reference)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_false_claim_of_entry_boundaries_is_judged_as_the_reference_judges_it(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    _name, layout, _group, block = data.draw(st.sampled_from(BLOCKS))
    states = keyed_entries.all_states(layout) or frozenset(range(len(layout.states)))
    scanned = keyed_decode._scan_block(block, states)
    if scanned is None:
        return
    value_ends, run_starts, end = scanned
    value_ends = value_ends.copy()
    run_end = keyed_decode._run_ends(len(value_ends), run_starts)
    if data.draw(st.booleans()) and len(value_ends) > 1:
        i = data.draw(st.integers(0, len(value_ends) - 2))
        value_ends[i] += data.draw(st.integers(-12, 12))
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(run_end) - 1))
        run_end[i] = not run_end[i]
    claimed = _damage(block, data, 0, 2)
    lo = data.draw(st.integers(0, len(value_ends) - 1))
    hi = data.draw(st.integers(lo + 1, len(value_ends)))
    native, reference = _both(
        monkeypatch,
        lambda: keyed_decode._structure(claimed, states, value_ends, run_end, end, lo, hi),
    )
    assert _same(native, reference)


def _part_cutter(layout: KeyedLayout) -> entry_parts.PartCutter:
    rekey = _rekey(layout, _max_parallelism(layout))
    return entry_parts.PartCutter(*(getattr(rekey, f) for f in rekey.__dataclass_fields__))


def _entries(cut: entry_parts.Cut) -> list[tuple[bytes, int, int, int]]:
    """A cut's entries as plain values: bytes after the prefix, new key group, state, key length."""
    joined = b"".join(bytes(raw) for raw in cut.raws)
    columns = (cut.starts.tolist(), cut.ends.tolist(), cut.groups.tolist(), cut.states.tolist())
    return [
        (joined[s:e], int(g), int(st_), int(k))
        for (s, e, g, st_), k in zip(zip(*columns, strict=True), cut.key_length.tolist(), strict=True)
    ]


def _reference_walk(
    buf: bytes, current: int | None, group: int, layout: KeyedLayout
) -> tuple[list[tuple[bytes, int, int, int]], int, int | None, bool] | None:
    """The reference path's take on a window: scan, window block, proof, prefixes, cut; None: not taken."""
    cutter = _part_cutter(layout)
    states = cutter.states(layout)
    scanned = keyed_decode._scan_window(buf, states, current)
    if scanned is None:
        return None
    value_ends, run_starts, consumed, after, ended = scanned
    if not len(value_ends):
        return [], consumed, after, ended
    block, window = keyed_decode._window_block(
        buf, states, value_ends, run_starts, consumed, current, after, ended
    )
    try:
        batches = list(keyed_decode._proven_batches(block, window, group, layout, 1 << 30, cutter))
    except KgError:
        return None  # a key stored in another key group: the kernel must leave it to the reference
    ((_lo, cut),) = batches
    return None if cut is None else (_entries(cut), consumed, after, ended)  # type: ignore[arg-type]


def _fused_walk(
    buf: bytes, current: int | None, group: int, layout: KeyedLayout
) -> tuple[list[tuple[bytes, int, int, int]], int, int | None, bool] | None:
    walked = _part_cutter(layout).walk(buf, current, group, layout)
    return None if walked is None else (_entries(walked[0]), *walked[1:])


REKEYED = [b for b in BLOCKS if keyed_entries.all_states(b[1])]


def test_the_fused_re_key_walk_takes_every_fixture_block_as_the_reference_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert len({name for name, *_ in REKEYED}) > 15
    taken = deferred = 0
    for _name, layout, group, block in REKEYED:
        monkeypatch.setenv(native_kernels.NATIVE_ENV, "0")
        reference = _reference_walk(block, None, group, layout)
        monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
        fused = _fused_walk(block, None, group, layout)
        if reference is None or not reference[3]:
            # A block the column-wise proof does not take (a key it cannot hash from its bytes), or not in
            # the canonical layout (a heap savepoint's NATIVE blocks): the reference path reads it.
            assert fused is None or fused == reference
            deferred += 1
            continue
        # Real blocks of short ASCII or fixed-size keys: the kernel takes them all, nothing deferred.
        ascii_keys = layout.codec.key_type != "string" or all(
            len(e) and e[0] < 0x80 and e[0] > 0 and max(e[1 : e[0]], default=0) < 0x80
            for e, *_ in reference[0]
        )
        if fused is None:
            assert not ascii_keys
            continue
        assert fused == reference
        # The key group under the old maxParallelism moved away: every key is then refused by both.
        monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
        assert _fused_walk(block, None, group + 1, layout) is None
        taken += 1
    assert taken > 200
    print(f"taken {taken}, deferred {deferred}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_fused_re_key_walk_of_a_damaged_window_is_the_reference_s_or_defers(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    _name, layout, group, block = data.draw(st.sampled_from(REKEYED))
    lo = data.draw(st.integers(0, len(block)))
    hi = data.draw(st.integers(lo, len(block)))
    window = _damage(block[lo:hi], data, 0, 3) if hi > lo else b""
    current = data.draw(st.none() | st.integers(0, len(layout.states) - 1))
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
    fused = _fused_walk(window, current, group, layout)
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "0")
    reference = _reference_walk(window, current, group, layout)
    if fused is not None:
        assert fused == reference


class _Bytes:
    """A ``source.read(a, b)`` over bytes in memory, as ``check_entries_in_windows`` reads a file."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.source = "t"

    def read(self, start: int, end: int) -> bytes:
        return self.data[start:end]


def _checked(block: bytes, group: int, layout: KeyedLayout, window: int) -> tuple[Any, Any]:
    """The copy's checks of a block: whole (``check_entries``) and window by window."""
    old_max = _max_parallelism(layout)
    return (
        keyed_entries.check_entries(block, group, layout, old_max),
        keyed_entries.check_entries_in_windows(_Bytes(block), group, 0, len(block), layout, old_max, window),
    )


def test_the_copy_s_checks_count_every_fixture_block_as_the_reference_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted = 0
    for _name, layout, group, block in REKEYED:
        for window in (64, 4096):
            native, reference = _both(
                monkeypatch, lambda b=block, g=group, la=layout, w=window: _checked(b, g, la, w)
            )
            assert native == reference
            counted += reference[0] is not None
        native, reference = _both(monkeypatch, lambda b=block, g=group, la=layout: _checked(b, g + 1, la, 64))
        assert native == reference == (None, None)
    assert counted > 400


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_copy_s_checks_of_a_damaged_block_are_the_reference_s(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    _name, layout, group, block = data.draw(st.sampled_from(REKEYED))
    damaged = _damage(block, data, 1, 3)
    window = data.draw(st.sampled_from([16, 64, 1 << 20]))
    native, reference = _both(monkeypatch, lambda: _checked(damaged, group, layout, window))
    assert native == reference


@settings(max_examples=300, deadline=None)
@given(
    value=st.integers(-(2**63), 2**63 - 1)
    | st.sampled_from([0, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]),
    kind=st.sampled_from([1, 2, 3]),
)
def test_fixed_size_keys_hash_and_mix_as_javahash_and_keygroups_do(value: int, kind: int) -> None:
    from keygroup_cli.flink.kernels import compiled as numba_kernels

    size, key_type = {1: (8, "long"), 2: (4, "int"), 3: (1, "boolean")}[kind]
    body = (value % 2**64).to_bytes(8, "big")[-size:]
    raw = np.frombuffer(b"\x05" + body + b"\x00", dtype=np.uint8)
    code, end = numba_kernels._key_hash(raw, 1, 1 + size, kind)
    key = int.from_bytes(body, "big", signed=True) if kind != 3 else body != b"\x00"
    assert code == int(javahash.hash_codes(np.asarray([key]), key_type)[0])
    assert end == 1 + size
    assert numba_kernels._key_hash(raw, 1, size, kind)[1] == -1  # a key that does not fit its entry
    # Flink's murmur of the code (MathUtils.murmurHash), and of the int itself where it is one.
    for mixed in (code, int(np.int64(value).astype(np.int32))):
        assert numba_kernels._murmur(mixed) == int(keygroups.murmur_hash_array([mixed])[0])
    mixed = abs(value) % 2**31  # a murmur hash: never negative
    assert numba_kernels._modulo(mixed, 1024) == mixed % 1024
    assert numba_kernels._modulo(mixed, 1000) == mixed % 1000


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.text(max_size=12) | st.binary(max_size=14), min_size=1, max_size=20),
    noise=st.binary(max_size=8),
)
def test_string_keys_hash_as_the_reference_hashes_them(
    keys: list[Any], noise: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # StringValue-like bytes (a length byte, then the chars), non-ASCII and ill-formed ones among them.
    raw, key_at, key_ends = bytearray(noise), [], []
    for key in keys:
        body = key.encode("utf-8") if isinstance(key, str) else key
        key_at.append(len(raw))
        raw += bytes([min(len(body) + 1, 255) if isinstance(key, str) else (body[:1] or b"\x00")[0]]) + body
        key_ends.append(len(raw))
        raw += b"\x00\x00\x00\x01"  # the value's int length: a key never ends its block
    buf = np.frombuffer(bytes(raw), dtype=np.uint8)
    at, ends = np.asarray(key_at, dtype=np.int64), np.asarray(key_ends, dtype=np.int64)
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
    found = native_kernels.kernels()
    assert found is not None
    assert _same(found.string_hashes(buf, at, ends), keyed_entries._short_string_hash_codes(buf, at, ends))


@st.composite
def _ranges(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Disjoint ranges of a source (empty ones among them) and disjoint places for them, in any order."""
    lengths = np.asarray(draw(st.lists(st.integers(0, 9), max_size=40)), dtype=np.int64)
    gaps = np.asarray(draw(st.lists(st.integers(0, 3), min_size=len(lengths), max_size=len(lengths))))
    src_at = (np.cumsum(lengths + gaps) - lengths).astype(np.int64)
    src = np.frombuffer(draw(st.binary(min_size=int((src_at + lengths).max(initial=0)))), dtype=np.uint8)
    order = np.asarray(draw(st.permutations(range(len(lengths)))), dtype=np.int64)
    places = np.cumsum((lengths + gaps)[order]) - lengths[order]
    dst_at = np.empty(len(lengths), dtype=np.int64)
    dst_at[order] = places
    return src, src_at, lengths, dst_at, int((dst_at + lengths).max(initial=0)) + 2


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranges=_ranges())
def test_entry_bytes_are_copied_as_the_reference_copies_them(
    ranges: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, src_at, lengths, dst_at, size = ranges
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
    found = native_kernels.kernels()
    assert found is not None
    native, reference = np.full(size, 7, dtype=np.uint8), np.full(size, 7, dtype=np.uint8)
    found.copy_ranges(src, src_at, lengths, native, dst_at)
    entry_parts.copy_ranges_reference(src, src_at, lengths, reference, dst_at)
    assert _same(native, reference)
    assert all(
        bytes(reference[d : d + n]) == bytes(src[s : s + n])
        for s, n, d in zip(src_at, lengths, dst_at, strict=True)
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranges=_ranges(), data=st.data())
def test_entries_are_framed_as_the_reference_frames_them(
    ranges: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int],
    data: st.DataObject,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src, src_at, lengths, _dst_at, _size = ranges
    count = len(lengths)
    nprefix = data.draw(st.sampled_from([1, 2]))
    groups = np.sort(np.asarray(data.draw(st.lists(st.integers(0, 5), min_size=count, max_size=count))))
    groups = groups.astype(np.int64) * (300 if nprefix == 2 else 20)
    states = np.asarray(
        data.draw(st.lists(st.integers(0, 3), min_size=count, max_size=count)), dtype=np.int64
    )
    key_length = np.minimum(
        lengths,
        np.asarray(data.draw(st.lists(st.integers(0, 9), min_size=count, max_size=count)), dtype=np.int64),
    )
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
    found = native_kernels.kernels()
    assert found is not None
    args = (groups, states, key_length, src, src_at, lengths, nprefix)
    assert _same(found.frame_entries(*args), entry_parts.frame_entries_reference(*args))


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, check=False
    )


def test_the_switch_without_numba_falls_back_or_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "from keygroup_cli.flink.kernels.native import kernels\n"
        "try:\n    print(kernels())\nexcept Exception as exc:\n    print(type(exc).__name__, exc.code)\n"
    )
    assert _python(code, KG_NATIVE="auto").stdout.strip() == "None"
    assert _python(code, KG_NATIVE="1").stdout.strip() == "MissingDependencyError NATIVE_KERNELS_MISSING"
    assert MissingDependencyError.exit_code == 6


def test_the_compile_cache_lives_in_kgs_cache_directory(tmp_path: Path) -> None:
    code = (
        "import os; os.environ.pop('NUMBA_CACHE_DIR', None)\n"
        "from keygroup_cli.flink.kernels.native import kernels\n"
        "kernels(); import numba; print(numba.config.CACHE_DIR)\n"
    )
    assert _python(code, KG_NATIVE="1", KG_CACHE_DIR=str(tmp_path)).stdout.strip() == str(tmp_path / "numba")


def test_auto_loads_the_kernels_only_once_the_walks_pay_for_them() -> None:
    # Loading numba costs far more than walking a small savepoint in Python: auto waits for 32 MiB of blocks.
    code = (
        "import sys\n"
        "from keygroup_cli.flink.kernels.native import AUTO_AFTER_BYTES, kernels\n"
        "small = kernels(AUTO_AFTER_BYTES // 2)\n"
        "print(small is None, 'numba' in sys.modules)\n"
        "large = kernels(AUTO_AFTER_BYTES // 2)\n"
        "print(large is not None, 'numba' in sys.modules, kernels() is large)\n"
    )
    assert _python(code, KG_NATIVE="auto").stdout.split() == ["True", "False", "True", "True", "True"]
    # A caller that says it is about to walk that much gets them from its first walk; 0 and 1 ignore it.
    told = (
        "from keygroup_cli.flink.kernels.native import AUTO_AFTER_BYTES, expect, kernels\n"
        "expect(AUTO_AFTER_BYTES - 1); print(kernels(1) is None)\n"
        "expect(AUTO_AFTER_BYTES); print(kernels(1) is not None)\n"
    )
    assert _python(told, KG_NATIVE="auto").stdout.split() == ["True", "True"]
    assert _python(told, KG_NATIVE="0").stdout.split() == ["True", "False"]
    # KG_NATIVE=1 asks for them on the first block, however small.
    first = "from keygroup_cli.flink.kernels.native import kernels\nprint(kernels(1) is not None)\n"
    assert _python(first, KG_NATIVE="1").stdout.strip() == "True"
    # A re-key's window is counted once: the fused walk (which asks first) does not count it, the reference
    # path that then walks it does. 20 MiB of windows stays under the 32 MiB, with no numba imported.
    once = (
        "import sys\n"
        "from keygroup_cli.flink.keyed import decode as keyed_decode, entries as keyed_entries\n"
        "from keygroup_cli.flink.kernels import native as native_kernels\n"
        "from keygroup_cli.flink.keyed.layout import KeyedLayout\n"
        "from keygroup_cli.flink.types.serializers import LONG_SERIALIZER_SNAPSHOT, key_codec\n"
        "window = bytes(1 << 20)\n"
        "layout = KeyedLayout(key_codec(LONG_SERIALIZER_SNAPSHOT), 1, ())\n"
        "for _ in range(20):\n"
        "    assert keyed_entries.walk_window(window, None, 0, layout, 128, 256, ()) is None\n"
        "    keyed_decode._scan_window(window, frozenset({0}), None)\n"
        "print(native_kernels._walked[0] == 20 << 20, 'numba' in sys.modules)\n"
    )
    assert _python(once, KG_NATIVE="auto").stdout.split() == ["True", "False"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_parts_are_laid_out_as_the_reference_lays_them_out(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_max = data.draw(st.sampled_from([1, 2, 7, 128, 129, 1024, 32768]))
    new_parallelism = data.draw(st.integers(1, min(new_max, 9)))
    buckets = data.draw(st.sampled_from([1, 3, 64, 256]))
    count = data.draw(st.integers(1, 60))
    groups = np.asarray(data.draw(st.lists(st.integers(0, new_max - 1), min_size=count, max_size=count)))
    column = st.lists(st.integers(0, 0xFFFF), min_size=count, max_size=count)
    key_length, states = (np.asarray(data.draw(column), dtype=np.int32) for _ in range(2))
    lengths = np.asarray(
        data.draw(st.lists(st.integers(0, 40), min_size=count, max_size=count)), dtype=np.int64
    )
    args = (groups.astype(np.int32), key_length, lengths, states, new_max, new_parallelism, buckets)
    monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
    found = native_kernels.kernels()
    assert found is not None
    native = found.sort_parts(*args)
    reference = entry_parts.sort_parts_reference(*args)
    out, placed, part_at, part_stop, keys, counts = reference
    # The entries' bytes are the caller's to copy: only the heads, columns and padding must agree.
    entries = np.zeros(len(out), dtype=bool)
    for at, size in zip(placed.tolist(), lengths.tolist(), strict=True):
        entries[at : at + size] = True
    assert np.array_equal(native[0][~entries], out[~entries])
    for mine, theirs in zip(native[1:], reference[1:], strict=True):
        assert np.array_equal(mine, theirs)
    # Parts ascend by (subtask, bucket) and hold what their heads say.
    assert list(keys) == sorted(set(keys.tolist())) and int(counts.sum()) == count
    for at, n in zip(part_at.tolist(), counts.tolist(), strict=True):
        assert entry_parts.part_entries(memoryview(out)[at:]) == n


def _part(
    key_length: list[int], lengths: list[int], groups: list[int], states: list[int], data: bytes
) -> bytes:
    """One part as ``entry_parts`` lays it out (see its module docstring), built here independently."""
    columns = b"".join(
        np.asarray(column, dtype=dtype).tobytes()
        for column, dtype in ((key_length, "<i4"), (lengths, "<i4"), (groups, "<u2"), (states, "<u2"))
    )
    part = struct.pack("<II", len(lengths), len(data)) + columns + data
    return part + bytes(-len(part) % 4)


@st.composite
def _bucket(draw: st.DrawFn) -> tuple[bytes, int, np.ndarray, bool, bool]:
    """A bucket's parts back to back: key groups of one contiguous range, states interleaved.

    Its entries are either legal ones (a key of 0 to 5 bytes after its prefix, ``int valueLen``, a value
    of 0 to 5 bytes) or any bytes (0 to 9, a key length within them or, rarely, any int32); its state map
    holds distinct header ids or is drawn freely (-1 and too short among them). Returns the bytes, the
    prefix width, the state map, whether the state map is valid and whether the entries are legal.
    """
    nprefix = draw(st.sampled_from([1, 2]))
    top = 127 if nprefix == 1 else 32767
    width = draw(st.integers(1, 6))
    low = draw(st.integers(0, top - width + 1))
    nstates = draw(st.integers(1, 4))
    legal = draw(st.booleans())
    buf = b""
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(0, 12))
        groups = draw(st.lists(st.integers(low, low + width - 1), min_size=n, max_size=n))
        states = draw(st.lists(st.integers(0, nstates - 1), min_size=n, max_size=n))
        entries, key_length = [], []
        for _entry in range(n):
            if legal:
                key, value = draw(st.binary(max_size=5)), draw(st.binary(max_size=5))
                entries.append(key + struct.pack(">i", len(value)) + value)
                key_length.append(len(key))
            else:
                entries.append(draw(st.binary(max_size=9)))
                odd = st.integers(-(2**31), 2**31 - 1)
                key_length.append(draw(st.integers(0, len(entries[-1])) | odd))
        buf += _part(key_length, [len(e) for e in entries], groups, states, b"".join(entries))
    known = draw(st.booleans())
    if known:
        ids = draw(st.lists(st.integers(0, 5), min_size=nstates, max_size=nstates, unique=True))
    else:
        ids = draw(st.lists(st.integers(-1, 5), max_size=nstates + 1))
    return buf, nprefix, np.asarray(ids, dtype=np.int64), known, legal


def _framed(buf: bytes, nprefix: int, ids: np.ndarray) -> tuple[list[Any], list[Any]]:
    """``frame_bucket``'s blocks, each with what ``check_block`` says of it, and the write task's framing
    and checks in one (``frame_checked_bucket``: the same blocks and verdicts, or the same error)."""
    layout = KeyedLayout(BLOCKS[0][1].codec, nprefix, BLOCKS[0][1].states)
    states = frozenset(int(i) for i in ids if i >= 0) or frozenset({0})
    framed = [
        (
            (b.key_group, bytes(b.block), b.rows, b.value_ends, b.run_end),
            keyed_decode.check_block(b.block, b.key_group, layout, b.value_ends, b.run_end, states),
        )
        for b in entry_parts.frame_bucket(buf, layout, ids)
    ]
    checked = [
        ((b.key_group, bytes(b.block), b.rows, b.value_ends, b.run_end), proven)
        for b, proven in entry_parts.frame_checked_bucket(buf, layout, ids, states)
    ]
    assert _same(checked, framed)
    return framed, checked


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bucket=_bucket())
def test_a_bucket_is_framed_and_checked_as_the_reference_does_it(
    bucket: tuple[bytes, int, np.ndarray, bool, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    buf, nprefix, ids, known, legal = bucket
    native, reference = _both(monkeypatch, lambda: _framed(buf, nprefix, ids))
    assert _same(native, reference)
    if known:
        # The kernel framed it (no DEFER); legal entries' blocks prove their claims.
        monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
        found = native_kernels.kernels()
        assert found is not None
        no_check = np.zeros(0, dtype=np.bool_)
        assert found.frame_bucket(np.frombuffer(buf, dtype=np.uint8), ids, nprefix, no_check)[0] == 1
        assert not legal or all(checked == framed[2] for framed, checked in native[0])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bucket=_bucket(), data=st.data())
def test_a_damaged_or_truncated_bucket_is_refused_or_framed_as_the_reference_does_it(
    bucket: tuple[bytes, int, np.ndarray, bool, bool],
    data: st.DataObject,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buf, nprefix, ids, _known, _legal = bucket
    if not buf:
        return
    if data.draw(st.booleans()):
        buf = buf[: data.draw(st.integers(0, len(buf) - 1))]
    else:
        buf = _damage(buf, data, 1, 3)
    native, reference = _both(monkeypatch, lambda: _framed(buf, nprefix, ids))
    assert _same(native, reference)


def test_a_part_with_a_negative_entry_length_is_refused_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lengths -2 and 6 add up to the part's 4 data bytes: only the sign shows the damage (the framing would
    # otherwise copy a negative count of bytes).
    columns = np.asarray([1, 1], "<i4").tobytes() + np.asarray([-2, 6], "<i4").tobytes()
    part = struct.pack("<II", 2, 4) + columns + bytes(8) + b"abcd"  # key groups and states: 0
    ids = np.zeros(1, dtype=np.int64)
    native, reference = _both(monkeypatch, lambda: _framed(part, 1, ids))
    assert (
        native == reference == (InvalidInputError, "a spilled entry part is corrupt", "FLINK_STATE_CORRUPT")
    )


def _claim(block: bytes, states: frozenset[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """The entry ends and run ends of a block's sequential read: what its encoder would claim."""
    scanned = keyed_decode._scan_block(block, states)
    if scanned is None or scanned[2] != len(block):
        return None
    return scanned[0].copy(), keyed_decode._run_ends(len(scanned[0]), scanned[1])


def test_every_fixtures_blocks_are_checked_as_the_reference_checks_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    accepted = 0
    for _name, layout, group, block in BLOCKS:
        states = keyed_entries.all_states(layout) or frozenset(range(len(layout.states)))
        claim = _claim(block, states)
        if claim is None:
            continue
        for key_group in (group, group + 1):
            native, reference = _both(
                monkeypatch,
                functools.partial(keyed_decode.check_block, block, key_group, layout, *claim, states),
            )
            assert native == reference
            accepted += native is not None
    assert accepted > 200


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_block_or_false_claim_is_checked_as_the_reference_checks_it(
    data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    _name, layout, group, block = data.draw(st.sampled_from(BLOCKS))
    states = keyed_entries.all_states(layout) or frozenset(range(len(layout.states)))
    claim = _claim(block, states)
    if claim is None:
        return
    value_ends, run_end = claim
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value_ends) - 1))
        value_ends[i] += data.draw(st.integers(-12, 12))
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(run_end) - 1))
        run_end[i] = not run_end[i]
    damaged = _damage(block, data, 0, 3)
    if data.draw(st.booleans()):
        damaged = damaged[: data.draw(st.integers(0, len(damaged)))]
    key_group = group + data.draw(st.sampled_from([0, 0, 0, 1, -1, 128]))
    native, reference = _both(
        monkeypatch,
        lambda: keyed_decode.check_block(damaged, key_group, layout, value_ends, run_end, states),
    )
    assert native == reference
