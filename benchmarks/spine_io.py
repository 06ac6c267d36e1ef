"""Benchmark: what ``kg rescale`` and ``kg inspect`` read and write, on local disk and over S3 (issue #21).

Runs the commands of any kg checkout (``--kg DIR``, put first on ``PYTHONPATH``; default: this one) in
fresh interpreters of this Python, against the 2M-key ``BenchSavepointGen`` savepoint (real Flink 2.3:
parallelism 3, maxParallelism 128, HashMap backend, 205.6 MB in 3 keyed files; generated with Flink from
the apache-flink-libraries wheel on first use, then cached as ``WORK/savepoint-<keys>``), and reports for

- ``kg rescale SP --to 4 --out DEST --engine local`` (maxParallelism kept: key-group blocks copied);
- the same with ``-m 1024`` (maxParallelism 128 -> 1024: every entry re-hashed);
- ``kg inspect SP``;

1. **wall**: process wall (interpreter start and imports included), best of ``--runs`` (default 3) fresh
   processes, on local disk and over S3;
2. **local I/O**, from one more run under ``strace -f`` (no kg name is involved, so any checkout can be
   measured): per input file (``_metadata`` and each state file) the successful opens, path lookups
   (stat), read calls and bytes read (``x size``: how many times the file's bytes were read); for the
   output, ``_metadata`` and the state files (opens for writing and reading, bytes written and read); and
   scratch files (spills, downloads);
3. **S3 requests**: the same commands with SP uploaded to moto's S3 server on 127.0.0.1 (and DEST on it
   too), counted by the server: every request is logged by a WSGI wrapper around moto's application (method,
   key, query, Range header, status, bytes) and classified as HEAD, LIST, ranged GET, whole GET, PUT,
   multipart (create, part, complete), DELETE; per input object: GETs, HEADs and bytes fetched. The counts
   are those of the first timed run (the report says when later runs differed).

Without strace, the local columns fall back to Python-level opens (``sys.addaudithook``): files opened
by pyarrow's C++ code are then missing. No assertion: the figures go to docs/performance.md.

Usage (nice: the machine is shared). A whole run takes about 2 minutes on 2 cores, plus 10 s to generate
the savepoint once; ``--kg`` may be a ``git worktree`` of any commit, to measure before and after:

    nice -n 10 .venv/bin/python benchmarks/spine_io.py --kg /path/to/kg-checkout --work /path/to/cache \\
        [--keys 2000000] [--savepoint DIR] [--runs 3] [--to 4] [-m 1024] [--no-s3] [--no-local] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "bench"
INPUT_PREFIX = "savepoints/sp"

# -- the commands ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One kg command line; ``{src}`` and ``{dest}`` are filled in per run."""

    name: str
    argv: tuple[str, ...]

    def args(self, src: str, dest: str) -> list[str]:
        return [a.format(src=src, dest=dest) for a in self.argv]

    @property
    def writes(self) -> bool:
        return "{dest}" in self.argv


def commands(to: int, max_p: int) -> list[Command]:
    rescale = ("rescale", "{src}", "--to", str(to), "--out", "{dest}", "--engine", "local", "-q")
    return [
        Command(f"rescale 3->{to} (maxP kept)", rescale),
        Command(f"rescale 3->{to}, maxP 128->{max_p}", (*rescale, "-m", str(max_p))),
        Command("inspect", ("inspect", "{src}")),
    ]


def kg_env(checkout: Path, scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(checkout), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["KG_SCRATCH_DIR"] = str(scratch)
    # `python -m` and `-c` put the working directory first on sys.path: kg's children run in SCRATCH (see
    # run_kg), and PYTHONSAFEPATH keeps it off sys.path too, so only the checkout provides keygroup_cli.
    env["PYTHONSAFEPATH"] = "1"
    env.update(extra or {})
    return env


def run_kg(argv: list[str], env: dict[str, str], prefix: Iterable[str] = ()) -> float:
    """Run ``python -m keygroup_cli ARGV`` in a fresh process; return its wall; fail on a non-zero exit."""
    start = time.perf_counter()
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "keygroup_cli", *argv],
        env=env,
        cwd=env["KG_SCRATCH_DIR"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"kg {' '.join(argv)} failed ({done.returncode}):\n{done.stderr.decode()[-3000:]}")
    return wall


