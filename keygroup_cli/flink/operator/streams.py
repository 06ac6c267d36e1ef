"""Check one operator-state stream as ``kg verify`` does, decoding it once.

``check_operator_stream`` is shared by ``kg verify`` (``flink.check.verify``) and by an opened savepoint
(``flink.savepoint.Savepoint.operator_streams``), whose rescale uses the rows the check decoded.
``class_finding`` is the check of a state header's serializer classes that keyed and operator headers
share: it runs wherever a header is parsed, so in every writer's gate too (no block read).
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

from keygroup_cli.core.errors import InvalidInputError, KgError, UnsupportedFormatError
from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.flink.io.snappy import decode_frames
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.state_files import offsets_finding, size_finding
from keygroup_cli.flink.operator.codec import decode_operator_file
from keygroup_cli.flink.operator.header import OperatorStateHeader, operator_header_end, read_operator_header
from keygroup_cli.flink.types.classes import near_miss
from keygroup_cli.flink.types.serializer_snapshots import SerializerSnapshot, StateMetaInfo


def stream_finding(exc: UnsupportedFormatError | InvalidInputError, subject: str) -> Finding:
    """Return the finding for a stream kg cannot read at all (missing, unreadable, or a format it lacks)."""
    if isinstance(exc, UnsupportedFormatError):
        return finding("FLINK_NOT_VERIFIED", subject, exc.message, severity=Severity.WARNING)
    code = "FLINK_STATE_FILE_MISSING" if exc.code == "STATE_FILE_MISSING" else "FLINK_STATE_FILE_UNREADABLE"
    return finding(code, subject, exc.message)


class OperatorStreamCheck(NamedTuple):
    """What checking one operator-state stream found: its header, findings and decoded elements."""

    #: The header bytes (None if the check stopped before them).
    raw_header: bytes | None
    header: OperatorStateHeader | None
    findings: tuple[Finding, ...]
    #: The elements in ``core.schema.OPERATOR_SCHEMA`` (None if they did not decode).
    table: pa.Table | None
    #: Whether the stream's file could be opened at all.
    opened: bool = True


def check_operator_stream(
    handle: OperatorStateHandle, src: StreamSource, subject: str
) -> OperatorStreamCheck:
    """Check one operator-state stream as ``kg verify`` does and decode it, reading it once.

    A rescale uses the same decode it checked
    (``flink.savepoint.Savepoint.operator_streams``).
    """
    findings: list[Finding] = []
    where = src.source
    wrong_size = size_finding(handle.delegate, src.size, where, subject)
    if wrong_size is not None:
        findings.append(wrong_size)
    outside = offsets_finding(handle, src.size, where, subject)
    if outside is not None:
        return OperatorStreamCheck(None, None, (*findings, outside), None)
    offsets = [o for e in handle.states for o in e.offsets]
    first = min([o for o in offsets if o > 0] or [src.size])
    prefix = src.read(0, first)
    end = operator_header_end(prefix, offsets, src.size)
    raw = prefix[: end or first]
    try:
        header = read_operator_header(raw, where, end)
    except InvalidInputError as exc:
        return OperatorStreamCheck(
            None, None, (*findings, finding("FLINK_STATE_HEADER_INVALID", subject, exc.message)), None
        )
    misnamed = class_finding(None, (*(header.states or ()), *(header.broadcast_states or ())), where, subject)
    if misnamed is not None:
        return OperatorStreamCheck(raw, header, (*findings, misnamed), None)
    if header.compressed:
        starts = sorted(set(offsets))
        for j, start in enumerate(starts):
            stop = starts[j + 1] if j + 1 < len(starts) else src.size
            try:
                decode_frames(src.read(start, stop), f"{where} element at byte {start}", verify=True)
            except InvalidInputError as exc:
                code = "FLINK_SNAPPY_CRC" if exc.code == "SNAPPY_CRC" else "FLINK_SNAPPY_CORRUPT"
                return OperatorStreamCheck(
                    raw, header, (*findings, finding(code, subject, exc.message)), None
                )
    try:
        table = decode_operator_file(src, handle, header)
    except KgError as exc:
        corrupt = finding("FLINK_OPERATOR_STATE_CORRUPT", subject, exc.message)
        return OperatorStreamCheck(raw, header, (*findings, corrupt), None)
    return OperatorStreamCheck(raw, header, tuple(findings), table)


def raw_class_finding(raw: bytes, where: str, subject: str) -> Finding | None:
    """Return ``class_finding``'s error for a class name anywhere in a header's bytes.

    Serializer snapshots kg cannot delimit (a SQL ``RowData`` field's, a job's own composite) hide their
    nested classes from the parsed header; Flink still loads each one. Every ``writeUTF`` string of the
    header (an unsigned 16-bit length of 20 to 300, then that many bytes) that names a class one edit
    away from one Flink ships is damage. A window shifted by a byte reads a length of 0 or of at least
    5,120, so only the strings themselves are judged.
    """
    for i in range(len(raw) - 2):
        length = (raw[i] << 8) | raw[i + 1]
        if not 20 <= length <= 300 or i + 2 + length > len(raw):
            continue
        text = raw[i + 2 : i + 2 + length]
        if text.count(b".") < 2 or b" " in text:
            continue
        name = text.decode("latin-1")
        meant = near_miss(name)
        if meant is not None:
            return finding(
                "FLINK_STATE_HEADER_INVALID",
                subject,
                f"{where}: serializer snapshot class {name!r} is not one Flink has (it differs by one "
                f"letter from {meant!r}): a restore cannot load it",
            )
    return None


def class_finding(
    key_serializer: SerializerSnapshot | None,
    states: tuple[StateMetaInfo, ...],
    where: str,
    subject: str,
) -> Finding | None:
    """Return an error if a state header names a serializer class one letter away from one Flink ships.

    Flink's restore loads every class a header names; such a name is damage no class path satisfies
    (``flink.types.classes``). Classes Flink does not ship (a job's own serializers) pass.
    """
    snapshots = [key_serializer] if key_serializer is not None else []
    snapshots += [s for info in states for _key, s in info.serializers]
    while snapshots:
        snapshot = snapshots.pop()
        meant = near_miss(snapshot.class_name)
        if meant is not None:
            return finding(
                "FLINK_STATE_HEADER_INVALID",
                subject,
                f"{where}: serializer snapshot class {snapshot.class_name!r} is not one Flink has (it "
                f"differs by one letter from {meant!r}): a restore cannot load it",
            )
        snapshots.extend(snapshot.nested)
    return None


def finding(code: str, subject: str, message: str, *, severity: Severity = Severity.ERROR) -> Finding:
    """Return a finding about one state stream (an error unless told otherwise)."""
    return Finding(code, severity, subject, message)


__all__ = ["OperatorStreamCheck", "check_operator_stream", "class_finding", "finding", "stream_finding"]
