from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from keygroup_cli.errors import ExecutionError, InvalidArgumentError
from keygroup_cli.keygroups import KeyGroupRange
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.model import Manifest, Operator, StateDescriptor
from keygroup_cli.snapshot.staging import (
    SnapshotWriter,
    operator_dir_name,
    snapshot_writer,
    staged_directory,
    staging_prefix,
    stale_staging,
)

OP_ID = "35a9f8ef506cec52320f30f0582ce304"


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


def test_operator_dir_names() -> None:
    assert operator_dir_name("counter", OP_ID) == "counter"
    assert operator_dir_name(None, OP_ID) == OP_ID
    assert operator_dir_name("a/b c", OP_ID) == "a_b_c-35a9f8ef"
    assert operator_dir_name("..", OP_ID) == "op..-35a9f8ef"
    assert operator_dir_name("_manifest.json", OP_ID) == "op_manifest.json-35a9f8ef"


def test_snapshot_writer_round_trip(tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    with snapshot_writer(dest) as w:
        d = w.operator_dir("my-keyed-op", OP_ID)
        assert w.operator_dir("my-keyed-op", OP_ID) == d == "my-keyed-op"
        keyed = w.write_keyed(
            d,
            0,
            pa.table(
                {
                    "key_group": pa.array([1, 0], pa.int32()),
                    "state": ["c", "c"],
                    "key": ["x", "y"],
                    "namespace": [b"\0", b"\0"],
                }
            ),
            key_type="string",
            key_groups=KeyGroupRange(0, 1),
            state_names=["c"],
        )
        op = w.write_operator(d, 0, pa.table({"state": ["b"], "position": [0], "value": [b"v"]}))
        w.commit(
            Manifest(
                1,
                "t",
                "t",
                {"kind": "generated"},
                (
                    Operator(
                        "my-keyed-op",
                        OP_ID,
                        None,
                        1,
                        2,
                        "string",
                        (StateDescriptor("c", "value"), StateDescriptor("b", "operator-split")),
                        (keyed,),
                        (op,),
                    ),
                ),
            )
        )
    snap = open_snapshot(dest)
    assert snap.manifest.operators[0].keyed_files[0].path == "my-keyed-op/keyed-00000.parquet"
    assert snap.manifest.operators[0].keyed_files[0].key_group_rows == (1, 1)


def test_snapshot_writer_without_commit_publishes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    with pytest.raises(ExecutionError), snapshot_writer(dest) as w:
        w.operator_dir("x", OP_ID)
    assert _siblings(dest) == []


def test_case_insensitive_collisions_get_distinct_dirs(tmp_path: Path) -> None:
    w = SnapshotWriter(tmp_path)
    assert w.operator_dir("Counter", "0" * 32) == "Counter"
    assert w.operator_dir("counter", "1" * 32) == "counter-11111111"


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
