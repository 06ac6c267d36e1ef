"""``kg export``, ``get``, ``diff`` and ``convert`` keep kg's promises on damaged and undecodable input.

Never exit 70, never a traceback: damaged input is one line and exit 3 (``INPUT_FAILS_VERIFY`` where
``kg verify`` rejects it), what kg cannot decode one line and exit 4, and nothing is exported or written
from an input ``kg verify`` rejects. The targeted cases are the crashes of issue 37 (a serializer class
name's first letter changed); the sample is seeded random damage (``corrupt_harness``) over real Flink 2.3
fixtures, each mutant through every reader.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.reliability.corrupt_harness import (
    FIXTURES,
    Corpus,
    Mutant,
    Result,
    apply,
    run_kg,
    state_files,
)

FLINK = FIXTURES / "flink" / "2.3"
SEED = 20261129
SAMPLE = 40
SQL, SQL_OPERATOR = "sql-heap-canonical-p2", "29_group-aggregate"


def _class_names(data: bytes) -> list[tuple[int, str]]:
    """Return (offset, name) of every Java class name written as a UTF string (short length, bytes)."""
    out = []
    for start in range(2, len(data)):
        if data[start - 2] != 0 or data[start - 1] < 12:
            continue
        name = data[start : start + data[start - 1]]
        if b"." in name and (b"Serializer" in name or b"Snapshot" in name) and name.isascii():
            if all(c.isalnum() or c in "._$" for c in name.decode()):
                out.append((start, name.decode()))
    return out


def _flip_first_letter(root: Path, suffix: str, custom: bool = False) -> int:
    """Change the first letter of every serializer class name ending in ``suffix`` in the state files.

    With ``custom`` the whole name becomes a same-length class of no Flink (``com.example.…MySnapshot``),
    which no check can tell from a user's own serializer.
    """
    flipped = 0
    for path in root.iterdir():
        if path.name == "_metadata" or path.suffix in (".json", ".txt") or not path.is_file():
            continue
        data = bytearray(path.read_bytes())
        for start, name in _class_names(bytes(data)):
            if name.endswith(suffix):
                if custom:
                    mine = ("com.example." + "x" * len(name))[: len(name) - 10] + "MySnapshot"
                    data[start : start + len(name)] = mine.encode()
                else:
                    data[start] ^= 1
                flipped += 1
        path.write_bytes(bytes(data))
    return flipped


def _one_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    return lines[0]


# -- the crashes of issue 37 -------------------------------------------------------------------------------


def _refused_or(result: Result, rejected: bool, code: int, dest: Path) -> str | None:
    """Check the answer to a damaged input: exit 3 where kg verify rejects it, else ``code``; one line."""
    assert result.code == (3 if rejected else code), (rejected, result.stderr)
    if result.code == 0:
        return None
    assert not dest.exists() and not [p for p in dest.parent.iterdir() if p.name.startswith(".")]
    return _one_line(result)


def test_byte_16892_of_the_inline_metadata(tmp_path: Path) -> None:
    """The ``o`` of ``org…ListSerializerSnapshot`` in ``_metadata``: refused (3 or 4), never exit 70."""
    src = tmp_path / "in"
    shutil.copytree(FLINK / "heap-inline-p3-maxp10-string", src)
    data = bytearray((src / "_metadata").read_bytes())
    assert data[16892 : 16892 + 65].endswith(b"ListSerializerSnapshot")
    data[16892] ^= 1
    (src / "_metadata").write_bytes(bytes(data))
    rejected = run_kg(["verify", str(src)]).code != 0
    for argv in (
        ["export", str(src), "-o", "keyed-state", "--out", str(tmp_path / "out" / "x")],
        ["convert", str(src), "--out", str(tmp_path / "out" / "x")],
        ["get", str(src), "-o", "keyed-state", "-k", "key-0"],
    ):
        (tmp_path / "out").mkdir(exist_ok=True)
        line = _refused_or(run_kg(argv), rejected, 4, tmp_path / "out" / "x")
        assert line is not None and "ListSerializerSnapshot" in line, line


def test_a_list_state_under_a_serializer_kg_cannot_know_is_exit_4(tmp_path: Path) -> None:
    """A class name no Flink has (not one letter off a known one): kg verify cannot tell, export says 4."""
    src = tmp_path / "in"
    shutil.copytree(FLINK / "heap-inline-p3-maxp10-string", src)
    data = (src / "_metadata").read_bytes()
    name = b"org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot"
    custom = b"com.example." + b"x" * (len(name) - 12 - 14) + b"MyListSnapshot"
    assert len(custom) == len(name) and data.count(name) >= 1
    (src / "_metadata").write_bytes(data.replace(name, custom))
    rejected = run_kg(["verify", str(src)]).code != 0
    dest = tmp_path / "out" / "x"
    dest.parent.mkdir()
    line = _refused_or(
        run_kg(["export", str(src), "-o", "keyed-state", "--out", str(dest)]), rejected, 4, dest
    )
    assert line is not None and "MyListSnapshot" in line, line
    if not rejected:
        assert "state 'ids'" in line and "not Flink's ListSerializer" in line, line


@pytest.mark.parametrize(
    ("case", "suffix", "operator", "code"),
    [
        ("typed-heap-canonical-p2", "ListSerializerSnapshot", "typed-state", 4),
        ("typed-heap-canonical-p2", "MapSerializerSnapshot", "typed-state", 4),
        ("typed-heap-canonical-p2", "StringSerializer$StringSerializerSnapshot", "typed-state", 0),
        ("typed-heap-canonical-p2", "LongSerializer$LongSerializerSnapshot", "typed-state", 0),
        ("typed-heap-canonical-p2", "TtlStateFactory$TtlSerializerSnapshot", "typed-state", 0),
        ("typed-heap-canonical-p2", "PojoSerializerSnapshot", "typed-state", 0),
        ("typed-heap-canonical-p2", "EnumSerializer$EnumSerializerSnapshot", "typed-state", 0),
        ("typed-heap-canonical-p2", "DoubleSerializer$DoubleSerializerSnapshot", "typed-state", 0),
        (SQL, "IntSerializer$IntSerializerSnapshot", SQL_OPERATOR, 0),
        (SQL, "StringDataSerializer$StringDataSerializerSnapshot", SQL_OPERATOR, 0),
    ],
)
@pytest.mark.parametrize("custom", [False, True], ids=["first-letter", "custom-class"])
def test_a_serializer_class_kg_does_not_know(
    tmp_path: Path, case: str, suffix: str, operator: str, code: int, custom: bool
) -> None:
    """Refused where kg verify refuses (3); else a list/map wrapper kg cannot know is 4 and a part kg
    cannot decode stays bytes with a note (0). Never exit 70, never a traceback."""
    src = tmp_path / "in"
    shutil.copytree(FLINK / case, src)
    assert _flip_first_letter(src, suffix, custom) > 0
    rejected = run_kg(["verify", str(src)]).code != 0
    dest = tmp_path / "out" / "x"
    dest.parent.mkdir()
    result = run_kg(["--json", "export", str(src), "-o", operator, "--out", str(dest)])
    line = _refused_or(result, rejected, code, dest)
    if line is not None:
        assert ("MySnapshot" if custom else suffix.split("$")[-1][1:]) in line, line
        return
    doc = json.loads(result.stdout)
    notes = [n for s in doc["states"] for n in s["notes"]]
    assert any("kept as bytes" in n for n in notes), notes
    for state in doc["states"]:
        table = pq.read_table(state["file"])
        assert table.num_rows == state["rows"] and table.schema.names == state["columns"]


# -- a seeded sample of random damage through every reader -------------------------------------------------

CORPORA = (
    (Corpus("string", FLINK / "heap-files-p3-maxp128-string", "flink", 256), "keyed-state", "key-0"),
    (
        Corpus("snappy", FLINK / "heap-snappy-files-p3-maxp128-long", "flink", 256),
        "keyed-state",
        "-100000000700",
    ),
    (Corpus("typed", FLINK / "typed-heap-canonical-p2", "flink", 256), "typed-state", "0"),
)
KINDS = ("bitflip", "bitflip", "bitflip", "bitflip", "truncate", "random", "zero", "swap", "other-subtask")


def _sample() -> list[tuple[Mutant, str, str]]:
    rng = random.Random(SEED)
    out = []
    for i in range(SAMPLE):
        corpus, operator, key = CORPORA[i % len(CORPORA)]
        files = state_files(corpus)
        weighted = [t for t in files for _ in range(4 if t.startswith("keyed") else 1)]
        file_type = rng.choice(weighted)
        kind = rng.choice(KINDS)
        if kind in ("swap", "other-subtask") and len(files[file_type]) < 2:
            kind = "bitflip"
        relpath = rng.choice(files[file_type])
        out.append((Mutant(corpus, file_type, relpath, kind, rng.randrange(1 << 30)), operator, key))
    return out


def _answer(result: Result) -> object:
    """Return what ``kg get --json`` found, less the path it was asked about."""
    doc = json.loads(result.stdout)
    doc.pop("input", None)
    return doc


def _export_tables(dest: Path) -> dict[str, object]:
    return {p.name: pq.read_table(p).to_pylist() for p in sorted(dest.iterdir())}


def test_random_damage_never_becomes_an_export_get_diff_or_convert(tmp_path: Path) -> None:
    originals: dict[str, dict[str, object]] = {}
    for corpus, operator, key in CORPORA:
        dest = tmp_path / f"base-{corpus.name}"
        assert run_kg(["export", str(corpus.path), "-o", operator, "--out", str(dest)]).code == 0
        got = run_kg(["--json", "get", str(corpus.path), "-o", operator, "-k", key])
        assert got.code == 0, got.stderr
        originals[corpus.name] = {"export": _export_tables(dest), "get": _answer(got)}
    counts = {"verify rejects": 0, "exit 0": 0, "exit 3": 0, "exit 4": 0}
    for mutant, operator, key in _sample():
        src = tmp_path / "in"
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(mutant.corpus.path, src)
        apply(mutant, src)
        rejected = run_kg(["verify", str(src)]).code != 0
        counts["verify rejects"] += rejected
        out = tmp_path / "out"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        runs = {
            "export": run_kg(["export", str(src), "-o", operator, "--out", str(out / "export")]),
            "get": run_kg(["--json", "get", str(src), "-o", operator, "-k", key]),
            "diff": run_kg(["diff", str(mutant.corpus.path), str(src)]),
            "convert": run_kg(["convert", str(src), "--out", str(out / "convert")]),
        }
        for name, result in runs.items():
            label = f"{name} {mutant.label}"
            allowed = {0, 3, 4} | ({1} if name in ("get", "diff") else set())
            assert result.code in allowed, f"{label}: exit {result.code}: {result.stderr}"
            assert "Traceback" not in result.stderr and "internal error" not in result.stderr, label
            if result.code not in (0, 1):
                _one_line(result)
            counts[f"exit {result.code}"] = counts.get(f"exit {result.code}", 0) + 1
            if rejected and name != "get":
                # Nothing is exported, compared or written from an input kg verify rejects.
                assert result.code == 3, f"{label}: exit {result.code} on an input verify rejects"
        if rejected:
            # kg get reads one key group's block: it answers only from blocks it checked, so its answer,
            # when it gives one, is the intact input's.
            assert runs["get"].code == 3 or _answer(runs["get"]) == originals[mutant.corpus.name]["get"], (
                f"get {mutant.label}: a different answer from an input verify rejects"
            )
        assert {p.name for p in out.iterdir()} <= {"export", "convert"}, mutant.label
        if runs["export"].code == 0:
            tables = _export_tables(out / "export")
            if rejected:
                assert tables == originals[mutant.corpus.name]["export"], mutant.label
        if runs["convert"].code == 0:
            assert run_kg(["verify", str(out / "convert")]).code == 0, f"convert {mutant.label}"
    print(f"\nreaders on {SAMPLE} mutants (seed {SEED}): {counts}")
    assert counts["verify rejects"] >= SAMPLE // 4 and counts["exit 3"] > 0


# -- the commit: staged, read back, renamed; an interruption leaves no DEST ------------------------------


def _interrupting_reader(after: int, action: str) -> object:
    """Return ``state_batches`` that stops the export after ``after`` real batches (Ctrl-C or SIGKILL)."""
    import os
    import signal

    from keygroup_cli.flink.data.tables import state_batches

    def reader(*args: object) -> object:
        for done, item in enumerate(state_batches(*args)):  # type: ignore[arg-type]
            if done == after:
                if action == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise KeyboardInterrupt
            yield item

    return reader


@pytest.mark.parametrize("state", [None, "sum"], ids=["directory", "one-file"])
def test_ctrl_c_during_an_export_leaves_no_dest(tmp_path: Path, state: str | None) -> None:
    from keygroup_cli.flink.data.export import export_states

    dest = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        export_states(
            FLINK / "heap-files-p3-maxp128-string", "keyed-state", dest, state,
            reader=_interrupting_reader(1, "ctrl-c"),  # type: ignore[arg-type]
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_a_killed_export_leaves_no_dest_and_the_next_one_commits(tmp_path: Path) -> None:
    import subprocess
    import sys

    dest = tmp_path / "out"
    code = (
        "from tests.reliability.test_reader_promises import FLINK, _interrupting_reader\n"
        "from keygroup_cli.flink.data.export import export_states\n"
        f"export_states(FLINK / 'heap-files-p3-maxp128-string', 'keyed-state', {str(dest)!r},"
        " reader=_interrupting_reader(1, 'kill'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=FIXTURES.parent, check=False)
    assert proc.returncode == -9
    assert not dest.exists()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and ".kg-staging-" in left[0]  # the killed writer's, marked with its pid
    source = str(FLINK / "heap-files-p3-maxp128-string")
    again = run_kg(["export", source, "-o", "keyed-state", "--out", str(dest)])
    assert again.code == 0, again.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the stale staging was removed first
    fresh = tmp_path.parent / f"{tmp_path.name}-fresh"
    assert run_kg(["export", source, "-o", "keyed-state", "--out", str(fresh)]).code == 0
    assert _export_tables(dest) == _export_tables(fresh)
    shutil.rmtree(fresh)


@pytest.mark.parametrize(
    ("corpus", "relpath", "kind", "seed", "says"),
    [
        # ``VALUE_SERIALIZER`` becomes ``VALUE]SERIALIZER`` in one subtask's header: Flink's restore
        # checkNotNull's the value serializer; kg verify and every reader refuse it (exit 3).
        (CORPORA[0][0], "b49c7e29-03ad-440f-9ce4-64c3f8ea4dd5", "bitflip", 659370740, "no VALUE_SERIALIZER"),
        # A keyed file of random bytes: its header version is one no Flink writes (damage, not exit 4).
        (CORPORA[0][0], "a1fa2465-0dbc-4b17-9ce2-e883744f1a92", "random", 557030041, "no Flink writes"),
    ],
)
def test_a_damaged_header_is_exit_3_everywhere(
    tmp_path: Path, corpus: Corpus, relpath: str, kind: str, seed: int, says: str
) -> None:
    src = tmp_path / "in"
    shutil.copytree(corpus.path, src)
    apply(Mutant(corpus, "keyed", relpath, kind, seed), src)
    verified = run_kg(["verify", str(src)])
    assert verified.code == 3 and says in verified.stdout, verified.stdout
    out = tmp_path / "out"
    out.mkdir()
    for argv in (
        ["export", str(src), "-o", "keyed-state", "--out", str(out / "x")],
        ["convert", str(src), "--out", str(out / "x")],
        ["diff", str(corpus.path), str(src)],
    ):
        result = run_kg(argv)
        assert result.code == 3 and says in _one_line(result), (argv[0], result.stderr)
    assert list(out.iterdir()) == []
    # kg get reads one key's file (a few ranged reads on an object store): it refuses damage in what it
    # reads and otherwise answers exactly what the intact input answers.
    got = run_kg(["get", str(src), "-o", "keyed-state", "-k", "key-0"])
    intact = run_kg(["get", str(corpus.path), "-o", "keyed-state", "-k", "key-0"])
    assert (got.code == 3 and says in _one_line(got)) or (got.code == 0 and got.stdout == intact.stdout), got
