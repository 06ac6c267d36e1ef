"""Every command against kg's promises: the command table, the corpora and the checks (issue #37, part 2).

Shared by ``tests/reliability/test_properties.py`` (CI size) and ``benchmarks/reliability.py`` (full size,
``--mutants N``). Two real Flink 2.3 savepoints are the inputs: a heap savepoint in the canonical layout
with files (``heap-files-p3-maxp128-long``) and a RocksDB NATIVE savepoint whose database files are state
files of their own (``rocksdb-native-files-p2-maxp128-long``).

Commands (``COMMANDS``): the readers ``inspect``, ``check -p 4``, ``check --deep``, ``verify``, ``get``
(one key), ``export``, ``diff`` (against the intact original) and ``plan --to 4``; the writers
``rescale --to 4`` (local engine), ``rescale --to 4 -m 256``, ``rescale --format native``, ``migrate
--rename <uid>=x`` and ``convert``; ``generate`` (a writer without input) runs only in the kill, ENOSPC,
concurrency and memory properties.

The promises each run is held to (``check_run``; each broken one is a ``Violation``):

- the exit code is in the documented table: readers {0, 1, 3, 4}, writers {0, 3, 4} (5 only where a
  write genuinely failed, never on a corrupt input);
- no ``Traceback`` on stderr, and on an error exactly one line on stderr (``kg verify`` and ``kg check``
  may print their findings on stdout with nothing on stderr);
- the input tree is byte-identical afterwards;
- a writer (``export`` included) leaves nothing at or beside DEST unless it exits 0, and then only DEST;
  a savepoint or kg snapshot it wrote passes ``kg verify`` (exit 0), an export's Parquet files re-read;
- **the gate**: when ``kg verify`` rejects the input (exit 3), every writer, ``export``, ``get`` and
  ``diff`` (which decodes all state) exit 3 with nothing written, and ``kg check --deep`` exits nonzero;
- no file is opened outside the input, the intact original (``diff``) and DEST's directory, within the
  work directory or the fixtures (an audit hook sees Python's ``open`` and ``os.open``).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from tests.reliability.corrupt_harness import Result, run_kg

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
PYTHON = sys.executable


@dataclass(frozen=True)
class Fixture:
    """One intact input: where it is, the keyed operator ``get``/``export``/``migrate`` name, and a key."""

    name: str
    path: Path
    operator: str
    key: str
    native: bool  # a RocksDB NATIVE savepoint: its database files are state files

    def state_files(self) -> list[str]:
        """Return ``_metadata`` and every state file of the savepoint (relative paths, sorted)."""
        return ["_metadata", *sorted(p.name for p in self.path.iterdir() if _is_state_file(p))]


def _is_state_file(p: Path) -> bool:
    return p.is_file() and p.name != "_metadata" and not p.name.endswith((".json", ".md", ".sh"))


HEAP = Fixture("heap", FIXTURES / "flink/2.3/heap-files-p3-maxp128-long", "keyed-state", "0", False)
NATIVE = Fixture(
    "native", FIXTURES / "flink/2.3/rocksdb-native-files-p2-maxp128-long", "keyed-state", "0", True
)
FIXTURE_SET = (HEAP, NATIVE)
#: The full size adds a typed job (POJO, Tuple, List, Map serializers), an SQL job (RowData keys) and a
#: savepoint whose state is inline in ``_metadata``.
FULL_FIXTURE_SET = (
    *FIXTURE_SET,
    Fixture("typed", FIXTURES / "flink/2.3/typed-heap-canonical-p2", "typed-state", "1", False),
    Fixture("sql", FIXTURES / "flink/2.3/sql-heap-canonical-p2", "9_group-aggregate", "2000000000", False),
    Fixture("inline", FIXTURES / "flink/2.3/heap-inline-p3-maxp10-string", "keyed-state", "key-0", False),
)

READER_CODES = frozenset({0, 1, 3, 4})
WRITER_CODES = frozenset({0, 3, 4})


@dataclass(frozen=True)
class Command:
    """One command of the table. ``argv(fixture, src, dest, pristine)``; ``output``: what DEST holds."""

    name: str
    argv: Callable[[Fixture, Path, Path, Path], list[str]]
    output: str | None = None  # "savepoint", "kg", "parquet"; None: a reader without DEST
    writer: bool = False  # exit-code table {0, 3, 4}; readers (export included) {0, 1, 3, 4}
    gated: bool = False  # must refuse (exit 3, nothing written) an input kg verify rejects
    #: A gated reader of a part of the input (``kg get``: one key's file): it may instead answer exactly
    #: what the intact input answers, having checked every byte it read.
    partial_read: bool = False
    applies: Callable[[Fixture], bool] = lambda _f: True


def _rescale(*extra: str) -> Callable[[Fixture, Path, Path, Path], list[str]]:
    return lambda f, src, dest, _p: [
        "rescale",
        str(src),
        "--to",
        "4",
        *extra,
        "--out",
        str(dest),
        "--engine",
        "local",
    ]


def _write_data(f: Fixture) -> Path:
    """Return a one-key delete for ``kg write`` of ``f``: an input kept outside the work directory."""
    import tempfile

    import pyarrow as pa

    root = Path(tempfile.gettempdir()) / f"kg-property-data-{os.getuid()}"
    root.mkdir(exist_ok=True)
    path = root / f"{f.name}.parquet"
    if not path.exists():
        key: object = int(f.key) if f.key.lstrip("-").isdigit() else f.key
        part = root / f"{f.name}.{os.getpid()}.tmp"
        pq.write_table(pa.table({"key": [key]}), part)
        os.replace(part, path)
    return path


COMMANDS: tuple[Command, ...] = (
    Command("inspect", lambda f, src, d, p: ["inspect", str(src)]),
    Command("check", lambda f, src, d, p: ["check", str(src), "-p", "4"]),
    Command("check --deep", lambda f, src, d, p: ["check", str(src), "-p", "4", "--deep"]),
    Command("verify", lambda f, src, d, p: ["verify", str(src)]),
    Command(
        "get",
        lambda f, src, d, p: ["get", str(src), "-o", f.operator, "-k", f.key],
        gated=True,
        partial_read=True,
    ),
    Command(
        "export",
        lambda f, src, d, p: ["export", str(src), "-o", f.operator, "--out", str(d)],
        output="parquet",
        gated=True,
    ),
    # diff decodes all of both inputs: damage kg verify finds is exit 3 there too (#37: "every reading
    # command"), never "different" (1) or "unsupported" (4).
    Command("diff", lambda f, src, d, p: ["diff", str(p), str(src)], gated=True),
    Command("plan", lambda f, src, d, p: ["plan", str(src), "--to", "4"]),
    Command("rescale", _rescale(), output="savepoint", writer=True, gated=True),
    Command("rescale -m 256", _rescale("-m", "256"), output="savepoint", writer=True, gated=True),
    Command(
        "rescale --format native",
        _rescale("--format", "native"),
        output="savepoint",
        writer=True,
        gated=True,
        applies=lambda f: f.native,
    ),
    Command(
        "migrate",
        lambda f, src, d, p: ["migrate", str(src), "--rename", f"{f.operator}=x", "--out", str(d)],
        output="savepoint",
        writer=True,
        gated=True,
    ),
    Command(
        "convert",
        lambda f, src, d, p: ["convert", str(src), "--out", str(d)],
        output="kg",
        writer=True,
        gated=True,
    ),
    Command(
        "write",
        lambda f, src, d, p: [
            *("write", str(src), "-o", f.operator, "--state", "sum", "--mode", "delete"),
            *("--data", str(_write_data(f)), "--out", str(d)),
        ],
        output="savepoint",
        writer=True,
        gated=True,
        applies=lambda f: f.operator == "keyed-state",
    ),
    Command(
        "compact",
        lambda f, src, d, p: ["compact", str(src), "--timers-before", "0", "--out", str(d)],
        output="savepoint",
        writer=True,
        gated=True,
    ),
)
BY_NAME = {c.name: c for c in COMMANDS}
#: generate: a writer without input (kill, ENOSPC, concurrency, memory only).
GENERATE_ARGS = ["-o", "a:long:20000:2:16", "-o", "b:string:5000:3:128"]


def writer_argv(name: str, fixture: Fixture, dest: Path) -> list[str]:
    """Return the arguments of writer ``name`` (``generate`` included) into ``dest``, on the intact input."""
    if name == "generate":
        return ["generate", str(dest), *GENERATE_ARGS]
    return BY_NAME[name].argv(fixture, fixture.path, dest, fixture.path)


WRITER_NAMES = (*(c.name for c in COMMANDS if c.writer), "generate")


def writer_fixture(name: str) -> Fixture:
    """Return the input a writer runs on in the kill/ENOSPC/concurrency/memory properties."""
    return NATIVE if name == "rescale --format native" else HEAP


# -- the corpora ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One change to one file: ``kind`` with its parameters (positions are computed from the seed)."""

    relpath: str
    kind: str  # flip, truncate, insert, int, replace
    at: int = 0
    value: bytes = b""


