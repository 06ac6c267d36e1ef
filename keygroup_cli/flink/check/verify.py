"""Deep verification of a Flink savepoint or checkpoint: the structure of every key group and operator stream.

Flink has no "is this savepoint intact?" check before a restore tries it, and its formats carry almost no
checksums (only snappy frames have CRCs, and Flink reads them with ``SnappyFramedInputStream(in, false)``,
i.e. unchecked). ``verify_flink`` walks what a restore would read, one block at a time through a memory
map, and returns one ``Finding`` per problem instead of raising:

- every state file exists with the size its handle records;
- a keyed handle covers Flink's key-group range for its subtask
  (``KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex``), its non-zero offsets lie after the
  header, inside the file and ascend with the key group (``FullSnapshotAsyncWriter`` writes in order);
- each block parses as ``FullSnapshotRestoreOperation.readKvStatesFromKeyGroup`` reads it: known state
  ids, entry lengths inside the block, the key-group prefix of every key equal to the block's key group,
  an ``END_OF_KEY_GROUP_MARK`` and no bytes after it;
- every decoded key hashes to its key group (``murmurHash(key.hashCode()) % maxParallelism``);
- every snappy frame's masked CRC32C holds;
- every operator-state element lies inside its stream and decodes.

A ``_metadata`` that does not parse still raises (``InvalidInputError``), as every command does.

The cheap part alone (files, sizes, offsets) is ``flink.metadata.state_files.state_file_findings``,
``kg check``'s gate; both word the same problem alike.
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.findings import Finding, Severity, VerifyReport
from keygroup_cli.core.javahash import HASHABLE_KEY_TYPES, hash_codes
from keygroup_cli.core.keygroups import key_group_range_for_operator_index, key_groups_for_hashes
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import decode_block_batch, decode_block_columns
from keygroup_cli.flink.keyed.entries import check_entries
from keygroup_cli.flink.keyed.header import KeyedStateHeader, read_keyed_header
from keygroup_cli.flink.keyed.layout import END_OF_KEY_GROUP_MARK, FIRST_BIT_IN_BYTE_MASK, KeyedLayout
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import FlinkCheckpoint
from keygroup_cli.flink.metadata.reader import OperatorState
from keygroup_cli.flink.metadata.state_files import offsets_finding, size_finding
from keygroup_cli.flink.operator.streams import class_finding, finding, raw_class_finding, stream_finding
from keygroup_cli.flink.savepoint import Savepoint, open_savepoint
from keygroup_cli.storage.locations import Location

#: Findings reported per state stream before the rest of it is summarised in one more finding.
MAX_FINDINGS_PER_STREAM = 10

_INT = struct.Struct(">i")
_USHORT = struct.Struct(">H")


class _Corrupt(Exception):
    """A structural problem in one block: a finding code and its message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def verify_flink(
    path: str | Path | Location | FlinkCheckpoint,
    *,
    on_progress: OnProgress | None = None,
    blocks: bool = True,
    layout_headers: bool = True,
) -> VerifyReport:
    """Verify the Flink savepoint or checkpoint at ``path`` deeply and return the findings.

    ``rows`` of the report counts keyed entries plus operator-state elements decoded; ``files`` the state
    streams walked. With ``blocks=False`` the key-group blocks are not decoded (nor a heap or RocksDB
    layout rewritten): every keyed file's size, key-group range, offsets and header are checked, and every
    operator-state stream decoded. That is the check before a rescale whose read tasks decode every block
    as strictly as this does (``keyed_decode.decode_keyed_file(strict=True)``). ``layout_headers=False``
    leaves a heap or RocksDB layout's own headers to a caller that rewrites the layout and checks the
    rewrite's headers (a rescale), so each header is read once.

    Raises:
        InvalidInputError: ``_metadata`` is missing or does not parse.
        UnsupportedFormatError: Its version is one kg does not read.

    ``path`` may be an opened savepoint: what it read already is not read again.
    """
    savepoint = Savepoint.of(path) if isinstance(path, FlinkCheckpoint) else open_savepoint(path)
    subject = str(savepoint.directory) if isinstance(path, FlinkCheckpoint) else str(path)
    report = on_progress or (lambda _s, _d, _t: None)
    from keygroup_cli.flink.layouts.heap import needs_canonical_view

    findings: list[Finding] = []
    rewritten = needs_canonical_view(savepoint)
    if rewritten:
        # Heap and RocksDB layouts are verified through the canonical files kg rewrites them into, which
        # cannot show the original files' recorded sizes nor (without blocks) a handle's key-group range.
        findings.extend(_layout_findings(savepoint, ranges=not blocks))
        # The classes the layout's own headers name, checked as a canonical input's are (headers only):
        # with or without blocks, and whether or not kg can rewrite the layout.
        misnamed = _layout_header_findings(savepoint) if layout_headers else []
        findings.extend(misnamed)
        if misnamed and blocks:
            # Rejected already: the rewrite would only name the same classes again, in scratch copies.
            return VerifyReport(str(savepoint.metadata_path), 0, 0, tuple(dict.fromkeys(findings)))
    if not blocks:
        files, rows = _verify_streams(savepoint, findings, report, keyed=not rewritten, blocks=False)
    elif rewritten:
        verified = _verify_canonical_view(savepoint, subject, findings, report)
        if verified is None:
            return VerifyReport(str(savepoint.metadata_path), 0, 0, tuple(findings))
        files, rows = verified
    else:
        files, rows = _verify_streams(savepoint, findings, report)
    return VerifyReport(str(savepoint.metadata_path), files, rows, tuple(dict.fromkeys(findings)))