def describe_checkout(checkout: Path) -> dict[str, str]:
    probe = subprocess.run(
        [sys.executable, "-c", "import keygroup_cli; print(keygroup_cli.__file__)"],
        env=kg_env(checkout, Path(tempfile.gettempdir())),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    )
    imported = Path(probe.stdout.strip()).resolve()
    if checkout.resolve() not in imported.parents:
        raise SystemExit(f"kg is imported from {imported}, not from the checkout {checkout}")

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, check=False)
        return out.stdout.strip()

    dirty = git("status", "--porcelain", "--", "keygroup_cli")
    return {
        "checkout": str(checkout),
        "commit": git("rev-parse", "--short", "HEAD") + (" (dirty)" if dirty else ""),
    }


# -- the savepoint -----------------------------------------------------------------------------------------


def savepoint_for(keys: int, work: Path) -> Path:
    """Return ``WORK/savepoint-<keys>``, generated first with Flink (BenchSavepointGen) when missing."""
    path = work / f"savepoint-{keys}"
    if path.exists():
        return path
    env = dict(os.environ)
    # build.sh finds the Flink jars with `python3 -c "import pyflink"`: this interpreter's.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    build = subprocess.run(
        ["bash", str(ROOT / "fixtures/java/build.sh")], capture_output=True, text=True, env=env, check=False
    )
    if build.returncode != 0:
        raise SystemExit(f"fixtures/java/build.sh failed ({build.returncode}):\n{build.stderr[-3000:]}")
    partial = work / f"savepoint-{keys}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    print(f"generating a {keys}-key savepoint with Flink into {path} ...", file=sys.stderr)
    cp = build.stdout.strip().splitlines()[-1]
    gen = ["java", "-Xmx4g", "-cp", cp, "kg.fixtures.BenchSavepointGen", str(partial), "--keys", str(keys)]
    done = subprocess.run(
        [*gen, "--payload-bytes", "24"], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"BenchSavepointGen failed ({done.returncode}):\n{done.stderr[-3000:]}")
    partial.rename(path)
    return path


def files_of(directory: Path) -> dict[str, int]:
    return {
        p.relative_to(directory).as_posix(): p.stat().st_size
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


# -- local I/O: strace ------------------------------------------------------------------------------------

TRACED = (
    "?open,openat,?openat2,read,pread64,readv,preadv,?preadv2,write,pwrite64,writev,pwritev,?pwritev2,"
    "mmap,sendfile,?copy_file_range,?stat,?lstat,?newfstatat,?statx"
)
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+)(?:<(.*)>)?")
_FD = re.compile(r"\s*(-?\d+)<(.*?)>$")
_READS = {"read", "pread64", "readv", "preadv", "preadv2"}
_WRITES = {"write", "pwrite64", "writev", "pwritev", "pwritev2"}
_STATS = {"stat", "lstat", "newfstatat", "statx"}


@dataclass
class FileIO:
    """What one process did to one file."""

    opens_read: int = 0
    opens_write: int = 0
    lookups: int = 0
    reads: int = 0
    read_bytes: int = 0
    writes: int = 0
    written_bytes: int = 0
    mmaps: int = 0

    def add(self, other: FileIO) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _split_args(text: str) -> list[str]:
    """Split a strace argument list at top-level commas (strings, braces and brackets kept whole)."""
    parts, depth, quoted, current = [], 0, False, []
    i = 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "\\":
                current.append(text[i : i + 2])
                i += 2
                continue
            quoted = ch != '"'
        elif ch == '"':
            quoted = True
        elif ch in "{[<(":
            depth += 1
        elif ch in "}]>)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    parts.append("".join(current).strip())
    return parts


def _fd_path(arg: str) -> str | None:
    match = _FD.match(arg)
    return match.group(2) if match else None


def _lookup_path(dirfd: str, path: str) -> str | None:
    """Absolute path of a lookup by name; ``dirfd`` as strace -y prints it (``AT_FDCWD</cwd>``)."""
    if len(path) < 3 or not (path.startswith('"') and path.endswith('"')):
        return None  # "" is an fstat through AT_EMPTY_PATH, not a lookup by name
    name = path[1:-1]
    base = dirfd.partition("<")[2].rpartition(">")[0]
    return os.path.normpath(os.path.join(base or os.getcwd(), name))