@dataclass(frozen=True)
class Mutant:
    fixture: Fixture
    label: str
    edits: tuple[Edit, ...]

    def apply(self, root: Path) -> None:
        """Damage the copy of the input at ``root``."""
        for e in self.edits:
            target = root / e.relpath
            data = bytearray(target.read_bytes())
            if e.kind == "flip":
                data[e.at] ^= e.value[0]
            elif e.kind == "truncate":
                del data[e.at :]
            elif e.kind == "insert":
                data[e.at : e.at] = e.value
            elif e.kind in ("int", "replace"):
                data[e.at : e.at + len(e.value)] = e.value
            else:  # pragma: no cover - a corpus bug
                raise ValueError(e.kind)
            target.write_bytes(bytes(data))


INT_EXTREMES = (b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", b"\x00\x00\x00\x00")


def random_mutants(fixture: Fixture, count: int, seed: int) -> list[Mutant]:
    """Return ``count`` seeded random mutants of ``fixture``: a flipped bit, a truncation, inserted bytes,
    or an int extreme (2^31-1, -2^31, -1, 0) at a 4-byte aligned position, in ``_metadata`` (a third of
    them) or in a state file."""
    rng = random.Random(f"{seed}:{fixture.name}")
    files = fixture.state_files()
    sizes = {f: (fixture.path / f).stat().st_size for f in files}
    out = []
    for i in range(count):
        relpath = "_metadata" if len(files) == 1 or rng.random() < 1 / 3 else rng.choice(files[1:])
        size = sizes[relpath]
        kind = rng.choice(("flip", "truncate", "insert", "int"))
        if kind == "flip":
            edit = Edit(relpath, "flip", rng.randrange(size), bytes([1 << rng.randrange(8)]))
            what = f"bit {edit.value[0].bit_length() - 1} of byte {edit.at}"
        elif kind == "truncate":
            edit = Edit(relpath, "truncate", rng.randrange(size))
            what = f"cut at {edit.at} of {size}"
        elif kind == "insert":
            edit = Edit(relpath, "insert", rng.randrange(size + 1), rng.randbytes(rng.choice((1, 4, 8, 64))))
            what = f"{len(edit.value)} bytes inserted at {edit.at}"
        else:
            edit = Edit(relpath, "int", rng.randrange(max(1, size // 4 - 1)) * 4, rng.choice(INT_EXTREMES))
            what = f"int {edit.value.hex()} at {edit.at}"
        out.append(Mutant(fixture, f"{fixture.name}:random#{i}:{relpath}:{what}", (edit,)))
    return out


#: A Java class name as ``writeUTF`` (and Flink's snapshot readers) write it: a package, then a class
#: whose simple name ends in ``Serializer`` or ``SerializerSnapshot`` (nested classes after a ``$``).
_CLASS = re.compile(
    rb"(?:[a-z_][a-z0-9_]*\.)+((?:[A-Za-z0-9_]+\$)*)([A-Z][A-Za-z0-9_]*Serializer[A-Za-z0-9_$]*)"
)


def serializer_names(fixture: Fixture) -> dict[str, list[tuple[str, int]]]:
    """Return simple class name → ``(file, position of its first letter)`` of every serializer class name
    in ``_metadata`` and the state files."""
    found: dict[str, list[tuple[str, int]]] = {}
    for relpath in fixture.state_files():
        data = (fixture.path / relpath).read_bytes()
        for m in _CLASS.finditer(data):
            found.setdefault(m.group(2).decode(), []).append((relpath, m.start(2)))
    return found


def targeted_mutants(fixture: Fixture, letters: tuple[str, ...] = ("Q",)) -> list[Mutant]:
    """Return the targeted mutants of ``fixture``.

    The first letter of every serializer class name (each name: every occurrence at once, as the issue's
    ``VoidNamespaceSerializer`` example; a name that also occurs in ``_metadata``: there alone, too),
    replaced by each of ``letters`` (a capital: a plausible class that does not exist; ``?``: not a Java
    identifier). For a NATIVE savepoint, its database files: ``CURRENT`` naming another
    MANIFEST, a byte inside an SST's data, the SST's magic number (its last 8 bytes).
    """
    out = []
    for name, places in sorted(serializer_names(fixture).items()):
        for letter in letters:
            everywhere = tuple(Edit(r, "replace", at, letter.encode()) for r, at in places)
            new = f"{letter}{name[1:]}"
            out.append(
                Mutant(fixture, f"{fixture.name}:class {name}->{new} everywhere ({len(places)})", everywhere)
            )
            in_meta = tuple(e for e in everywhere if e.relpath == "_metadata")
            if in_meta and len(in_meta) < len(everywhere):
                out.append(Mutant(fixture, f"{fixture.name}:class {name}->{new} in _metadata", in_meta))
    if fixture.native:
        out.extend(native_mutants(fixture))
    return out


def native_files(fixture: Fixture) -> dict[str, list[str]]:
    """Return a NATIVE savepoint's database files by kind (``CURRENT``, ``sst``, ``MANIFEST``)."""
    from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
    from keygroup_cli.flink.metadata.locate import read_flink_metadata

    out: dict[str, list[str]] = {"CURRENT": [], "sst": [], "MANIFEST": []}
    for op in read_flink_metadata(fixture.path).metadata.operators:
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, IncrementalKeyedHandle):
                for local in (*keyed.shared, *keyed.private):
                    rel = getattr(local.handle, "relative_path", None)
                    if rel is None:
                        continue
                    kind = "sst" if local.local_path.endswith(".sst") else local.local_path.split("-")[0]
                    if kind in out:
                        out[kind].append(rel)
    return {k: sorted(v) for k, v in out.items()}


def native_mutants(fixture: Fixture) -> list[Mutant]:
    files = native_files(fixture)
    out = []
    for rel in files["CURRENT"][:2]:
        size = (fixture.path / rel).stat().st_size
        # MANIFEST-000005\n -> MANIFEST-000004\n: a manifest that is not there
        out.append(
            Mutant(
                fixture,
                f"{fixture.name}:CURRENT {rel} names another MANIFEST",
                (Edit(rel, "flip", size - 2, b"\x01"),),
            )
        )
        out.append(Mutant(fixture, f"{fixture.name}:CURRENT {rel} emptied", (Edit(rel, "truncate", 0),)))
    for rel in files["sst"][:3]:
        size = (fixture.path / rel).stat().st_size
        out.append(
            Mutant(
                fixture,
                f"{fixture.name}:SST {rel} byte {size // 4} flipped",
                (Edit(rel, "flip", size // 4, b"\x10"),),
            )
        )
        out.append(
            Mutant(fixture, f"{fixture.name}:SST {rel} magic number", (Edit(rel, "flip", size - 3, b"\x01"),))
        )
    for rel in files["MANIFEST"][:1]:
        size = (fixture.path / rel).stat().st_size
        out.append(
            Mutant(
                fixture,
                f"{fixture.name}:MANIFEST {rel} byte {size // 2} flipped",
                (Edit(rel, "flip", size // 2, b"\x04"),),
            )
        )
    return out


# -- running one command and judging it ---------------------------------------------------------------------


def tree_digest(root: Path) -> str:
    """Return a digest of every path (files, directories, links) and file's bytes under ``root``."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


class _OpenAudit:
    """Records the files opened while armed that lie under ``watched`` but under none of ``allowed``."""

    def __init__(self) -> None:
        self.armed = False
        self.watched: tuple[str, ...] = ()
        self.allowed: tuple[str, ...] = ()
        self.outside: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[object, ...]) -> None:
        if (
            not self.armed
            or event != "open"
            or not args
            or not isinstance(args[0], str | bytes | os.PathLike)
        ):
            return
        path = os.path.abspath(os.fsdecode(args[0]))
        if path.startswith(self.watched) and not path.startswith(self.allowed):
            self.outside.append(path)

    def arm(self, watched: list[Path], allowed: list[Path]) -> None:
        self.watched = tuple(str(p) + os.sep for p in watched)
        self.allowed = tuple(str(p) + os.sep for p in allowed) + tuple(str(p) for p in allowed)
        self.outside = []
        self.armed = True

    def disarm(self) -> list[str]:
        self.armed = False
        return self.outside


_AUDIT: _OpenAudit | None = None


def audit() -> _OpenAudit:
    global _AUDIT
    if _AUDIT is None:
        _AUDIT = _OpenAudit()
    return _AUDIT


@dataclass
class Violation:
    command: str
    mutant: str
    what: str
    code: int | None
    stderr: str

    def line(self) -> str:
        first = self.stderr.strip().splitlines()[0][:240] if self.stderr.strip() else "(no stderr)"
        return f"{self.command} | {self.mutant} | {self.what} | exit {self.code} | {first}"


def one_line_error(command: str, result: Result) -> bool:
    """Return whether a failure reads as the promise says: one line on stderr (or findings on stdout)."""
    lines = result.stderr.strip().splitlines()
    if (
        command in ("verify", "check", "check --deep")
        and result.code in (1, 3)
        and not lines
        and result.stdout.strip()
    ):
        return True
    if result.code == 1 and command in ("diff", "get", "check", "check --deep") and not lines:
        return True
    return len(lines) == 1


def verify_output(path: Path) -> Result:
    return run_kg(["-q", "verify", str(path)])


def parquet_rereads(path: Path) -> str | None:
    """Return why an export's output does not re-read (None: every Parquet file reads)."""
    files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
    if not files:
        return "no Parquet file in the output"
    for f in files:
        try:
            pq.read_table(f)
        except Exception as exc:  # noqa: BLE001 - any failure to re-read is a bad output
            return f"{f.name}: {type(exc).__name__}: {exc}"
    return None


def check_output(command: Command, dest: Path) -> str | None:
    """Return why ``command``'s committed output is bad, or None."""
    if not dest.exists():
        return "exit 0 and no output"
    if command.output == "parquet":
        return parquet_rereads(dest)
    done = verify_output(dest)
    if done.code != 0:
        why = " / ".join((done.stderr or done.stdout).strip().splitlines())
        return f"output fails kg verify (exit {done.code}): {why[:200]}"
    return None


COLUMNS = ("runs", "exit codes", "tracebacks", "bad exit", "messy errors", "bad outputs", "gate broken",
           "modified inputs", "leftovers", "reads outside")  # fmt: skip


@dataclass
class Tally:
    """Per command: runs, exit-code histogram, and counts of every broken promise; the violations."""

    codes: dict[str, Counter[int | None]] = field(default_factory=dict)
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    def run(self, command: str, code: int | None) -> None:
        self.codes.setdefault(command, Counter())[code] += 1
        self.counts.setdefault(command, Counter())["runs"] += 1

    def bad(self, column: str, v: Violation) -> None:
        self.counts.setdefault(v.command, Counter())[column] += 1
        self.violations.append(v)

    def table(self) -> str:
        rows = [("command", *COLUMNS)]
        for name in [c.name for c in COMMANDS] + ["generate"]:
            if name not in self.counts:
                continue
            c = self.counts[name]
            hist = " ".join(
                f"{k}:{n}"
                for k, n in sorted(self.codes[name].items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
            )
            rows.append((name, str(c["runs"]), hist, *(str(c[k]) for k in COLUMNS[2:])))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in rows]
        lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
        return "\n".join(lines)


def judge_mutant(tally: Tally, mutant: Mutant, work: Path, commands: tuple[Command, ...] = COMMANDS) -> None:
    """Run every command that applies on ``mutant`` (``verify`` first) and check every promise."""
    fixture = mutant.fixture
    pristine = fixture.path
    src = work / "input"
    out = work / "out"

    def fresh_input() -> str:
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(fixture.path, src)
        mutant.apply(src)
        return tree_digest(src)

    digest = fresh_input()
    ordered = sorted((c for c in commands if c.applies(fixture)), key=lambda c: c.name != "verify")
    rejected: bool | None = None
    verify_says = ""
    hook = audit()
    for command in ordered:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        dest = out / "dest"
        hook.arm([work, FIXTURES], [src, out, pristine])
        result = run_kg(["--no-color", "-q", *command.argv(fixture, src, dest, pristine)])
        outside = hook.disarm()
        tally.run(command.name, result.code)

        def bad(
            column: str, what: str, _r: Result = result, _c: Command = command, _v: str = verify_says
        ) -> None:
            detail = _r.stderr if _r.stderr.strip() else f"(stdout) {_r.stdout.strip()[:200]}"
            if column == "gate broken" and not _r.stderr.strip():
                detail = f"(kg verify) {_v}"
            tally.bad(column, Violation(_c.name, mutant.label, what, _r.code, detail))

        if command.name == "verify":
            rejected = result.code == 3
            findings = [ln for ln in result.stdout.splitlines() if ln.startswith("ERROR")]
            verify_says = (findings or result.stderr.strip().splitlines() or [""])[0]
        allowed = WRITER_CODES if command.writer else READER_CODES
        if "Traceback" in result.stderr:
            bad("tracebacks", "traceback on stderr")
        if not mutant.edits and result.code != 0:
            # The intact input must pass every command: a suite where everything refuses proves nothing.
            bad("bad exit", f"exit {result.code} on the intact input")
        elif result.code not in allowed:
            bad("bad exit", f"exit {result.code} not in {sorted(allowed)}")
        elif result.code != 0 and not one_line_error(command.name, result):
            bad("messy errors", f"{len(result.stderr.strip().splitlines())} lines on stderr")
        if outside:
            bad("reads outside", f"opened {sorted(set(outside))[:3]}")
        if tree_digest(src) != digest:
            bad("modified inputs", "input tree changed")
            digest = fresh_input()
        if command.output is not None:
            left = sorted(p.name for p in out.iterdir())
            if result.code != 0 and left:
                bad("leftovers", f"exit {result.code} and {left} at/beside DEST")
            elif result.code == 0 and left != ["dest"]:
                bad("leftovers", f"exit 0 and {left} beside DEST")
            if result.code == 0:
                why = check_output(command, dest)
                if why:
                    bad("bad outputs", why)
        if rejected:
            intact = (
                run_kg(["--no-color", "-q", *command.argv(fixture, pristine, dest, pristine)])
                if command.partial_read and result.code == 0
                else None
            )
            if intact is not None and result.stdout == intact.stdout:
                pass  # answered from bytes it checked, exactly as the intact input answers
            elif command.gated and result.code != 3:
                bad("gate broken", f"kg verify exits 3, {command.name} exits {result.code}")
            if command.name == "check --deep" and result.code == 0:
                bad("gate broken", "kg verify exits 3, check --deep exits 0")
    shutil.rmtree(out, ignore_errors=True)


def baseline(tally: Tally, work: Path, fixtures: tuple[Fixture, ...] = FIXTURE_SET) -> None:
    """Judge the intact inputs as mutants without damage (every command must keep its promises there too)."""
    for fixture in fixtures:
        judge_mutant(tally, Mutant(fixture, f"{fixture.name}:intact", ()), work)


def full_corpus(
    seed: int, per_fixture: int, fixtures: tuple[Fixture, ...] = FULL_FIXTURE_SET
) -> list[Mutant]:
    """Return the full-size corpus: every targeted mutant of every fixture (class names with ``Q`` and with
    ``?``), then ``per_fixture`` random ones of each."""
    out = [m for f in fixtures for m in targeted_mutants(f, ("Q", "?"))]
    return out + [m for f in fixtures for m in random_mutants(f, per_fixture, seed)]
