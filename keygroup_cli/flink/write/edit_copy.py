"""Edit one keyed file, copying as bytes every key group the edit leaves alone.

The fast half of ``kg write`` and ``kg compact`` on one keyed file (same maxParallelism, same header). The
reference path (``edit.edited_batches`` over ``keyed_tasks.read_keyed_task``, then
``keyed_tasks.write_keyed_task``) decodes every block into rows and encodes every block again. Here each
key group's block is first proven as it is stored (snappy CRCs, structure, every key hashed against its key
group, as ``kg verify`` and ``regroup`` check a block they copy) and its entries counted by state; then

- a key group the edit cannot change is copied as it is stored, compressed bytes included: a write (upsert,
  delete) changes only the key groups of its data's keys; a rule or a replace only the key groups holding
  an entry of a state it names;
- a key group it changes is edited on its entries' bytes where the edit allows, with no row made:
  ``--expired-ttl`` alone on TTL value states (the last-access timestamp is the value's first 8 bytes),
  and a write (upsert, delete) of one value state; both for Int and Long keys (``_ttl_filters``,
  ``_Splice``). Kept entries are copied, inserted ones added after their state's run, and the runs
  framed anew (ids, last-entry flags, END mark) as ``FullSnapshotAsyncWriter`` frames them. With the
  native kernels (``KG_NATIVE``), a write's match and splice are ``kernels.splice``'s: one pass over the
  entries to find the data's keys, then the kept entries between two dropped ones copied as one range
  and only the ends of those ranges framed anew; the same bytes as the numpy code, which stays the
  reference;
- any other key group it changes goes through the reference path, decoded, edited and encoded.

Steps are written as they are made, so a file's new blocks are never all held in memory at once.

An uncompressed block the reference path re-encodes comes out byte for byte as it was read
(``keyed.encode``), so the file is the reference path's, byte for byte. A snappy block copied keeps
Flink's own compressed bytes (the reference path's compressor may pick other matches; the content is the
same). A block the proof does not take goes through the reference path, which says what is wrong with it.
Counts (``edit.EditCounts``) are the reference path's: a copied key group's entries of the edited states
are counted as kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.flink.check.verify import block_finding
from keygroup_cli.flink.io.snappy import decode_frames, encode_frames
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, RelativeFileHandle, key_group_extents
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.kernels.native import expect, kernels, state_mask
from keygroup_cli.flink.keyed.encode import write_keyed_file
from keygroup_cli.flink.keyed.entries import proven_entries, walked_entries
from keygroup_cli.flink.keyed.entry_parts import copy_ranges
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.keyed.layout import END_OF_KEY_GROUP_MARK, FIRST_BIT_IN_BYTE_MASK, KeyedLayout
from keygroup_cli.flink.types.values import StateCodecs
from keygroup_cli.flink.write.edit import EditCounts, KeyedEdit, edit_in_range, edited_batches, is_ttl
from keygroup_cli.flink.write.keyed_tasks import (
    KeyedReadTask,
    KeyedWriteTask,
    WrittenKeyedFile,
    directory_of,
    read_keyed_task,
)
from keygroup_cli.storage.locations import is_remote
from keygroup_cli.storage.staging import flush_soon

#: A block larger than this is not held whole to be proven: it goes through the (windowed) reference path.
MAX_COPIED_BLOCK = 64 << 20


def copies_key_groups(read: KeyedReadTask, write: KeyedWriteTask) -> bool:
    """Return whether ``edit_copying`` can run the task: same maxParallelism, range and header, local output.

    A block's state ids are positions in its file's header and its key-group prefix has the width of its
    maxParallelism, so a block is copied only into a file with the same header, for the same key groups.
    """
    return (
        read.header is not None
        and read.header == write.header
        and read.max_parallelism == write.max_parallelism
        and read.key_groups == write.key_groups
        and not is_remote(write.root)
        and (read.header[4] == 1) == write.compressed
    )


def touched_groups(edit: KeyedEdit) -> frozenset[int]:
    """Return the key groups of the edit's data (matches and inserts): all a write without a rule changes."""
    groups: set[int] = set()
    for table in (edit.matches, edit.inserts):
        if table is not None and table.num_rows:
            groups.update(
                np.unique(np.asarray(table.column("key_group").to_numpy(), dtype=np.int64)).tolist()
            )
    return frozenset(groups)


class _Shifted:
    """A writer dropping the first ``skip`` bytes: the header ``write_keyed_file`` writes, already written."""

    def __init__(self, out: BinaryIO | None, skip: int) -> None:
        self.out, self.skip, self.written = out, skip, 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data)
        n = len(view)
        if self.skip:
            dropped = min(self.skip, n)
            self.skip -= dropped
            view = view[dropped:]
        if len(view):
            if self.out is not None:
                self.out.write(view)
            self.written += len(view)
        return n


