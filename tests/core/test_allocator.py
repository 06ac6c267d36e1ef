"""keep_freed_memory: kg's processes reuse the buffers they free instead of faulting fresh pages in.

Each case runs in a fresh interpreter (the thresholds are per process and cannot be unset) and counts the
page faults of allocating and freeing buffers of about 8 MiB again and again, as kg's byte route does per
batch and per bucket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from keygroup_cli.core.allocator import _glibc

pytestmark = pytest.mark.skipif(not _glibc(), reason="the thresholds are glibc's")

ROUNDS = 24
PAGES = (8 << 20) // 4096

#: After an optional setup, fills buffers of 8 MiB and a little more each time, two alive at once (as a
#: batch's buffers are while the next one is cut), ROUNDS of them; prints the page faults of the loop.
#: glibc's dynamic threshold rises only to the size last freed, so each larger buffer is a fresh mapping.
_CHURN = """
import json, resource, sys
SETUP
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
alive = []
for i in range(ROUNDS):
    alive.append(b"\\x01" * ((8 << 20) + i * 65536))  # malloc'd and written: every page touched
    if len(alive) > 2:
        alive.pop(0)
print(json.dumps({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, "set": SET}))
"""


def _churn(setup: str = "", flag: str = "None", env: dict[str, str] | None = None) -> dict[str, object]:
    code = _CHURN.replace("SETUP", setup).replace("ROUNDS", str(ROUNDS)).replace("SET", flag)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **(env or {})}, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_glibcs_own_thresholds_fault_every_buffer_in_again():
    # The case the thresholds are for: without them each 8 MiB buffer is a fresh mapping.
    faults = _churn()["faults"]
    assert isinstance(faults, int) and faults >= ROUNDS * PAGES // 2


def test_kept_freed_memory_is_reused():
    setup = "from keygroup_cli.core.allocator import keep_freed_memory\nkept = keep_freed_memory()"
    result = _churn(setup, "kept")
    assert result["set"] is True
    # The first buffers are faulted in once; the others reuse their pages.
    assert isinstance(result["faults"], int) and result["faults"] < 8 * PAGES


@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"},
        {"MALLOC_ARENA_MAX": "8"},
    ],
)
def test_the_users_own_setting_stands(env):
    setup = "from keygroup_cli.core.allocator import keep_freed_memory\nkept = keep_freed_memory()"
    result = _churn(setup, "kept", env)
    assert result["set"] is False
    faults = result["faults"]
    assert isinstance(faults, int) and faults >= ROUNDS * PAGES // 2


def test_the_kg_command_keeps_freed_memory():
    # cli.main sets the thresholds before it runs the command: the command here is the churn itself.
    setup = (
        "import keygroup_cli.cli as cli\n"
        "def measured(argv=None):\n"
        "    global kept\n"
        "    from keygroup_cli.core import allocator\n"
        "    kept = allocator._done\n"
        "    return 0\n"
        "cli.run = measured\n"
        "try:\n"
        "    cli.main([])\n"
        "except SystemExit:\n"
        "    pass"
    )
    result = _churn(setup, "kept")
    assert result["set"] is True
    assert isinstance(result["faults"], int) and result["faults"] < 8 * PAGES


#: A worker thread fills and frees buffers as _CHURN does and stays alive (as kg's workers do) while a
#: second worker does the same with larger ones; prints the second worker's page faults.
_TWO_WORKERS = """
import json, resource, threading
SETUP
def churn(first):
    alive = []
    for i in range(first, first + 24):
        alive.append(b"\\x01" * ((8 << 20) + i * 65536))
        if len(alive) > 2:
            alive.pop(0)
done, finish, faults = threading.Event(), threading.Event(), []
def first():
    churn(0)
    done.set()
    finish.wait()  # alive: its heap stays its own
def second():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    churn(24)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
one = threading.Thread(target=first)
one.start()
done.wait()
two = threading.Thread(target=second)
two.start()
two.join()
finish.set()
one.join()
print(json.dumps({"faults": faults[0]}))
"""


def test_workers_reuse_what_other_workers_freed():
    # With a heap per thread, the second worker would fault its first buffers in afresh (about 6,000
    # pages) although the first one's freed pages lie unused; on one heap it only grows it a little.
    code = _TWO_WORKERS.replace(
        "SETUP", "from keygroup_cli.core.allocator import keep_freed_memory\nassert keep_freed_memory()"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    done = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["faults"] < PAGES
