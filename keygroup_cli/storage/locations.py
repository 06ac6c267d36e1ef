"""Where a savepoint or snapshot lives: a local path or an object-store URI, behind one small API.

``location(text)`` turns what a user (or a Flink handle) names into a ``Location``:

- a plain path or ``file://`` URI: the local file system;
- ``s3://`` and Flink's ``s3a://`` / ``s3p://`` aliases, ``gs://`` / ``gcs://``, ``abfs://`` / ``abfss://``,
  ``hdfs://``: the matching ``pyarrow.fs`` file system, so kg has no HTTP or authentication code of its own.
  Credentials come from each store's standard chain (for S3 the AWS environment variables, profiles and
  instance roles; ``AWS_ENDPOINT_URL`` reaches S3-compatible stores such as MinIO or Ceph).

A ``Location`` behaves like the part of ``pathlib.Path`` kg uses (``/``, ``name``, ``parent``, ``exists``,
``is_file``, ``is_dir``, ``read_bytes``) and adds bounded range reads (``read_range``), so metadata commands
read ``_metadata`` and state-file headers without downloading state files. File-system errors become
``KgError`` lines: a missing object exit 3, a store kg cannot reach or authenticate to exit 6.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, MissingDependencyError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

#: URI schemes kg reads and writes, mapped to the scheme pyarrow.fs knows them by.
SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "s3p": "s3",
    "s3n": "s3",
    "gs": "gs",
    "gcs": "gs",
    "abfs": "abfs",
    "abfss": "abfss",
    "hdfs": "hdfs",
    "viewfs": "hdfs",
}


def is_uri(text: str | os.PathLike[str]) -> bool:
    """Return whether ``text`` is a URI (``scheme://…``) rather than a plain local path.

    Any scheme counts, so that an unknown one (``ftp://``) is refused by ``location`` with a clear line
    instead of being taken for a local directory called ``ftp:``.
    """
    if not isinstance(text, str):
        return False
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", text) is not None


def is_remote(text: str | os.PathLike[str] | Location) -> bool:
    """Return whether ``text`` goes through the storage layer: any URI, ``file://`` included.

    A ``file://`` URI is the local file system, handled as an object store would be (read in place,
    written metadata-last), so that it never becomes a local directory called ``file:``.
    """
    if isinstance(text, Location):
        return not text.is_local
    return is_uri(text)


@dataclass(frozen=True)
class Location:
    """A file or directory on some file system: ``fs`` and its path there, plus the URI shown to users."""

    fs: pafs.FileSystem
    path: str
    uri: str

    # -- pathlib-like --------------------------------------------------------------------------------------

    def __truediv__(self, other: str | os.PathLike[str]) -> Location:
        part = str(other).lstrip("/")
        return Location(self.fs, posixpath.join(self.path, part), _join_uri(self.uri, part))

    def __str__(self) -> str:
        return self.uri

    def __fspath__(self) -> str:
        if not self.is_local:
            raise TypeError(f"{self.uri} is not a local path")
        return self.path

    @property
    def name(self) -> str:
        """Return the last path component."""
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def parent(self) -> Location:
        """Return the containing directory."""
        path = posixpath.dirname(self.path.rstrip("/")) or self.path
        uri = self.uri.rstrip("/")
        return Location(self.fs, path, uri[: uri.rfind("/")] if "/" in uri else uri)

    @property
    def is_local(self) -> bool:
        """Return whether this is on the local file system."""
        return type(self.fs).__name__ == "LocalFileSystem"

    @property
    def local_path(self) -> Path | None:
        """Return the local ``Path``, or None on an object store."""
        return Path(self.path) if self.is_local else None

    def exists(self) -> bool:
        """Return whether a file or directory (for object stores: any object under this prefix) is here."""
        return str(self._info().type.name) != "NotFound"

    def is_file(self) -> bool:
        """Return whether this is a file (an object)."""
        return str(self._info().type.name) == "File"

    def is_dir(self) -> bool:
        """Return whether this is a directory (an object-store prefix with objects below it)."""
        return str(self._info().type.name) == "Directory"

    def size(self) -> int:
        """Return the size of the file in bytes.

        Raises:
            InvalidInputError: No such file.
        """
        info = self._info()
        if info.type.name != "File":
            raise InvalidInputError(f"{self.uri}: no such file", code="STATE_FILE_MISSING")
        return int(info.size)

    def iterdir(self) -> Iterator[Location]:
        """Yield the direct children of this directory."""
        import pyarrow.fs as pafs

        with storage_errors(self.uri):
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        for info in sorted(infos, key=lambda i: i.path):
            yield self / posixpath.basename(info.path)

    def walk_files(self) -> list[tuple[str, int]]:
        """Return ``(relative path, size)`` of every file below this directory, sorted."""
        import pyarrow.fs as pafs

        with storage_errors(self.uri):
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True, allow_not_found=True))
        base = self.path.rstrip("/") + "/"
        return sorted((info.path[len(base) :], int(info.size)) for info in infos if info.type.name == "File")

    # -- reading -------------------------------------------------------------------------------------------

    def read_bytes(self) -> bytes:
        """Return the whole file (for small files: ``_metadata``, a manifest)."""
        with storage_errors(self.uri), self.fs.open_input_file(self.path) as fh:
            return bytes(fh.read())

    def read_range(self, offset: int, length: int) -> bytes:
        """Return up to ``length`` bytes from ``offset``: one ranged GET on an object store.

        pyarrow's random-access files ask for the size first, so that is two requests in all.
        """
        with storage_errors(self.uri), self.fs.open_input_file(self.path) as fh:
            total = fh.size()
            if offset >= total or length <= 0:
                return b""
            return bytes(fh.read_at(min(length, total - offset), offset))

    def open_input(self) -> Any:
        """Return a seekable binary file (``pyarrow.NativeFile``) for reads; the caller closes it."""
        with storage_errors(self.uri):
            return self.fs.open_input_file(self.path)

    # -- writing -------------------------------------------------------------------------------------------

    def write_bytes(self, data: bytes) -> None:
        """Write ``data`` as this file (an object store writes it whole or not at all)."""
        self._parents()
        with storage_errors(self.uri), self.fs.open_output_stream(self.path) as out:
            out.write(data)

    def upload_from(self, source: Path, chunk: int = 8 << 20) -> None:
        """Copy the local file ``source`` here, streaming."""
        self._parents()
        with storage_errors(self.uri), self.fs.open_output_stream(self.path) as out, open(source, "rb") as fh:
            while block := fh.read(chunk):
                out.write(block)

    def download_to(self, target: Path, chunk: int = 8 << 20) -> int:
        """Copy this file to the local ``target`` (parents created), streaming; return its size."""
        target.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        with storage_errors(self.uri), self.fs.open_input_stream(self.path) as fh, open(target, "wb") as out:
            while block := fh.read(chunk):
                out.write(block)
                written += len(block)
        return written

    def same_store(self, other: Location) -> bool:
        """Return whether ``other`` is on this file system (same store, endpoint and credentials)."""
        return bool(self.fs.equals(other.fs))

    def copy_to(self, target: Location) -> None:
        """Copy this file to ``target`` on the same store; object stores copy server-side (S3 CopyObject)."""
        target._parents()
        with storage_errors(self.uri):
            self.fs.copy_file(self.path, target.path)

    def delete(self) -> None:
        """Delete this file; a missing file is not an error."""
        import pyarrow.fs as pafs

        info = self._info()
        if info.type == pafs.FileType.File:
            with storage_errors(self.uri):
                self.fs.delete_file(self.path)

    def _parents(self) -> None:
        # Object stores have no directories; a local file system (file://) needs them.
        if self.is_local:
            with storage_errors(self.uri):
                self.fs.create_dir(posixpath.dirname(self.path), recursive=True)

    def _info(self) -> Any:
        with storage_errors(self.uri):
            return self.fs.get_file_info(self.path)


def location(target: str | os.PathLike[str] | Location) -> Location:
    """Return the ``Location`` of a local path or a URI (see the module docstring for the schemes).

    Raises:
        InvalidArgumentError: An unknown URI scheme.
        MissingDependencyError: The file system's library is missing (HDFS needs ``libhdfs`` and Hadoop).
    """
    if isinstance(target, Location):
        return target
    import pyarrow.fs as pafs

    text = os.fspath(target)
    parsed = urlparse(text) if isinstance(text, str) else None
    scheme = parsed.scheme.lower() if parsed is not None else ""
    if not scheme or (len(scheme) == 1 and os.name == "nt"):
        path = os.path.abspath(text)
        return Location(pafs.LocalFileSystem(), path, text)
    if scheme == "file":
        from urllib.parse import unquote

        return Location(pafs.LocalFileSystem(), unquote(parsed.path) if parsed else text, text)
    if scheme not in SCHEMES:
        raise InvalidArgumentError(
            f"{text}: unknown file system {scheme}:// (kg reads local paths, file://, "
            "s3:// (s3a, s3p), gs://, abfs:// (abfss), hdfs://)",
            code="UNKNOWN_FILE_SYSTEM",
        )
    canonical = SCHEMES[scheme] + text[len(scheme) :]
    try:
        fs, path = pafs.FileSystem.from_uri(canonical)
    except (OSError, ValueError) as exc:
        raise _environment_error(text, exc) from None
    return Location(fs, path.rstrip("/") or path, text.rstrip("/"))


class storage_errors:  # noqa: N801 - used as a context manager, read as a phrase
    """Turn a file-system exception inside the block into one ``KgError`` line naming ``uri``."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: Any) -> None:
        if exc is None or not isinstance(exc, (OSError, ValueError)):
            return
        if isinstance(exc, FileNotFoundError):
            raise InvalidInputError(f"{self.uri}: no such file or object", code="OBJECT_NOT_FOUND") from None
        raise _environment_error(self.uri, exc) from None


def _environment_error(uri: str, exc: BaseException) -> Exception:
    text = " ".join(str(exc).split())
    lowered = text.lower()
    if "nosuchbucket" in lowered or "bucket does not exist" in lowered or "bucket not found" in lowered:
        return InvalidInputError(f"{uri}: no such bucket ({text[:160]})", code="BUCKET_NOT_FOUND")
    if any(
        word in lowered
        for word in (
            "accessdenied",
            "access denied",
            "access_denied",
            "forbidden",
            "invalidaccesskeyid",
            "signature",
            "403",
        )
    ):
        return MissingDependencyError(
            f"{uri}: access denied by the store; check its credentials (for S3: AWS_ACCESS_KEY_ID / "
            f"AWS_PROFILE / the instance role) ({text[:160]})",
            code="STORAGE_ACCESS_DENIED",
        )
    if "libhdfs" in lowered or "hadoop" in lowered:
        return MissingDependencyError(
            f"{uri}: HDFS needs Hadoop's libhdfs and CLASSPATH (set HADOOP_HOME and ARROW_LIBHDFS_DIR) "
            f"({text[:160]})",
            code="HDFS_UNAVAILABLE",
        )
    return MissingDependencyError(
        f"{uri}: the store cannot be reached ({text[:200]}); check the URI, the network and the store's "
        "settings (for S3-compatible stores: AWS_ENDPOINT_URL)",
        code="STORAGE_UNREACHABLE",
    )


def _join_uri(uri: str, part: str) -> str:
    return uri.rstrip("/") + "/" + part if uri else part


__all__ = ["SCHEMES", "Location", "is_remote", "is_uri", "location", "storage_errors"]
