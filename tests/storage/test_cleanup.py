"""``kg clean``'s core: what a killed writer left beside a local destination, and what is removed.

The writers are real processes: one that dies inside its staging directory (``os._exit``, as a kill
leaves it) and one that still runs (it waits on its stdin until the test lets it go).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from keygroup_cli.storage.cleanup import clean

_WRITER = """
import os, sys
from keygroup_cli.storage.staging import staged_directory
with staged_directory(sys.argv[1]) as staging:
    (staging / "part-0").write_bytes(b"x" * 100)
    print(staging, flush=True)
    if sys.argv[2] == "die":
        os._exit(9)
    sys.stdin.read()
    os._exit(9)
"""


def _writer(dest: Path, how: str) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(dest), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    staging = Path(proc.stdout.readline().strip())
    assert staging.is_dir()
    return proc, staging


def test_a_dead_writers_staging_is_listed_by_a_dry_run_and_removed_by_clean(tmp_path):
    dest = tmp_path / "out"
    proc, staging = _writer(dest, "die")
    assert proc.wait() == 9
    listed = clean(dest, dry_run=True)
    assert [(Path(x.path), x.writer_gone, x.removed) for x in listed] == [(staging, True, False)]
    assert staging.is_dir()
    removed = clean(dest)
    assert [(Path(x.path), x.removed) for x in removed] == [(staging, True)]
    assert not staging.exists() and not dest.exists()
    assert clean(dest) == []


def test_a_running_writers_staging_is_left_alone_unless_forced(tmp_path):
    dest = tmp_path / "out"
    proc, staging = _writer(dest, "wait")
    try:
        listed = clean(dest)
        assert [(Path(x.path), x.writer_gone, x.removed) for x in listed] == [(staging, False, False)]
        assert str(proc.pid) in listed[0].writer
        assert staging.is_dir()
        forced = clean(dest, force=True)
        assert [(Path(x.path), x.removed) for x in forced] == [(staging, True)]
        assert not staging.exists()
    finally:
        proc.communicate("")


def test_a_committed_destination_is_never_touched(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "_metadata").write_bytes(b"committed")
    assert clean(dest, force=True) == []
    assert (dest / "_metadata").read_bytes() == b"committed"