def _verify_canonical_view(
    savepoint: FlinkCheckpoint, subject: str, findings: list[Finding], report: OnProgress
) -> tuple[int, int] | None:
    """Verify a heap checkpoint or RocksDB files in the canonical layout kg rewrites them into.

    The rewrite itself decodes every entry and refuses corrupt blocks. Returns the files read and the rows,
    or None when the rewrite failed (its finding added).
    """
    from keygroup_cli.flink.layouts.heap import canonical_view

    with tempfile.TemporaryDirectory(prefix="kg-verify-") as scratch:
        try:
            view = canonical_view(savepoint, Path(scratch) / "canonical")
        except InvalidInputError as exc:
            # A damaged database file keeps its own code; anything else the rewrite refuses is unreadable.
            code = exc.code if exc.code == "FLINK_DATABASE_CORRUPT" else "FLINK_KEYED_STATE_UNREADABLE"
            findings.append(_finding(code, subject, exc.message))
            return None
        except UnsupportedFormatError as exc:
            findings.append(_finding("FLINK_NOT_VERIFIED", subject, exc.message, severity=Severity.WARNING))
            return None
        return _verify_streams(view, findings, report)


def _layout_findings(savepoint: FlinkCheckpoint, *, ranges: bool) -> list[Finding]:
    """What verifying a heap or RocksDB layout through its canonical rewrite leaves out.

    Every state file's existence, size and offsets as ``_metadata`` records them (``kg check``'s gate,
    ``flink.metadata.state_files``), and with ``ranges`` every keyed handle's key-group range against Flink's
    assignment (the rewrite keeps a handle's range; only its blocks, not read without ``blocks``, show it).
    """
    from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
    from keygroup_cli.flink.metadata.state_files import state_file_findings

    found = state_file_findings(savepoint)
    if not ranges:
        return found
    for op in savepoint.metadata.operators:
        for sub in op.subtasks:
            handle = sub.managed_keyed_state
            if not isinstance(handle, KeyGroupsHandle | IncrementalKeyedHandle):
                continue
            want = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, sub.index)
            if (handle.key_group_start, handle.key_group_end) != (want.start, want.end):
                found.append(
                    _finding(
                        "FLINK_KEY_GROUP_RANGE",
                        f"{op.label} subtask {sub.index}",
                        f"{savepoint.metadata_path}: the keyed handle covers key groups "
                        f"[{handle.key_group_start}, {handle.key_group_end}], Flink assigns "
                        f"[{want.start}, {want.end}] to subtask {sub.index} of {op.parallelism} "
                        f"(maxParallelism {op.max_parallelism})",
                    )
                )
    return found


