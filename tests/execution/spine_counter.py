"""Count the storage reads and codec work of one savepoint rescale, in this process (issue #21's "measured").

``count_rescale(source, dest, ...)`` runs ``keygroup_cli.execution.routes.rescale.rescale`` on the local
engine with class- and module-level counters installed, and returns per input file:

- ``metadata_reads``: reads of the input ``_metadata`` from storage (a file or an object);
- ``header_reads``: reads of a state file's first bytes (its keyed or operator-state header), per file;
  a download of the whole object counts as its one read;
- ``operator_decodes``: decodes of each operator-state stream, per stream (by file name);
- ``metadata_encodes``: encodes of an output ``_metadata`` (``flink.metadata.writer.write_metadata``).

Only the input's files are counted for reads: the output's own check reads the new files by design.
"""

from __future__ import annotations

import builtins
import collections
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.storage.locations import Location


@dataclass
class SpineCounts:
    """What one rescale read and encoded (see the module docstring)."""

    metadata_reads: int = 0
    header_reads: collections.Counter[str] = field(default_factory=collections.Counter)
    operator_decodes: collections.Counter[str] = field(default_factory=collections.Counter)
    metadata_encodes: int = 0


def _patch_everywhere(monkeypatch: pytest.MonkeyPatch, original: Any, wrapper: Any) -> None:
    """Replace ``original`` by ``wrapper`` in every loaded kg module that holds it by name."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("keygroup_cli") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                monkeypatch.setattr(module, attr, wrapper)


def _is_input(path: object, root: str) -> bool:
    return str(path).startswith(root)


@contextmanager
def counting(
    monkeypatch: pytest.MonkeyPatch, input_root: str, input_names: frozenset[str]
) -> Iterator[SpineCounts]:
    """Install the counters for reads under ``input_root`` (a directory or an object-store prefix).

    ``input_names`` are the names of the input's state files (operator-state decodes count by name).
    """
    import keygroup_cli.execution.routes.savepoint  # noqa: F401  (loads the whole path)
    import keygroup_cli.flink.metadata.writer as writer
    import keygroup_cli.flink.operator.codec as operator_state

    counts = SpineCounts()
    root = input_root.rstrip("/") + "/"

    def metadata(path: object) -> bool:
        return _is_input(path, root) and str(path).endswith("/_metadata")

    path_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        counts.metadata_reads += metadata(self)
        return path_read_bytes(self)

    location_read_bytes = Location.read_bytes

    def location_bytes(self: Location) -> bytes:
        counts.metadata_reads += metadata(self)
        return location_read_bytes(self)

    location_download = Location.download_to

    def download(self: Location, target: Path, *args: Any, **kwargs: Any) -> int:
        # A download reads the whole object once, its header with it (then read from the local copy).
        if metadata(self):
            counts.metadata_reads += 1
        elif _is_input(self, root):
            counts.header_reads[str(self)] += 1
        return location_download(self, target, *args, **kwargs)

    opener = builtins.open

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "r" in mode and "+" not in mode and isinstance(file, str | Path):
            counts.metadata_reads += metadata(file)
        return opener(file, mode, *args, **kwargs)

    stream_read = StreamSource.read

    def read(self: StreamSource, start: int, end: int) -> bytes:
        if start == 0 and _is_input(self.source, root):
            counts.header_reads[str(self.source)] += 1
        return stream_read(self, start, end)

    decode = operator_state.decode_operator_file

    def decode_operator_file(src: StreamSource, *args: Any, **kwargs: Any) -> Any:
        # By file name: an object-store input is decoded from its downloaded copy (same name, new place).
        name = str(src.source).rsplit("/", 1)[-1]
        if name in input_names:
            counts.operator_decodes[name] += 1
        return decode(src, *args, **kwargs)

    encode = writer.write_metadata

    def write_metadata(*args: Any, **kwargs: Any) -> bytes:
        counts.metadata_encodes += 1
        return encode(*args, **kwargs)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(Location, "read_bytes", location_bytes)
    monkeypatch.setattr(Location, "download_to", download)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(StreamSource, "read", read)
    _patch_everywhere(monkeypatch, decode, decode_operator_file)
    _patch_everywhere(monkeypatch, encode, write_metadata)
    yield counts


def count_rescale(
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    dest: str,
    new_parallelism: int,
    new_max_parallelism: int | None,
    input_names: frozenset[str],
    migration: Any = None,
    output_format: str = "canonical",
) -> SpineCounts:
    """Rescale ``source`` into ``dest`` on the local engine, counting (see the module docstring).

    ``migration`` is a ``planning.migration.MigrationRequest`` done in the same pass (``kg rescale
    --rename``...).
    """
    with counting(monkeypatch, source, input_names) as counts:
        rescale(
            source,
            dest,
            new_parallelism,
            new_max_parallelism=new_max_parallelism,
            migration=migration,
            output_format=output_format,
            engine="local",
        )
    monkeypatch.undo()
    return counts


def assert_each_once(counts: SpineCounts, *, state_files: int, operator_streams: int) -> None:
    """Assert the one-spine targets: every count 1, for every file the input holds."""
    assert counts.metadata_reads == 1, counts
    assert counts.metadata_encodes == 1, counts
    # Every file a keyed or operator-state handle names is read (a RocksDB layout's database files too).
    assert len(counts.header_reads) >= state_files, counts.header_reads
    assert set(counts.header_reads.values()) == {1}, counts.header_reads
    assert len(counts.operator_decodes) == operator_streams, counts.operator_decodes
    assert set(counts.operator_decodes.values()) <= {1}, counts.operator_decodes
