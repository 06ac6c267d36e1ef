"""Regroup a canonical savepoint's keyed state into new key-group ranges by copying bytes, not decoding.

In a canonical savepoint each subtask's keyed file is a header (the ``KeyedBackendSerializationProxy``)
followed by one self-contained block per key group, found through the handle's per-key-group offsets
(``KeyGroupsSavepointStateHandle``). When maxParallelism stays the same, key groups keep their numbers and
their blocks stay valid byte for byte, so new subtask *j*'s file is the header followed by the blocks of
the key groups in its new range, copied from the old files, with new offsets. This is what Flink's own
restore-time rescale reads (``KeyGroupsStateHandle.getIntersection`` over the old handles), written out
as one file per new subtask, so the result restores without Flink having to rescale again.

It needs one header for all old subtasks (``shared_keyed_header``): state ids in the blocks are positions
in the header's state list. When the headers differ, or maxParallelism changes (every key moves to another
key group), kg decodes and re-encodes instead (``keygroup_cli.convert.from_savepoint``, then
``keygroup_cli.convert.to_savepoint``).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.findings import fails_verify_error
from keygroup_cli.core.keygroups import KeyGroupRange, key_group_range_for_operator_index
from keygroup_cli.core.workers import ordered_map
from keygroup_cli.flink.check.verify import block_finding
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, RelativeFileHandle, key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.kernels.native import expect
from keygroup_cli.flink.keyed.decode import BYTE_WINDOW_BYTES
from keygroup_cli.flink.keyed.entries import check_entries_in_windows
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.keyed.layout import KeyedLayout
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import FlinkCheckpoint
from keygroup_cli.flink.metadata.reader import OperatorState
from keygroup_cli.flink.savepoint import Savepoint
from keygroup_cli.storage.staging import flush_soon

#: Bytes copied per read: bounds memory whatever the size of a key group run.
COPY_CHUNK = 16 * 1024 * 1024
#: An uncompressed block larger than this is checked and copied window by window (memory: a window).
CHECK_WINDOW_BYTES = BYTE_WINDOW_BYTES
#: Other blocks are read whole to be checked; worker threads hold those larger than this one at a time.
LARGE_BLOCK_BYTES = 64 << 20
_LARGE_BLOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class RegroupedFile:
    """One new subtask's keyed state: its handle (relative to the savepoint) and size.

    A canonical keyed file, or the RocksDB database a NATIVE write task built (``flink.write.native``).
    """

    subtask: int
    handle: KeyGroupsHandle | IncrementalKeyedHandle
    size: int
    key_groups_with_data: int


def keyed_handles(op: OperatorState) -> list[KeyGroupsHandle]:
    """Return the operator's keyed handles (one per subtask with keyed state), in subtask order."""
    return [s.managed_keyed_state for s in op.subtasks if isinstance(s.managed_keyed_state, KeyGroupsHandle)]


def shared_keyed_header(savepoint: FlinkCheckpoint, op: OperatorState) -> bytes | None:
    """Return the header every old keyed file of ``op`` starts with, or None if they differ.

    The headers are the opened savepoint's (``Savepoint.keyed_streams``): read once, not again here.
    """
    headers = {s.raw_header for s in Savepoint.of(savepoint).keyed_streams.get(op.operator_id, ())}
    return headers.pop() if len(headers) == 1 else None


def regroup_keyed_state(
    savepoint: FlinkCheckpoint,
    op: OperatorState,
    header: bytes,
    new_parallelism: int,
    target: Path,
    *,
    check: str | None = None,
    workers: int = 1,
) -> list[RegroupedFile]:
    """Write the keyed file of every new subtask of ``op`` into ``target`` (files named by random UUIDs).

    Args:
        savepoint: The source savepoint.
        op: The operator, at its old parallelism; its maxParallelism is kept.
        header: ``shared_keyed_header(savepoint, op)``.
        new_parallelism: The new number of subtasks.
        target: The directory the new savepoint is staged in.
        check: Check every block as ``kg verify`` does, in the pass that copies it (``verify.block_finding``:
            read once, nothing decoded into rows), and name the input so in the error; None: copy runs of
            blocks as they are (a caller that checked them already).
        workers: Threads writing new subtasks' files at once (``keygroup_cli.core.workers``).

    Raises:
        InvalidInputError: A state file is missing or shorter than its offsets say; with ``check``, a
            block ``kg verify`` refuses (``INPUT_FAILS_VERIFY``, its first finding).
    """
    old = sorted(keyed_handles(op), key=lambda h: h.key_group_start)
    layout = None
    compressed = False
    if check is not None:
        parsed = read_keyed_header(header, check, len(header))
        layout = KeyedLayout.from_header(parsed, op.max_parallelism, check)
        compressed = parsed.compressed
    subtasks = {id(s.managed_keyed_state): s.index for s in op.subtasks}

    def write(index: int) -> RegroupedFile:
        wanted = key_group_range_for_operator_index(op.max_parallelism, new_parallelism, index)
        offsets = [0] * wanted.size
        name = str(uuid.uuid4())
        with open(target / name, "wb") as out:
            out.write(header)
            position = len(header)
            for handle in old:
                if handle.key_group_end < wanted.start or handle.key_group_start > wanted.end:
                    continue
                position = _copy_handle(
                    savepoint, op, handle, subtasks, wanted, offsets, out, position, layout, compressed, check
                )
        flush_soon(target / name)  # the disk flushes this file while the next one is copied
        handle_out = KeyGroupsHandle(7, wanted.start, tuple(offsets), RelativeFileHandle(name, position))
        return RegroupedFile(index, handle_out, position, sum(1 for o in offsets if o))

    return list(ordered_map(write, range(new_parallelism), workers))


