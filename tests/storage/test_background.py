"""Background file-system work: early flushes, removals, and their errors reaching the caller."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from keygroup_cli.storage import background


def test_settle_waits_and_raises_the_first_error(tmp_path: Path) -> None:
    gate = threading.Event()
    slow = background.submit(gate.wait, 5)
    (tmp_path / "null").symlink_to(os.devnull)  # a device: fsync refuses it (EINVAL)
    failing = background.submit(background.fsync_file, tmp_path / "null")
    gate.set()
    with pytest.raises(OSError):
        background.settle([slow, failing])
    assert slow.done() and slow.result() is True


def test_a_file_removed_before_its_flush_has_nothing_to_flush(tmp_path: Path) -> None:
    background.settle([background.submit(background.fsync_file, tmp_path / "removed", True)])
    with pytest.raises(FileNotFoundError):  # unless the caller says so
        background.fsync_file(tmp_path / "removed")


def test_remove_files_takes_what_is_there_and_ignores_what_is_gone(tmp_path: Path) -> None:
    present = tmp_path / "a"
    present.write_bytes(b"x")
    background.settle([background.submit(background.remove_files, [present, tmp_path / "never"])])
    assert not present.exists()


def test_abandon_drops_errors_and_waits_for_running_work(tmp_path: Path) -> None:
    gate = threading.Event()
    running = background.submit(gate.wait, 5)
    (tmp_path / "null").symlink_to(os.devnull)
    failing = background.submit(background.fsync_file, tmp_path / "null")
    gate.set()
    background.abandon([running, failing])  # no raise
    assert running.done()


def test_a_forked_child_starts_its_own_threads() -> None:
    assert background.submit(int, "1").result(timeout=5) == 1  # the parent's threads exist
    pid = os.fork()
    if pid == 0:  # the child has none of its parent's threads: work must not wait on them forever
        try:
            os._exit(0 if background.submit(int, "7").result(timeout=10) == 7 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
