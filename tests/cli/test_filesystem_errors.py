"""What the file system refuses is one line and a documented exit code, never an internal error (exit 70).

The refusals are real: a regular file where DEST's directory should be (EEXIST / ENOTDIR), a parent that
cannot exist (ENOENT under /proc), a directory the user may not write (EACCES: as root, kg runs as user
nobody through ``setpriv``), and in a private mount namespace (``unshare -Urm``, no privileges needed) a
64 KiB tmpfs (ENOSPC) and a read-only one (EROFS). Each time the input is unchanged and nothing is left
at or beside DEST.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from keygroup_cli.cli import run

ROOT = Path(__file__).resolve().parents[2]
SAVEPOINT = ROOT / "fixtures" / "flink" / "2.3" / "heap-files-p3-maxp128-long"

#: The commands that write a DEST, each as arguments after ``kg --json``.
WRITERS = {
    "rescale": lambda dest: ["rescale", str(SAVEPOINT), "--to", "4", "--out", dest, "--engine", "local"],
    "rescale -m": lambda dest: [
        "rescale",
        str(SAVEPOINT),
        "--to",
        "4",
        "-m",
        "256",
        "--out",
        dest,
        "--engine",
        "local",
    ],
    "convert": lambda dest: ["convert", str(SAVEPOINT), "--out", dest],
    "generate": lambda dest: ["generate", dest, "-o", "a:long:20000:2:16"],
}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        h.update(str(f.relative_to(path)).encode())
        if f.is_file():
            h.update(f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def input_digest() -> Iterator[str]:
    before = _digest(SAVEPOINT)
    yield before
    assert _digest(SAVEPOINT) == before, "the input savepoint was modified"


def _in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    code = run(["--json", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def _subprocess(
    args: list[str], wrapper: list[str], before: str = "", after: str = ""
) -> tuple[int, dict, str]:
    """Run ``python -m keygroup_cli --json ARGS`` under ``wrapper``, between shell ``before``, ``after``."""
    kg = [sys.executable, "-m", "keygroup_cli", "--json", *args]
    script = f"{before}{shlex.join(kg)}; status=$?; {after}exit $status"
    # Without shell steps kg is exec'd directly: a shell run as another user may not reach this Python.
    done = subprocess.run(
        [*wrapper, "sh", "-c", script] if before or after else [*wrapper, *kg],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def _assert_refused(result: tuple[int, dict, str], exit_code: int, code: str, dest: str, reason: str) -> None:
    returned, document, stderr = result
    assert returned == exit_code, stderr
    assert document["error"]["code"] == code
    assert document["error"]["message"].startswith(f"cannot write {dest}: {reason}")
    assert stderr.count("\n") == 1 and stderr.startswith("kg: error: cannot write "), stderr
    assert "internal error" not in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("command", WRITERS)
def test_a_file_where_dests_directory_should_be(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], input_digest: str
) -> None:
    (tmp_path / "afile").write_text("not a directory")
    dest = str(tmp_path / "afile" / "out")
    result = _in_process(WRITERS[command](dest), capsys)
    _assert_refused(result, 2, "DESTINATION_NOT_WRITABLE", dest, "a component of the path is a file")
    assert "choose another --out" in result[1]["error"]["message"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_parent_that_cannot_exist(capsys: pytest.CaptureFixture[str], input_digest: str) -> None:
    dest = "/proc/kg-no-such-dir/out"
    _assert_refused(
        _in_process(WRITERS["rescale"](dest), capsys),
        2,
        "DESTINATION_NOT_WRITABLE",
        dest,
        "no such file or directory",
    )


@pytest.mark.parametrize("command", WRITERS)
def test_a_directory_the_user_may_not_write(command: str, input_digest: str) -> None:
    # As root every directory is writable: kg runs as user nobody in a real unprivileged process.
    root = Path(tempfile.mkdtemp(prefix="kg-eacces-"))
    try:
        root.chmod(0o755)
        locked = root / "locked"
        locked.mkdir(mode=0o555)
        locked.chmod(0o555)
        dest = str(locked / "out")
        wrapper = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        result = _subprocess(WRITERS[command](dest), wrapper)
        _assert_refused(result, 2, "DESTINATION_NOT_WRITABLE", dest, "permission denied (EACCES)")
        assert list(locked.iterdir()) == []
    finally:
        shutil.rmtree(root)


@pytest.mark.parametrize("command", WRITERS)
def test_no_space_left_on_device(command: str, tmp_path: Path, input_digest: str) -> None:
    # A 64 KiB tmpfs in a private mount namespace: the state files do not fit.
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    dest = str(tiny / "out")
    mount = f"mount -t tmpfs -o size=64k none {shlex.quote(str(tiny))} && "
    # Listed in the same namespace once kg ended: nothing is left on the full file system.
    listing = f"ls -A {shlex.quote(str(tiny))} >&2; "
    returned, document, stderr = _subprocess(WRITERS[command](dest), ["unshare", "-Urm"], mount, listing)
    assert returned == 5, stderr
    assert document["error"] == {
        "code": "NO_SPACE_LEFT",
        "message": f"cannot write {dest}: no space left on device (ENOSPC); nothing was committed",
    }
    assert stderr == f"kg: error: {document['error']['message']}\n"


@pytest.mark.parametrize("command", WRITERS)
def test_a_read_only_file_system(command: str, tmp_path: Path, input_digest: str) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    dest = str(ro / "out")
    mount = f"mount -t tmpfs -o ro none {shlex.quote(str(ro))} && "
    result = _subprocess(WRITERS[command](dest), ["unshare", "-Urm"], mount)
    _assert_refused(result, 2, "DESTINATION_NOT_WRITABLE", dest, "read-only file system (EROFS)")


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "{dir}"],
        ["check", "{dir}", "-p", "2"],
        ["verify", "{dir}"],
        ["plan", "{dir}", "--to", "2"],
        ["rescale", "{dir}", "--to", "2", "--out", "{dir}-out"],
        ["convert", "{dir}", "--out", "{dir}-out"],
        ["diff", "{dir}", "{dir}"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_directory_of_neither_format_is_the_same_one_line_everywhere(argv, tmp_path, capsys):
    """A directory with no _metadata, no chk-N and no _manifest.json: one sentence and exit 3 (#25 item 3)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    code = run([a.replace("{dir}", str(empty)) for a in argv])
    captured = capsys.readouterr()
    assert code == 3 and captured.out == ""
    assert captured.err == (
        f"kg: error: {empty}: not a Flink savepoint or checkpoint, nor a kg snapshot (no _metadata file, "
        "no chk-N directory, no _manifest.json; an uncommitted write has none of them)\n"
    )
    assert not (tmp_path / "empty-out").exists()
