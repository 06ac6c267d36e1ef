"""Timers in raw keyed state redistributed by key group (``flink.write.raw_timers``), on Flink 2.3's own
bytes.

``fixtures/flink/2.3/async-forst-native-p3``: AsyncJob's ForSt NATIVE savepoint, p 3, maxParallelism 128, 300
event-time and 200 processing-time timers in the async operator's raw keyed-state streams. Real Flink's
restores of kg's outputs are in tests/restore/test_native.py.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from keygroup_cli.core.errors import UnsupportedFormatError
from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import key_group_for_hash
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.timers import read_timer_section
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from keygroup_cli.flink.savepoint import open_savepoint
from keygroup_cli.flink.write.raw_timers import plan_raw_timers, write_raw_timers
from tests.conftest import FIXTURES

CASE = FIXTURES / "flink" / "2.3" / "async-forst-native-p3"
KEYED = "7b2864a1f22e23b34f207087b3cdcae7"  # async-keyed: murmur3_128 of its uid, as Flink hashes it


def _timers(sections: dict[int, bytes]) -> Counter[tuple[int, str, bytes]]:
    found: Counter[tuple[int, str, bytes]] = Counter()
    for group, data in sections.items():
        for service in read_timer_section(data, f"key group {group}"):
            found.update((group, "event", t) for t in service.event)
            found.update((group, "processing", t) for t in service.processing)
    return found


def test_same_max_parallelism_keeps_each_key_groups_section_as_flink_wrote_it() -> None:
    savepoint = open_savepoint(CASE)
    planned = plan_raw_timers(savepoint, {KEYED: (4, 128)})
    assert set(planned) == {KEYED}
    timers = planned[KEYED]
    assert (timers.max_parallelism, timers.timers, sorted(timers.sections)) == (128, 500, list(range(128)))
    for op in savepoint.metadata.operators:
        for sub in op.subtasks:
            handle = sub.raw_keyed_state
            if handle is None:
                continue
            with StreamSource(handle.delegate, savepoint.directory) as src:
                data = src.read(0, src.size)
            ends = [*handle.offsets[1:], len(data)]
            for i, (start, end) in enumerate(zip(handle.offsets, ends, strict=True)):
                assert timers.sections[handle.key_group_start + i] == data[start:end]


def test_new_max_parallelism_moves_every_timer_to_its_keys_key_group(tmp_path: Path) -> None:
    savepoint = open_savepoint(CASE)
    before = _timers(plan_raw_timers(savepoint, {KEYED: (3, 128)})[KEYED].sections)
    rekeyed = plan_raw_timers(savepoint, {KEYED: (4, 256)})[KEYED]
    assert sorted(rekeyed.sections) == list(range(256))
    after = _timers(dict(rekeyed.sections))
    # The same timers, byte for byte, each once, now under the key group of its key at maxParallelism 256.
    assert Counter((kind, t) for (_g, kind, t), n in after.items() for _ in range(n)) == Counter(
        (kind, t) for (_g, kind, t), n in before.items() for _ in range(n)
    )
    assert sum(after.values()) == 500
    for group, data in rekeyed.sections.items():
        for service in read_timer_section(data, f"key group {group}"):
            for key in (*service.event_keys, *service.processing_keys):
                assert key_group_for_hash(hash_code(key, "string"), 256) == group
    handles = write_raw_timers({KEYED: rekeyed}, tmp_path)[KEYED]
    assert [(h.key_group_start, h.num_key_groups) for h in handles] == [
        (0, 64),
        (64, 64),
        (128, 64),
        (192, 64),
    ]
    for handle in handles:
        data = (tmp_path / handle.delegate.relative_path).read_bytes()  # type: ignore[union-attr]
        ends = [*handle.offsets[1:], len(data)]
        for i, (start, end) in enumerate(zip(handle.offsets, ends, strict=True)):
            assert data[start:end] == rekeyed.sections[handle.key_group_start + i]


def test_raw_keyed_state_that_is_not_timers_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "savepoint"
    shutil.copytree(CASE, copy)
    savepoint = open_savepoint(copy)
    handle = next(
        s.raw_keyed_state for op in savepoint.metadata.operators for s in op.subtasks if s.raw_keyed_state
    )
    path = copy / handle.delegate.relative_path  # type: ignore[union-attr]
    path.write_bytes(b"\x00" * path.stat().st_size)  # an operator's own raw keyed state, say
    with pytest.raises(UnsupportedFormatError) as refused:
        plan_raw_timers(open_savepoint(copy), {KEYED: (4, 128)})
    assert refused.value.code == "FLINK_RAW_STATE"
    assert "not Flink's timers" in str(refused.value)


def test_inline_raw_keyed_state_plans_the_same_as_files(tmp_path: Path) -> None:
    # Under Flink's default inline threshold (20 KB) each subtask's raw stream (about 11 KB here) sits in
    # _metadata as a ByteStreamStateHandle; the fixture wrote files (threshold 0). Same sections either way.
    copy = tmp_path / "savepoint"
    shutil.copytree(CASE, copy)
    snapshot = read_flink_metadata(copy)
    operators = []
    for op in snapshot.metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            raw = sub.raw_keyed_state
            if raw is not None:
                assert isinstance(raw, KeyGroupsHandle) and isinstance(raw.delegate, RelativeFileHandle)
                file = copy / raw.delegate.relative_path
                raw = replace(raw, delegate=ByteStreamHandle(f"inline-{file.name}", file.read_bytes()))
                file.unlink()
            subtasks.append(replace(sub, raw_keyed_state=raw))
        operators.append(replace(op, subtasks=tuple(subtasks)))
    (copy / "_metadata").write_bytes(write_metadata(replace(snapshot.metadata, operators=tuple(operators))))
    for target in ((4, 128), (4, 256)):
        inline = plan_raw_timers(open_savepoint(copy), {KEYED: target})
        assert inline == plan_raw_timers(open_savepoint(CASE), {KEYED: target})