def edit_copying(
    read: KeyedReadTask,
    write: KeyedWriteTask,
    edit: KeyedEdit,
    codecs: Mapping[str, StateCodecs],
    key_type: str,
    state_names: tuple[str, ...],
    counts: EditCounts | None = None,
    *,
    output: bool = True,
    copied: list[int] | None = None,
    filtered: list[int] | None = None,
) -> WrittenKeyedFile | None:
    """Write ``write``'s file: ``read``'s file edited by ``edit``, untouched key groups copied as bytes.

    Requires ``copies_key_groups(read, write)``. With ``output=False`` nothing is written (a dry run's
    counts) and None is returned. ``copied`` receives the key groups copied as stored,
    ``filtered`` those whose expired TTL values were dropped as bytes.

    Raises:
        InvalidInputError: A block ``kg verify`` rejects, or a key stored in the wrong key group (the
            reference path's errors: a block the proof does not take is read by it).
    """
    assert copies_key_groups(read, write)
    assert read.header is not None
    with StreamSource(read.handle.delegate, directory_of(read.root)) as src:
        header = read_keyed_header(read.header, src.source, len(read.header))
        layout = KeyedLayout.from_header(header, read.max_parallelism, src.source)
        extents = {g: (a, b) for g, a, b in key_group_extents(read.handle, src.size) if g in read.key_groups}
        expect(sum(b - a for a, b in extents.values()))
        # Each step is written (and let go) as it comes: a file's new blocks are never held all at once.
        plan = _noted(
            _plan(src, extents, edit, layout, header.compressed, read, codecs, key_type, counts),
            copied,
            filtered,
        )
        if not output:
            for step in plan:
                if isinstance(step, KeyGroupRange):
                    for _ in _edited(read, step, edit, codecs, key_type, state_names, counts):
                        pass
            return None
        span = write.key_groups
        offsets = [0] * span.size
        rows = 0
        path = Path(write.root) / write.name
        with open(path, "wb", buffering=1 << 20) as out:
            head = bytearray(write.header)
            head[4] = 1 if write.compressed else 0
            out.write(head)
            pos = len(head)
            for step in plan:
                if isinstance(step, KeyGroupRange):
                    shifted = _Shifted(out, len(head))
                    batches = _edited(read, step, edit, codecs, key_type, state_names, counts)
                    encoded = write_keyed_file(
                        shifted,
                        write.header,
                        layout,
                        batches,
                        step,
                        compressed=write.compressed,  # type: ignore[arg-type]
                    )
                    for i, offset in enumerate(encoded.offsets):
                        if offset:
                            offsets[step.start + i - span.start] = offset - len(head) + pos
                    pos += shifted.written
                    rows += encoded.rows
                elif len(step[1]):
                    group, data, entries, _copied = step
                    offsets[group - span.start] = pos
                    out.write(data)
                    pos += len(data)
                    rows += entries
        flush_soon(path)
    handle = KeyGroupsHandle(7, span.start, tuple(offsets), RelativeFileHandle(write.name, pos))
    return WrittenKeyedFile(write.subtask, handle, pos, rows, sum(1 for o in offsets if o))


def _noted(
    plan: Iterable[tuple[int, bytes | np.ndarray, int, bool] | KeyGroupRange],
    copied: list[int] | None,
    filtered: list[int] | None,
) -> Iterator[tuple[int, bytes | np.ndarray, int, bool] | KeyGroupRange]:
    """Yield ``plan``'s steps, adding each key group written as bytes to ``copied`` or ``filtered``."""
    for step in plan:
        if not isinstance(step, KeyGroupRange):
            into = copied if step[3] else filtered
            if into is not None:
                into.append(step[0])
        yield step


def _edited(
    read: KeyedReadTask,
    span: KeyGroupRange,
    edit: KeyedEdit,
    codecs: Mapping[str, StateCodecs],
    key_type: str,
    state_names: tuple[str, ...],
    counts: EditCounts | None,
) -> Iterator[pa.Table]:
    """Yield the reference path's edited rows of the key groups ``span`` of ``read``'s file."""
    task = KeyedReadTask(read.root, read.handle, read.max_parallelism, span, read.order, 0, read.header)
    yield from edited_batches(
        read_keyed_task(task, state_names), edit_in_range(edit, span), codecs, key_type, state_names, counts
    )


