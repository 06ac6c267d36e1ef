"""kg clean: a killed run's staging is removed once its writer is provably gone, and nothing else."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from keygroup_cli.storage.staging import staging_prefix


def _leftover(dest: Path, host: str | None = None) -> Path:
    pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                             capture_output=True, text=True).stdout)  # fmt: skip
    stale = dest.parent / f"{staging_prefix(dest)}{pid}-12345678"
    stale.mkdir(parents=True)
    (stale / "part-0.parquet").write_bytes(b"half")
    mark = {"host": host or socket.gethostname(), "pid": pid, "started": "1"}
    (stale / ".kg-writer").write_text(json.dumps(mark))
    return stale


def test_clean_lists_then_removes_a_dead_writers_staging(kg, tmp_path):
    dest = tmp_path / "rescaled"
    dest.mkdir()
    (dest / "_manifest.json").write_text("{}")  # a committed destination is never touched
    stale = _leftover(dest)
    listed = kg("clean", dest, "--dry-run", "--json")
    assert listed.exit_code == 0
    [entry] = listed.json()["leftovers"]
    assert (entry["path"], entry["writer_gone"], entry["removed"]) == (str(stale), True, False)
    assert stale.exists()
    done = kg("clean", dest)
    assert done.exit_code == 0 and "removed" in done.stdout
    assert not stale.exists() and (dest / "_manifest.json").exists()
    assert "nothing of kg's left" in kg("clean", dest).stdout


def test_another_hosts_staging_needs_force(kg, tmp_path):
    dest = tmp_path / "rescaled"
    stale = _leftover(dest, host="worker-7.example")
    kept = kg("clean", dest, "--json")
    assert kept.json()["leftovers"][0]["removed"] is False and stale.exists()
    assert "writer may still run" in kg("clean", dest).stdout
    forced = kg("clean", dest, "--force", "--json")
    assert forced.json()["leftovers"][0]["removed"] is True and not stale.exists()
