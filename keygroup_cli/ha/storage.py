"""Turn a ``CompletedCheckpoint`` stored in ``high-availability.storageDir`` into the directory to read.

Shared by the ZooKeeper and Kubernetes readers: both store the same ``RetrievableStreamStateHandle`` to
the same kind of file (``FileSystemStateStorageHelper``); only how they list entries differs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.ha.javaser import (
    CompletedCheckpointInfo,
    parse_completed_checkpoint,
    pointer_candidates,
)

_CHECKPOINT_DIR = re.compile(r"chk-(\d+)")


@dataclass(frozen=True, slots=True)
class Pointer:
    """The directory a store entry leads to, and how kg found it."""

    checkpoint: CompletedCheckpointInfo
    pointer: str
    warnings: tuple[str, ...] = ()


def local_or_uri(uri: str) -> str:
    """Return a local path for ``file:`` URIs and bare paths; any other URI (``s3://…``) unchanged."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path) if parsed.scheme else uri
    return uri


def read_storage_file(uri: str, entry: str) -> bytes:
    """Read the ``completedCheckpoint…`` file a store entry points to.

    Raises:
        InvalidInputError: The file is missing or unreadable (Flink would fail to recover too).
        UnsupportedFormatError: It is on a file system kg does not read (copy it locally first).
    """
    location = local_or_uri(uri)
    if "://" in location:
        raise UnsupportedFormatError(
            f"{entry}: the HA storage file {uri} is on a remote file system; kg reads "
            "high-availability.storageDir on a local or mounted file system only",
            code="HA_STORAGE_REMOTE",
        )
    try:
        return Path(location).read_bytes()
    except FileNotFoundError:
        raise InvalidInputError(
            f"{entry}: the HA storage file {location} is missing (Flink could not recover from this "
            "entry either)",
            code="HA_STORAGE_FILE_MISSING",
        ) from None
    except OSError as exc:
        raise InvalidInputError(
            f"{entry}: cannot read the HA storage file {location}: {exc.strerror}",
            code="HA_STORAGE_FILE_MISSING",
        ) from None


def resolve_pointer(data: bytes, checkpoint_id: int, entry: str) -> Pointer:
    """Return the ``chk-N`` / savepoint directory of a serialized ``CompletedCheckpoint``.

    When the object does not parse, the stream's path-like strings are searched instead: one ending in
    ``chk-<id>`` is the pointer; else the ``chk-*`` directories beside a path-like string are listed and
    ``chk-<id>`` among them is used.

    Raises:
        InvalidInputError: Neither way finds the directory.
    """
    try:
        info = parse_completed_checkpoint(data, entry)
        return Pointer(info, local_or_uri(info.external_pointer))
    except InvalidInputError as exc:
        reason = exc.message
    candidates = [local_or_uri(c).rstrip("/") for c in pointer_candidates(data)]
    wanted = f"chk-{checkpoint_id}"
    found = next((c for c in candidates if c.endswith("/" + wanted)), None)
    if found is None:
        for candidate in candidates:
            parent = Path(candidate).parent
            if _CHECKPOINT_DIR.fullmatch(Path(candidate).name) and (parent / wanted).is_dir():
                found = str(parent / wanted)
                break
    if found is None:
        raise InvalidInputError(
            f"{reason}; and no {wanted} directory was found beside the paths it names",
            code="HA_ENTRY_UNREADABLE",
        )
    info = CompletedCheckpointInfo(checkpoint_id, found, None, "checkpoint", None, False, None, "strings")
    warning = f"{entry}: the CompletedCheckpoint did not parse ({reason}); {found} was found by its name"
    return Pointer(info, found, (warning,))
