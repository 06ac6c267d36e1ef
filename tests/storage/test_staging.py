"""The atomic commit: staging beside DEST, one rename, and leftovers of killed writers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.storage.staging import flush_soon, staged_directory, staging_prefix, stale_staging


def _siblings(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir())


def test_success_renames_staging_to_dest(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with staged_directory(dest) as staging:
        assert staging.parent == tmp_path and staging.name.startswith(".out.kg-staging-")
        assert not dest.exists()
        (staging / "a").write_text("x")
    assert (dest / "a").read_text() == "x"
    assert _siblings(dest) == ["out"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_failure_leaves_dest_absent_and_no_staging(tmp_path: Path, exc: BaseException) -> None:
    dest = tmp_path / "out"
    with pytest.raises(type(exc)), staged_directory(dest) as staging:
        (staging / "a").write_text("x")
        raise exc
    assert _siblings(dest) == []


def test_an_early_flush_is_committed_with_the_rest(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with staged_directory(dest) as staging:
        (staging / "a").write_bytes(b"x" * 100_000)
        flush_soon(staging / "a")
    assert (dest / "a").read_bytes() == b"x" * 100_000
    assert _siblings(dest) == ["out"]


def test_an_early_flush_error_fails_the_commit_even_from_a_relative_dest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    dest = Path("out")
    with pytest.raises(OSError), staged_directory(dest) as staging:
        (staging / "device").symlink_to(os.devnull)  # fsync refuses a device (EINVAL)
        flush_soon(staging / "device")  # its error must not be lost: the commit's own fsync would not see it
    assert _siblings(tmp_path / "out") == []


def test_a_flush_outside_a_staging_directory_does_nothing_and_leaks_into_no_commit(tmp_path: Path) -> None:
    flush_soon(tmp_path / "missing")  # no staging directory of this process holds it
    with staged_directory(tmp_path / "out") as staging:
        (staging / "a").write_text("x")
    assert (tmp_path / "out" / "a").read_text() == "x"


def test_existing_dest_is_refused_before_writing(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(InvalidArgumentError) as info, staged_directory(dest):
        pytest.fail("must not be entered")
    assert info.value.code == "DESTINATION_EXISTS" and str(dest) in info.value.message


def test_dest_appearing_meanwhile_is_not_overwritten(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    with pytest.raises(InvalidArgumentError), staged_directory(dest):
        dest.mkdir()
        (dest / "theirs").write_text("keep")
    assert (dest / "theirs").read_text() == "keep"
    assert _siblings(dest) == ["out"]


def test_stale_staging_of_a_dead_process_is_removed_and_never_blocks(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"{staging_prefix(dest)}{int(dead.stdout)}-deadbeef"
    stale.mkdir()
    (stale / "junk").write_text("half-written")
    with staged_directory(dest) as staging:
        (staging / "ok").write_text("1")
    assert _siblings(dest) == ["out"]


def test_live_staging_of_another_process_is_left_alone(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    live = tmp_path / f"{staging_prefix(dest)}{os.getppid()}-cafe0000"
    live.mkdir()
    with staged_directory(dest):
        pass
    assert live.exists()


def _marked(dest: Path, pid: int, host: str | None = None, started: str | None = "auto") -> Path:
    import json
    import socket

    from keygroup_cli.storage.writer import process_start_time

    stale = dest.parent / f"{staging_prefix(dest)}{pid}-0badf00d-work"
    stale.mkdir()
    (stale / "partial").write_text("half-written")
    when = process_start_time(pid) if started == "auto" else started
    (stale / ".kg-writer").write_text(
        json.dumps({"host": host or socket.gethostname(), "pid": pid, "started": when})
    )
    return stale


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def test_a_killed_writers_leftover_is_removed_even_when_dest_exists(tmp_path: Path) -> None:
    # Killed between the commit (rename) and removing its scratch directory: DEST exists, the scratch
    # stays. The next write to DEST removes it before refusing DEST, instead of leaving it forever.
    dest = tmp_path / "out"
    dest.mkdir()
    stale = _marked(dest, _dead_pid())
    with pytest.raises(InvalidArgumentError, match="destination exists"), staged_directory(dest):
        pass
    assert not stale.exists()


def test_a_reused_pid_does_not_keep_a_leftover_alive(tmp_path: Path) -> None:
    # The mark's pid is running again (our parent), but it started at another time: not the writer.
    dest = tmp_path / "out"
    stale = _marked(dest, os.getppid(), started="1")
    live = _marked(tmp_path / "other", os.getppid())
    with staged_directory(dest):
        pass
    assert not stale.exists()
    assert stale_staging(tmp_path / "other")[0].removable is False and live.exists()


def test_another_hosts_leftover_is_never_judged_gone(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    foreign = _marked(dest, _dead_pid(), host="some-other-host")
    with staged_directory(dest):
        pass
    assert foreign.exists()
    [found] = stale_staging(dest)
    assert (found.path, found.removable) == (foreign, False)