def _layout_header_findings(savepoint: FlinkCheckpoint) -> list[Finding]:
    """The serializer classes a heap or RocksDB layout's keyed headers name that Flink does not have.

    A heap layout's file starts with its ``KeyedBackendSerializationProxy`` (up to the first key group's
    offset), a RocksDB handle's metadata file is exactly one. Only ``stream_checks.class_finding``'s
    near misses are reported: whatever else is wrong in a header, the rewrite that reads it reports.
    """
    from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle

    found: list[Finding] = []
    for op in savepoint.metadata.operators:
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            subject = f"{op.label} subtask {sub.index}"
            try:
                if isinstance(keyed, KeyGroupsHandle) and keyed.delegate is not None:
                    with StreamSource(keyed.delegate, savepoint.directory) as src:
                        first = min((o for o in keyed.offsets if o > 0), default=src.size)
                        raw, where = src.read(0, first), src.source
                elif isinstance(keyed, IncrementalKeyedHandle) and keyed.metadata is not None:
                    with StreamSource(keyed.metadata, savepoint.directory) as src:
                        raw, where = src.read(0, src.size), src.source
                else:
                    continue
            except (InvalidInputError, UnsupportedFormatError):
                continue
            try:
                header = read_keyed_header(raw, where, len(raw))
                misnamed = class_finding(header.key_serializer, header.states or (), where, subject)
            except (InvalidInputError, UnsupportedFormatError):
                misnamed = None
            # Snapshots kg cannot delimit hide their nested classes: their strings are checked as bytes.
            misnamed = misnamed or raw_class_finding(raw, where, subject)
            if misnamed is not None:
                found.append(misnamed)
    return found


def verify_streams(
    savepoint: FlinkCheckpoint, *, keyed: bool = True, on_progress: OnProgress | None = None
) -> VerifyReport:
    """Verify every keyed and operator-state stream an already parsed ``_metadata`` references.

    For a savepoint being committed whose ``_metadata`` is not at its place yet (an object-store upload
    writes it last): ``savepoint.metadata_path`` says where it will be, the streams are read there. With
    ``keyed=False`` only the operator-state streams are read (a writer that checked its keyed blocks as
    it encoded them).
    """
    findings: list[Finding] = []
    files, rows = _verify_streams(savepoint, findings, on_progress or (lambda _s, _d, _t: None), keyed=keyed)
    return VerifyReport(str(savepoint.metadata_path), files, rows, tuple(findings))


def _verify_streams(
    savepoint: FlinkCheckpoint,
    findings: list[Finding],
    report: OnProgress,
    *,
    keyed: bool = True,
    blocks: bool = True,
) -> tuple[int, int]:
    """Check every stream of ``savepoint``; add the findings, return the files read and the rows.

    What an opened savepoint read already is not read again: its operator-state streams were checked by
    the same check when it opened them (``Savepoint.operator_streams``), and the keyed headers it holds
    are used as they are.
    """
    opened = Savepoint.of(savepoint)
    headers = _known_headers(opened) if keyed else {}
    kinds = KeyGroupsHandle | OperatorStateHandle if keyed else OperatorStateHandle
    work = [
        (op, sub.index, handle)
        for op in savepoint.metadata.operators
        for sub in op.subtasks
        for handle in (sub.managed_keyed_state, sub.managed_operator_state)
        if isinstance(handle, kinds)
    ]
    files = rows = 0
    for done, (op, index, handle) in enumerate(work, 1):
        subject = f"{op.label} subtask {index}"
        found: list[Finding] = []
        if isinstance(handle, OperatorStateHandle):
            checked = opened.operator_streams[(op.operator_id, index)]
            files += checked.opened
            found.extend(checked.findings)
            rows += checked.table.num_rows if checked.table is not None else 0
        else:
            try:
                with StreamSource(handle.delegate, savepoint.directory) as src:
                    files += 1
                    known_header = headers.get((op.operator_id, index))
                    for item in _keyed_stream(op, index, handle, src, subject, known_header, blocks=blocks):
                        if isinstance(item, Finding):
                            found.append(item)
                        else:
                            rows += item
            except (UnsupportedFormatError, InvalidInputError) as exc:
                found.append(stream_finding(exc, subject))
        findings.extend(_capped(found, subject))
        report("verify", done, len(work))
    return files, rows