def parse_strace(lines: Iterable[str]) -> dict[str, FileIO]:
    """Per absolute path: opens, lookups, reads and writes of one strace -ff -y output file."""
    files: dict[str, FileIO] = collections.defaultdict(FileIO)
    for line in lines:
        match = _CALL.match(line)
        if not match:
            continue
        call, raw, result, result_path = match.groups()
        ok = not result.startswith("-")
        args = _split_args(raw)
        if call in ("open", "openat", "openat2"):
            if ok and result_path and "O_DIRECTORY" not in raw:
                flags = args[1] if call == "open" else args[2]
                io = files[result_path]
                if "O_WRONLY" in flags or "O_RDWR" in flags:
                    io.opens_write += 1
                else:
                    io.opens_read += 1
            elif not ok:
                where = _lookup_path("", args[0]) if call == "open" else _lookup_path(args[0], args[1])
                if where:
                    files[where].lookups += 1
        elif call in _STATS:
            by_cwd = call in ("stat", "lstat")
            where = _lookup_path("", args[0]) if by_cwd else _lookup_path(args[0], args[1])
            if where:
                files[where].lookups += 1
        elif not ok:
            continue
        elif call in _READS or call in _WRITES:
            path = _fd_path(args[0])
            if path:
                io = files[path]
                if call in _READS:
                    io.reads += 1
                    io.read_bytes += int(result)
                else:
                    io.writes += 1
                    io.written_bytes += int(result)
        elif call == "sendfile" or call == "copy_file_range":
            out_path, in_path = (args[0], args[1]) if call == "sendfile" else (args[2], args[0])
            source, target = _fd_path(in_path), _fd_path(out_path)
            if source:
                files[source].reads += 1
                files[source].read_bytes += int(result)
            if target:
                files[target].writes += 1
                files[target].written_bytes += int(result)
        elif call == "mmap" and len(args) > 4:
            path = _fd_path(args[4])
            if path:
                files[path].mmaps += 1
    return files


def trace_run(argv: list[str], env: dict[str, str], trace_dir: Path) -> tuple[float, dict[str, FileIO]]:
    """Run kg once under ``strace -ff``; return the wall and the I/O of all its threads, per path."""
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir(parents=True)
    prefix = ["strace", "-ff", "-qq", "-y", "-s", "0", "-e", "signal=none", "-e", f"trace={TRACED}"]
    wall = run_kg(argv, env, [*prefix, "-o", str(trace_dir / "trace")])
    total: dict[str, FileIO] = collections.defaultdict(FileIO)
    for part in sorted(trace_dir.iterdir()):
        with open(part, errors="replace") as lines:
            for path, io in parse_strace(lines).items():
                total[path].add(io)
    shutil.rmtree(trace_dir, ignore_errors=True)
    return wall, dict(total)


_AUDIT = """\
import collections, json, os, runpy, sys
opens = collections.Counter()
def hook(event, args):
    if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    mode = args[1] if isinstance(args[1], str) else ""
    flags = args[2] if isinstance(args[2], int) else 0
    write = any(c in mode for c in "wax+") or bool(flags & (os.O_WRONLY | os.O_RDWR))
    opens[(os.path.abspath(os.fsdecode(args[0])), write)] += 1
sys.addaudithook(hook)
sys.argv = ["kg", *sys.argv[2:]]
try:
    runpy.run_module("keygroup_cli", run_name="__main__", alter_sys=True)
finally:
    with open(LOG, "w") as out:
        json.dump([[p, w, n] for (p, w), n in opens.items()], out)
"""


def audit_run(argv: list[str], env: dict[str, str], log: Path) -> tuple[float, dict[str, FileIO]]:
    """Without strace: Python-level opens only (``sys.addaudithook``), per absolute path."""
    code = _AUDIT.replace("LOG", repr(str(log)))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, "kg", *argv],
        env=env,
        cwd=env["KG_SCRATCH_DIR"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"kg {' '.join(argv)} failed ({done.returncode}):\n{done.stderr.decode()[-3000:]}")
    files: dict[str, FileIO] = collections.defaultdict(FileIO)
    for path, write, count in json.loads(log.read_text()):
        io = files[os.path.abspath(path)]
        if write:
            io.opens_write += count
        else:
            io.opens_read += count
    return wall, dict(files)


@dataclass
class LocalRow:
    what: str
    size: int | None
    io: FileIO
    files: int = 1
    most_opens: int = 0


