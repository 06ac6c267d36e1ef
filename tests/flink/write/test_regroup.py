"""Copying key-group blocks between Flink keyed files, checked against Flink's own files.

The truth is the blocks Flink wrote: every key group of a new file must hold exactly the bytes of that
key group's block in the old file, and decode (with kg's decoder) to the same entries.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.keygroups import key_group_range_for_operator_index
from keygroup_cli.execution.routes import savepoint as savepoint_rescale
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.check.verify import block_finding
from keygroup_cli.flink.io.stream_handles import key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import decode_keyed_file
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.keyed.layout import KeyedLayout
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.write import regroup
from keygroup_cli.flink.write.regroup import keyed_handles, regroup_keyed_state, shared_keyed_header

FIXTURES = Path(__file__).parents[3] / "fixtures" / "flink" / "2.3"
CASES = [
    "heap-files-p3-maxp128-long",
    "heap-inline-p3-maxp10-string",
    "heap-snappy-files-p3-maxp128-long",
    "rocksdb-canonical-snappy-p2-maxp256-string",
]


def _blocks(directory: Path, handle) -> dict[int, bytes]:
    with StreamSource(handle.delegate, directory) as src:
        return {g: src.read(a, b) for g, a, b in key_group_extents(handle, src.size)}


def _rows(directory: Path, handle, max_parallelism: int) -> pa.Table:
    with StreamSource(handle.delegate, directory) as src:
        first = min([o for o in handle.offsets if o] or [src.size])
        header = read_keyed_header(src.read(0, first), src.source, first)
        layout = KeyedLayout.from_header(header, max_parallelism, src.source)
        batches = list(decode_keyed_file(src, handle, layout, compressed=header.compressed))
    table = pa.Table.from_batches(batches)
    return table.set_column(
        table.schema.get_field_index("state"), "state", table.column("state").cast(pa.string())
    )


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("new_p", [1, 4, 7])
def test_every_key_group_keeps_its_bytes_and_entries(case, new_p, tmp_path):
    savepoint = read_flink_metadata(FIXTURES / case)
    for op in savepoint.metadata.operators:
        old = keyed_handles(op)
        if not old:
            continue
        header = shared_keyed_header(savepoint, op)
        assert header is not None  # Flink writes one header for all subtasks of these jobs
        files = regroup_keyed_state(savepoint, op, header, new_p, tmp_path, check="in", workers=3)
        one_thread = tmp_path / f"one-{op.operator_id}"
        one_thread.mkdir()
        alone = regroup_keyed_state(savepoint, op, header, new_p, one_thread, check="in", workers=1)
        # Three threads write what one writes: the same files, subtask by subtask.
        assert [f.subtask for f in files] == [f.subtask for f in alone] == list(range(new_p))
        for threaded, single in zip(files, alone, strict=True):
            assert threaded.handle.offsets == single.handle.offsets
            assert (tmp_path / threaded.handle.delegate.relative_path).read_bytes() == (
                one_thread / single.handle.delegate.relative_path
            ).read_bytes()
        old_blocks = {g: b for h in old for g, b in _blocks(savepoint.directory, h).items()}
        new_blocks: dict[int, bytes] = {}
        for f in files:
            want = key_group_range_for_operator_index(op.max_parallelism, new_p, f.subtask)
            assert (f.handle.key_group_start, f.handle.key_group_end) == (want.start, want.end)
            assert (tmp_path / f.handle.delegate.relative_path).stat().st_size == f.size
            assert (tmp_path / f.handle.delegate.relative_path).read_bytes().startswith(header)
            blocks = _blocks(tmp_path, f.handle)
            assert all(g in want for g in blocks)
            new_blocks.update(blocks)
        assert new_blocks == old_blocks  # every block once, byte for byte, in its new owner's file
        before = pa.concat_tables([_rows(savepoint.directory, h, op.max_parallelism) for h in old])
        after = pa.concat_tables([_rows(tmp_path, f.handle, op.max_parallelism) for f in files])
        sort = [(name, "ascending") for name in before.column_names]
        assert after.num_rows == before.num_rows > 0
        assert after.sort_by(sort).equals(before.sort_by(sort))


def test_savepoint_rescale_copies_key_groups_only_when_it_can(tmp_path, monkeypatch):
    case = FIXTURES / "heap-files-p3-maxp128-long"
    # Copied as bytes: sizes known, entries not decoded (so not counted).
    same = rescale(case, tmp_path / "same", 4, engine="local")
    assert same.regrouped is not None and same.keyed_rows is None
    # A new maxParallelism renumbers key groups: decoded, re-hashed and re-encoded instead (counted).
    rehash = rescale(case, tmp_path / "rehash", 4, new_max_parallelism=256, engine="local")
    assert rehash.keyed_rows is not None and sum(map(sum, rehash.keyed_rows.values())) > 0
    # Subtasks whose headers differ cannot share blocks (state ids index the header): decoded too.
    monkeypatch.setattr(savepoint_rescale, "shared_keyed_header", lambda _sp, _op: None)
    decoded = rescale(case, tmp_path / "decoded", 4, engine="local")
    assert decoded.keyed_rows is not None
    assert sum(map(sum, decoded.keyed_rows.values())) == sum(map(sum, rehash.keyed_rows.values()))


@pytest.mark.parametrize("case", CASES)
def test_a_copy_reads_each_input_byte_once_and_checks_every_block(case, tmp_path, monkeypatch):
    # #22: the gate reads no block; the copy checks each block in the pass that copies it.
    from keygroup_cli.flink.write import regroup

    read = StreamSource.read
    seen: dict[str, int] = {}
    checked: list[int] = []

    def counting(self, start: int, end: int) -> bytes:
        data = read(self, start, end)
        seen[self.source] = seen.get(self.source, 0) + len(data)
        return data

    def check(raw, group, *args):
        checked.append(group)
        return block_finding(raw, group, *args)

    monkeypatch.setattr(StreamSource, "read", counting)
    monkeypatch.setattr(regroup, "block_finding", check)
    rescale(FIXTURES / case, tmp_path / "out", 4, engine="local")
    savepoint = read_flink_metadata(FIXTURES / case)
    handles = [h for op in savepoint.metadata.operators for h in keyed_handles(op)]
    for handle in handles:
        path = getattr(handle.delegate, "relative_path", None)
        if path is not None:
            # Header once (when opened), every block once (when copied): nothing twice.
            assert 0 < seen[str(FIXTURES / case / path)] <= (FIXTURES / case / path).stat().st_size
    assert sorted(checked) == sorted(g for h in handles for g, _a, _b in key_group_extents(h, h.size))
    assert checked


def test_worker_threads_check_large_blocks_one_at_a_time(tmp_path, monkeypatch):
    savepoint = read_flink_metadata(FIXTURES / "heap-files-p3-maxp128-long")
    op = next(o for o in savepoint.metadata.operators if keyed_handles(o))
    header = shared_keyed_header(savepoint, op)
    assert header is not None
    inside, most = [0], [0]
    lock = threading.Lock()
    real = regroup.block_finding

    def watched(*args, **kwargs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.002)  # long enough for another thread to arrive
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(regroup, "block_finding", watched)
    monkeypatch.setattr(regroup, "LARGE_BLOCK_BYTES", 0)  # every block is "large"
    files = regroup_keyed_state(savepoint, op, header, 4, tmp_path, check="in", workers=3)
    assert most[0] == 1
    assert sum(f.key_groups_with_data for f in files) > 0


@pytest.mark.parametrize("case", ["heap-files-p3-maxp128-long", "rocksdb-canonical-snappy-p2-maxp256-string"])
def test_large_blocks_are_checked_and_copied_window_by_window(case, tmp_path, monkeypatch):
    # Windows of 64 bytes: every uncompressed block of these small fixtures is "large".
    savepoint = read_flink_metadata(FIXTURES / case)
    op = next(o for o in savepoint.metadata.operators if keyed_handles(o))
    header = shared_keyed_header(savepoint, op)
    assert header is not None
    whole = tmp_path / "whole"
    whole.mkdir()
    expected = regroup_keyed_state(savepoint, op, header, 3, whole, check="in", workers=1)
    windowed: list[int] = []
    real = regroup.check_entries_in_windows

    def counted(*args, **kwargs):
        got = real(*args, **kwargs)
        windowed.append(got is not None)
        return got

    read = StreamSource.read
    seen: dict[str, int] = {}

    def counting(self, start: int, end: int) -> bytes:
        data = read(self, start, end)
        seen[self.source] = seen.get(self.source, 0) + len(data)
        return data

    monkeypatch.setattr(regroup, "CHECK_WINDOW_BYTES", 64)
    monkeypatch.setattr(regroup, "check_entries_in_windows", counted)
    monkeypatch.setattr(StreamSource, "read", counting)
    out = tmp_path / "windows"
    out.mkdir()
    files = regroup_keyed_state(savepoint, op, header, 3, out, check="in", workers=2)
    for a, b in zip(files, expected, strict=True):
        assert a.handle.offsets == b.handle.offsets
        assert (out / a.handle.delegate.relative_path).read_bytes() == (
            whole / b.handle.delegate.relative_path
        ).read_bytes()
    compressed = "snappy" in case
    assert (windowed == []) if compressed else (len(windowed) > 10 and all(windowed))
    for handle in keyed_handles(op):
        path = FIXTURES / case / handle.delegate.relative_path
        assert seen[str(path)] <= path.stat().st_size  # each byte read once


def test_a_damaged_large_block_is_refused_as_a_whole_block_check_refuses_it(tmp_path, monkeypatch):
    source = tmp_path / "in"
    shutil.copytree(FIXTURES / "heap-files-p3-maxp128-long", source)
    savepoint = read_flink_metadata(source)
    op = next(o for o in savepoint.metadata.operators if keyed_handles(o))
    handle = keyed_handles(op)[0]
    path = source / handle.delegate.relative_path
    with StreamSource(handle.delegate, source) as src:
        group, start, end = max(key_group_extents(handle, src.size), key=lambda e: e[2] - e[1])
    data = bytearray(path.read_bytes())
    data[end - 1] ^= 0x5A  # the END mark after its last entry is no longer one
    path.write_bytes(bytes(data))
    errors = []
    for window in (1 << 30, 64):
        monkeypatch.setattr(regroup, "CHECK_WINDOW_BYTES", window)
        try:
            rescale(source, tmp_path / f"out-{window}", 4, engine="local")
        except InvalidInputError as error:
            errors.append((error.code, str(error)))
        else:
            errors.append(None)
        assert not (tmp_path / f"out-{window}").exists()
    assert errors[0] == errors[1]
    assert errors[0] is not None and errors[0][0] == "INPUT_FAILS_VERIFY"
