"""Seal a staged Flink savepoint: encode ``_metadata`` once, check what was written against it, write it last.

The commit's format half. A writer (``convert.to_savepoint``) puts the state files of a new savepoint into
a staging directory and returns the ``CheckpointMetadata`` that describes them; ``seal_savepoint`` then

1. encodes ``_metadata`` once, and parses those very bytes back: they must describe what was meant
   (no re-read from storage, no second encode);
2. checks every handle against Flink's rules and the files: each keyed handle covers Flink's key-group
   range for its subtask, each file exists with the size its handle records, every offset falls inside;
3. decodes every operator-state stream of the output where it is (keyed blocks were checked as they were
   encoded, or before they were copied), unless they are to be checked where they will be (an upload);
4. writes ``_metadata`` into the staging directory, last.

Renaming the staging directory (``storage.staging``) or uploading it with ``_metadata`` last is the
caller's step. Any failure raises ``ExecutionError`` (``OUTPUT_VERIFICATION_FAILED``) and nothing is
committed.

A writer that copied the input's state files as bytes (``kg migrate``) passes ``verify`` instead: the
staged savepoint, ``_metadata`` included, is then verified as ``kg verify`` does (every stream, every
block) by that callable before the handles are checked, so a finding is the input's (its bytes were
copied unread) and the callable words it as such; the rename is still the commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.core.findings import first_error
from keygroup_cli.core.keygroups import key_group_range_for_operator_index
from keygroup_cli.flink.check.verify import verify_streams
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle, OperatorStateHandle
from keygroup_cli.flink.metadata.locate import METADATA_FILE, FlinkCheckpoint
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, parse_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from keygroup_cli.storage.locations import Location, location


@dataclass(frozen=True, slots=True)
class SealedSavepoint:
    """A staged savepoint whose ``_metadata`` is written: its bytes, and what they say."""

    staging: Path
    encoded: bytes
    metadata: CheckpointMetadata


def seal_savepoint(
    staging: Path,
    metadata: CheckpointMetadata,
    *,
    keyed_root: str | None = None,
    check_streams: bool = True,
    verify: Callable[[Path], None] | None = None,
) -> SealedSavepoint:
    """Encode, check and write the ``_metadata`` of the savepoint staged in ``staging`` (see the module).

    Args:
        staging: The staging directory holding the new state files.
        metadata: What the writer wrote.
        keyed_root: Where the keyed files are when not in ``staging``: an object-store prefix that write
            tasks wrote to directly.
        check_streams: Decode every operator-state stream now; an upload checks them where they will be
            instead (``require_streams_decode``), once beside the keyed files.
        verify: Called with ``staging`` once ``_metadata`` is written there, before anything else is
            checked: it verifies the whole staged savepoint and raises on a finding (``kg migrate``'s
            copied bytes). Operator-state streams are then not decoded again.

    Raises:
        ExecutionError: ``OUTPUT_VERIFICATION_FAILED``; nothing is committed.
        KgError: What ``verify`` raises.
    """
    where = f"output verification failed: {staging / METADATA_FILE}"
    encoded, parsed = _encode_checked(metadata, where)
    if verify is not None:
        (staging / METADATA_FILE).write_bytes(encoded)
        verify(staging)
        _require_handles_match(parsed, staging, keyed_root, where)
        return SealedSavepoint(staging, encoded, parsed)
    _require_handles_match(parsed, staging, keyed_root, where)
    if check_streams:
        require_streams_decode(FlinkCheckpoint(staging / METADATA_FILE, parsed), staging)
    (staging / METADATA_FILE).write_bytes(encoded)
    return SealedSavepoint(staging, encoded, parsed)


def seal_in_place(target: Location, metadata: CheckpointMetadata) -> CheckpointMetadata:
    """Encode, check and write ``_metadata`` at ``target``, where every state file is already written.

    For a savepoint whose files were copied straight to an object store (``kg migrate``): ``_metadata`` is
    encoded once and parsed back, every operator-state stream is decoded where it is, and only then is
    ``_metadata`` written, the commit. The caller checked each file's size as it copied it. Returns what
    was written, as parsed back.

    Raises:
        ExecutionError: ``OUTPUT_VERIFICATION_FAILED``; ``_metadata`` is not written.
    """
    metadata_at = target / METADATA_FILE
    encoded, parsed = _encode_checked(metadata, f"output verification failed: {metadata_at}")
    require_streams_decode(FlinkCheckpoint(metadata_at, parsed), target)
    metadata_at.write_bytes(encoded)
    return parsed


def _encode_checked(metadata: CheckpointMetadata, where: str) -> tuple[bytes, CheckpointMetadata]:
    """Encode ``metadata`` once and parse those bytes back: they must say what was meant."""
    encoded = write_metadata(metadata)
    parsed = parse_metadata(encoded, where)
    # ``properties`` is what the parser reads out of ``properties_bytes`` (compared as bytes).
    if parsed != replace(metadata, properties=parsed.properties):
        raise ExecutionError(f"{where}: does not read back as written", code="OUTPUT_VERIFICATION_FAILED")
    return encoded, parsed


def require_streams_decode(savepoint: FlinkCheckpoint, where: Path | Location) -> None:
    """Decode every operator-state stream of a new savepoint where it is (``_metadata`` may not be yet).

    Raises:
        ExecutionError: The first error finding (``OUTPUT_VERIFICATION_FAILED``); nothing is committed.
    """
    problem = first_error(verify_streams(savepoint, keyed=False).findings)
    if problem is not None:
        raise ExecutionError(
            f"output verification failed: {where}: {problem}", code="OUTPUT_VERIFICATION_FAILED"
        )


def _require_handles_match(
    metadata: CheckpointMetadata, staging: Path, keyed_root: str | None, where: str
) -> None:
    """Check every handle against Flink's key-group ranges and the files written."""
    for op in metadata.operators:
        for sub in op.subtasks:
            subject = f"{where}: operator {op.label!r} subtask {sub.index}"
            keyed = sub.managed_keyed_state
            if isinstance(keyed, KeyGroupsHandle):
                want = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, sub.index)
                if (keyed.key_group_start, keyed.key_group_end) != (want.start, want.end):
                    raise ExecutionError(
                        f"{subject} covers key groups [{keyed.key_group_start}, {keyed.key_group_end}], "
                        f"not [{want.start}, {want.end}]",
                        code="OUTPUT_VERIFICATION_FAILED",
                    )
                _require_written_file(keyed_root or staging, keyed.delegate, keyed.offsets, subject)
            if isinstance(keyed, IncrementalKeyedHandle):
                want = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, sub.index)
                if (keyed.key_group_start, keyed.key_group_end) != (want.start, want.end):
                    raise ExecutionError(
                        f"{subject} covers key groups [{keyed.key_group_start}, {keyed.key_group_end}], "
                        f"not [{want.start}, {want.end}]",
                        code="OUTPUT_VERIFICATION_FAILED",
                    )
                for file in (keyed.metadata, *(f.handle for f in keyed.private)):
                    _require_written_file(staging, file, [], subject)
            raw = sub.raw_keyed_state
            if isinstance(raw, KeyGroupsHandle):
                # Timers in raw keyed state (flink.write.raw_timers), written into the staging directory.
                want = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, sub.index)
                if (raw.key_group_start, raw.key_group_end) != (want.start, want.end):
                    raise ExecutionError(
                        f"{subject} raw keyed state covers key groups [{raw.key_group_start}, "
                        f"{raw.key_group_end}], not [{want.start}, {want.end}]",
                        code="OUTPUT_VERIFICATION_FAILED",
                    )
                _require_written_file(staging, raw.delegate, raw.offsets, subject)
            op_handle = sub.managed_operator_state
            if isinstance(op_handle, OperatorStateHandle):
                offsets = [o for e in op_handle.states for o in e.offsets]
                _require_written_file(staging, op_handle.delegate, offsets, subject)


def _require_written_file(root: Path | str, file: object, offsets: Sequence[int], subject: str) -> None:
    if isinstance(file, ByteStreamHandle):
        # Inline state (kept as Flink wrote it by ``kg migrate``): its offsets fall inside its bytes.
        if any(not 0 <= o < file.size for o in offsets):
            raise ExecutionError(
                f"{subject}: an offset beyond the {file.size} inline bytes", code="OUTPUT_VERIFICATION_FAILED"
            )
        return
    assert isinstance(file, RelativeFileHandle), "kg writes every state file beside _metadata"
    if isinstance(root, Path):
        path = root / file.relative_path
        size = path.stat().st_size if path.is_file() else -1
    else:
        stored = location(root) / file.relative_path
        size = stored.size() if stored.is_file() else -1
    if size != file.size or any(not 0 <= o < size for o in offsets):
        raise ExecutionError(
            f"{subject}: {file.relative_path} has {size} bytes; its handle records {file.size} "
            f"and offsets up to {max(offsets, default=0)}",
            code="OUTPUT_VERIFICATION_FAILED",
        )


__all__ = ["SealedSavepoint", "require_streams_decode", "seal_in_place", "seal_savepoint"]
