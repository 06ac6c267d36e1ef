"""Containment: kg reads nothing outside the input it is given and writes nothing into it.

- a relative state handle that climbs out (``../outside/f``, ``../../../../etc/passwd``) or a state file
  that is a link to outside is refused (exit 3, ``STATE_FILE_OUTSIDE``), and its bytes never reach an
  output;
- an absolute state path outside the checkpoint's own directories is refused unless its root is named in
  ``KG_STATE_ROOTS``;
- every command that reads state (inspect, check, check --deep, verify, get, export, diff, plan, rescale,
  migrate, convert) refuses, with exit 3, ``STATE_FILE_OUTSIDE`` and the one sentence of
  ``storage.containment.outside_error``: an absolute handle to a file in the savepoint's parent directory
  or in a sibling savepoint, the issue's private ``LOG`` handle of a NATIVE savepoint naming a secret
  file, an object-store handle with ``..`` on a local copy, a ``_metadata`` or ``_manifest.json`` that
  is a link to outside; an audit hook on ``open`` (and on the links and copies RocksDB's reader makes)
  shows that no file outside the allowed places is opened, and no output holds the file's bytes; with
  ``KG_STATE_ROOTS`` naming the place, the same input is read again (exit 0);
- a checkpoint (``chk-<n>``) reads its job's ``shared/``, ``taskowned/`` and ``dstl/``, never a sibling
  ``chk-<m>``;
- a destination equal to, inside or around the input is refused before anything is written;
- several concurrent ``kg rescale … --out SAME``: exactly one commits, the others refuse with one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from keygroup_cli.flink.io.stream_handles import FileHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle, LocalHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from tests.conftest import FIXTURES
from tests.execution.snapshots import tree_digest

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
SECRET = b"kg-containment-secret-" * 64


def _with_keyed_path(tmp_path: Path, rewrite) -> Path:
    """Copy the savepoint; rewrite the first keyed handle's file reference with ``rewrite(handle)``."""
    copy = tmp_path / "savepoint"
    shutil.copytree(SAVEPOINT, copy)
    metadata = read_flink_metadata(copy).metadata
    done = False
    operators = []
    for op in metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if not done and isinstance(keyed, KeyGroupsHandle) and keyed.delegate is not None:
                keyed = dataclasses.replace(keyed, delegate=rewrite(keyed.delegate, copy))
                sub = dataclasses.replace(sub, managed_keyed_state=keyed)
                done = True
            subtasks.append(sub)
        operators.append(dataclasses.replace(op, subtasks=tuple(subtasks)))
    assert done
    (copy / "_metadata").write_bytes(
        write_metadata(dataclasses.replace(metadata, operators=tuple(operators)))
    )
    return copy


@pytest.mark.parametrize("escape", ["../outside/f", "../../../../etc/passwd", "/etc/passwd"])
def test_relative_handles_that_climb_out_are_refused(kg, tmp_path, escape):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(SECRET)

    def rewrite(handle: RelativeFileHandle, _copy: Path) -> RelativeFileHandle:
        return dataclasses.replace(handle, relative_path=escape)

    savepoint = _with_keyed_path(tmp_path, rewrite)
    for args in (("inspect", savepoint), ("rescale", savepoint, "--to", "4", "--out", tmp_path / "out")):
        done = kg(*args, "--json")
        assert done.exit_code == 3, done.stderr
        error = done.json()["error"]
        assert error["code"] == "STATE_FILE_OUTSIDE" and "outside the input" in error["message"]
    assert not (tmp_path / "out").exists()


