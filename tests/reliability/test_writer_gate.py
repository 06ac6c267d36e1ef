"""The writers' gate: nothing is written from an input ``kg verify`` rejects, and damage is exit 3.

``kg migrate`` and every local ``kg rescale`` route (key groups copied as bytes, re-hashed at a new
maxParallelism, written as NATIVE databases) are run on real damaged copies of a Flink 2.3 savepoint:

- a key stored in the wrong key group (byte 1994 of one keyed file XOR 8): found in the pass that copies
  or decodes the block;
- ``VoidNamespaceSerializer`` renamed ``XoidNamespaceSerializer`` in every state file: a class Flink does
  not have, so its restore cannot load it; found by the gate's header check, before any block is read;
- a seeded sample of the corrupt harness's mutants: where ``kg verify`` exits 3, migrate and rescale exit
  3 and write nothing; where it exits 0, migrate commits an output ``kg verify`` passes.

Each refusal must leave DEST absent, no staging or scratch directory beside it, and the input unchanged.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shutil
from pathlib import Path

import pytest

from keygroup_cli.cli import run
from keygroup_cli.flink.types.classes import FLINK_SERIALIZER_SNAPSHOTS, near_miss
from tests.conftest import FIXTURES
from tests.execution.snapshots import tree_digest
from tests.reliability.corrupt_harness import Corpus, Mutant, apply, state_files

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
VOID = b"org.apache.flink.runtime.state.VoidNamespaceSerializer"
XOID = b"org.apache.flink.runtime.state.XoidNamespaceSerializer"
#: Same length as ``VOID``: a namespace serializer of the job's own, which Flink loads from the job's jar.
CUSTOM = b"com.example.myjob.serde.CustomNamespaceSerializer12345"

CLASS_NAME = re.compile(rb"org\.apache\.flink\.[\w.$]+")

MIGRATE = ("migrate", "--rename", "keyed-state=x")
RESCALES = {
    "copy": ("rescale", "--to", "4", "--engine", "local"),
    "rehash": ("rescale", "--to", "3", "-m", "256", "--engine", "local"),
    "native": ("rescale", "--to", "4", "--format", "native", "--engine", "local"),
}
WRITERS = {"migrate": MIGRATE, **RESCALES}


def _kg(*argv: str | Path) -> tuple[int, dict, str]:
    """Run ``kg --json argv`` in-process through its error boundary: exit code, JSON document, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(["--json", "--no-color", *map(str, argv)])
    return int(code), json.loads(out.getvalue() or "{}"), err.getvalue()


def _copy(tmp_path: Path, name: str = "input") -> Path:
    copy = tmp_path / name
    shutil.copytree(SAVEPOINT, copy)
    return copy


def _wrong_key_group(tmp_path: Path) -> Path:
    copy = _copy(tmp_path)
    (keyed,) = copy.glob("24560c3d-*")
    data = bytearray(keyed.read_bytes())
    data[1994] ^= 8
    keyed.write_bytes(bytes(data))
    return copy


def _renamed_class(tmp_path: Path, old: bytes = VOID, new: bytes = XOID) -> Path:
    """Rename ``old`` to ``new`` (same length) in every state file of a copy of the savepoint."""
    assert len(old) == len(new)
    copy = _copy(tmp_path)
    changed = 0
    for path in copy.iterdir():
        if path.name in ("_metadata", "expected-state.json", "flink-report.json"):
            continue
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new))
            changed += 1
    assert changed >= 3
    return copy


def _assert_nothing_written(out: Path) -> None:
    assert not out.exists()
    beside = sorted(p.name for p in out.parent.iterdir() if p.name != "input")
    assert beside == [], beside


def _assert_refused(writer: str, damaged: Path, tmp_path: Path, *, input_fails_verify: bool) -> None:
    before = tree_digest(damaged)
    out = tmp_path / "out"
    code, doc, err = _kg(*WRITERS[writer], damaged, "--out", out)
    assert code == 3, (code, doc, err)
    if input_fails_verify:
        assert doc["error"]["code"] == "INPUT_FAILS_VERIFY", doc
    assert "\n" not in doc["error"]["message"]
    assert "Traceback" not in err
    _assert_nothing_written(out)
    assert tree_digest(damaged) == before


