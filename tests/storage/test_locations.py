"""Locations: URIs and plain paths, file:// handled by the storage layer, unknown schemes refused."""

from __future__ import annotations

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.storage import is_remote, location
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"


@pytest.mark.parametrize(
    ("text", "remote"),
    [
        ("s3://b/k", True),
        ("s3p://b/k", True),
        ("gs://b/k", True),
        ("abfss://c@a.dfs.core.windows.net/p", True),
        ("hdfs://nn:8020/p", True),
        ("file:///tmp/x", True),
        ("/tmp/x", False),
        ("relative/dir", False),
        ("s3:relative", False),
    ],
)
def test_what_goes_through_the_storage_layer(text, remote):
    assert is_remote(text) is remote


def test_a_location_behaves_like_a_path(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"0123456789")
    here = location(f"file://{tmp_path}")
    f = here / "d" / "f"
    assert (f.name, f.parent.name, f.is_file(), f.parent.is_dir(), f.size()) == ("f", "d", True, True, 10)
    assert f.read_range(3, 4) == b"3456" and f.read_range(8, 10) == b"89" and f.read_range(10, 1) == b""
    assert [c.name for c in (here / "d").iterdir()] == ["f"]
    assert not (here / "missing").exists()


def test_unknown_schemes_are_refused():
    with pytest.raises(InvalidArgumentError, match="unknown file system ftp://"):
        location("ftp://host/x")


def test_file_uris_never_become_a_directory_called_file(kg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert kg("check", f"file://{SAVEPOINT}", "-p", "4").exit_code == 0
    out = tmp_path / "out"
    done = kg("rescale", f"file://{SAVEPOINT}", "--from", "3", "--to", "4", "--out", f"file://{out}")
    assert done.exit_code == 0, done.stderr
    assert (out / "_metadata").is_file()
    assert kg("check", out, "-p", "4").exit_code == 0
    assert not (tmp_path / "file:").exists()