def _capped(found: list[Finding], subject: str) -> list[Finding]:
    """Return one stream's findings, past ``MAX_FINDINGS_PER_STREAM`` summed up in one more."""
    if len(found) <= MAX_FINDINGS_PER_STREAM:
        return found
    more = found[MAX_FINDINGS_PER_STREAM:]
    found = found[:MAX_FINDINGS_PER_STREAM]
    # The summary is as severe as the worst finding it stands for (warnings stay warnings).
    worst = next(s for s in Severity if any(f.severity is s for f in more))
    found.append(
        _finding(
            found[-1].code,
            subject,
            f"... and {len(more)} more problem(s) in this stream",
            severity=worst,
        )
    )
    return found


def _known_headers(opened: Savepoint) -> dict[tuple[str, int], bytes]:
    """Return the keyed headers of ``opened`` by (operator id, subtask), read once and kept on it.

    A plan or rescale after this gate reuses them. Where one does not read, none is returned: each stream's
    own read then turns what is wrong into its finding.
    """
    known = opened.keyed_streams_read()
    if known is None:
        try:
            known = opened.keyed_streams
        except (UnsupportedFormatError, InvalidInputError):
            return {}
    return {(s.operator_id, s.subtask): s.raw_header for streams in known.values() for s in streams}


def _keyed_stream(
    op: OperatorState,
    index: int,
    handle: KeyGroupsHandle,
    src: StreamSource,
    subject: str,
    known_header: bytes | None = None,
    *,
    blocks: bool = True,
) -> Iterator[Finding | int]:
    """Yield findings and entry counts for one keyed stream (canonical key-group blocks).

    With ``blocks=False`` only the size, range, header and offsets: no block is read. ``known_header``
    is the file's header as an opened savepoint read it already (not read again).
    """
    where = src.source
    wrong_size = size_finding(handle.delegate, src.size, where, subject)
    if wrong_size is not None:
        yield wrong_size
    want = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, index)
    if (handle.key_group_start, handle.key_group_end) != (want.start, want.end):
        yield _finding(
            "FLINK_KEY_GROUP_RANGE",
            subject,
            f"{where}: handle covers key groups [{handle.key_group_start}, {handle.key_group_end}], Flink "
            f"assigns [{want.start}, {want.end}] to subtask {index} of {op.parallelism} "
            f"(maxParallelism {op.max_parallelism})",
        )
    outside = offsets_finding(handle, src.size, where, subject)
    if outside is not None:
        yield outside
        return
    present = [(handle.key_group_start + i, off) for i, off in enumerate(handle.offsets) if off != 0]
    opened = yield from _keyed_header(op, present, src, subject, known_header)
    if opened is None or not blocks:
        return
    header, layout = opened
    for j, (group, start) in enumerate(present):
        end = present[j + 1][1] if j + 1 < len(present) else src.size
        raw = src.read(start, end)
        yield from _keyed_block(raw, group, header.compressed, layout, op.max_parallelism, where, subject)


def _keyed_header(
    op: OperatorState,
    present: list[tuple[int, int]],
    src: StreamSource,
    subject: str,
    known_header: bytes | None,
) -> Generator[Finding, None, tuple[KeyedStateHeader, KeyedLayout] | None]:
    """Read a keyed stream's header and check the blocks follow it in order; None after a finding.

    ``present`` lists the key groups with data and their offsets: the header ends where the first block
    starts, and every block starts after the one before it and inside the file.
    """
    where = src.source
    header_end = min([off for _g, off in present] or [src.size])
    if not 0 < header_end <= src.size:
        yield _finding(
            "FLINK_KEY_GROUP_OFFSETS",
            subject,
            f"{where}: first key-group offset {header_end} is outside the file",
        )
        return None
    try:
        raw = known_header if known_header is not None else src.read(0, header_end)
        header = read_keyed_header(raw, where, header_end)
        layout = KeyedLayout.from_header(header, op.max_parallelism, where)
    except InvalidInputError as exc:
        yield _finding("FLINK_STATE_HEADER_INVALID", subject, exc.message)
        return None
    misnamed = class_finding(header.key_serializer, header.states or (), where, subject)
    misnamed = misnamed or raw_class_finding(raw, where, subject)
    if misnamed is not None:
        yield misnamed
        return None
    if header.end is not None and header.end != header_end:
        yield _finding(
            "FLINK_KEY_GROUP_OFFSETS",
            subject,
            f"{where}: the header ends at byte {header.end}, the first key group starts at {header_end}",
        )
        return None
    previous = header_end - 1
    for group, off in present:
        if off <= previous or off >= src.size:
            yield _finding(
                "FLINK_KEY_GROUP_OFFSETS",
                subject,
                f"{where}: key group {group} at offset {off}: not after the previous block "
                f"({previous}) and inside the file ({src.size} bytes)",
            )
            return None
        previous = off
    return header, layout


