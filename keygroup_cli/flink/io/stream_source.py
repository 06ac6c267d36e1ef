"""Random access to the bytes of one state handle: inline bytes, a local file (memory-mapped) or a segment.

Shared by the keyed-state decoder (``keyed_decode``), the operator-state reader and the layout rewriters.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.paths import local_path
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle, SegmentFileHandle, StreamHandle
from keygroup_cli.storage.locations import Location, storage_errors


class StreamSource:
    """Random access to the bytes of one state handle: inline, a file, or a segment of one.

    A file on a local file system is read with ``pread``; on an object store every read is one ranged GET.

    Use as a context manager; ``read(start, end)`` returns ``bytes``.
    """

    def __init__(
        self, handle: StreamHandle | None, directory: Path | Location, source: str | None = None
    ) -> None:
        self._file: BinaryIO | None = None
        self._remote: Any = None
        self._base = 0
        if handle is None:
            self._data: bytes = b""
            self.source = source or "<empty>"
        elif isinstance(handle, ByteStreamHandle):
            self._data = handle.data
            self.source = source or f"inline state {handle.handle_name}"
        else:
            path = local_path(handle, directory)
            if path is None:
                raise UnsupportedFormatError(
                    f"cannot read state handle {handle!r}", code="FLINK_HANDLE_UNSUPPORTED"
                )
            self.source = source or str(path)
            if isinstance(path, Location):
                if path.local_path is None:
                    self._open_remote(path, handle)
                    return
                path = path.local_path
            try:
                self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
            except FileNotFoundError:
                raise InvalidInputError(f"{path}: state file is missing", code="STATE_FILE_MISSING") from None
            except OSError as exc:
                raise InvalidInputError(
                    f"{path}: cannot read state file: {exc.strerror}", code="STATE_FILE_UNREADABLE"
                ) from None
            # Read with pread, not a memory map: a mapping's touched pages count towards the process's
            # RSS, which then grew with the state read (a rescale reads every byte).
            self._data = b""
            total = path.stat().st_size
            if isinstance(handle, SegmentFileHandle):
                self._segment(handle, total)
                return
            self.size = total
            return
        self.size = len(self._data)

    def _open_remote(self, path: Location, handle: StreamHandle) -> None:
        with storage_errors(path.uri):
            self._remote = path.fs.open_input_file(path.path)
            total = self._remote.size()
        self._uri = path.uri
        self._data = b""
        if isinstance(handle, SegmentFileHandle):
            self._segment(handle, total)
        else:
            self.size = total

    def _segment(self, handle: SegmentFileHandle, total: int) -> None:
        # The segment's offset and size come from _metadata: reads stay inside the bytes the file holds, so
        # a claimed size of 2^62 allocates nothing (the readers then find the stream short and say so).
        self._base = min(max(handle.start_pos, 0), total)
        self.size = max(0, min(handle.size, total - self._base))

    def read(self, start: int, end: int) -> bytes:
        """Return the bytes ``[start, end)`` of the stream (clipped to its end; empty if ``end <= start``).

        Raises:
            InvalidInputError: ``start`` is negative (``FLINK_STATE_OFFSET_INVALID``): every offset kg
                reads at comes from ``_metadata`` or a state file, and a negative one is damage (a
                ``pread`` would fail with EINVAL, a slice of inline bytes would count from their end).
        """
        if start < 0:
            raise InvalidInputError(
                f"{self.source}: negative offset {start} into the stream", code="FLINK_STATE_OFFSET_INVALID"
            )
        end = min(end, self.size)
        if end <= start:
            return b""
        if self._remote is not None or self._file is not None:
            if self._file is not None:
                return os.pread(self._file.fileno(), end - start, self._base + start)
            with storage_errors(self._uri):
                return bytes(self._remote.read_at(end - start, self._base + start))
        return bytes(self._data[self._base + start : self._base + end])

    def close(self) -> None:
        """Release the file."""
        if self._remote is not None:
            self._remote.close()
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> StreamSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


__all__ = ["StreamSource"]
