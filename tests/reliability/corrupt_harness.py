"""A seeded corpus of corrupt inputs and the oracle that judges kg's answer to each.

Every mutant is one intact input (a Flink savepoint, a snappy one, a kg snapshot) with one damage: a file
truncated, a bit flipped, emptied, replaced by random bytes, deleted, swapped with a sibling of its type,
replaced by another subtask's file, or an extra file added; for kg snapshots also Parquet damage whose
manifest sizes and xxh64 are fixed up (so only the data checks can catch it). Each command runs in-process
through ``keygroup_cli.cli.run`` (the real exit-code boundary) under an alarm, and its result is one of:

- ``clean``: a documented exit code (1, 3, 4, 5) with one line on stderr (``kg check`` findings on stdout);
- ``same``: exit 0 and exactly the intact input's output (damage in bytes the command never reads);
- ``undetectable``: exit 0 with a different output, and the mutant passes ``kg verify`` (its format has
  no check that covers the damaged bytes: see docs/reliability.md);
- ``crash`` (exit 70, an escaping exception or a messy error), ``hang``, ``wrong`` (exit 0, a different
  output, and ``kg verify`` rejects the input, or kg cannot read the savepoint it wrote).

Side effects are counted on every run: the input modified, a partial DEST after a failure, leftovers
(scratch or staging directories) beside DEST.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import xxhash

from keygroup_cli.cli import run
from keygroup_cli.flink.io.stream_handles import FileHandle, KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"

#: Seconds one command may run before it counts as a hang.
HANG_SECONDS = 60
#: Exit codes a corrupt input may legitimately end with (docs/reference/exit-codes.md).
DOCUMENTED = {1, 3, 4, 5}
KINDS_PER_FILE = ("truncate", "bitflip", "zero", "random", "missing", "swap", "other-subtask")
FIXUP_KINDS = ("bitflip", "truncate", "random")
COLUMNS = (
    "runs",
    "clean errors",
    "same output",
    "undetectable",
    "crashes",
    "hangs",
    "wrong outputs",
    "inputs modified",
    "partial outputs",
    "leftovers",
)


@dataclass(frozen=True)
class Corpus:
    """One intact input: where it is, its kind, and the maxParallelism a re-hashing rescale moves to."""

    name: str
    path: Path
    kind: str  # "flink" or "kg"
    new_max_parallelism: int
    to: int = 2


CI_CORPUS = (
    Corpus("flink", FIXTURES / "flink/2.3/heap-files-p3-maxp128-string", "flink", 256),
    Corpus("flink-snappy", FIXTURES / "flink/2.3/heap-snappy-files-p3-maxp128-long", "flink", 256),
    Corpus("kg", FIXTURES / "snapshots/valid", "kg", 32),
)
FULL_CORPUS = (
    *CI_CORPUS,
    Corpus("flink-rocksdb", FIXTURES / "flink/2.3/rocksdb-canonical-p4-maxp128-string", "flink", 256, 3),
    Corpus("flink-inline", FIXTURES / "flink/2.3/heap-inline-p3-maxp10-string", "flink", 20),
    Corpus(
        "flink-rocksdb-snappy",
        FIXTURES / "flink/2.3/rocksdb-canonical-snappy-p2-maxp256-string",
        "flink",
        512,
        3,
    ),
)


@dataclass(frozen=True)
class Mutant:
    """One damage to one file (or the directory) of a corpus input."""

    corpus: Corpus
    file_type: str
    relpath: str
    kind: str
    seed: int

    @property
    def label(self) -> str:
        return f"{self.corpus.name}:{self.file_type}:{self.relpath}:{self.kind}:{self.seed}"


@dataclass
class Tally:
    """Counts per command, and the labels of every bad outcome (for the failure message)."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)

    def add(
        self, command: str, outcome: str, label: str, *, modified: bool, partial: bool, leftover: bool
    ) -> None:
        c = self.counts.setdefault(command, Counter())
        c["runs"] += 1
        c[outcome] += 1
        for flag, name in (
            (modified, "inputs modified"),
            (partial, "partial outputs"),
            (leftover, "leftovers"),
        ):
            if flag:
                c[name] += 1
                self.bad.append(f"{command} {label}: {name}")
        if outcome in ("crashes", "hangs", "wrong outputs"):
            self.bad.append(f"{command} {label}: {outcome}")

    def total(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for c in self.counts.values():
            out.update(c)
        return out

    def table(self) -> str:
        rows = [("command", *COLUMNS)]
        for command, c in sorted(self.counts.items()):
            rows.append((command, *(str(c[k]) for k in COLUMNS)))
        t = self.total()
        rows.append(("total", *(str(t[k]) for k in COLUMNS)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in rows]
        lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
        return "\n".join(lines)


# -- the corpus ----------------------------------------------------------------------------------------------


def state_files(corpus: Corpus) -> dict[str, list[str]]:
    """Return file type → relative paths of the input's files of that type (sorted)."""
    if corpus.kind == "kg":
        manifest = json.loads((corpus.path / "_manifest.json").read_text())
        keyed = [f["path"] for op in manifest["operators"] for f in op.get("keyed_files", [])]
        operator = [f["path"] for op in manifest["operators"] for f in op.get("operator_files", [])]
        return {
            "manifest": ["_manifest.json"],
            "parquet-keyed": sorted(keyed),
            "parquet-operator": sorted(operator),
        }
    savepoint = read_flink_metadata(corpus.path)
    keyed, operator = set(), set()
    for op in savepoint.metadata.operators:
        for sub in op.subtasks:
            for handle, into in ((sub.managed_keyed_state, keyed), (sub.managed_operator_state, operator)):
                if isinstance(handle, KeyGroupsHandle | OperatorStateHandle):
                    name = _file_name(handle.delegate)
                    if name:
                        into.add(name)
    snappy = "snappy" in corpus.name
    out = {"_metadata": ["_metadata"]}
    if keyed:
        out["keyed-snappy" if snappy else "keyed"] = sorted(keyed)
    if operator:
        out["operator-snappy" if snappy else "operator"] = sorted(operator)
    return out


def _file_name(handle: object) -> str | None:
    if isinstance(handle, RelativeFileHandle):
        return handle.relative_path
    if isinstance(handle, FileHandle):
        return Path(handle.path).name
    return None


def mutants(corpora: tuple[Corpus, ...], seed: int, full: bool) -> Iterator[Mutant]:
    """Yield the seeded mutants: in CI one random file per type and kind, in full every file, 3 seeds each."""
    rng = random.Random(seed)
    for corpus in corpora:
        for file_type, paths in state_files(corpus).items():
            chosen = paths if full else [rng.choice(paths)]
            for relpath in chosen:
                for kind in KINDS_PER_FILE:
                    if kind in ("swap", "other-subtask") and len(paths) < 2:
                        continue
                    for _ in range(3 if full and kind in ("truncate", "bitflip", "random") else 1):
                        yield Mutant(corpus, file_type, relpath, kind, rng.randrange(1 << 30))
                if file_type.startswith("parquet"):
                    for kind in FIXUP_KINDS:
                        for _ in range(3 if full else 1):
                            yield Mutant(corpus, file_type, relpath, f"{kind}+fixup", rng.randrange(1 << 30))
        yield Mutant(corpus, "directory", "-", "extra", rng.randrange(1 << 30))


def apply(mutant: Mutant, root: Path) -> None:
    """Damage the copy of the input at ``root`` as ``mutant`` says (deterministic in its seed)."""
    rng = random.Random(mutant.seed)
    kind = mutant.kind.removesuffix("+fixup")
    if kind == "extra":
        (root / "e0f1a2b3-0000-4000-8000-000000000000").write_bytes(rng.randbytes(512))
        if mutant.corpus.kind == "kg":
            (root / "counter" / "keyed-00007.parquet").write_bytes(rng.randbytes(512))
        return
    target = root / mutant.relpath
    data = target.read_bytes()
    siblings = [p for p in state_files(mutant.corpus)[mutant.file_type] if p != mutant.relpath]
    if kind == "truncate":
        target.write_bytes(data[: rng.randrange(max(1, len(data)))])
    elif kind == "bitflip":
        buf = bytearray(data)
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
        target.write_bytes(bytes(buf))
    elif kind == "zero":
        target.write_bytes(b"")
    elif kind == "random":
        target.write_bytes(rng.randbytes(len(data)))
    elif kind == "missing":
        target.unlink()
    elif kind == "swap":
        other = root / rng.choice(siblings)
        other_data = other.read_bytes()
        other.write_bytes(data)
        target.write_bytes(other_data)
    elif kind == "other-subtask":
        target.write_bytes((root / rng.choice(siblings)).read_bytes())
    if mutant.kind.endswith("+fixup"):
        _fix_manifest(root)


def _fix_manifest(root: Path) -> None:
    """Rewrite the manifest's ``bytes`` and ``xxh64`` to match the files (a forged, consistent one)."""
    path = root / "_manifest.json"
    manifest = json.loads(path.read_text())
    for op in manifest["operators"]:
        for f in [*op.get("keyed_files", []), *op.get("operator_files", [])]:
            data = (root / f["path"]).read_bytes()
            f["bytes"] = len(data)
            f["xxh64"] = xxhash.xxh64(data).hexdigest()
    path.write_text(json.dumps(manifest, indent=2))


# -- running and judging ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    code: int | None  # None: hang; -1: an exception escaped run()
    stdout: str
    stderr: str


class _Hang(BaseException):
    pass


def _alarm(_signum: int, _frame: object) -> None:
    raise _Hang


def run_kg(argv: list[str]) -> Result:
    """Run ``kg argv`` in-process through its error boundary, under an alarm of ``HANG_SECONDS``."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_SECONDS)
    code: int | None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(["--no-color", *argv])
    except _Hang:
        code = None
    except BaseException as exc:  # noqa: BLE001 - anything escaping the boundary is a crash
        err.write(f"escaped: {type(exc).__name__}: {exc}\n")
        code = -1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return Result(code, out.getvalue(), err.getvalue())


def tree_digest(root: Path) -> str:
    """Return a digest of every file's path and bytes under ``root``."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def kg_content(path: Path) -> str:
    """Return a digest of a kg snapshot's content: operators, their settings, and every row (order-free)."""
    manifest = json.loads((path / "_manifest.json").read_text())
    h = hashlib.sha256()
    for op in sorted(manifest["operators"], key=lambda o: o["operator_id"]):
        h.update(
            repr((op["operator_id"], op["parallelism"], op["max_parallelism"], op.get("key_type"))).encode()
        )
        for files in ("keyed_files", "operator_files"):
            rows: list[tuple[object, ...]] = []
            for f in op.get(files, []):
                table = pq.read_table(path / f["path"])
                rows.extend(tuple(r.values()) for r in table.to_pylist())
            h.update(repr(sorted(rows, key=repr)).encode())
    return h.hexdigest()


def output_content(path: Path, kind: str) -> str:
    """Return the content digest of a rescale's output; a Flink savepoint is read back with kg's own reader.

    Raises:
        AssertionError: kg cannot read (or deep-verify) the savepoint it wrote.
    """
    if kind == "kg":
        return kg_content(path)
    from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
    from keygroup_cli.flink.check.verify import verify_flink

    report = verify_flink(path)
    assert report.ok, [f.message for f in report.findings]
    with tempfile.TemporaryDirectory() as scratch:
        savepoint_to_snapshot(path, Path(scratch) / "kg")
        return kg_content(Path(scratch) / "kg")


def passes_verify(path: Path, kind: str) -> bool:
    """Return whether the (mutated) input passes kg's deep verification: the format's own checks."""
    from keygroup_cli.core.errors import KgError

    try:
        if kind == "kg":
            from keygroup_cli.snapshot.verify import verify_snapshot

            return verify_snapshot(path).ok
        from keygroup_cli.flink.check.verify import verify_flink

        return verify_flink(path).ok
    except KgError:
        return False


def sizes_consistent(path: Path, kind: str) -> bool:
    """Return whether every state file the metadata names exists with the size it records.

    ``kg inspect`` and ``kg check`` (without ``--deep``) read metadata only: when the sizes agree, a
    different answer describes the files that are there, and only ``kg verify`` can tell they are damaged.
    """
    try:
        if kind == "kg":
            manifest = json.loads((path / "_manifest.json").read_text())
            files = [
                f
                for op in manifest["operators"]
                for f in (*op.get("keyed_files", []), *op.get("operator_files", []))
            ]
            return all(
                (path / f["path"]).is_file() and (path / f["path"]).stat().st_size == f["bytes"]
                for f in files
            )
        savepoint = read_flink_metadata(path)
    except Exception:  # noqa: BLE001 - unreadable metadata is not consistent
        return False
    for op in savepoint.metadata.operators:
        for sub in op.subtasks:
            for handle in (sub.managed_keyed_state, sub.managed_operator_state):
                if isinstance(handle, KeyGroupsHandle | OperatorStateHandle) and isinstance(
                    handle.delegate, RelativeFileHandle
                ):
                    f = path / handle.delegate.relative_path
                    if not f.is_file() or f.stat().st_size != handle.delegate.size:
                        return False
    return True


@dataclass(frozen=True)
class Command:
    """One kg command judged by the harness: its arguments and how its output is compared."""

    name: str
    argv: Callable[[Corpus, Path, Path], list[str]]
    writes: bool = False


COMMANDS = (
    Command("inspect", lambda c, src, _d: ["inspect", str(src)]),
    Command("check", lambda c, src, _d: ["check", str(src), "-p", str(c.to)]),
    Command("check --deep", lambda c, src, _d: ["check", str(src), "-p", str(c.to), "--deep"]),
    Command("verify", lambda c, src, _d: ["verify", str(src)]),
    Command(
        "rescale (same maxP)",
        lambda c, src, dest: [
            "-q",
            "rescale",
            str(src),
            "--to",
            str(c.to),
            "--out",
            str(dest),
            "--engine",
            "local",
        ],
        writes=True,
    ),
    Command(
        "rescale (new maxP)",
        lambda c, src, dest: [
            "-q",
            "rescale",
            str(src),
            "--to",
            str(c.to),
            "-m",
            str(c.new_max_parallelism),
            "--out",
            str(dest),
            "--engine",
            "local",
        ],
        writes=True,
    ),
)


def _fingerprint(command: Command, corpus: Corpus, result: Result, dest: Path) -> str:
    if not command.writes:
        return result.stdout
    try:
        return output_content(dest, corpus.kind)
    except Exception as exc:  # noqa: BLE001 - an output kg cannot read is a wrong output, whatever the error
        return f"unreadable output: {type(exc).__name__}: {exc}"


def judge(
    tally: Tally,
    commands: tuple[Command, ...],
    corpora: tuple[Corpus, ...],
    seed: int,
    full: bool,
    work: Path,
) -> None:
    """Run every command on every mutant and add the outcomes to ``tally``."""
    baselines: dict[tuple[str, str], str] = {}
    src = work / "input"
    for corpus in corpora:
        for command in commands:
            shutil.rmtree(src, ignore_errors=True)
            shutil.copytree(corpus.path, src)
            dest_parent = work / "out"
            shutil.rmtree(dest_parent, ignore_errors=True)
            dest_parent.mkdir()
            result = run_kg(command.argv(corpus, src, dest_parent / "dest"))
            # The intact input must pass every command (a baseline failure would hide wrong outputs).
            baselines[(corpus.name, command.name)] = (
                _fingerprint(command, corpus, result, dest_parent / "dest")
                if result.code == 0
                else f"baseline failed: exit {result.code}: {result.stderr.strip()}"
            )
    for mutant in mutants(corpora, seed, full):
        verdict: bool | None = None
        for command in commands:
            shutil.rmtree(src, ignore_errors=True)
            shutil.copytree(mutant.corpus.path, src)
            apply(mutant, src)
            before = tree_digest(src)
            dest_parent = work / "out"
            shutil.rmtree(dest_parent, ignore_errors=True)
            dest_parent.mkdir()
            dest = dest_parent / "dest"
            result = run_kg(command.argv(mutant.corpus, src, dest))
            modified = tree_digest(src) != before
            left = {p.name for p in dest_parent.iterdir()}
            partial = result.code != 0 and dest.exists()
            leftover = bool(left - {"dest"})
            baseline = baselines[(mutant.corpus.name, command.name)]
            if result.code is None:
                outcome = "hangs"
            elif result.code == 0 or (
                command.name.startswith("check") and result.code == 1 and baseline_is_fail(baseline)
            ):
                fingerprint = _fingerprint(command, mutant.corpus, result, dest)
                if fingerprint == baseline:
                    outcome = "same output"
                else:
                    if command.name in ("inspect", "check"):
                        detectable = not sizes_consistent(src, mutant.corpus.kind)
                    else:
                        if verdict is None:
                            verdict = passes_verify(src, mutant.corpus.kind)
                        detectable = not verdict or fingerprint.startswith("unreadable output")
                    outcome = "wrong outputs" if detectable else "undetectable"
                    if outcome == "wrong outputs":
                        tally.bad.append(f"  {command.name} {mutant.label}: {fingerprint[:200]}")
            elif result.code in DOCUMENTED and (
                (result.code == 1 and command.name.startswith("check"))
                or (result.code == 3 and command.name == "verify" and "INVALID" in result.stdout)
                # kg check reports damage as findings on stdout with exit 3, as verify does.
                or (result.code == 3 and command.name.startswith("check") and "FAILED" in result.stdout)
                or len(result.stderr.strip().splitlines()) == 1
            ):
                outcome = "clean errors"
            else:
                outcome = "crashes"
                tally.bad.append(
                    f"  {command.name} {mutant.label}: exit {result.code}: {result.stderr.strip()[:300]}"
                )
            tally.add(
                command.name, outcome, mutant.label, modified=modified, partial=partial, leftover=leftover
            )


def baseline_is_fail(baseline: str) -> bool:
    """Return whether the intact input's ``kg check`` output is itself a failure (never for the corpus)."""
    return "FAILED" in baseline


def full_run() -> bool:
    """Return whether ``KG_RELIABILITY_FULL`` asks for the full-size corpus."""
    return os.environ.get("KG_RELIABILITY_FULL", "").strip().lower() in {"1", "true", "yes", "on"}


# -- targeted mutants: enums, offsets and lengths of every Flink layout -----------------------------------
#
# Random damage seldom lands in the few bytes that name an enum or feed an offset, yet those are what a
# reader turns into a dict key, a seek or an allocation. These mutants hit them on purpose, in one savepoint
# or checkpoint of every layout kg reads, and every one must be refused: exit 3 (or 4), one line.

FLINK_23 = FIXTURES / "flink/2.3"
_CHK = "0000000000006b670000000000007569"


@dataclass(frozen=True)
class Layout:
    """One Flink input of a layout: the directory copied whole, and the savepoint or checkpoint in it."""

    name: str
    root: Path
    input: str = "."
    to: int = 2
    new_max_parallelism: int = 256


LAYOUTS = (
    Layout("heap canonical, files", FLINK_23 / "heap-files-p3-maxp10-long"),
    Layout("heap canonical, inline", FLINK_23 / "heap-inline-p4-maxp10-string"),
    Layout("heap canonical, snappy", FLINK_23 / "heap-snappy-files-p3-maxp128-long"),
    Layout("heap canonical, uid job", FLINK_23 / "uid-heap-canonical-p3"),
    Layout("rocksdb canonical", FLINK_23 / "uid-rocksdb-canonical-p3"),
    Layout("heap NATIVE", FLINK_23 / "uid-heap-native-p3"),
    Layout("rocksdb NATIVE", FLINK_23 / "uid-rocksdb-native-p3"),
    Layout("heap checkpoint", FLINK_23 / "uid-heap-checkpoint-p3", f"{_CHK}/chk-2"),
    Layout("rocksdb incremental checkpoint", FLINK_23 / "uid-rocksdb-incremental-p3", f"{_CHK}/chk-3"),
)

#: ``OperatorStateHandle.Mode`` names, as ``writeUTF`` writes them into operator-state headers.
MODE_NAMES = ("SPLIT_DISTRIBUTE", "UNION", "BROADCAST")
#: How a flip changes a big-endian integer field: (byte index, xor mask) for int64 and int32 fields.
FIELD_FLIPS = {
    8: {"sign": (0, 0x80), "huge": (3, 0x01), "shift": (7, 0x01)},
    4: {"sign": (0, 0x80), "huge": (1, 0x01), "shift": (3, 0x01)},
    1: {"ordinal": (0, 0x01), "ordinal+2": (0, 0x02)},
}


@dataclass(frozen=True)
class Targeted:
    """One flipped byte at a known field of a layout's file (``relpath`` is relative to its root)."""

    layout: Layout
    relpath: str
    position: int
    xor: int
    field: str
    variant: str

    @property
    def label(self) -> str:
        return (
            f"{self.layout.name}:{self.relpath}@{self.position}^{self.xor:#04x}:{self.field}:{self.variant}"
        )


def _utf(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw


def _find_all(data: bytes, needle: bytes) -> list[int]:
    found, start = [], 0
    while (i := data.find(needle, start)) >= 0:
        found.append(i)
        start = i + 1
    return found


def _state_files(root: Path) -> list[Path]:
    return [
        p for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith((".json", ".md", ".sh"))
    ]


def _mode_string_fields(layout: Layout) -> list[tuple[str, str, int, int]]:
    """Return ``(file, mode name, position, length)`` of every distribution-mode string of the layout."""
    out = []
    for path in _state_files(layout.root):
        data = path.read_bytes()
        for name in MODE_NAMES:
            for at in _find_all(data, _utf(name)):
                out.append((str(path.relative_to(layout.root)), name, at + 2, len(name)))
    return out


def _delimitable(header: object, entry_name: str) -> bool:
    """Return whether kg can tell where each element of the operator state ``entry_name`` ends."""
    from keygroup_cli.flink.operator.codec import BYTE_ARRAY_SERIALIZER_SNAPSHOT
    from keygroup_cli.flink.types.serializers import FIXED_SIZES, STRING_SERIALIZER_SNAPSHOT

    known = {*FIXED_SIZES, STRING_SERIALIZER_SNAPSHOT, BYTE_ARRAY_SERIALIZER_SNAPSHOT}
    for info in getattr(header, "states", None) or ():
        if info.name == entry_name:
            value = info.serializer("VALUE_SERIALIZER")
            return value is not None and value.class_name in known
    for info in getattr(header, "broadcast_states", None) or ():
        if info.name == entry_name:
            parts = [info.serializer("KEY_SERIALIZER"), info.serializer("VALUE_SERIALIZER")]
            return all(
                p is not None and p.class_name in known - {BYTE_ARRAY_SERIALIZER_SNAPSHOT} for p in parts
            )
    return False


def _operator_header(savepoint: object, handle: OperatorStateHandle) -> object:
    from keygroup_cli.flink.io.stream_source import StreamSource
    from keygroup_cli.flink.operator.header import operator_header_end, read_operator_header

    with StreamSource(handle.delegate, savepoint.directory) as src:  # type: ignore[attr-defined]
        offsets = [o for e in handle.states for o in e.offsets]
        first = min([o for o in offsets if o > 0] or [src.size])
        prefix = src.read(0, first)
        end = operator_header_end(prefix, offsets, src.size)
        return read_operator_header(prefix[: end or first], src.source, end)


def _stream_size_fields(handle: object, data: bytes) -> list[tuple[str, int, int]]:
    """Return ``(field, position, width)`` of a stream handle's recorded size (files) or length (inline)."""
    from keygroup_cli.flink.io.stream_handles import ByteStreamHandle

    if isinstance(handle, RelativeFileHandle):
        needle = _utf(handle.relative_path) + handle.size.to_bytes(8, "big", signed=True)
        return [("state file size", at + len(needle) - 8, 8) for at in _find_all(data, needle)]
    if isinstance(handle, FileHandle):
        needle = b"\x02" + handle.size.to_bytes(8, "big", signed=True) + _utf(handle.path)
        return [("state file size", at + 1, 8) for at in _find_all(data, needle)]
    if isinstance(handle, ByteStreamHandle):
        needle = _utf(handle.handle_name) + len(handle.data).to_bytes(4, "big")
        return [("inline state length", at + len(needle) - 4, 4) for at in _find_all(data, needle)]
    return []


def _metadata_fields(layout: Layout) -> list[tuple[str, int, int, bool]]:
    """Return ``(field, position, width, shiftable)`` of the offset, length and enum fields in ``_metadata``.

    ``shiftable``: an off-by-one of the field is detectable (an operator-state element offset is, only where
    kg can delimit the element; every other field always is).
    """
    import struct as _struct

    from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle

    savepoint = read_flink_metadata(layout.root / layout.input)
    data = (layout.root / layout.input / "_metadata").read_bytes()
    fields: dict[tuple[str, int], tuple[int, bool]] = {}

    def add(name: str, at: int, width: int, shiftable: bool = True) -> None:
        fields.setdefault((name, at), (width, shiftable))

    for op in savepoint.metadata.operators:
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, KeyGroupsHandle):
                n = len(keyed.offsets)
                needle = _struct.pack(f">ii{n}q", keyed.key_group_start, n, *keyed.offsets)
                for at in _find_all(data, needle):
                    for i, off in enumerate(keyed.offsets):
                        if off:
                            add("key-group offset", at + 8 + 8 * i, 8)
                for name, at, width in _stream_size_fields(keyed.delegate, data):
                    add(name, at, width)
            elif isinstance(keyed, IncrementalKeyedHandle):
                needle = _utf(keyed.backend_identifier) + _struct.pack(
                    ">ii", keyed.key_group_start, keyed.num_key_groups
                )
                for at in _find_all(data, needle):
                    add("key-group range start", at + len(needle) - 8, 4)
                for local in (*keyed.shared, *keyed.private):
                    for name, at, width in _stream_size_fields(local.handle, data):
                        add(name, at, width)
            handle = sub.managed_operator_state
            if isinstance(handle, OperatorStateHandle):
                header = _operator_header(savepoint, handle)
                for entry in handle.states:
                    n = len(entry.offsets)
                    needle = _utf(entry.name) + _struct.pack(f">bi{n}q", entry.mode, n, *entry.offsets)
                    for at in _find_all(data, needle):
                        add("distribution mode ordinal", at + len(_utf(entry.name)), 1)
                        for i in range(n):
                            add(
                                "operator element offset",
                                at + len(_utf(entry.name)) + 5 + 8 * i,
                                8,
                                _delimitable(header, entry.name),
                            )
                for name, at, width in _stream_size_fields(handle.delegate, data):
                    add(name, at, width)
    return [(name, at, width, shiftable) for (name, at), (width, shiftable) in sorted(fields.items())]


def targeted_mutants(layouts: tuple[Layout, ...], seed: int, full: bool) -> list[Targeted]:
    """Return the targeted mutants: in CI one per mode name and field kind per layout, in full every one.

    Mode strings: one byte inside ``SPLIT_DISTRIBUTE`` / ``UNION`` / ``BROADCAST`` wherever a header holds
    it (operator-state files, or ``_metadata`` for inline state), its letter's case flipped (the issue's
    ``SpLIT_DISTRIBUTE``) or bit 0 flipped; full size flips every byte of every occurrence both ways.
    Fields of ``_metadata``: key-group and operator-state element offsets, state file sizes, inline state
    lengths, a RocksDB handle's key-group range and the handle's distribution-mode ordinal, each with its
    sign bit, a high bit and its lowest bit flipped (an ordinal: +-1 and +-2).
    """
    rng = random.Random(seed)
    out: list[Targeted] = []
    for layout in layouts:
        strings = _mode_string_fields(layout)
        for name in MODE_NAMES:
            found = [s for s in strings if s[1] == name]
            chosen = found if full else ([rng.choice(found)] if found else [])
            for relpath, _name, at, length in chosen:
                chars = range(length) if full else [rng.randrange(length)]
                for i in chars:
                    masks = (0x20, 0x01) if full else (rng.choice((0x20, 0x01)),)
                    for mask in masks:
                        out.append(
                            Targeted(layout, relpath, at + i, mask, f"mode string {name}", f"char {i}")
                        )
        metadata = str(Path(layout.input) / "_metadata")
        fields = _metadata_fields(layout)
        for kind in sorted({f[0] for f in fields}):
            found = [f for f in fields if f[0] == kind]
            for name, at, width, shiftable in found if full else [rng.choice(found)]:
                variants = [v for v in FIELD_FLIPS[width] if shiftable or v != "shift"]
                for variant in variants if full else [rng.choice(variants)]:
                    index, mask = FIELD_FLIPS[width][variant]
                    out.append(Targeted(layout, metadata, at + index, mask, name, variant))
    return out


def judge_targeted(tally: Tally, mutants: list[Targeted], work: Path) -> None:
    """Run every command on every targeted mutant; only a refusal (or an untouched answer) is right.

    ``verify``, ``rescale`` and ``rescale -m``: exit 3 or 4 with one line on stderr (``kg verify``'s
    findings on stdout), the input unchanged, no DEST, nothing left beside it; exit 0 is a wrong output.
    ``inspect`` and ``check`` read ``_metadata`` and a few headers (``check`` stats the files), so they
    may also end 0 (``check``: 1 with findings): with the intact input's output ("same output"), or with
    another one ("undetectable": what ``_metadata`` records about a file they never open, or a header
    that still parses when its end moves by a byte). Every run is checked for a traceback, the input
    modified, a partial DEST and leftovers.
    """
    src_root = work / "input"
    baselines: dict[tuple[str, str], Result] = {}
    for mutant in mutants:
        layout = mutant.layout
        corpus = Corpus(
            layout.name, layout.root / layout.input, "flink", layout.new_max_parallelism, layout.to
        )
        for command in COMMANDS:
            if command.name == "check --deep":
                continue  # kg verify's findings plus kg check's: judged as verify
            src = src_root / layout.input
            dest_parent = work / "out"
            key = (layout.name, command.name)
            if key not in baselines:
                shutil.rmtree(src_root, ignore_errors=True)
                shutil.copytree(layout.root, src_root)
                shutil.rmtree(dest_parent, ignore_errors=True)
                dest_parent.mkdir()
                baselines[key] = run_kg(command.argv(corpus, src, dest_parent / "dest"))
                assert baselines[key].code == 0, (key, baselines[key].stderr)
            shutil.rmtree(src_root, ignore_errors=True)
            shutil.copytree(layout.root, src_root)
            target = src_root / mutant.relpath
            data = bytearray(target.read_bytes())
            data[mutant.position] ^= mutant.xor
            target.write_bytes(bytes(data))
            before = tree_digest(src_root)
            shutil.rmtree(dest_parent, ignore_errors=True)
            dest_parent.mkdir()
            dest = dest_parent / "dest"
            result = run_kg(command.argv(corpus, src, dest))
            modified = tree_digest(src_root) != before
            leftover = bool({p.name for p in dest_parent.iterdir()} - {"dest"})
            one_line = len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
            refused = result.code in (3, 4) and (
                one_line
                or (command.name == "verify" and result.code == 3 and "INVALID" in result.stdout)
                or (command.name.startswith("check") and result.code == 3 and "FAILED" in result.stdout)
            )
            if result.code is None:
                outcome = "hangs"
            elif refused or (
                command.name == "check" and result.code == 1 and "Traceback" not in result.stderr
            ):
                outcome = "clean errors"
            elif result.code == 0 and command.name in ("inspect", "check"):
                # They show what _metadata records and the headers they read: a size of a file they do
                # not open, or a header end that still parses, reaches their output unchecked.
                same = result.stdout == baselines[key].stdout
                outcome = "same output" if same else "undetectable"
            elif result.code == 0:
                outcome = "wrong outputs"
            else:
                outcome = "crashes"
            if outcome not in ("clean errors", "same output"):
                tally.bad.append(
                    f"  {command.name} {mutant.label}: exit {result.code}: {result.stderr.strip()[:300]}"
                )
            tally.add(
                command.name,
                outcome,
                mutant.label,
                modified=modified,
                partial=result.code != 0 and dest.exists(),
                leftover=leftover,
            )