def _keyed_block(
    raw: bytes,
    group: int,
    compressed: bool,
    layout: KeyedLayout,
    max_parallelism: int,
    where: str,
    subject: str,
) -> Iterator[Finding | int]:
    """Yield the findings of one key group's block, then its entry count if nothing stopped the check."""
    try:
        block = decode_frames(raw, f"{where} key group {group}", verify=True) if compressed else raw
        # Column-wise, the block's structure is proven as a whole (keyed_decode._structure); only a
        # block that path refuses is walked entry by entry, for the finding that names the problem.
        batch = decode_block_columns(block, group, layout, whole=True)
        entries = batch.num_rows if batch is not None else _walk_block(block, group, layout)
    except InvalidInputError as exc:
        code = "FLINK_SNAPPY_CRC" if exc.code == "SNAPPY_CRC" else "FLINK_SNAPPY_CORRUPT"
        yield _finding(code, subject, exc.message)
        return
    except _Corrupt as exc:
        yield _finding(exc.code, subject, f"{where}: key group {group}: {exc.message}")
        return
    if batch is None:
        try:
            batch = decode_block_batch(block, group, layout, where)
        except UnsupportedFormatError as exc:
            yield _finding("FLINK_NOT_VERIFIED", subject, exc.message, severity=Severity.WARNING)
            yield entries
            return
        except InvalidInputError as exc:
            yield _finding("FLINK_KEY_GROUP_BLOCK_CORRUPT", subject, exc.message)
            return
    misplaced = _misplaced_key(batch, group, layout.codec.key_type, max_parallelism, where, subject)
    if misplaced is not None:
        yield misplaced
        return
    yield entries


def block_finding(
    raw: bytes,
    group: int,
    compressed: bool,
    layout: KeyedLayout,
    max_parallelism: int,
    where: str,
    subject: str,
) -> Finding | None:
    """Return the first error ``kg verify`` finds in one key group's block (as stored), or None.

    For a block copied as bytes, checked in the pass that copies it: snappy CRCs, the structure proven as
    a whole and every key hashed from its bytes against ``group`` (``keyed_entries.check_entries``), no
    row made. Only a block that check does not take is checked again by ``_keyed_block``, which names the
    problem exactly as ``kg verify`` does.
    """
    try:
        block = decode_frames(raw, f"{where} key group {group}", verify=True) if compressed else raw
    except InvalidInputError:
        block = None
    if block is not None and check_entries(block, group, layout, max_parallelism) is not None:
        return None
    for item in _keyed_block(raw, group, compressed, layout, max_parallelism, where, subject):
        if isinstance(item, Finding) and item.severity is Severity.ERROR:
            return item
    return None


def _misplaced_key(
    batch: pa.RecordBatch, group: int, key_type: str, max_parallelism: int, where: str, subject: str
) -> Finding | None:
    """The first key of a block that Flink's hash assigns to another key group, as a finding.

    Matches ``KeyGroupRangeAssignment.assignToKeyGroup``; None for key types kg does not hash.
    """
    if key_type not in HASHABLE_KEY_TYPES or not batch.num_rows:
        return None
    hashed = key_groups_for_hashes(hash_codes(batch.column("key"), key_type), max_parallelism)
    bad = np.flatnonzero(hashed != group)
    if not bad.size:
        return None
    i = int(bad[0])
    return _finding(
        "FLINK_KEY_IN_WRONG_KEY_GROUP",
        subject,
        f"{where}: key {batch.column('key')[i].as_py()!r} is stored in key group {group}, Flink "
        f"assigns it to {int(hashed[i])} ({bad.size} such key(s) in this block)",
    )