def test_a_state_file_that_links_outside_is_refused(kg, tmp_path):
    copy = tmp_path / "savepoint"
    shutil.copytree(SAVEPOINT, copy)
    metadata = read_flink_metadata(copy).metadata
    keyed = next(
        s.managed_keyed_state
        for op in metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed_state, KeyGroupsHandle)
    )
    target = copy / keyed.delegate.relative_path
    secret = tmp_path / "secret"
    secret.write_bytes(target.read_bytes())  # even a plausible file: it is outside
    target.unlink()
    target.symlink_to(secret)
    done = kg("rescale", copy, "--from", "3", "--to", "4", "--out", tmp_path / "out", "--json")
    assert done.exit_code == 3, done.stderr
    error = done.json()["error"]
    assert error["code"] == "STATE_FILE_OUTSIDE" and "outside the input" in error["message"]
    assert not (tmp_path / "out").exists()


def test_absolute_state_paths_outside_need_a_named_root(kg, tmp_path, tmp_path_factory, monkeypatch):
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # not under the savepoint's parent

    def rewrite(handle: RelativeFileHandle, copy: Path) -> FileHandle:
        moved = elsewhere / handle.relative_path
        shutil.move(copy / handle.relative_path, moved)
        return FileHandle(path=f"file://{moved}", size=handle.size)

    savepoint = _with_keyed_path(tmp_path, rewrite)
    refused = kg("inspect", savepoint, "--json")
    assert refused.exit_code == 3 and refused.json()["error"]["code"] == "STATE_FILE_OUTSIDE"
    assert "KG_STATE_ROOTS" in refused.json()["error"]["message"]
    monkeypatch.setenv("KG_STATE_ROOTS", str(elsewhere))
    assert kg("inspect", savepoint).exit_code == 0


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_a_destination_in_or_around_the_input_is_refused(kg, tmp_path, where):
    snapshot = tmp_path / "work" / "snap"
    assert kg("rescale", FIXTURES / "snapshots" / "valid", "--to", "3", "--out", snapshot,
              "--engine", "local").exit_code == 0  # fmt: skip
    before = tree_digest(snapshot)
    dest = {"same": snapshot, "inside": snapshot / "counter" / "new", "around": tmp_path / "work"}[where]
    done = kg("rescale", snapshot, "--to", "4", "--out", dest, "--engine", "local", "--json")
    assert done.exit_code == 2
    assert done.json()["error"]["code"] in ("DESTINATION_INSIDE_INPUT", "DESTINATION_EXISTS")
    assert tree_digest(snapshot) == before
    assert kg("verify", snapshot).exit_code == 0


def test_concurrent_writers_to_one_destination_have_exactly_one_winner(tmp_path):
    dest = tmp_path / "out"
    env = {**os.environ, "COLUMNS": "100"}
    args = [sys.executable, "-m", "keygroup_cli", "rescale", str(SAVEPOINT), "--from", "3", "--to", "4",
            "-m", "256", "--out", str(dest), "--engine", "local", "-q"]  # fmt: skip
    procs = [
        subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)
    ]
    results = [(p.wait(120), p.stderr.read().decode()) for p in procs]
    winners = [r for r in results if r[0] == 0]
    losers = [r for r in results if r[0] != 0]
    assert len(winners) == 1, results
    for code, stderr in losers:
        assert code == 2 and stderr.count("\n") == 1 and "destination exists" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging left behind
    done = subprocess.run([*args[:3], "check", str(dest), "-p", "4", "-m", "256"], env=env, check=False)
    assert done.returncode == 0


# -- every command that reads state, every way out ---------------------------------------------------------

NATIVE = FIXTURES / "flink" / "2.3" / "rocksdb-native-files-p2-maxp128-long"
REPOSITORY = Path(__file__).resolve().parents[2]

#: Real paths opened (``open``) or handed to another reader (``os.symlink``, ``shutil.copyfile``: RocksDB's
#: reader opens the files kg links into its scratch database) while a test records; None otherwise.
_OPENED: list[str] | None = None


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _OPENED is None or event not in ("open", "os.symlink", "os.link", "shutil.copyfile"):
        return
    target = args[0] if args else None
    if isinstance(target, str | bytes | os.PathLike):
        _OPENED.append(os.path.realpath(os.fsdecode(target)))


