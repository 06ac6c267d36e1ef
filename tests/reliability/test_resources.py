"""No space inside RocksDB, and too little memory, are exit 5 in one line: no SIGABRT, nothing left behind.

- ENOSPC while RocksDB builds a NATIVE savepoint's database (``--format native``), on a small tmpfs mounted
  in a private mount namespace (``unshare -Urm``): exit 5 ``NO_SPACE_LEFT`` (it was exit 4, "rocksdict
  cannot build the NATIVE database"), DEST absent, nothing left on the tmpfs.
- An address-space limit (``RLIMIT_AS``, set in the child before kg starts): exit 0 or exit 5
  ``NOT_ENOUGH_MEMORY`` naming the limit, never 70 nor a SIGABRT (RocksDB aborts the process where it cannot
  start a thread or allocate: it was 134 below about 600 MiB), and no staging or scratch directory left.
- A rocksdict binding that is installed but cannot be mapped (``failed to map segment from shared object``)
  is not enough memory (exit 5), not a missing binding (exit 6).
"""

from __future__ import annotations

import json
import resource
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLINK_23 = ROOT / "fixtures" / "flink" / "2.3"
NATIVE = FLINK_23 / "rocksdb-native-files-p2-maxp128-long"
HEAP = FLINK_23 / "heap-files-p3-maxp128-long"
KG = [sys.executable, "-m", "keygroup_cli", "--json"]


def _unshare_works() -> None:
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True, text=True)
    assert probe.returncode == 0, f"no private mount namespace here: {probe.stderr}"


def test_no_space_inside_rocksdb_while_writing_native_output(tmp_path: Path) -> None:
    _unshare_works()
    # Sizes at which the NATIVE rescale of this fixture runs out of space at different points: in kg's own
    # files, and inside RocksDB (its OPTIONS file, an SST it writes, its checkpoint).
    inside_rocksdb = 0
    for kib in (64, 128, 160, 256):
        tiny = tmp_path / f"tiny{kib}"
        tiny.mkdir()
        dest = tiny / "out"
        argv = [*KG, "rescale", str(NATIVE), "--to", "3", "--format", "native", "--engine", "local"]
        script = (
            f"mount -t tmpfs -o size={kib}k none {shlex.quote(str(tiny))} || exit 99; "
            f"{shlex.join([*argv, '--out', str(dest)])}; status=$?; "
            f"ls -A {shlex.quote(str(tiny))} >&2; exit $status"
        )
        done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True)
        assert done.returncode == 5, (kib, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "NO_SPACE_LEFT", error
        assert error["message"].startswith(f"cannot write {dest}: no space left on device (ENOSPC")
        # stderr: the one error line, then the listing of the tmpfs, which must be empty.
        assert done.stderr.splitlines() == [f"kg: error: {error['message']}"], done.stderr
        inside_rocksdb += "/.native-" in error["message"]
        assert not dest.exists()
    assert inside_rocksdb >= 2  # RocksDB itself ran out of space, not only kg's own writes


#: (name, kg arguments after ``--json``; ``{out}`` is DEST).
COMMANDS = [
    ("verify-native", ["verify", str(NATIVE)]),
    ("rescale-native", ["rescale", str(NATIVE), "--to", "3", "--engine", "local", "--out", "{out}"]),
    ("rescale-heap", ["rescale", str(HEAP), "--to", "4", "--engine", "local", "--out", "{out}"]),
    ("export-native", ["export", str(NATIVE), "-o", "keyed-state", "--out", "{out}"]),
    (
        "rescale-to-native",
        ["rescale", str(HEAP), "--to", "4", "--format", "native", "--engine", "local", "--out", "{out}"],
    ),
]


def _limit(mib: int):  # noqa: ANN202 - a preexec_fn
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))

    return apply


@pytest.mark.parametrize("mib", [300, 450, 600])
def test_low_address_space_is_one_line_and_exit_5(tmp_path: Path, mib: int) -> None:
    refused = 0
    for name, args in COMMANDS:
        out = tmp_path / name
        argv = [*KG, *(a.replace("{out}", str(out)) for a in args)]
        done = subprocess.run(argv, capture_output=True, text=True, preexec_fn=_limit(mib), cwd=tmp_path)
        assert done.returncode in (0, 5), (name, mib, done.returncode, done.stdout[-500:], done.stderr[-500:])
        assert "Traceback" not in done.stderr
        if done.returncode == 5:
            refused += 1
            error = json.loads(done.stdout)["error"]
            assert error["code"] == "NOT_ENOUGH_MEMORY", (name, error)
            assert error["message"].startswith(f"not enough memory (address space limit {mib} MiB"), error
            assert done.stderr.splitlines() == [f"kg: error: {error['message']}"]
            assert not out.exists()
        # Nothing kg would have to clean: no staging or scratch directory beside DEST.
        assert [p.name for p in tmp_path.iterdir() if ".kg-staging-" in p.name] == []
    if mib == 300:
        assert refused == len(COMMANDS)  # each command met the limit, and said so


_LOAD_BINDING = """
import json, resource, sys
import keygroup_cli.core.allocator as allocator
import keygroup_cli.flink.layouts.rocksdb as rocksdb
from keygroup_cli.core.errors import KgError
rocksdb.BINDING_ADDRESS_SPACE_NEEDED = int(sys.argv[1])  # 0: no check first, the loader itself fails
used = allocator.address_space_in_use()
resource.setrlimit(resource.RLIMIT_AS, (used + (4 << 20), resource.RLIM_INFINITY))
try:
    rocksdb.load_binding()
    print(json.dumps({"loaded": True}))
except KgError as exc:
    print(json.dumps({"code": exc.code, "exit": int(exc.exit_code), "message": exc.message}))
"""


@pytest.mark.parametrize("checked_first", [False, True], ids=["loader-fails", "refused-before"])
def test_a_binding_that_cannot_be_mapped_is_not_a_missing_one(checked_first: bool) -> None:
    need = str(32 << 20) if checked_first else "0"
    done = subprocess.run([sys.executable, "-c", _LOAD_BINDING, need], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["code"] == "NOT_ENOUGH_MEMORY" and result["exit"] == 5, result
    assert "rocksdict" in result["message"] and "needs the rocksdict binding" not in result["message"]
