from __future__ import annotations

from pathlib import Path

import pytest
import xxhash

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.snapshot.checksums import CHUNK_SIZE, bytes_digest, file_digest, require_file_intact
from keygroup_cli.snapshot.model import OperatorFile


def test_known_xxh64_vectors() -> None:
    # Reference values of XXH64 with seed 0 (xxHash's own test vectors).
    assert bytes_digest(b"") == "ef46db3751d8e999"
    assert bytes_digest(b"abc") == "44bc2cf5ad770999"


def test_streaming_digest_equals_one_shot_across_chunk_boundaries(tmp_path: Path) -> None:
    data = bytes(range(256)) * ((2 * CHUNK_SIZE + 777) // 256)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert file_digest(path) == (len(data), xxhash.xxh64(data).hexdigest())


def _entry(file: Path, **overrides: object) -> OperatorFile:
    size, digest = file_digest(file)
    fields: dict[str, object] = {"subtask": 0, "path": file.name, "rows": 1, "bytes": size, "xxh64": digest}
    fields.update(overrides)
    return OperatorFile(**fields)  # type: ignore[arg-type]


def test_verify_ok_and_each_failure(tmp_path: Path) -> None:
    path = tmp_path / "operator-00000.parquet"
    path.write_bytes(b"hello world")
    require_file_intact(tmp_path, _entry(path))
    cases = {
        "SIZE_MISMATCH": _entry(path, bytes=3),
        "CHECKSUM_MISMATCH": _entry(path, xxh64="0" * 16),
        "FILE_MISSING": _entry(path, path="gone.parquet"),
    }
    for code, entry in cases.items():
        with pytest.raises(InvalidInputError) as info:
            require_file_intact(tmp_path, entry)
        assert info.value.code == code and info.value.exit_code == 3
        assert entry.path in info.value.message


def test_same_size_corruption_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello world")
    entry = _entry(path)
    path.write_bytes(b"hello World")
    with pytest.raises(InvalidInputError, match="xxh64 is"):
        require_file_intact(tmp_path, entry)


def test_digest_of_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as info:
        file_digest(tmp_path / "x")
    assert info.value.code == "FILE_MISSING"
