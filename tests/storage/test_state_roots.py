"""``storage.containment``: every reference normalized, then read only inside the input's roots.

Real directories, files and links; an object-store input is judged without a request (``locate=False``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.storage.containment import contain, contain_file, input_roots, outside_error
from keygroup_cli.storage.locations import Location


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``parent/{sp/{f,sub/g}, secret, job/{chk-1/x, chk-2/y, shared/s, taskowned/t, dstl/d}}``."""
    monkeypatch.delenv("KG_STATE_ROOTS", raising=False)
    for name in ("sp/f", "sp/sub/g", "secret", "job/chk-1/x", "job/chk-2/y", "job/shared/s",
                 "job/taskowned/t", "job/dstl/job/dstl/d", "job/elsewhere/e"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    return tmp_path


def _refused(reference: str, directory: Path | Location, **kw: object) -> str:
    with pytest.raises(InvalidInputError) as info:
        contain(reference, directory, **kw)  # type: ignore[arg-type]
    assert info.value.code == "STATE_FILE_OUTSIDE"
    return info.value.message


def test_relative_references_are_normalized_and_may_not_leave(tree: Path) -> None:
    sp = tree / "sp"
    assert contain("sub/../f", sp, relative=True) == sp / "f"
    assert contain("./sub/g", sp, relative=True) == sp / "sub" / "g"
    for escape in ("../secret", "sub/../../secret", "/etc/passwd", "", ".."):
        _refused(escape, sp, relative=True)


def test_absolute_paths_file_uris_and_percent_encoding_are_judged_after_normalizing(tree: Path) -> None:
    sp = tree / "sp"
    assert contain(str(sp / "f"), sp) == sp / "f"
    assert contain((sp / "f").as_uri(), sp) == sp / "f"
    assert contain(f"file:{sp}/sub/../f", sp) == sp / "f"
    for outside in (str(tree / "secret"), f"file://{sp}/%2e%2e/secret", f"{sp}/sub/../../secret"):
        message = _refused(outside, sp)
        assert message == outside_error(outside, tree / "secret").message


def test_links_are_followed_then_judged(tree: Path) -> None:
    sp = tree / "sp"
    (sp / "inside").symlink_to(sp / "f")
    (sp / "out").symlink_to(tree / "secret")
    (sp / "dir").symlink_to(tree / "job")
    assert contain("inside", sp, relative=True) == sp / "inside"
    _refused("out", sp, relative=True)
    _refused("dir/shared/s", sp, relative=True)
    (sp / "_metadata").symlink_to(tree / "secret")
    with pytest.raises(InvalidInputError) as info:
        contain_file(sp / "_metadata")
    assert info.value.code == "STATE_FILE_OUTSIDE"


def test_a_checkpoint_reads_its_jobs_shared_taskowned_and_dstl_only(tree: Path) -> None:
    chk = tree / "job" / "chk-2"
    for inside in ("shared/s", "taskowned/t", "dstl/job/dstl/d"):
        assert contain(str(tree / "job" / inside), chk) == tree / "job" / inside
    for outside in ("chk-1/x", "elsewhere/e"):
        _refused(str(tree / "job" / outside), chk)
    _refused(str(tree / "job" / "shared" / "s"), tree / "sp")  # a savepoint: its own directory only


def test_a_moved_checkpoints_files_are_found_inside_or_reported_missing_there(tree: Path) -> None:
    chk = tree / "job" / "chk-2"
    gone = "/nowhere/checkpoints/job/shared/s"
    assert contain(f"file:{gone}", chk) == tree / "job" / "shared" / "s"  # the job's copy
    assert contain("/nowhere/chk-2/y", chk) == chk / "y"  # beside _metadata
    # Nowhere at all: named where the input's own copy would be (a missing file, not a read outside).
    assert contain("/nowhere/checkpoints/job/shared/missing", chk) == tree / "job" / "shared" / "missing"
    # A copy is never taken from outside the roots: the savepoint's parent holds "secret", not read.
    assert contain(f"/nowhere/{tree.name}/secret", tree / "sp") == tree / "sp" / "secret"
    _refused(str(tree / "secret"), tree / "sp")  # where it exists, named directly: refused


def test_object_store_references_with_dot_dot_on_a_local_copy(tree: Path) -> None:
    sp = tree / "sp"
    # Once resolved to the grandparent of the copy (sp/../../secret); now normalized: s3://b/secret.
    _refused("s3p://b/x/../secret", sp)
    _refused("s3://b/x/%2E%2E/secret", sp)
    assert contain("s3://b/x/../f", sp) == sp / "f"  # a copy of the object beside _metadata
    with pytest.raises(UnsupportedFormatError):
        contain("ftp://host/f", sp)


def test_kg_state_roots_names_local_directories_and_object_store_prefixes(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sp = tree / "sp"
    monkeypatch.setenv("KG_STATE_ROOTS", f"{tree / 'job' / 'elsewhere'}{os.pathsep}s3://b/shared")
    roots = input_roots(sp)
    assert roots.local == (sp, tree / "job" / "elsewhere")
    assert roots.remote == (("s3", "b", "/shared"),)
    assert contain(str(tree / "job" / "elsewhere" / "e"), sp) == tree / "job" / "elsewhere" / "e"
    assert contain("s3p://b/shared/x", sp, locate=False) is None  # inside: judged, not fetched
    _refused("s3://b/shared/../other/x", sp, locate=False)
    _refused("s3://b/sharedx/y", sp, locate=False)
    _refused(str(tree / "secret"), sp)


def test_an_object_store_input_reads_under_its_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KG_STATE_ROOTS", raising=False)
    fs = pafs.S3FileSystem(region="us-east-1", anonymous=True)
    chk = Location(fs, "b/ckpt/job/chk-3", "s3://b/ckpt/job/chk-3")
    assert contain("s3a://b/ckpt/job/chk-3/x", chk, locate=False) is None
    assert contain("s3://b/ckpt/job/shared/y", chk, locate=False) is None
    assert contain("a/b", chk, relative=True) == chk / "a/b"
    # (A place outside is looked for as a copy beside _metadata first, a request: tests/storage.)
    _refused("../chk-2/x", chk, relative=True)
    with pytest.raises(UnsupportedFormatError):
        contain("/etc/passwd", chk)


@pytest.mark.parametrize("reference", ["a\0b", "/sp/\0", "s3://[bucket/x"])
def test_a_name_no_file_can_have_is_one_error_not_a_crash(tree: Path, reference: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        contain(reference, tree / "sp", relative=reference == "a\0b")
    assert info.value.code == "STATE_FILE_UNREADABLE"


def test_a_checkpoint_picked_from_a_job_root_may_not_be_a_link_elsewhere(tree: Path) -> None:
    from keygroup_cli.flink.metadata.locate import find_metadata

    (tree / "job" / "chk-2" / "_metadata").write_bytes(b"x")
    assert find_metadata(tree / "job") == tree / "job" / "chk-2" / "_metadata"
    (tree / "other" / "chk-9").mkdir(parents=True)
    (tree / "other" / "chk-9" / "_metadata").write_bytes(b"x")
    (tree / "job" / "chk-9").symlink_to(tree / "other" / "chk-9")
    with pytest.raises(InvalidInputError) as info:
        find_metadata(tree / "job")
    assert info.value.code == "STATE_FILE_OUTSIDE"
    assert find_metadata(tree / "job" / "chk-9") == tree / "job" / "chk-9" / "_metadata"  # named itself