def _copy_handle(
    savepoint: FlinkCheckpoint,
    op: OperatorState,
    handle: KeyGroupsHandle,
    subtasks: dict[int, int],
    wanted: KeyGroupRange,
    offsets: list[int],
    out: BinaryIO,
    position: int,
    layout: KeyedLayout | None,
    compressed: bool,
    check: str | None,
) -> int:
    """Append the blocks of ``handle``'s key groups in ``wanted`` to ``out``; return the new position.

    Sets each copied key group's offset in ``offsets``; with ``layout``, checks each block as it copies it.
    """
    with StreamSource(handle.delegate, savepoint.directory) as src:
        extents = [e for e in key_group_extents(handle, src.size) if e[0] in wanted]
        if layout is not None:
            expect(sum(end - start for _group, start, end in extents))
        subject = f"{op.label} subtask {subtasks.get(id(handle), 0)}"
        for run in _contiguous_runs(extents):
            run_start, run_end = run[0][1], run[-1][2]
            if run_end > src.size:
                raise InvalidInputError(
                    f"{src.source}: ends at byte {src.size}, before key group {run[-1][0]}'s "
                    f"block (offset {run[-1][1]})",
                    code="FLINK_STATE_CORRUPT",
                )
            for group, start, _end in run:
                offsets[group - wanted.start] = position + start - run_start
            if layout is None:
                for chunk_start in range(run_start, run_end, COPY_CHUNK):
                    out.write(src.read(chunk_start, min(chunk_start + COPY_CHUNK, run_end)))
            else:
                for group, start, end in run:
                    if not compressed and end - start > CHECK_WINDOW_BYTES:
                        mark = out.tell()
                        through = _ReadOnceInto(src, start, out)
                        taken = check_entries_in_windows(
                            through, group, start, end, layout, op.max_parallelism, CHECK_WINDOW_BYTES
                        )
                        if taken is not None and through.end == end:
                            continue  # checked window by window, each byte written as it was read
                        out.seek(mark)  # not taken: the whole-block check below says why, or takes it
                        out.truncate()
                    # Checked whole: threads take turns with large blocks, so memory is one large block,
                    # not one per thread.
                    with _LARGE_BLOCK if end - start > LARGE_BLOCK_BYTES else contextlib.nullcontext():
                        raw = src.read(start, end)
                        problem = block_finding(
                            raw, group, compressed, layout, op.max_parallelism, src.source, subject
                        )
                        if problem is not None:
                            raise fails_verify_error(check or "", problem)
                        out.write(raw)
                        del raw
            position += run_end - run_start
    return position


class _ReadOnceInto:
    """A forward-only view of ``src`` from ``start``: each byte is written to ``out`` when first read.

    The window walk reads ``[a, b)`` ranges that move forward and may start inside the last one (a window
    ends at its last whole entry): those bytes come from the kept tail, so each input byte is read from
    ``src`` and written to ``out`` once.
    """

    def __init__(self, src: StreamSource, start: int, out: BinaryIO) -> None:
        self.src, self.out = src, out
        self.tail, self.tail_at = b"", start
        self.source = src.source

    @property
    def end(self) -> int:
        """Return where the bytes read so far end."""
        return self.tail_at + len(self.tail)

    def read(self, start: int, end: int) -> bytes:
        """Return ``src[start:end]`` (``start`` at or after the last read's start)."""
        if start < self.tail_at:
            raise ValueError("a forward-only read went back")  # the window walk never does
        have = self.end
        if end > have:
            fresh = self.src.read(have, end)
            self.out.write(fresh)
            keep = min(start, have)
            self.tail = self.tail[keep - self.tail_at :] + fresh
            self.tail_at = keep
        return self.tail[start - self.tail_at : end - self.tail_at]


def _contiguous_runs(extents: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """Group ``(key_group, start, end)`` extents (file order) into runs of adjacent bytes: one copy each."""
    runs: list[list[tuple[int, int, int]]] = []
    for extent in sorted(extents, key=lambda e: e[1]):
        if runs and runs[-1][-1][2] == extent[1]:
            runs[-1].append(extent)
        else:
            runs.append([extent])
    return runs


__all__ = ["RegroupedFile", "keyed_handles", "regroup_keyed_state", "shared_keyed_header"]