sys.addaudithook(_audit)  # for the whole process (hooks cannot be removed); it records only in _recording


@contextlib.contextmanager
def _recording() -> Iterator[list[str]]:
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


def _system_places() -> list[Path]:
    """Where Python, kg's code and the libraries it loads live (opened by imports, locale, /proc…)."""
    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    places |= {str(REPOSITORY / "keygroup_cli"), "/usr", "/lib", "/lib64", "/etc", "/proc", "/sys", "/dev"}
    return [Path(os.path.realpath(p)) for p in places]


@dataclasses.dataclass
class Case:
    """One input naming a file outside it: what to run on it, the file, and what makes it readable."""

    input: Path
    outside: Path
    kind: str  # "flink" or "kg"
    other: Path  # the second input of kg diff
    #: Makes the same input readable again (KG_STATE_ROOTS naming the place, or a copy put inside);
    #: None when the file outside is no state at all (the issue's secret).
    allow: Callable[[pytest.MonkeyPatch], None] | None


def _rewrite(savepoint: Path, change: Callable[[object], object], *, first: bool = False) -> None:
    """Rewrite ``savepoint/_metadata`` in place: ``change`` maps keyed-state's subtask-2 (or the first
    RocksDB; with ``first`` the first heap) keyed handle to its replacement, with kg's own metadata reader
    and writer."""
    metadata = read_flink_metadata(savepoint).metadata
    done = False
    operators = []
    for op in metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            wanted = isinstance(keyed, IncrementalKeyedHandle) or (
                isinstance(keyed, KeyGroupsHandle)
                and isinstance(keyed.delegate, RelativeFileHandle)
                and (first or (op.uid == "keyed-state" and sub.index == 2))
            )
            if not done and wanted:
                sub = dataclasses.replace(sub, managed_keyed_state=change(keyed))
                done = True
            subtasks.append(sub)
        operators.append(dataclasses.replace(op, subtasks=tuple(subtasks)))
    assert done
    rewritten = dataclasses.replace(metadata, operators=tuple(operators))
    (savepoint / "_metadata").write_bytes(write_metadata(rewritten))


def _keyed_file(savepoint: Path) -> RelativeFileHandle:
    found: list[RelativeFileHandle] = []

    def keep(keyed):
        found.append(keyed.delegate)
        return keyed

    _rewrite(savepoint, keep)
    return found[0]


def _absolute_to(savepoint: Path, place: Path, *, uri: bool = False) -> None:
    def change(keyed):
        path = place.as_uri() if uri else str(place)
        return dataclasses.replace(keyed, delegate=FileHandle(path=path, size=keyed.delegate.size))

    _rewrite(savepoint, change)


def _roots(place: Path) -> Callable[[pytest.MonkeyPatch], None]:
    return lambda monkeypatch: monkeypatch.setenv("KG_STATE_ROOTS", str(place))


def _parent_case(case: Path) -> Case:
    source = case / "input"
    shutil.copytree(SAVEPOINT, source)
    name = _keyed_file(source).relative_path
    moved = case / name  # in the savepoint's parent directory
    shutil.move(source / name, moved)
    _absolute_to(source, moved)
    return Case(source, moved, "flink", SAVEPOINT, _roots(case))


def _sibling_case(case: Path) -> Case:
    source, sibling = case / "input", case / "sibling"
    shutil.copytree(SAVEPOINT, source)
    shutil.copytree(SAVEPOINT, sibling)
    name = _keyed_file(source).relative_path
    (source / name).unlink()
    _absolute_to(source, sibling / name, uri=True)  # file:///…
    return Case(source, sibling / name, "flink", SAVEPOINT, _roots(sibling))