def test_verify_rejects_both_reproductions(tmp_path: Path) -> None:
    wrong = _wrong_key_group(tmp_path / "a")
    code, doc, _ = _kg("verify", wrong)
    assert code == 3
    assert {f["code"] for f in doc["findings"]} == {"FLINK_KEY_IN_WRONG_KEY_GROUP"}
    renamed = _renamed_class(tmp_path / "b")
    code, doc, _ = _kg("verify", renamed)
    assert code == 3
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert errors and all(f["code"] == "FLINK_STATE_HEADER_INVALID" for f in errors)
    assert all("XoidNamespaceSerializer" in f["message"] for f in errors)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_unknown_flink_class_is_refused_by_every_writer(writer: str, tmp_path: Path) -> None:
    _assert_refused(writer, _renamed_class(tmp_path), tmp_path, input_fails_verify=True)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_key_in_wrong_key_group_is_refused_by_every_writer(writer: str, tmp_path: Path) -> None:
    # Bytes copied (migrate, same maxParallelism): the copy's check names kg verify's finding. Decoded
    # (re-hash, native): the strict decode refuses the block with its own code, exit 3 as well.
    copied = writer in ("migrate", "copy")
    _assert_refused(writer, _wrong_key_group(tmp_path), tmp_path, input_fails_verify=copied)


def test_a_jobs_own_namespace_serializer_is_a_warning_and_migrates(tmp_path: Path) -> None:
    """A class Flink does not ship (the job's own) is no damage: verify warns, migrate and rescale write."""
    custom = _renamed_class(tmp_path, VOID, CUSTOM)
    code, doc, _ = _kg("verify", custom)
    assert code == 0, doc
    assert doc["findings"] and {f["severity"] for f in doc["findings"]} == {"warning"}
    for writer in ("migrate", "copy"):
        out = tmp_path / f"out-{writer}"
        code, doc, err = _kg(*WRITERS[writer], custom, "--out", out)
        assert code == 0, (writer, doc, err)
        assert _kg("verify", out)[0] == 0


def test_class_check_knows_no_two_flink_classes_as_one_edit_apart() -> None:
    for name in FLINK_SERIALIZER_SNAPSHOTS:
        assert near_miss(name) is None
    assert near_miss(XOID.decode() + "$VoidNamespaceSerializerSnapshot") == (
        VOID.decode() + "$VoidNamespaceSerializerSnapshot"
    )
    assert near_miss("org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshotX")
    assert near_miss("org.apache.flink.api.common.typeutils.base.ListSerializerSnapsho")
    assert near_miss("com.example.Serializer$Snapshot") is None


def test_no_bundled_fixture_names_a_near_miss() -> None:
    """Every class name in every fixture's files is Flink's own or far from it (no false refusal)."""
    names = set()
    for path in FIXTURES.rglob("*"):
        if path.is_file():
            names.update(m.group().decode() for m in CLASS_NAME.finditer(path.read_bytes()))
    assert len(names) > 50
    assert [n for n in names if near_miss(n)] == []


MUTANT_CORPORA = (
    Corpus("long", SAVEPOINT, "flink", 256),
    Corpus("snappy", FIXTURES / "flink" / "2.3" / "heap-snappy-files-p3-maxp128-long", "flink", 256),
)


def _mutants(count: int, seed: int) -> list[Mutant]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        corpus = rng.choice(MUTANT_CORPORA)
        files = state_files(corpus)
        file_type = rng.choice(sorted(files))
        kind = rng.choice(("bitflip", "bitflip", "bitflip", "truncate", "random"))
        out.append(Mutant(corpus, file_type, rng.choice(files[file_type]), kind, rng.randrange(1 << 30)))
    return out


@pytest.mark.parametrize("mutant", _mutants(30, 37), ids=lambda m: m.label)
def test_mutant_writers_agree_with_verify(mutant: Mutant, tmp_path: Path) -> None:
    damaged = tmp_path / "input"
    shutil.copytree(mutant.corpus.path, damaged)
    apply(mutant, damaged)
    verdict, _, _ = _kg("verify", damaged)
    assert verdict in (0, 3)
    before = tree_digest(damaged)
    if verdict == 3:
        for writer in ("migrate", "copy"):
            out = tmp_path / "out"
            code, doc, err = _kg(*WRITERS[writer], damaged, "--out", out)
            assert code == 3, (writer, code, doc, err)
            assert "Traceback" not in err
            _assert_nothing_written(out)
    else:
        out = tmp_path / "out"
        code, doc, err = _kg(*MIGRATE, damaged, "--out", out)
        assert code == 0, (doc, err)
        assert _kg("verify", out)[0] == 0
    assert tree_digest(damaged) == before