def _walk_block(block: bytes, group: int, layout: KeyedLayout) -> int:
    """Walk one uncompressed key-group block as Flink's restore reads it; return its entry count.

    Mirrors ``FullSnapshotRestoreOperation.readKvStatesFromKeyGroup``: a short state id, then entries
    ``int keyLen, key, int valueLen, value`` until one whose ``key[0]`` has bit 0x80 set, then the next
    state id or ``END_OF_KEY_GROUP_MARK``. Every length is checked against the bytes left.

    Raises:
        _Corrupt: The first structural problem found.
    """
    n = len(block)
    nprefix = layout.prefix_bytes
    if not 0 <= group < 256**nprefix:
        # A corrupt key-group range in _metadata: no key of this layout can carry this group's prefix.
        raise _Corrupt(
            "FLINK_KEY_GROUP_OFFSETS", f"key group {group} is beyond what a {nprefix}-byte key prefix holds"
        )
    expected = group.to_bytes(nprefix, "big")
    pos = count = 0
    state_id = _state_id(block, pos)
    while state_id != END_OF_KEY_GROUP_MARK:
        if state_id >= len(layout.states):
            raise _Corrupt(
                "FLINK_KEY_GROUP_BLOCK_CORRUPT",
                f"state id {state_id} at byte {pos}; the header declares {len(layout.states)} states",
            )
        pos, count = _walk_state(block, pos + 2, count, expected)
        state_id = _state_id(block, pos)
    pos += 2
    if pos != n:
        raise _Corrupt(
            "FLINK_KEY_GROUP_OFFSETS",
            f"{n - pos} byte(s) after the END_OF_KEY_GROUP mark, before the next block",
        )
    return count


def _walk_state(block: bytes, pos: int, count: int, expected: bytes) -> tuple[int, int]:
    """Walk one state's entries from ``pos``, up to the one whose key marks the state's last.

    ``expected`` is the key-group prefix every key must start with (bit 0x80 of its first byte aside);
    ``count`` is the entries walked before. Returns the position after the last entry and the new count.
    """
    n = len(block)
    nprefix = len(expected)
    shortest_key = max(nprefix, 1)
    while True:
        klen = _length(block, n, pos, "key", count)
        pos += 4
        if klen < shortest_key:
            raise _Corrupt(
                "FLINK_SERIALIZER_LENGTH", f"entry {count}: key of {klen} bytes has no key-group prefix"
            )
        key = block[pos : pos + klen]
        pos += klen
        if bytes((key[0] & 0x7F,)) + key[1:nprefix] != expected:
            stored = int.from_bytes(bytes((key[0] & 0x7F,)) + key[1:nprefix], "big")
            raise _Corrupt(
                "FLINK_KEY_IN_WRONG_KEY_GROUP", f"entry {count}: key prefix names key group {stored}"
            )
        pos += 4 + _length(block, n, pos, "value", count)
        count += 1
        if key[0] & FIRST_BIT_IN_BYTE_MASK:
            return pos, count


def _state_id(block: bytes, pos: int) -> int:
    """Read the short state id (or ``END_OF_KEY_GROUP_MARK``) at ``pos``."""
    if pos + 2 > len(block):
        raise _Corrupt(
            "FLINK_END_OF_KEY_GROUP_MISSING",
            f"block ends at byte {len(block)} before its END_OF_KEY_GROUP mark",
        )
    value: int = _USHORT.unpack_from(block, pos)[0]
    return value


def _length(block: bytes, n: int, pos: int, what: str, count: int) -> int:
    """Read the int length of entry ``count``'s key or value (``what``) at ``pos``; check it fits in ``n``."""
    if pos + 4 > n:
        raise _Corrupt(
            "FLINK_END_OF_KEY_GROUP_MISSING", f"block ends at byte {n} inside an entry's {what} length"
        )
    value: int = _INT.unpack_from(block, pos)[0]
    if value < 0 or value > n - pos - 4:
        raise _Corrupt(
            "FLINK_SERIALIZER_LENGTH",
            f"entry {count}: {what} length {value} at byte {pos} exceeds the {n - pos - 4} bytes left",
        )
    return value


_finding = finding


__all__ = ["MAX_FINDINGS_PER_STREAM", "block_finding", "verify_flink"]