def _native_case(case: Path) -> Case:
    """The issue's reproduction: a private ``LOG`` of a NATIVE savepoint names a secret file."""
    source, secret = case / "input", case / "secret"
    shutil.copytree(NATIVE, source)
    secret.write_bytes(SECRET)

    def change(keyed):
        log = LocalHandle("LOG", FileHandle(str(secret), len(SECRET)))
        return dataclasses.replace(keyed, private=(*keyed.private, log))

    _rewrite(source, change)
    return Case(source, secret, "flink", NATIVE, None)


def _object_store_case(case: Path) -> Case:
    """``s3p://bucket/x/../<file>``: its local copy was once looked for in the grandparent of the input."""
    source = case / "input"
    shutil.copytree(SAVEPOINT, source)
    name = _keyed_file(source).relative_path
    stolen = case.parent / name
    shutil.move(source / name, stolen)

    def change(keyed):
        handle = FileHandle(f"s3p://bucket/x/../{name}", keyed.delegate.size)
        return dataclasses.replace(keyed, delegate=handle)

    _rewrite(source, change)
    # A copy of the object beside _metadata is what the input may read (a checkpoint copied from a store).
    return Case(source, stolen, "flink", SAVEPOINT, lambda _mp: shutil.copyfile(stolen, source / name))


def _linked_case(case: Path, origin: Path, commit_file: str, kind: str) -> Case:
    source, elsewhere = case / "input", case / "elsewhere"
    shutil.copytree(origin, source)
    elsewhere.mkdir()
    shutil.move(source / commit_file, elsewhere / commit_file)
    (source / commit_file).symlink_to(elsewhere / commit_file)
    return Case(source, elsewhere / commit_file, kind, origin, _roots(elsewhere))


CASES: dict[str, Callable[[Path], Case]] = {
    "parent directory": _parent_case,
    "sibling savepoint": _sibling_case,
    "issue reproduction": _native_case,
    "object store ..": _object_store_case,
    "linked _metadata": lambda case: _linked_case(case, SAVEPOINT, "_metadata", "flink"),
    "linked _manifest.json": lambda c: _linked_case(c, c.parent / "snapshot", "_manifest.json", "kg"),
}