@pytest.mark.parametrize("case", ["rocksdb-native-p3-maxp128-long", "heap-checkpoint-p2-maxp128-string"])
@pytest.mark.parametrize("writer", ["migrate", "copy", "plan"])
def test_a_layouts_headers_are_gated_too(case: str, writer: str, tmp_path: Path) -> None:
    """A heap or RocksDB layout's own headers pass the same class check, before its rewrite is read."""
    damaged = tmp_path / "input"
    shutil.copytree(FIXTURES / "flink" / "2.3" / case, damaged)
    changed = 0
    for path in damaged.rglob("*"):
        data = path.read_bytes() if path.is_file() and path.name != "_metadata" else b""
        if b"base.MapSerializerSnapshot" in data:
            path.write_bytes(data.replace(b"base.MapSerializerSnapshot", b"base.QapSerializerSnapshot"))
            changed += 1
    assert changed
    assert _kg("verify", damaged)[0] == 3
    before = tree_digest(damaged)
    uid = "keyed-state"
    argv = {
        "migrate": ("migrate", "--rename", f"{uid}=x"),
        "copy": RESCALES["copy"],
        "plan": ("plan", "--to", "4"),
    }[writer]
    out = tmp_path / "out"
    code, doc, err = _kg(*argv, damaged, *(() if writer == "plan" else ("--out", out)))
    assert code == 3 and doc["error"]["code"] == "INPUT_FAILS_VERIFY", (code, doc, err)
    _assert_nothing_written(out)
    assert tree_digest(damaged) == before


@pytest.mark.parametrize("command", ["verify", "rescale", "export", "convert", "diff"])
def test_a_misspelt_class_inside_an_opaque_snapshot_is_damage(command: str, tmp_path: Path) -> None:
    """A SQL job's RowData snapshot hides its field serializers from the parsed header; Flink loads them."""
    original = FIXTURES / "flink" / "2.3" / "sql-heap-canonical-p2"
    damaged = tmp_path / "input"
    shutil.copytree(original, damaged)
    name = b"org.apache.flink.api.common.typeutils.base.IntSerializer"
    changed = 0
    for path in damaged.iterdir():
        data = path.read_bytes() if path.is_file() and path.name != "_metadata" else b""
        if name in data:
            path.write_bytes(data.replace(name, b"?" + name[1:]))
            changed += 1
    assert changed
    before = tree_digest(damaged)
    out = tmp_path / "out"
    argv = {
        "verify": ("verify", damaged),
        "rescale": ("rescale", damaged, "--to", "3", "--engine", "local", "--out", out),
        "export": ("export", damaged, "-o", "9_group-aggregate", "--out", out),
        "convert": ("convert", damaged, "--out", out),
        "diff": ("diff", original, damaged),
    }[command]
    code, doc, err = _kg(*argv)
    assert code == 3, (doc, err)
    if command == "verify":
        assert {f["code"] for f in doc["findings"] if f["severity"] == "error"} == {
            "FLINK_STATE_HEADER_INVALID"
        }
    else:
        assert doc["error"]["code"] == "INPUT_FAILS_VERIFY" and "?rg.apache.flink" in doc["error"]["message"]
    _assert_nothing_written(out)
    assert tree_digest(damaged) == before


def test_no_fixture_holds_a_string_one_letter_off_a_flink_class() -> None:
    # The byte-level scan must never refuse what Flink wrote: every state file of every fixture passes.
    from keygroup_cli.flink.operator.streams import raw_class_finding

    files = [p for p in (FIXTURES / "flink").rglob("*") if p.is_file() and not p.suffix]
    assert len(files) > 500
    assert [str(p) for p in files if raw_class_finding(p.read_bytes()[:262144], str(p), "x")] == []
