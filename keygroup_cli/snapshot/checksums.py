"""xxHash64 digests of snapshot files, and verification of files against their manifest entries.

The manifest records, per file, its size and the lowercase hex xxHash64 (seed 0) of all its bytes.
Files are hashed in 1 MiB chunks, so memory stays flat whatever their size.
"""

from __future__ import annotations

from pathlib import Path

import xxhash

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.snapshot.model import KeyedFile, OperatorFile

CHUNK_SIZE = 1 << 20


def file_digest(path: Path | str) -> tuple[int, str]:
    """Return ``(size in bytes, xxh64 as 16 lowercase hex characters)`` of a file, streamed.

    Raises:
        InvalidInputError: The file is missing (``FILE_MISSING``) or unreadable (``FILE_UNREADABLE``).
    """
    path = Path(path)
    hasher = xxhash.xxh64(seed=0)
    size = 0
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK_SIZE):
                hasher.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: file is missing", code="FILE_MISSING") from None
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read: {exc.strerror}", code="FILE_UNREADABLE") from None
    return size, hasher.hexdigest()


def bytes_digest(data: bytes) -> str:
    """Return the xxh64 (seed 0) of ``data`` as 16 lowercase hex characters."""
    return xxhash.xxh64(data, seed=0).hexdigest()


def require_file_intact(directory: Path | str, entry: KeyedFile | OperatorFile) -> None:
    """Raise unless the file ``entry`` names exists under ``directory`` with its recorded size and xxh64.

    The size is compared first (a cheap ``stat``), so a truncated file is reported without hashing it.

    Raises:
        InvalidInputError: ``FILE_MISSING``, ``SIZE_MISMATCH`` or ``CHECKSUM_MISMATCH``, naming the file.
    """
    path = Path(directory) / entry.path
    if not path.is_file():
        raise InvalidInputError(f"{path}: file is missing", code="FILE_MISSING")
    size = path.stat().st_size
    if size != entry.bytes:
        raise InvalidInputError(
            f"{path}: size is {size} bytes but the manifest says {entry.bytes}", code="SIZE_MISMATCH"
        )
    size, digest = file_digest(path)
    if size != entry.bytes:
        # The file changed between stat and read; report what was hashed.
        raise InvalidInputError(
            f"{path}: size is {size} bytes but the manifest says {entry.bytes}", code="SIZE_MISMATCH"
        )
    if digest != entry.xxh64:
        raise InvalidInputError(
            f"{path}: xxh64 is {digest} but the manifest says {entry.xxh64}", code="CHECKSUM_MISMATCH"
        )


__all__ = ["CHUNK_SIZE", "bytes_digest", "file_digest", "require_file_intact"]
