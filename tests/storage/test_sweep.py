"""``storage.sweep``: listing that never follows a link; removal that deletes only the very file listed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keygroup_cli.storage.sweep import FILE, LINK, OTHER, StoredFile, list_tree, remove_files


def _tops(name: str) -> bool:
    return name in ("shared", "taskowned") or name.startswith("chk-")


def _tree(root: Path) -> dict[str, bytes]:
    files = {
        "shared/a": b"aaa",
        "shared/sub/b": b"bb",
        "chk-1/c": b"c",
        "chk-2/_metadata": b"meta",
        "other/d": b"not swept",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_list_tree_reports_links_and_never_enters_them(tmp_path):
    root = tmp_path / "job"
    _tree(root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"x" * 10)
    (root / "shared" / "link").symlink_to(outside / "secret")
    (root / "taskowned").symlink_to(outside, target_is_directory=True)
    os.mkfifo(root / "shared" / "fifo")
    listed = {f.path: f for f in list_tree(root, _tops)}
    assert set(listed) == {"shared/a", "shared/sub/b", "chk-1/c", "chk-2/_metadata", "shared/link",
                           "taskowned", "shared/fifo"}  # fmt: skip
    assert listed["shared/link"].kind == LINK and listed["taskowned"].kind == LINK
    assert listed["shared/fifo"].kind == OTHER and listed["shared/a"] == StoredFile(
        "shared/a", 3, (root / "shared" / "a").stat().st_mtime, FILE
    )


def test_remove_files_deletes_files_then_the_folders_they_emptied(tmp_path):
    root = tmp_path / "job"
    _tree(root)
    listed = {f.path: f for f in list_tree(root, _tops)}
    removal = remove_files(
        root,
        [listed["shared/sub/b"], listed["chk-1/c"], listed["shared/a"]],
        keep=lambda rel: rel in ("shared", "taskowned"),
    )
    assert {f.path for f in removal.removed} == {
        "shared/sub/b",
        "chk-1/c",
        "shared/a",
    } and not removal.changed
    assert set(removal.directories) == {"shared/sub", "chk-1"}
    assert (root / "shared").is_dir() and not (root / "chk-1").exists()
    assert (root / "chk-2" / "_metadata").read_bytes() == b"meta" and (root / "other" / "d").exists()


def test_a_file_that_changed_since_it_was_listed_stays(tmp_path):
    root = tmp_path / "job"
    _tree(root)
    listed = {f.path: f for f in list_tree(root, _tops)}
    (root / "shared" / "a").write_bytes(b"rewritten by a job")  # size and mtime change
    target = tmp_path / "precious"
    target.write_bytes(b"c")
    (root / "chk-1" / "c").unlink()
    (root / "chk-1" / "c").symlink_to(target)  # the listed file became a link
    removal = remove_files(root, [listed["shared/a"], listed["chk-1/c"]])
    assert removal.removed == () and {f.path for f in removal.changed} == {"shared/a", "chk-1/c"}
    assert (root / "shared" / "a").read_bytes() == b"rewritten by a job" and target.read_bytes() == b"c"


def test_a_folder_swapped_for_a_link_to_outside_is_not_followed(tmp_path):
    root = tmp_path / "job"
    _tree(root)
    listed = {f.path: f for f in list_tree(root, _tops)}
    outside = tmp_path / "outside"
    (root / "shared" / "sub").rename(outside)  # same inode, same mtime: only the path leads out now
    (root / "shared" / "sub").symlink_to(outside, target_is_directory=True)
    removal = remove_files(root, [listed["shared/sub/b"]])
    assert removal.removed == () and (outside / "b").read_bytes() == b"bb"


def test_paths_that_leave_the_root_are_a_bug(tmp_path):
    root = tmp_path / "job"
    _tree(root)
    for bad in ("../x", "/etc/passwd", "shared/../../x", "", "shared//a"):
        with pytest.raises(ValueError):
            remove_files(root, [StoredFile(bad, 1, 0.0)])