def local_rows(files: dict[str, FileIO], source: Path, run_dir: Path, out_names: set[str]) -> list[LocalRow]:
    """Input files one by one; the output's ``_metadata``, its state files and scratch files in sums."""
    source = source.resolve()
    run_dir = run_dir.resolve()
    sizes = files_of(source)
    inputs = {name: FileIO() for name in sizes}
    out_meta, out_state, scratch = FileIO(), FileIO(), FileIO()
    out_files: set[str] = set()
    scratch_files: set[str] = set()
    most = 0
    for raw, io in files.items():
        path = Path(raw)
        if source in path.parents:
            name = path.relative_to(source).as_posix()
            inputs.setdefault(name, FileIO()).add(io)
        elif run_dir in path.parents:
            if path.name == "_metadata":
                out_meta.add(io)
            elif path.name in out_names:
                out_state.add(io)
                out_files.add(path.name)
                most = max(most, io.opens_read + io.opens_write)
            else:
                scratch.add(io)
                scratch_files.add(raw)
    ordered = sorted(inputs.items(), key=_input_order)
    rows = [LocalRow(f"in `{_short(n)}`", sizes.get(n), io) for n, io in ordered]
    if out_names:
        rows.append(LocalRow("out `_metadata`", None, out_meta))
        rows.append(LocalRow("out state files", None, out_state, len(out_files), most))
    if scratch_files:
        rows.append(LocalRow("scratch files", None, scratch, len(scratch_files)))
    return rows


def _short(name: str) -> str:
    """A state file's name cut to 8 characters (Flink names them by UUID); other names whole."""
    return name[:8] + "…" if len(name) > 20 else name


def _input_order(item: tuple[str, Any]) -> tuple[int, str]:
    return (0 if item[0] == "_metadata" else 1, item[0])


# -- S3: moto's server with a request log ------------------------------------------------------------------