def _plan(
    src: StreamSource,
    extents: dict[int, tuple[int, int]],
    edit: KeyedEdit,
    layout: KeyedLayout,
    compressed: bool,
    read: KeyedReadTask,
    codecs: Mapping[str, StateCodecs],
    key_type: str,
    counts: EditCounts | None,
) -> Iterable[tuple[int, bytes | np.ndarray, int, bool] | KeyGroupRange]:
    """Yield, ascending, ``(group, bytes, entries, copied)`` to write and ranges of key groups to re-encode.

    ``copied``: the bytes are the block as stored; else a TTL rule's block filtered as bytes. A group
    written as bytes is counted here (``counts``), as the reference path counts it.
    """
    by_rule = edit.replace or edit.rule is not None
    data_groups = touched_groups(edit)
    edited_ids = np.asarray([i for i, s in enumerate(layout.states) if s.name in edit.states], dtype=np.int64)
    edited_mask = state_mask(frozenset(edited_ids.tolist()))
    filters = _ttl_filters(edit, layout, codecs, key_type)
    splice = _Splice.of(edit, layout, read.key_groups) if data_groups else None
    wanted = sorted(set(extents) | {g for g in data_groups if g in read.key_groups})
    run: list[int] = []
    for group in wanted:
        step: tuple[int, bytes | np.ndarray, int, bool] | None = None
        proven = None
        if group in extents and (group not in data_groups or splice is not None):
            proven = _proven(src, group, extents[group], layout, compressed, read.max_parallelism)
        if group in data_groups:
            if splice is not None and (proven is not None or group not in extents):
                step = splice.block(group, proven, layout, compressed, counts)
        elif proven is not None:
            raw, block, found = proven
            ids = np.asarray(found.state_ids, dtype=np.int64)
            if not (by_rule and bool(edited_mask[ids].any())):
                _count_kept(counts, ids, edited_ids, layout, group)
                step = (group, raw, len(ids), True)
            elif filters is not None:
                step = _filtered(group, raw, block, found, filters, edit, layout, compressed, counts)
        if step is None:
            run.append(group)
            continue
        if run:
            yield KeyGroupRange(run[0], run[-1])
            run = []
        yield step
    if run:
        yield KeyGroupRange(run[0], run[-1])


def _proven(
    src: StreamSource, group: int, extent: tuple[int, int], layout: KeyedLayout, compressed: bool, max_p: int
) -> tuple[bytes, bytes, Any] | None:
    """Return a block's stored bytes, its bytes and its entries, if it is proven; None: decode it instead."""
    start, end = extent
    if end - start > MAX_COPIED_BLOCK or end > src.size:
        return None
    raw = src.read(start, end)
    try:
        block = decode_frames(raw, f"{src.source} key group {group}", verify=True) if compressed else raw
    except InvalidInputError:  # damaged: the reference path reads it and says what is wrong
        return None
    found = proven_entries(block, group, layout, max_p)
    if found is None:
        # Keys the column-wise proof does not take (RowData, POJO, opaque): kg verify's own check of the
        # block, then its entries walked one by one.
        if block_finding(raw, group, compressed, layout, max_p, src.source, src.source) is not None:
            return None
        found = walked_entries(block)
    return raw, block, found


def _count_kept(
    counts: EditCounts | None, ids: np.ndarray, edited_ids: np.ndarray, layout: KeyedLayout, group: int
) -> None:
    """Add a copied block's entries of the edited states to ``counts.before``."""
    if counts is None:
        return
    n = np.bincount(ids)  # state ids are 2 bytes, never negative
    present = np.flatnonzero(n)
    for sid, count in zip(present.tolist(), n[present].tolist(), strict=True):
        if sid in edited_ids:
            key = (layout.states[sid].name, group)
            counts.before[key] = counts.before.get(key, 0) + int(count)


# -- A write's key groups as bytes ---------------------------------------------------------------------------