@pytest.fixture(scope="module")
def kg_snapshot(tmp_path_factory) -> Path:
    """A kg snapshot of SAVEPOINT, as ``kg convert`` writes it."""
    snapshot = tmp_path_factory.mktemp("kg-snapshot") / "snapshot"
    done = subprocess.run(
        [sys.executable, "-m", "keygroup_cli", "-q", "convert", str(SAVEPOINT), "--out", str(snapshot)],
        check=False,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    return snapshot


def _commands(case: Case, out: Path) -> dict[str, list[object]]:
    src = case.input
    both = {
        "inspect": ["inspect", src],
        "check": ["check", src, "-p", "4"],
        "check --deep": ["check", src, "-p", "4", "--deep"],
        "verify": ["verify", src],
        "diff": ["diff", src, case.other],
        "plan": ["plan", src, "--to", "4"],
        "rescale": ["rescale", src, "--to", "4", "--out", out / "rescale", "--engine", "local"],
    }
    if case.kind == "kg":  # get, export and migrate read Flink savepoints only
        return {**both, "convert": ["convert", src, "--to-flink", "--out", out / "convert"]}
    return {
        **both,
        "get": ["get", src, "-o", "keyed-state", "-k", "0"],
        "export": ["export", src, "-o", "keyed-state", "--out", out / "export"],
        "migrate": ["migrate", src, "--rename", "keyed-state=renamed", "--out", out / "migrate"],
        "convert": ["convert", src, "--out", out / "convert"],
    }


@pytest.mark.parametrize("name", list(CASES))
def test_every_command_refuses_what_leads_outside_until_kg_state_roots_names_it(
    kg, tmp_path, monkeypatch, kg_snapshot, name
):
    monkeypatch.delenv("KG_STATE_ROOTS", raising=False)
    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    out.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (tmp_path / "case").mkdir()
    shutil.copytree(kg_snapshot, tmp_path / "snapshot")  # the kg snapshot the _manifest.json case links
    case = CASES[name](tmp_path / "case")
    secret = case.outside.read_bytes()
    before = tree_digest(case.input)
    allowed = [Path(os.path.realpath(p)) for p in (case.input, out, scratch, case.other)] + _system_places()
    forbidden = os.path.realpath(case.outside)

    messages = set()
    commands = _commands(case, out)
    for command, args in commands.items():
        with _recording() as opened:
            done = kg("--json", "-q", *args)
        assert done.exit_code == 3, (command, done.stdout, done.stderr)
        error = done.json()["error"]
        assert error["code"] == "STATE_FILE_OUTSIDE", (command, error)
        messages.add(error["message"])
        assert "Traceback" not in done.stderr
        assert forbidden not in opened, command
        strays = sorted({p for p in opened if not any(Path(p).is_relative_to(a) for a in allowed)})
        assert strays == [], (command, strays)
        assert secret[-48:] not in done.stdout.encode() + done.stderr.encode()
    # One sentence, worded the same by every command: what was refused, and that KG_STATE_ROOTS allows it.
    assert len(messages) == 1, messages
    (message,) = messages
    assert "outside the input" in message and "KG_STATE_ROOTS" in message and message.count(". ") == 0
    assert list(out.rglob("*")) == []  # nothing written, no staging left, so the bytes are nowhere
    assert tree_digest(case.input) == before

    if case.allow is None:
        return
    case.allow(monkeypatch)
    again = tmp_path / "again"
    again.mkdir()
    for command, args in _commands(case, again).items():
        done = kg("-q", *args)
        assert done.exit_code == 0, (command, done.stdout[-600:], done.stderr)
    assert kg("verify", again / "rescale").exit_code == 0


CHECKPOINT_JOB = (
    FIXTURES / "flink" / "2.3" / "heap-checkpoint-p2-maxp128-string" / "0000000000006b670000000000000005"
)


@pytest.mark.parametrize(
    ("folder", "readable"),
    [("shared", True), ("taskowned", True), ("dstl", True), ("chk-1", False), ("other-job", False)],
)
def test_a_checkpoint_reads_its_jobs_shared_taskowned_and_dstl_but_no_sibling_checkpoint(
    kg, tmp_path, monkeypatch, folder, readable
):
    monkeypatch.delenv("KG_STATE_ROOTS", raising=False)
    job = tmp_path / CHECKPOINT_JOB.name
    checkpoint = job / "chk-2"
    shutil.copytree(CHECKPOINT_JOB / "chk-2", checkpoint)
    names: list[str] = []

    def move(keyed):
        name = keyed.delegate.relative_path
        names.append(name)
        place = (tmp_path if folder == "other-job" else job) / folder / name
        place.parent.mkdir(parents=True)
        shutil.move(checkpoint / name, place)
        return dataclasses.replace(keyed, delegate=FileHandle(place.as_uri(), keyed.delegate.size))

    _rewrite(checkpoint, move, first=True)
    done = kg("verify", checkpoint, "--json")
    if readable:
        assert done.exit_code == 0, done.stdout
        return
    assert done.exit_code == 3 and done.json()["error"]["code"] == "STATE_FILE_OUTSIDE", done.stdout
    monkeypatch.setenv("KG_STATE_ROOTS", str(tmp_path / folder if folder == "other-job" else job / folder))
    assert kg("verify", checkpoint).exit_code == 0


def test_relative_handles_are_normalized_not_refused_for_a_dot_dot_that_stays_inside(kg, tmp_path):
    """``a/../<file>`` and ``./<file>`` name the savepoint's own file: normalized, then read."""

    def rewrite(handle: RelativeFileHandle, _copy: Path) -> RelativeFileHandle:
        return dataclasses.replace(handle, relative_path=f"sub/.././{handle.relative_path}")

    savepoint = _with_keyed_path(tmp_path, rewrite)
    assert kg("verify", savepoint).exit_code == 0