def serve_s3(port: int, log: Path) -> None:
    """Run moto's S3 application on 127.0.0.1:PORT, logging one JSON line per request to LOG."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    sink = open(log, "a", buffering=1)  # noqa: SIM115  (open for the server's life)

    def logged(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        status: list[str] = []

        def start(code: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            status.append(code)
            return start_response(code, headers, *exc)

        sent = 0
        try:
            for chunk in app(environ, start):
                sent += len(chunk)
                yield chunk
        finally:
            record = {
                "method": environ["REQUEST_METHOD"],
                "path": environ.get("PATH_INFO", ""),
                "query": environ.get("QUERY_STRING", ""),
                "range": environ.get("HTTP_RANGE"),
                "copy": bool(environ.get("HTTP_X_AMZ_COPY_SOURCE")),
                "status": int(status[0].split()[0]) if status else 0,
                "bytes_out": sent,
                "bytes_in": int(
                    environ.get("HTTP_X_AMZ_DECODED_CONTENT_LENGTH") or environ.get("CONTENT_LENGTH") or 0
                ),
            }
            sink.write(json.dumps(record) + "\n")

    make_server("127.0.0.1", port, logged, threaded=True, request_handler=MotoRequestHandler).serve_forever()


@dataclass
class S3Server:
    proc: subprocess.Popen[bytes]
    endpoint: str
    log: Path

    @classmethod
    def start(cls, work: Path) -> S3Server:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        log = work / "s3-requests.jsonl"
        log.write_text("")
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-s3", str(port), str(log)],
            stdout=subprocess.DEVNULL,
            stderr=open(work / "s3-server.err", "wb"),  # noqa: SIM115
        )
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                return cls(proc, endpoint, log)
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise SystemExit(  # noqa: B904  (the server's own error is the cause)
                        f"the S3 server did not start: {(work / 's3-server.err').read_text()[-2000:]}"
                    )
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def fs(self) -> Any:
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key="bench",
            secret_key="bench",
            endpoint_override=self.endpoint,
            region="us-east-1",
            allow_bucket_creation=True,
        )

    def upload(self, local: Path, key_prefix: str) -> None:
        fs = self.fs()
        fs.create_dir(BUCKET)
        for name in files_of(local):
            with (
                open(local / name, "rb") as src,
                fs.open_output_stream(f"{BUCKET}/{key_prefix}/{name}") as out,
            ):
                shutil.copyfileobj(src, out, 8 << 20)

    def delete(self, key_prefix: str) -> None:
        self.fs().delete_dir(f"{BUCKET}/{key_prefix}")

    def mark(self) -> int:
        return len(self.log.read_bytes().splitlines())

    def requests_since(self, mark: int) -> list[dict[str, Any]]:
        # The server logs a request once it has sent the response's last byte: wait until the log is still.
        lines: list[bytes] | None = None
        for _ in range(50):
            now = self.log.read_bytes().splitlines()
            if lines is not None and len(now) == len(lines):
                break
            lines = now
            time.sleep(0.2)
        assert lines is not None
        return [json.loads(line) for line in lines[mark:] if b"/moto-api" not in line]


LIST_PARAMETERS = {
    "list-type",
    "prefix",
    "delimiter",
    "max-keys",
    "continuation-token",
    "encoding-type",
    "marker",
    "start-after",
    "fetch-owner",
}


def operation(request: dict[str, Any]) -> str:
    """S3 operation of one logged request (path-style addressing: /bucket/key)."""
    method, query = str(request["method"]), str(request["query"])
    _, _, key = request["path"].lstrip("/").partition("/")
    params = {p.split("=", 1)[0] for p in query.split("&") if p}
    if not key:
        if method == "GET":
            return "LIST" if not params - LIST_PARAMETERS else "GET bucket"
        if method == "POST" and "delete" in params:
            return "DELETE (batch)"
        return f"{method} bucket"
    if method == "GET":
        return "GET ranged" if request["range"] else "GET whole"
    if method == "PUT":
        if "partNumber" in params:
            return "multipart part"
        return "COPY" if request["copy"] else "PUT"
    if method == "POST":
        return "multipart create" if "uploads" in params else "multipart complete"
    if method == "DELETE":
        return "multipart abort" if "uploadId" in params else "DELETE"
    return method


OPERATIONS = (
    "HEAD",
    "LIST",
    "GET ranged",
    "GET whole",
    "PUT",
    "multipart create",
    "multipart part",
    "multipart complete",
    "COPY",
    "DELETE",
    "DELETE (batch)",
)


@dataclass
class S3Counts:
    total: int = 0
    by_operation: collections.Counter[str] = field(default_factory=collections.Counter)
    bytes_fetched: int = 0
    bytes_sent: int = 0
    # per input object (relative name): GETs, HEADs, bytes fetched
    inputs: dict[str, collections.Counter[str]] = field(default_factory=dict)
    errors: collections.Counter[int] = field(default_factory=collections.Counter)

    @classmethod
    def of(cls, requests: list[dict[str, Any]], input_names: Iterable[str]) -> S3Counts:
        counts = cls(inputs={name: collections.Counter() for name in input_names})
        prefix = f"/{BUCKET}/{INPUT_PREFIX}/"
        for r in requests:
            op = operation(r)
            counts.total += 1
            counts.by_operation[op] += 1
            if r["method"] == "GET":
                counts.bytes_fetched += r["bytes_out"]
            counts.bytes_sent += r["bytes_in"] if r["method"] in ("PUT", "POST") else 0
            if r["status"] >= 400:
                counts.errors[r["status"]] += 1
            if r["path"].startswith(prefix) and op in ("GET ranged", "GET whole", "HEAD"):
                per = counts.inputs.setdefault(r["path"][len(prefix) :], collections.Counter())
                per["HEAD" if op == "HEAD" else "GET"] += 1
                per["bytes"] += r["bytes_out"]
        return counts

    def signature(self) -> tuple[Any, ...]:
        return (self.total, sorted(self.by_operation.items()))


# -- the run -----------------------------------------------------------------------------------------------


def measure_local(
    checkout: Path, source: Path, work: Path, cmds: list[Command], runs: int, use_strace: bool
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for cmd in cmds:
        run_dir = work / "runs" / re.sub(r"\W+", "-", cmd.name)
        walls = []
        for _ in range(runs):
            shutil.rmtree(run_dir, ignore_errors=True)
            (run_dir / "scratch").mkdir(parents=True)
            walls.append(
                run_kg(cmd.args(str(source), str(run_dir / "out")), kg_env(checkout, run_dir / "scratch"))
            )
        print(f"  local {cmd.name}: {' '.join(f'{w:.2f}' for w in walls)} s", file=sys.stderr)
        shutil.rmtree(run_dir, ignore_errors=True)
        (run_dir / "scratch").mkdir(parents=True)
        env = kg_env(checkout, run_dir / "scratch")
        argv = cmd.args(str(source), str(run_dir / "out"))
        if use_strace:
            traced_wall, files = trace_run(argv, env, work / "trace")
        else:
            traced_wall, files = audit_run(argv, env, work / "audit.json")
        out_names = set(files_of(run_dir / "out")) if cmd.writes else set()
        rows = local_rows(files, source, run_dir, {Path(n).name for n in out_names})
        results[cmd.name] = {"walls": walls, "traced_wall": traced_wall, "rows": rows}
        shutil.rmtree(run_dir, ignore_errors=True)
    return results


def measure_s3(checkout: Path, source: Path, work: Path, cmds: list[Command], runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    server = S3Server.start(work)
    try:
        server.upload(source, INPUT_PREFIX)
        names = list(files_of(source))
        src = f"s3://{BUCKET}/{INPUT_PREFIX}"
        for cmd in cmds:
            walls, counts = [], []
            for i in range(runs):
                scratch = work / "runs" / "s3-scratch"
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
                out_prefix = f"out/{re.sub(r'[^a-z0-9]+', '-', cmd.name.lower())}-{i}"
                mark = server.mark()
                env = kg_env(checkout, scratch, server.env)
                walls.append(run_kg(cmd.args(src, f"s3://{BUCKET}/{out_prefix}"), env))
                counts.append(S3Counts.of(server.requests_since(mark), names))
                if cmd.writes:
                    server.delete(out_prefix)
                shutil.rmtree(scratch, ignore_errors=True)
            shown = " ".join(f"{w:.2f}" for w in walls)
            print(f"  S3 {cmd.name}: {shown} s, {counts[0].total} requests", file=sys.stderr)
            differ = [c.total for c in counts if c.signature() != counts[0].signature()]
            results[cmd.name] = {"walls": walls, "counts": counts[0], "differ": differ}
    finally:
        server.stop()
    return results


# -- the report --------------------------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} B"


def _times(value: int, size: int | None) -> str:
    return f"{value / size:.2f}" if size else "-"


def _walls(walls: list[float] | None) -> str:
    return f"{min(walls):.2f} s ({', '.join(f'{w:.2f}' for w in walls)})" if walls else "-"


LOCAL_HEADER = (
    "| file | size | opens r / w | lookups | read calls | bytes read | x size | bytes written | mmaps |"
)


def _local_table(result: dict[str, Any]) -> list[str]:
    out = [LOCAL_HEADER, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        io = row.io
        what = row.what if row.files == 1 else f"{row.what} ({row.files})"
        if row.most_opens:
            what += f", most opens of one: {row.most_opens}"
        size = _mb(row.size) if row.size is not None else "-"
        out.append(
            f"| {what} | {size} | {io.opens_read} / {io.opens_write} | {io.lookups} | {io.reads:,} "
            f"| {_mb(io.read_bytes)} | {_times(io.read_bytes, row.size)} | {_mb(io.written_bytes)} "
            f"| {io.mmaps} |"
        )
    return out


def _s3_tables(s3: dict[str, Any], sizes: dict[str, int]) -> list[str]:
    seen = {op for r in s3.values() for op in r["counts"].by_operation}
    ops = [op for op in OPERATIONS if op in seen] + sorted(seen - set(OPERATIONS))
    out = [
        "| command | requests | " + " | ".join(ops) + " | bytes fetched | bytes sent | errors |",
        "|---|---:|" + "---:|" * len(ops) + "---:|---:|---|",
    ]
    for name, result in s3.items():
        c: S3Counts = result["counts"]
        errors = ", ".join(f"{n}x {code}" for code, n in sorted(c.errors.items())) or "-"
        cells = " | ".join(f"{c.by_operation[op]:,}" for op in ops)
        note = f" (other runs: {result['differ']} requests)" if result["differ"] else ""
        out.append(
            f"| `kg {name}`{note} | {c.total:,} | {cells} | {_mb(c.bytes_fetched)} | {_mb(c.bytes_sent)} "
            f"| {errors} |"
        )
    out += ["", "Per input object: GETs / HEADs / bytes fetched (bytes / size)", ""]
    out.append("| object | size | " + " | ".join(f"`kg {name}`" for name in s3) + " |")
    out.append("|---|---:|" + "---:|" * len(s3))
    for n, size in sorted(sizes.items(), key=_input_order):
        per_command = []
        for result in s3.values():
            per = result["counts"].inputs.get(n, collections.Counter())
            per_command.append(
                f"{per['GET']} / {per['HEAD']} / {_mb(per['bytes'])} ({_times(per['bytes'], size)})"
            )
        out.append(f"| `{_short(n)}` | {_mb(size)} | " + " | ".join(per_command) + " |")
    return out


def report(meta: dict[str, Any], local: dict[str, Any], s3: dict[str, Any], runs: int, strace: bool) -> str:
    out = [
        f"kg {meta['commit']} ({meta['checkout']}); savepoint {meta['savepoint']}: {meta['files']} files, "
        f"{_mb(meta['bytes'])}",
        f"{meta['machine']}; load average {meta['load_before']} before, {meta['load_after']} after; "
        f"the run took {meta['run_seconds']:.0f} s",
        "",
        f"### Wall (process, best of {runs} fresh processes; every run in brackets)",
        "",
        "| command | local disk | S3 (moto) |",
        "|---|---:|---:|",
    ]
    for name in {**local, **s3}:
        on_disk, on_s3 = local.get(name, {}).get("walls"), s3.get(name, {}).get("walls")
        out.append(f"| `kg {name}` | {_walls(on_disk)} | {_walls(on_s3)} |")
    if local:
        how = "strace -f" if strace else "Python audit hook: Python-level opens only"
        out += [
            "",
            f"### Local disk: file I/O of one more run ({how})",
            "",
            "opens r / w: successful opens for reading / writing; lookups: stat calls and failed opens "
            "by name; x size: bytes read / file size.",
        ]
        for name, result in local.items():
            out += ["", f"`kg {name}` (traced run: {result['traced_wall']:.2f} s)", "", *_local_table(result)]
    if s3:
        out += ["", "### S3 (moto on 127.0.0.1): requests of the first run, counted by the server", ""]
        out += _s3_tables(s3, meta["sizes"])
    return "\n".join(out)


def as_json(meta: dict[str, Any], local: dict[str, Any], s3: dict[str, Any]) -> dict[str, Any]:
    def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"what": r.what, "size": r.size, "files": r.files, **vars(r.io)} for r in result["rows"]]

    def counts(c: S3Counts) -> dict[str, Any]:
        return {
            "total": c.total,
            "by_operation": dict(c.by_operation),
            "bytes_fetched": c.bytes_fetched,
            "bytes_sent": c.bytes_sent,
            "inputs": {n: dict(per) for n, per in c.inputs.items()},
            "errors": {str(code): n for code, n in c.errors.items()},
        }

    return {
        "meta": meta,
        "local": {
            k: {"walls": v["walls"], "traced_wall": v["traced_wall"], "rows": rows(v)}
            for k, v in local.items()
        },
        "s3": {k: {"walls": v["walls"], "differ": v["differ"], **counts(v["counts"])} for k, v in s3.items()},
    }


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-s3":
        serve_s3(int(sys.argv[2]), Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kg", type=Path, default=ROOT, help="The kg checkout to measure (default: this one)."
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "kg-spine-io")
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--savepoint", type=Path, help="Use this savepoint instead of WORK/savepoint-<keys>.")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--to", type=int, default=4)
    parser.add_argument("-m", "--max-parallelism", type=int, default=1024)
    parser.add_argument("--no-local", action="store_true")
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--json", type=Path, help="Also write the figures as JSON here.")
    args = parser.parse_args()

    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    args.work.mkdir(parents=True, exist_ok=True)
    checkout = args.kg.resolve()
    meta: dict[str, Any] = describe_checkout(checkout)
    source = (args.savepoint or savepoint_for(args.keys, args.work)).resolve()
    sizes = files_of(source)
    meta.update(
        savepoint=str(source),
        sizes=sizes,
        files=len(sizes),
        bytes=sum(sizes.values()),
        machine=f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} "
        f"{platform.release()}",
    )
    cmds = commands(args.to, args.max_parallelism)
    strace = shutil.which("strace") is not None
    if not strace:
        print("strace not found: local opens are counted at Python level only", file=sys.stderr)
    local = {} if args.no_local else measure_local(checkout, source, args.work, cmds, args.runs, strace)
    s3 = {} if args.no_s3 else measure_s3(checkout, source, args.work, cmds, args.runs)
    shutil.rmtree(args.work / "runs", ignore_errors=True)
    meta["load_before"] = f"{load_before:.1f}"
    meta["load_after"] = f"{os.getloadavg()[0]:.1f}"
    meta["run_seconds"] = time.perf_counter() - started
    print(report(meta, local, s3, args.runs, strace))
    if args.json:
        args.json.write_text(json.dumps(as_json(meta, local, s3), indent=1))


if __name__ == "__main__":
    main()