class _Splice:
    """An upsert or delete of one value state with Int or Long keys, done on a block's entries as bytes.

    What ``edit.edited_batches`` then ``keyed.encode`` make of a key group, without rows: the entries whose
    key (and namespace, where the data names it) the data matches are dropped; the inserted entries follow
    the state's kept entries (or, when it has none, close the block), in the data's order.
    """

    def __init__(
        self,
        sid: int,
        name: str,
        width: int,
        prefix: int,
        namespace: int,
        match_ns: bool,
        match_groups: np.ndarray,
        match_keys: np.ndarray,
        insert_groups: np.ndarray,
        insert_bytes: bytes,
        insert_offsets: np.ndarray,
    ) -> None:
        self.sid, self.name, self.width, self.prefix, self.namespace = sid, name, width, prefix, namespace
        self.match_ns, self.match_groups, self.match_keys = match_ns, match_groups, match_keys
        #: The inserted entries, back to back (``insert_offsets``: where each begins, then the end).
        self.insert_groups, self.insert_bytes, self.insert_offsets = (
            insert_groups,
            insert_bytes,
            insert_offsets,
        )
        self.insert_array = np.frombuffer(insert_bytes, dtype=np.uint8)
        # The data's keys as the kernels compare them: the first (up to) 8 bytes of each one's key and
        # namespace, a big-endian unsigned number; where that is all of them, the numbers say it all.
        cell = match_keys.dtype.itemsize
        self.number_width = min(cell, 8)
        keys = np.frombuffer(match_keys.tobytes(), dtype=np.uint8).reshape(-1, cell)
        padded = np.zeros((len(keys), 8), dtype=np.uint8)
        padded[:, 8 - self.number_width :] = keys[:, : self.number_width]
        self.match_numbers = padded.view(">u8").ravel().astype(np.uint64)

    @classmethod
    def of(cls, edit: KeyedEdit, layout: KeyedLayout, span: KeyGroupRange) -> _Splice | None:
        """Return the splice of ``edit`` (its data in ``span``), or None when it needs rows."""
        width = _FIXED_KEYS.get(layout.codec.key_type)
        if width is None or edit.replace or edit.rule is not None or len(edit.states) != 1:
            return None
        (name,) = edit.states
        ids = layout.state_ids()
        sid = ids.get(name)
        if sid is None or layout.states[sid].kind != "value" or layout.states[sid].namespace_size is None:
            return None
        namespace = int(layout.states[sid].namespace_size)
        matches = _in_span(edit.matches, span)
        inserts = _in_span(edit.inserts, span)
        if edit.inserts is None:
            inserts = (
                pa.table({c: pa.array([], pa.binary()) for c in ("namespace", "value")})
                .append_column("key", pa.array([], pa.int64()))
                .append_column("key_group", pa.array([], pa.int32()))
                .append_column("state", pa.array([], pa.string()))
            )
        if not set(matches.column_names) <= {"key_group", "state", "key", "namespace"}:
            return None
        for table in (matches, inserts):
            names = set(table.column("state").cast(pa.string()).to_pylist()) if table.num_rows else set()
            if names - {name}:
                return None
        if any(
            c in inserts.column_names and inserts.column(c).null_count != inserts.num_rows
            for c in ("user_key", "timestamp")
        ):
            return None
        match_ns = "namespace" in matches.column_names
        cell = width + (namespace if match_ns else 0)
        cells = np.empty((matches.num_rows, cell), dtype=np.uint8)
        cells[:, :width] = _key_bytes(matches.column("key"), width)
        if match_ns:
            ns = _fixed_cells(matches.column("namespace").combine_chunks(), namespace)
            if ns is None:
                return None
            cells[:, width:] = ns
        match_keys = cells.view(f"S{cell}").ravel()
        prefix = layout.prefix_bytes
        built = _entries(inserts, prefix, width, namespace)
        if built is None:
            return None
        return cls(
            sid,
            name,
            width,
            prefix,
            namespace,
            match_ns,
            np.asarray(matches.column("key_group").to_numpy(), dtype=np.int64),
            match_keys,
            np.asarray(inserts.column("key_group").to_numpy(), dtype=np.int64),
            *built,
        )

    def _dropped(
        self,
        buf: np.ndarray,
        ids: np.ndarray,
        key_starts: np.ndarray,
        key_ends: np.ndarray,
        lo: int,
        hi: int,
    ) -> tuple[int, np.ndarray] | None:
        """Return the state's entries in a block and, ascending, those the data matches (None: decode it)."""
        mine = ids == self.sid
        if bool((key_ends[mine] - key_starts[mine] != self.prefix + self.width + self.namespace).any()):
            return None
        cell = self.width + (self.namespace if self.match_ns else 0)
        drop = np.zeros(len(ids), dtype=bool)
        rows = np.flatnonzero(mine)
        if hi > lo and len(rows):
            drop[rows] = self._matched(
                _cells(buf, key_starts[rows] + self.prefix, cell), self.match_keys[lo:hi]
            )
        return len(rows), np.flatnonzero(drop)

    def _dropped_natively(
        self,
        native: Any,
        buf: np.ndarray,
        ids: np.ndarray,
        key_starts: np.ndarray,
        key_ends: np.ndarray,
        lo: int,
        hi: int,
    ) -> tuple[int, np.ndarray] | None:
        """``_dropped`` by the ``splice_match`` kernel: one pass over the block's entries, the same result."""
        ok, mine, hits = native.splice_match(
            buf,
            np.ascontiguousarray(ids, dtype=np.int64),
            np.ascontiguousarray(key_starts, dtype=np.int64),
            np.ascontiguousarray(key_ends, dtype=np.int64),
            self.sid,
            self.prefix + self.width + self.namespace,
            self.prefix,
            self.number_width,
            np.unique(self.match_numbers[lo:hi]),
        )
        if not ok:
            return None
        cell = self.match_keys.dtype.itemsize
        if len(hits) and cell > self.number_width:
            # Matched on their first 8 bytes; then by all their bytes (a Long key and a namespace).
            found = _cells(buf, key_starts[hits] + self.prefix, cell).view(f"S{cell}")
            hits = hits[np.isin(found, self.match_keys[lo:hi])]
        return int(mine), np.asarray(hits, dtype=np.int64)

    def _matched(self, cells: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """Return which entries' ``cells`` (key, then namespace where matched, back to back) are wanted.

        The keys are compared as numbers; the few entries whose key is wanted then by all their bytes.
        """
        cell = wanted.dtype.itemsize
        width = self.width
        keys = cells.reshape(-1, cell)[:, :width].copy().view(">i8" if width == 8 else ">i4").ravel()
        wanted_bytes = np.frombuffer(wanted.tobytes(), dtype=np.uint8).reshape(-1, cell)
        wanted_keys = wanted_bytes[:, :width].copy().view(">i8" if width == 8 else ">i4").ravel()
        hits = _among(keys.astype(np.int64), wanted_keys.astype(np.int64))
        if cell == width:
            return hits
        exact = {bytes(r) for r in wanted_bytes}
        rows = cells.reshape(-1, cell)
        for i in np.flatnonzero(hits).tolist():
            hits[i] = bytes(rows[i]) in exact
        return hits

    def block(
        self,
        group: int,
        proven: tuple[bytes, bytes, Any] | None,
        layout: KeyedLayout,
        compressed: bool,
        counts: EditCounts | None,
    ) -> tuple[int, bytes | np.ndarray, int, bool] | None:
        """Return key group ``group``'s new block (None: decode it), counted as the reference counts it."""
        block = proven[1] if proven is not None else b""
        if proven is not None:
            found = proven[2]
            ids = np.asarray(found.state_ids, dtype=np.int64)
            starts = np.asarray(found.key_starts, dtype=np.int64) - 4
            key_starts = np.asarray(found.key_starts, dtype=np.int64)
            key_ends = np.asarray(found.key_ends, dtype=np.int64)
            ends = np.asarray(found.value_ends, dtype=np.int64)
        else:
            ids = starts = key_starts = key_ends = ends = np.zeros(0, dtype=np.int64)
        buf = np.frombuffer(block, dtype=np.uint8)
        lo, hi = (int(i) for i in np.searchsorted(self.match_groups, [group, group + 1]))
        native = kernels() if len(ids) else None
        if native is not None:
            matched = self._dropped_natively(native, buf, ids, key_starts, key_ends, lo, hi)
        else:
            matched = self._dropped(buf, ids, key_starts, key_ends, lo, hi)
        if matched is None:
            return None
        mine, dropped = matched
        a, b = (int(i) for i in np.searchsorted(self.insert_groups, [group, group + 1]))
        added = b - a
        if counts is not None:
            key = (self.name, group)
            if mine:
                counts.before[key] = counts.before.get(key, 0) + mine
            removed = len(dropped)
            if removed:
                counts.removed[key] = counts.removed.get(key, 0) + removed
                values = int((ends[dropped] - key_ends[dropped] - 4).sum())
                size = removed * (self.width + self.namespace) + values
                counts.removed_bytes[self.name] = counts.removed_bytes.get(self.name, 0) + size
            if added:
                counts.inserted[key] = counts.inserted.get(key, 0) + added
        kept = len(ids) - len(dropped)
        if not added:
            if not kept:
                return group, b"", 0, False
            if kept == len(ids):
                return group, proven[0] if proven is not None else b"", len(ids), proven is not None
        offsets = self.insert_offsets[a : b + 1]
        if native is not None:
            # The kernel: the kept entries between two dropped ones copied as one range, the added ones
            # after them, the ends of the ranges framed anew (0: a framing it does not take; _rebuilt).
            framed, data = native.splice_block(
                buf,
                np.ascontiguousarray(ids, dtype=np.int64),
                np.ascontiguousarray(starts, dtype=np.int64),
                np.ascontiguousarray(ends, dtype=np.int64),
                dropped,
                self.sid,
                self.insert_array[int(offsets[0]) : int(offsets[-1])],
                offsets - offsets[0],
            )
            if framed:
                return group, (encode_frames(data.tobytes()) if compressed else data), kept + added, False
        drop = np.zeros(len(ids), dtype=bool)
        drop[dropped] = True
        keep = np.flatnonzero(~drop)
        extra = self.insert_bytes[int(offsets[0]) : int(offsets[-1])]
        lengths = np.diff(offsets)
        new_starts = len(block) + offsets[:-1] - offsets[0]
        new_ids = np.full(added, self.sid, dtype=np.int64)
        kept_ids = ids[keep]
        # After the state's last kept entry (its run), or at the end when it kept none.
        where = np.flatnonzero(kept_ids == self.sid)
        at = int(where[-1]) + 1 if len(where) else len(keep)
        order_ids = np.concatenate((kept_ids[:at], new_ids, kept_ids[at:]))
        order_starts = np.concatenate((starts[keep][:at], new_starts, starts[keep][at:]))
        order_ends = np.concatenate((ends[keep][:at], new_starts + lengths, ends[keep][at:]))
        data = _rebuilt(np.frombuffer(block + extra, dtype=np.uint8), order_ids, order_starts, order_ends)
        return group, (encode_frames(data.tobytes()) if compressed else data), len(order_ids), False


def _entries(inserts: pa.Table, prefix: int, width: int, namespace: int) -> tuple[bytes, np.ndarray] | None:
    """Return the inserted rows as entries, back to back, and where each begins (then the end).

    An entry: ``int keyLen``, the key-group prefix, the key (big-endian), the namespace, ``int valueLen``,
    the value. None for a null or odd-sized namespace or a null value (the reference path says why).
    """
    n = inserts.num_rows
    if not n:
        return b"", np.zeros(1, dtype=np.int64)
    ns = inserts.column("namespace").combine_chunks().cast(pa.large_binary())
    values = inserts.column("value").combine_chunks().cast(pa.large_binary())
    if ns.null_count or values.null_count:
        return None
    ns_lengths = np.asarray(pc.binary_length(ns).to_numpy(zero_copy_only=False), dtype=np.int64)
    if bool((ns_lengths != namespace).any()):
        return None
    head = 4 + prefix + width + namespace + 4
    heads = np.empty((n, head), dtype=np.uint8)
    heads[:, :4] = np.frombuffer((prefix + width + namespace).to_bytes(4, "big"), dtype=np.uint8)
    groups = np.asarray(inserts.column("key_group").to_numpy(), dtype=np.int64)
    heads[:, 4 : 4 + prefix] = groups.astype(">i8").view(np.uint8).reshape(n, 8)[:, 8 - prefix :]
    keys = np.asarray(inserts.column("key").to_numpy(), dtype=np.int64 if width == 8 else np.int32)
    heads[:, 4 + prefix : 4 + prefix + width] = (
        keys.astype(">i8" if width == 8 else ">i4").view(np.uint8).reshape(n, width)
    )
    if namespace:
        ns_buffers = ns.buffers()
        ns_at = np.frombuffer(ns_buffers[1], dtype=np.int64)[ns.offset : ns.offset + n]
        heads[:, 4 + prefix + width : head - 4] = np.frombuffer(ns_buffers[2], dtype=np.uint8)[
            ns_at[:, None] + np.arange(namespace)
        ]
    value_buffers = values.buffers()
    value_at = np.frombuffer(value_buffers[1], dtype=np.int64)[values.offset : values.offset + n + 1]
    lengths = np.diff(value_at)
    heads[:, head - 4 :] = lengths.astype(">i4").view(np.uint8).reshape(n, 4)
    sizes = head + lengths
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    copy_ranges(heads.reshape(-1), np.arange(n, dtype=np.int64) * head, np.full(n, head), out, offsets[:-1])
    if int(lengths.sum()):
        data = np.frombuffer(value_buffers[2], dtype=np.uint8)
        copy_ranges(data, value_at[:-1], lengths, out, offsets[:-1] + head)
    return out.tobytes(), offsets


def _among(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Return which ``values`` are in ``wanted`` (few): a binary search each, no sort of ``values``."""
    hits = np.zeros(len(values), dtype=bool)
    if not len(wanted) or not len(values):
        return hits
    # A Bloom-like bitmap of the wanted values' hashes first: only the values it lets through are searched.
    bits = 1 << max(10, min(24, int(len(wanted)).bit_length() + 6))
    table = np.zeros(bits, dtype=bool)
    table[_slot(wanted, bits)] = True
    maybe = np.flatnonzero(table[_slot(values, bits)])
    if len(maybe):
        ordered = np.sort(wanted)
        at = np.minimum(np.searchsorted(ordered, values[maybe]), len(ordered) - 1)
        hits[maybe] = ordered[at] == values[maybe]
    return hits


def _slot(values: np.ndarray, bits: int) -> np.ndarray:
    """Return each value's slot among ``bits`` (a power of two): Fibonacci hashing of its 64 bits."""
    mixed = values.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return (mixed >> np.uint64(64 - (bits.bit_length() - 1))).astype(np.int64)


def _in_span(table: pa.Table | None, span: KeyGroupRange) -> pa.Table:
    if table is None:
        return pa.table(
            {
                "key_group": pa.array([], pa.int32()),
                "state": pa.array([], pa.string()),
                "key": pa.array([], pa.int32()),
            }
        )
    groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int64)
    lo = int(np.searchsorted(groups, span.start, side="left"))
    hi = int(np.searchsorted(groups, span.end, side="right"))
    return table.slice(lo, hi - lo)


def _key_bytes(keys: pa.Array | pa.ChunkedArray, width: int) -> np.ndarray:
    """Return Int or Long keys as Flink's ``IntSerializer``/``LongSerializer`` write them (big-endian).

    One row of ``width`` bytes per key.
    """
    values = np.asarray(keys.to_numpy(zero_copy_only=False), dtype=np.int64 if width == 8 else np.int32)
    return values.astype(">i8" if width == 8 else ">i4").view(np.uint8).reshape(-1, width)


def _fixed_cells(values: pa.Array, size: int) -> np.ndarray | None:
    """Return binary ``values`` of ``size`` bytes each, as a matrix's rows; None: a null or another size."""
    values = values.cast(pa.large_binary())
    n = len(values)
    if values.null_count:
        return None
    lengths = np.asarray(pc.binary_length(values).to_numpy(zero_copy_only=False), dtype=np.int64)
    if bool((lengths != size).any()):
        return None
    if not n or not size:
        return np.empty((n, size), dtype=np.uint8)
    buffers = values.buffers()
    at = np.frombuffer(buffers[1], dtype=np.int64)[values.offset : values.offset + n]
    return np.frombuffer(buffers[2], dtype=np.uint8)[at[:, None] + np.arange(size)]


# -- TTL expiry as bytes ------------------------------------------------------------------------------------

#: Serialized size of the key types whose rows hold the key as a fixed-width number (``_count_bytes``).
_FIXED_KEYS = {"int": 4, "long": 8}


def _ttl_filters(
    edit: KeyedEdit, layout: KeyedLayout, codecs: Mapping[str, StateCodecs], key_type: str
) -> dict[int, int] | None:
    """Return, for a pure ``--expired-ttl`` rule, state id → namespace size of the TTL value states it trims.

    The other named states must be ones the rule leaves alone (no TTL, or timers with no timer rule).
    None when the rule or a named state needs rows: the reference path runs.
    """
    rule = edit.rule
    if (
        rule is None
        or edit.replace
        or (edit.matches is not None and edit.matches.num_rows)
        or (edit.inserts is not None and edit.inserts.num_rows)
        or rule.key_filter is not None
        or rule.ttl_ms is None
        or rule.now_ms is None
        or rule.ttl_ms < 0
        or key_type not in _FIXED_KEYS
    ):
        return None
    out: dict[int, int] = {}
    for sid, state in enumerate(layout.states):
        if state.name not in edit.states:
            continue
        codec = codecs.get(state.name)
        if codec is None:
            return None
        if state.kind == "timer":
            if rule.timers_before is not None:
                return None
        elif is_ttl(codec.value):
            if state.kind != "value" or state.namespace_size is None:
                return None
            out[sid] = state.namespace_size
    return out


def _filtered(
    group: int,
    raw: bytes,
    block: bytes,
    found: Any,
    filters: dict[int, int],
    edit: KeyedEdit,
    layout: KeyedLayout,
    compressed: bool,
    counts: EditCounts | None,
) -> tuple[int, bytes | np.ndarray, int, bool] | None:
    """Return a block with its expired TTL values dropped, rebuilt from its entries' bytes (None: decode it).

    As ``edit._expired`` decides (``TtlUtils.expired``: ``last_access + ttl <= now``, saturating) and
    ``FullSnapshotAsyncWriter`` lays out what is kept: each state's run its id, the last entry of a run
    flagged in its key's first byte, then the next run's id or the END mark.
    """
    rule = edit.rule
    assert rule is not None and rule.ttl_ms is not None and rule.now_ms is not None
    buf = np.frombuffer(block, dtype=np.uint8)
    ids = np.asarray(found.state_ids, dtype=np.int64)
    key_starts = np.asarray(found.key_starts, dtype=np.int64)
    key_ends = np.asarray(found.key_ends, dtype=np.int64)
    value_ends = np.asarray(found.value_ends, dtype=np.int64)
    native = kernels() if len(ids) else None
    if native is not None:
        # The kernels: which values expired in one pass, then the kept entries copied in ranges.
        ok, dropped = native.ttl_expired(
            buf,
            np.ascontiguousarray(ids, dtype=np.int64),
            np.ascontiguousarray(key_ends, dtype=np.int64),
            np.ascontiguousarray(value_ends, dtype=np.int64),
            state_mask(frozenset(filters)),
            rule.ttl_ms,
            rule.now_ms,
        )
        if not ok:
            return None  # a TTL value shorter than its timestamp: the reference path says so
    else:
        trimmed = np.isin(ids, np.asarray(list(filters), dtype=np.int64))
        rows = np.flatnonzero(trimmed)
        value_starts = key_ends + 4
        if bool((value_ends[rows] - value_starts[rows] < 8).any()):
            return None  # a TTL value shorter than its timestamp: the reference path says so
        stamps = _cells(buf, value_starts[rows], 8).view(">i8").astype(np.int64)
        long_max = np.iinfo(np.int64).max
        saturated = stamps > long_max - rule.ttl_ms
        expires = np.where(saturated, long_max, stamps + np.where(saturated, 0, rule.ttl_ms))
        dropped = rows[expires <= rule.now_ms]
    edited_ids = np.asarray([i for i, s in enumerate(layout.states) if s.name in edit.states], dtype=np.int64)
    if counts is not None:
        _count_kept(counts, ids, edited_ids, layout, group)
        _count_removed(counts, ids, dropped, key_ends, value_ends, filters, layout, group)
    if not len(dropped):
        return group, raw, len(ids), True
    kept = len(ids) - len(dropped)
    if not kept:
        return group, b"", 0, False
    if native is not None:
        framed, data = native.splice_block(
            buf,
            np.ascontiguousarray(ids, dtype=np.int64),
            np.ascontiguousarray(key_starts - 4, dtype=np.int64),
            np.ascontiguousarray(value_ends, dtype=np.int64),
            dropped,
            -1,
            np.zeros(0, dtype=np.uint8),
            np.zeros(1, dtype=np.int64),
        )
        if framed:
            return group, (encode_frames(data.tobytes()) if compressed else data), kept, False
    drop = np.zeros(len(ids), dtype=bool)
    drop[dropped] = True
    keep = np.flatnonzero(~drop)
    data = _rebuilt(buf, ids[keep], key_starts[keep] - 4, value_ends[keep])
    return group, (encode_frames(data.tobytes()) if compressed else data), len(keep), False


def _count_removed(
    counts: EditCounts,
    ids: np.ndarray,
    dropped: np.ndarray,
    key_ends: np.ndarray,
    value_ends: np.ndarray,
    filters: dict[int, int],
    layout: KeyedLayout,
    group: int,
) -> None:
    """Add the ``dropped`` entries to ``counts.removed`` and their bytes to ``counts.removed_bytes``.

    The bytes are ``edit._count_bytes``'s: the key's width, the namespace and the value (as rows hold them).
    """
    key_width = layout.codec.key_type
    dropped_ids = ids[dropped]
    for sid, ns in filters.items():
        mine = dropped[dropped_ids == sid]
        n = len(mine)
        if not n:
            continue
        name = layout.states[sid].name
        counts.removed[(name, group)] = counts.removed.get((name, group), 0) + n
        values = int((value_ends[mine] - key_ends[mine] - 4).sum())
        size = n * (_FIXED_KEYS[key_width] + ns) + values
        counts.removed_bytes[name] = counts.removed_bytes.get(name, 0) + size


def _cells(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """Return the ``width`` bytes at each of ``starts`` in ``buf``, back to back (one copy kernel call)."""
    out = np.empty(len(starts) * width, dtype=np.uint8)
    copy_ranges(buf, starts, np.full(len(starts), width, dtype=np.int64), out, np.arange(len(starts)) * width)
    return out


def _rebuilt(buf: np.ndarray, ids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Return a block of the entries ``buf[starts[i]:ends[i]]`` (state ``ids[i]``), runs framed anew."""
    lengths = ends - starts
    last = np.ones(len(ids), dtype=bool)
    last[:-1] = ids[1:] != ids[:-1]
    room = lengths + 2 * last
    positions = 2 + np.concatenate(([0], np.cumsum(room)[:-1]))
    out = np.empty(2 + int(room.sum()), dtype=np.uint8)
    out[:2] = np.frombuffer(int(ids[0]).to_bytes(2, "big"), dtype=np.uint8)
    copy_ranges(buf, starts, lengths, out, positions)
    flag_at = positions + 4  # the key's first byte: the key-group prefix's, which carries the flag
    out[flag_at] = np.where(
        last, out[flag_at] | FIRST_BIT_IN_BYTE_MASK, out[flag_at] & (0xFF ^ FIRST_BIT_IN_BYTE_MASK)
    )
    ends_at = positions[last] + lengths[last]
    following = np.append(ids[1:], END_OF_KEY_GROUP_MARK)[last]
    out[ends_at] = (following >> 8) & 0xFF
    out[ends_at + 1] = following & 0xFF
    return out


__all__ = ["MAX_COPIED_BLOCK", "copies_key_groups", "edit_copying", "touched_groups"]
