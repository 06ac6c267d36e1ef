"""Damaged database files of a NATIVE savepoint are an invalid snapshot everywhere (exit 3), not unsupported.

A NATIVE savepoint's keyed state is RocksDB's (or ForSt's) own files. Each case damages one of them in a copy
of a real Flink 2.3 fixture: ``CURRENT`` naming a MANIFEST the handle does not list, one byte of an SST's
first data block (its block checksum), the last byte of an SST (its footer's magic number), one byte of a
MANIFEST record (RocksDB itself stops reading there and opens the database without the records after it:
kg read 1,219 of the fixture's 2,214 rows and said OK). ``kg verify`` reports an ERROR finding naming the
savepoint's file and exits 3; ``kg check --deep`` reports that ERROR too; every command that reads the
state (rescale, export, get, diff, convert) exits 3 with one line and ``FLINK_DATABASE_CORRUPT``, no
traceback, and writes nothing.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from keygroup_cli.core.errors import ExecutionError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink.io.stream_handles import RelativeFileHandle
from keygroup_cli.flink.layouts.rocksdb import log_damage, rocksdb_status_error
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata

ROOT = Path(__file__).resolve().parents[2]
FLINK_23 = ROOT / "fixtures" / "flink" / "2.3"
ROCKSDB = FLINK_23 / "rocksdb-native-files-p2-maxp128-long"
FORST = FLINK_23 / "forst-native-p3-maxp128-long"


def _database_file(savepoint: Path, name: str, operator: str = "keyed-state", subtask: int = 0) -> Path:
    """Return the savepoint's file that subtask ``subtask`` of ``operator`` lists as RocksDB's ``name``."""
    metadata = read_flink_metadata(savepoint).metadata
    for op in metadata.operators:
        if op.label != operator:
            continue
        handle = op.subtasks[subtask].managed_keyed_state
        assert isinstance(handle, IncrementalKeyedHandle)
        for entry in (*handle.shared, *handle.private):
            if entry.local_path == name:
                assert isinstance(entry.handle, RelativeFileHandle)
                return savepoint / entry.handle.relative_path
    raise AssertionError(f"{savepoint}: no {name} in {operator} subtask {subtask}")


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position if position >= 0 else len(data) + position] ^= 0x5A
    path.write_bytes(bytes(data))


def _current(savepoint: Path) -> str:
    # Same size (16 bytes), so the handle's recorded size still holds: only the content is wrong.
    _database_file(savepoint, "CURRENT").write_bytes(b"MANIFEST-000099\n")
    return "CURRENT"


def _sst_checksum(savepoint: Path) -> str:
    _flip(_database_file(savepoint, "000019.sst"), 100)  # inside the first data block
    return "000019.sst"


def _sst_magic(savepoint: Path) -> str:
    _flip(_database_file(savepoint, "000019.sst"), -1)  # the footer's magic number ends the file
    return "000019.sst"


def _manifest(savepoint: Path) -> str:
    _flip(_database_file(savepoint, "MANIFEST-000005"), 260)  # a record's payload (its comparator name)
    return "MANIFEST-000005"


DAMAGE: dict[str, tuple[Path, Callable[[Path], str], str]] = {
    "rocksdb-current": (ROCKSDB, _current, "not the name of a MANIFEST its handle lists"),
    "rocksdb-sst-checksum": (ROCKSDB, _sst_checksum, "Corruption: block checksum mismatch"),
    "rocksdb-sst-magic": (ROCKSDB, _sst_magic, "Corruption: Bad table magic number"),
    "rocksdb-manifest": (ROCKSDB, _manifest, "fails its checksum"),
    "forst-sst-checksum": (FORST, _sst_checksum, "Corruption: block checksum mismatch"),
}


@pytest.fixture(params=sorted(DAMAGE))
def damaged(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path, str]:
    """Return (damaged copy, damaged file, what its message says)."""
    source, damage, says = DAMAGE[request.param]
    copy = tmp_path / "sp"
    shutil.copytree(source, copy)
    name = damage(copy)
    return copy, _database_file(copy, name), says


def _one_error(result, code: str = "FLINK_DATABASE_CORRUPT") -> str:
    """Assert a refusal in one line (``--json``: one document on stdout); return its message."""
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 1
    document = json.loads(result.stdout)
    assert document["error"]["code"] == code, document
    message: str = document["error"]["message"]
    assert "\n" not in message
    return message


def test_verify_and_check_deep_report_the_damaged_file(kg, damaged) -> None:
    savepoint, file, says = damaged
    verified = kg("--json", "verify", savepoint)
    assert verified.exit_code == 3, verified.stdout
    errors = [f for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"]
    assert len(errors) == 1 and says in errors[0]["message"]
    assert errors[0]["code"] == "FLINK_DATABASE_CORRUPT"
    assert file.name in errors[0]["message"]  # the savepoint's file, not kg's scratch copy
    checked = kg("--json", "check", "--deep", savepoint)
    # Damage is exit 3 in kg check too; the finding is verify's.
    assert checked.exit_code == 3, checked.stdout
    check_errors = [f for f in json.loads(checked.stdout)["findings"] if f["severity"] == "error"]
    assert [f["message"] for f in check_errors] == [errors[0]["message"]]


@pytest.mark.parametrize(
    "argv",
    [
        ["rescale", "{sp}", "--to", "3", "--engine", "local", "--out", "{out}"],
        ["export", "{sp}", "-o", "keyed-state", "--out", "{out}"],
        ["get", "{sp}", "-o", "keyed-state", "-k", "1"],
        ["diff", "{sp}", str(ROCKSDB)],
        ["convert", "{sp}", "--out", "{out}"],
    ],
    ids=lambda argv: argv[0],
)
def test_every_reading_command_refuses_it_as_invalid(kg, damaged, tmp_path: Path, argv: list[str]) -> None:
    savepoint, file, says = damaged
    out = tmp_path / "out"
    result = kg("--json", *(a.replace("{sp}", str(savepoint)).replace("{out}", str(out)) for a in argv))
    assert result.exit_code == 3, (result.stdout, result.stderr)
    message = _one_error(result)
    assert says in message and file.name in message
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["sp"]  # no staging, no scratch left beside DEST


def test_every_manifest_of_the_fixtures_holds_its_checksums() -> None:
    # The MANIFEST check must not refuse what Flink wrote: every RocksDB and ForSt MANIFEST the fixtures
    # hold (NATIVE savepoints and incremental checkpoints of every Flink version) passes it.
    manifests = [p for p in (ROOT / "fixtures" / "flink").rglob("*") if _is_manifest(p)]
    assert len(manifests) >= 20
    assert [(str(p), log_damage(p.read_bytes())) for p in manifests if log_damage(p.read_bytes())] == []
    damaged = bytearray(manifests[0].read_bytes())
    damaged[len(damaged) // 2] ^= 1
    assert log_damage(bytes(damaged)) is not None


def _is_manifest(path: Path) -> bool:
    """A RocksDB MANIFEST under its UUID name: a full first record naming the comparator (``VersionEdit``)."""
    if not path.is_file() or path.stat().st_size > 1 << 20:
        return False
    with open(path, "rb") as f:
        head = f.read(64)
    return len(head) > 7 and head[6] == 1 and b"leveldb.BytewiseComparator" in head


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        # RocksDB's own status texts, as rocksdict raised them on damaged fixture copies.
        (
            "Corruption: block checksum mismatch: stored = 935456591, computed = 1675926256, type = 4  "
            "in /scratch/db/000019.sst offset 0 size 2249",
            InvalidInputError,
            "FLINK_DATABASE_CORRUPT",
        ),
        (
            "IO error: No such file or directory: While opening a file for sequentially reading: "
            "/scratch/db/MANIFEST-000099: No such file or directory",
            InvalidInputError,
            "FLINK_DATABASE_CORRUPT",
        ),
        (
            "IO error: No space left on device: While appending to file: /scratch/db/000010.sst: "
            "No space left on device",
            ExecutionError,
            "NO_SPACE_LEFT",
        ),
        (
            "IO error: While mmap file /scratch/db/x: Cannot allocate memory",
            ExecutionError,
            "NOT_ENOUGH_MEMORY",
        ),
        (
            "Not implemented: Unsupported compression method for this build: ZSTD",
            UnsupportedFormatError,
            "ROCKSDB_UNSUPPORTED",
        ),
        (
            "Invalid argument: leveldb.BytewiseComparator does not match existing comparator x",
            UnsupportedFormatError,
            "ROCKSDB_UNSUPPORTED",
        ),
    ],
)
def test_a_rocksdb_status_is_classified_by_its_code(status: str, kind: type, code: str) -> None:
    files = {"": "/scratch/db", "000019.sst": "sp/7701c5a6", "MANIFEST-000099": "sp/x"}
    error = rocksdb_status_error(status, "sp/_metadata: operator 'a' subtask RocksDB 1", files)
    assert type(error) is kind and error.code == code
    assert "/scratch/db" not in error.message and "\n" not in error.message
