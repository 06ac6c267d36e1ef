"""Restore savepoints of the fixture job in real Flink and read back what Flink restored.

Runs ``kg.fixtures.RestoreDump`` (fixtures/java/src) in ONE ``java`` process per batch: the JVM and
MiniCluster start once (about 1.5 s), then each restore takes well under a second. Each restore
writes a dump (schema: fixtures/flink/README.md, "Restore and dump") that tests compare with a
case's ``expected-state.json``; kg-written savepoints go through the same path.

Import it from tests as ``from tests.restore.harness import ...``; the session fixtures live in
``tests/restore/conftest.py``. Missing Java or Flink jars raise :class:`FlinkHarnessError`, so the
``flink`` suite fails (never skips) where they are absent.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.javahash import hash_code
from keygroup_cli.core.keygroups import key_group_for_hash, operator_index_for_key_group, subtask_ranges

ROOT = Path(__file__).resolve().parents[2]
BUILD_SH = ROOT / "fixtures" / "java" / "build.sh"
CASES = ROOT / "fixtures" / "flink" / "2.3"
MAIN_CLASS = "kg.fixtures.RestoreDump"
INSTALL_HINT = "pip install apache-flink-libraries==2.3.0 (and put Java 17 on PATH)"

KEYED_OPERATORS = ("keyed-state", "count-no-uid")
OP_STATE = "op-state"
ASYNC = "async-wait"
# RestoreDump holds JVM flags for a short-lived batch: serial GC and C1 only start faster.
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx1g")

Dump = dict[str, Any]


class FlinkHarnessError(RuntimeError):
    """Java, the Flink jars or the restore batch itself failed (not a restore Flink rejected)."""


@dataclass(frozen=True)
class RestoreRequest:
    """One restore of a KgTestJob savepoint, as RestoreDump's batch file spells it.

    Attributes:
        savepoint: The savepoint (or retained checkpoint) directory, or its ``_metadata`` file.
        parallelism: Parallelism of every operator but the source (always 1, as in KgTestJob).
        max_parallelism: Set with ``env.setMaxParallelism``, i.e. explicitly: a savepoint whose
            maxParallelism differs fails the way Flink always fails it.
        key_type: ``"string"`` or ``"long"``, the key type the savepoint was written with.
        backend: ``"hashmap"`` or ``"rocksdb"``.
        allow_non_restored_state: Flink's ``--allowNonRestoredState``.
        timeout_seconds: Upper bound for this restore inside the batch.
    """

    savepoint: Path
    parallelism: int
    max_parallelism: int
    key_type: str
    backend: str = "hashmap"
    allow_non_restored_state: bool = False
    timeout_seconds: int = 120

    def to_json(self, out: Path) -> dict[str, Any]:
        return {
            "savepoint": str(Path(self.savepoint).resolve()),
            "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism,
            "key_type": self.key_type,
            "backend": self.backend,
            "out": str(out),
            "allow_non_restored_state": self.allow_non_restored_state,
            "timeout_seconds": self.timeout_seconds,
        }


def _tool_env() -> dict[str, str]:
    # build.sh finds the jars with `python3 -c "import pyflink"`: make that the interpreter running
    # the tests (a CI venv is not activated, so the first python3 on PATH may lack pyflink).
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """Hold the lock on fixtures/java/build: test workers (pytest -n) compile and fetch jars one at a time."""
    lock = ROOT / "fixtures" / "java" / "build" / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_classpath() -> str:
    """Compile fixtures/java (once; build.sh skips up-to-date builds) and return the classpath.

    Raises:
        FlinkHarnessError: java/javac or the Flink jars are missing, or the sources do not compile.
    """
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise FlinkHarnessError(f"the flink tests need `{tool}` (Java 17) on PATH; {INSTALL_HINT}")
    with _build_lock():
        proc = subprocess.run(
            ["bash", str(BUILD_SH)], capture_output=True, text=True, env=_tool_env(), timeout=600, check=False
        )
    if proc.returncode == 6:
        raise FlinkHarnessError(f"the Flink 2.3.0 jars are missing: {INSTALL_HINT}")
    if proc.returncode != 0:
        raise FlinkHarnessError(f"fixtures/java/build.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1]


def run_java_batch(
    label: str,
    command: Sequence[str],
    entries: Sequence[Mapping[str, Any]],
    workdir: Path,
    *,
    timeout: float | None = None,
) -> list[Dump]:
    """Run one JVM over a batch of restores and return each entry's dump, in order.

    Each entry gets an ``out`` path in ``workdir``; the batch file's path is appended to ``command``
    (``java ... MAIN [restore]``). A restore Flink refuses is a dump whose ``error`` is Flink's message
    chain; anything else going wrong (the JVM, the batch, the time limit) raises.

    Args:
        label: The program's name in messages and file names (``RestoreDump``, ``UidJob (2.3.0)``).
        command: ``java`` and its arguments up to the batch file.
        entries: The batch entries, without ``out``.
        workdir: Where the batch file, stderr and dumps go (created if missing).
        timeout: Seconds for the whole batch; default 60 plus 30 per entry.

    Raises:
        FlinkHarnessError: The java process failed, timed out or wrote no dump.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    stem = label.split()[0].lower()
    outs = [workdir / f"{stem}-dump-{i:03d}.json" for i in range(len(entries))]
    for out in outs:
        out.unlink(missing_ok=True)
    batch = workdir / f"{stem}-batch.json"
    batch.write_text(json.dumps([{**e, "out": str(o)} for e, o in zip(entries, outs, strict=True)], indent=1))
    limit = timeout if timeout is not None else 60.0 + 30.0 * len(entries)
    try:
        proc = subprocess.run(
            [*command, str(batch)],
            capture_output=True,
            text=True,
            env=_tool_env(),
            timeout=limit,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FlinkHarnessError(f"{label} timed out after {limit:.0f} s ({len(entries)} restores)") from exc
    (workdir / f"{stem}.stderr").write_text(proc.stderr)
    if proc.returncode != 0:
        raise FlinkHarnessError(f"{label} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    dumps: list[Dump] = []
    for entry, out in zip(entries, outs, strict=True):
        if not out.is_file():
            raise FlinkHarnessError(f"{label} wrote no dump for {entry}:\n{proc.stderr[-4000:]}")
        dumps.append(json.loads(out.read_text(encoding="utf-8")))
    return dumps


def run_restores(
    requests: Sequence[RestoreRequest | Mapping[str, Any]],
    workdir: Path,
    classpath: str,
    *,
    timeout: float | None = None,
) -> list[Dump]:
    """Restore every request in one JVM and return the dumps, in request order.

    A restore that Flink rejects is a dump whose ``error`` is Flink's message chain; anything else
    going wrong (JVM, batch file, timeout) raises.

    Args:
        requests: The restores to run: KgTestJob's, or AsyncJob's batch entries (``async_request``: a
            mapping with ``"job": "async"``, without ``out``) that RestoreDump hands to AsyncJob in the
            same cluster.
        workdir: Where the batch file and the dumps are written (created if missing).
        classpath: From :func:`build_classpath`.
        timeout: Seconds for the whole batch; default 60 plus 30 per request.

    Raises:
        FlinkHarnessError: The java process failed, timed out or wrote no dump.
    """
    entries = [
        {k: v for k, v in r.to_json(Path("-")).items() if k != "out"}
        if isinstance(r, RestoreRequest)
        else dict(r)
        for r in requests
    ]
    command = ["java", *JVM_FLAGS, "-cp", classpath, MAIN_CLASS]
    return run_java_batch("RestoreDump", command, entries, workdir, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# Logical views used to compare a dump with expected-state.json (or with another dump)


def canonical(value: Any) -> str:
    """Order-independent-by-key, order-preserving-by-list JSON text of a value (for multisets)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def key_state(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The logical state of one dumped key: key, state values and timers (no placement)."""
    return {
        "key": entry["key"],
        "values": entry["values"],
        "eventTimers": entry["eventTimers"],
        "processingTimers": entry["processingTimers"],
    }


def dumped_keys(dump: Dump, operator: str) -> list[dict[str, Any]]:
    """Every (key, subtask) entry Flink restored for a keyed operator, sorted by key then subtask."""
    keys: list[dict[str, Any]] = dump["keyedOperators"][operator]["keys"]
    return keys


def expected_keys(expected: Mapping[str, Any], operator: str) -> list[dict[str, Any]]:
    """A case's expected-state.json keys of ``operator`` in the dump's per-key shape."""
    op = next(o for o in expected["keyedOperators"] if o["name"] == operator)
    out = []
    for k in op["keys"]:
        if operator == "keyed-state":
            values = {"sum": k["sum"], "ids": k["ids"], "buckets": k["buckets"]}
            ev, pr = k["eventTimers"], k["processingTimers"]
        else:
            values, ev, pr = {"n": k["n"]}, [], []
        out.append(
            {
                "key": k["key"],
                "keyGroup": k["keyGroup"],
                "subtask": k["subtask"],
                "values": values,
                "eventTimers": ev,
                "processingTimers": pr,
            }
        )
    return out


def key_multiset(entries: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """Keys with their state as a multiset: equal multisets = nothing lost, nothing duplicated."""
    return Counter(canonical(key_state(e)) for e in entries)


def subtask_of_key_group(dump: Dump, operator: str, key_group: int) -> int:
    """The subtask whose restored keyed backend (as Flink reported it) owns ``key_group``."""
    owners: list[int] = [
        s["index"]
        for s in dump["keyedOperators"][operator]["subtasks"]
        if s["keyGroupRange"] and s["keyGroupRange"][0] <= key_group <= s["keyGroupRange"][1]
    ]
    if len(owners) != 1:
        raise AssertionError(f"key group {key_group} of {operator} is owned by subtasks {owners}")
    return owners[0]


def async_elements(dump: Dump) -> Counter[str]:
    """Every in-flight element re-delivered to the async operator, over all subtasks."""
    return Counter(canonical(e) for s in dump["asyncInFlight"][ASYNC]["subtasks"] for e in s["elements"])


def restore_error(dump: Dump) -> str | None:
    """Flink's message chain if it rejected the restore, else None."""
    err: str | None = dump.get("error")
    return err


# ---------------------------------------------------------------------------------------------
# Fixture cases, kg rescales of them, and whole-restore checks (shared by the kg-savepoint modules)


def case_json(case: str, name: str) -> Any:
    """One of a fixture case's JSON files (``flink-report.json``, ``expected-state.json``)."""
    return json.loads((CASES / case / name).read_text(encoding="utf-8"))


def case_key_type(case: str) -> str:
    """``"string"`` or ``"long"``: the key type a fixture case was written with."""
    return "long" if case_json(case, "flink-report.json")["job"]["keyType"] == "java.lang.Long" else "string"


def case_request(
    case: str,
    savepoint: Path | None = None,
    parallelism: int | None = None,
    max_parallelism: int | None = None,
) -> RestoreRequest:
    """Restore ``savepoint`` (default: the case itself) as the case's job, at its or the given p/maxP."""
    job = case_json(case, "flink-report.json")["job"]
    return RestoreRequest(
        savepoint=savepoint if savepoint is not None else CASES / case,
        parallelism=parallelism or job["parallelism"],
        max_parallelism=max_parallelism or job["maxParallelism"],
        key_type=case_key_type(case),
        backend=job["stateBackend"],
    )


def union_pairs(values: Sequence[int]) -> Counter[str]:
    """``union-counts`` ([old subtask, records seen] pairs, concatenated) as a multiset of pairs."""
    return Counter(canonical(list(values[i : i + 2])) for i in range(0, len(values), 2))


def assert_timers_fired(dump: Dump) -> None:
    """Assert every restored timer fired once, in timestamp order, on the subtask that lists its key.

    RestoreDump fires each keyed operator's timers after dumping them (event time: watermark
    Long.MAX_VALUE; processing time: the timer service's callback for a clock at Long.MAX_VALUE); a
    timer restored into the wrong key group, or twice, fires on another subtask or twice.
    """
    for op in KEYED_OPERATORS:
        keys = dumped_keys(dump, op)
        for sub in dump["keyedOperators"][op]["subtasks"]:
            fired = sub["firedTimers"]
            assert fired["pendingAfterFiring"] == 0
            for domain, field in (("event", "eventTimers"), ("processing", "processingTimers")):
                times = [ts for _key, ts in fired[domain]]
                assert times == sorted(times), f"{op} subtask {sub['index']}: {domain} timers out of order"
                listed = Counter(
                    canonical([e["key"], ts]) for e in keys if e["subtask"] == sub["index"] for ts in e[field]
                )
                assert Counter(canonical(t) for t in fired[domain]) == listed


def assert_restored_like_expected(
    dump: Dump, expected: Mapping[str, Any], parallelism: int, max_parallelism: int, key_type: str
) -> None:
    """Assert a restore at (parallelism, max_parallelism) holds exactly the state of ``expected``.

    Nothing lost, nothing duplicated: every key with its values, list order, map entries and timers once
    (and each timer fires once, on that key's subtask: ``assert_timers_fired``);
    every ``split-ids`` element on exactly one subtask; the full ``union-counts`` list and the ``bcast``
    map on every subtask; every in-flight async element once. Placement: Flink's restored key-group
    ranges are kg's ``subtask_ranges``, each key sits in the key group Flink computed for it at
    ``max_parallelism`` (kg's murmur math agrees) and on the subtask whose restored range holds that
    group, which is also kg's ``operator_index_for_key_group``.
    """
    error = restore_error(dump)
    assert error is None, f"Flink refused the restore:\n{error}"
    ranges = [[r.start, r.end] for r in subtask_ranges(max_parallelism, parallelism)]
    for op in KEYED_OPERATORS:
        subtasks = dump["keyedOperators"][op]["subtasks"]
        assert [s["index"] for s in subtasks] == list(range(parallelism))
        assert [s["keyGroupRange"] for s in subtasks] == ranges
        got = dumped_keys(dump, op)
        assert key_multiset(got) == key_multiset(expected_keys(expected, op))
        for entry in got:
            group = key_group_for_hash(hash_code(entry["key"], key_type), max_parallelism)
            assert entry["keyGroup"] == group, entry["key"]
            assert entry["subtask"] == subtask_of_key_group(dump, op, group), entry["key"]
            assert entry["subtask"] == operator_index_for_key_group(max_parallelism, parallelism, group)
    assert_timers_fired(dump)
    (exp_op,) = expected["operatorState"]
    got_op = dump["operatorState"][OP_STATE]["subtasks"]
    assert [s["index"] for s in got_op] == list(range(parallelism))
    assert Counter(i for s in got_op for i in s["split-ids"]) == Counter(
        i for s in exp_op["subtasks"] for i in s["split-ids"]
    )
    all_union = Counter(canonical(s["union-counts"]) for s in exp_op["subtasks"])
    for got in got_op:
        assert got["restored"] is True
        assert union_pairs(got["union-counts"]) == all_union
        assert got["bcast"] == exp_op["bcast"]
        assert got["registeredStates"] == ["split-ids", "union-counts"]
        assert got["registeredBroadcastStates"] == ["bcast"]
    assert len(dump["asyncInFlight"][ASYNC]["subtasks"]) == parallelism
    exp_async = Counter(canonical(e) for s in expected["asyncInFlight"]["subtasks"] for e in s["elements"])
    assert async_elements(dump) == exp_async


def comparable_dump(dump: Dump) -> dict[str, Any]:
    """A dump with the parts no savepoint fixes put in one order, for comparing two restores.

    Dropped: ``request`` (it names the savepoint path). Re-ordered inside each subtask, and nothing
    else: ``split-ids`` (a Flink-rescaled restore concatenates the partitions of several old handles in
    a HashMap's order), ``union-counts`` pairs (concatenated in ``_metadata`` handle order, which a
    savepoint does not fix) and async in-flight elements (one list partition per element, same reason).
    Keys stay sorted by key then subtask; list state order, map entries, timers, key groups, subtask
    ranges, backend classes and key counts are compared as Flink dumped them.
    """
    out = {k: v for k, v in dump.items() if k != "request"}
    if out.get("error") is not None:
        return out
    op_state = json.loads(json.dumps(out["operatorState"]))
    for sub in op_state[OP_STATE]["subtasks"]:
        sub["split-ids"] = sorted(sub["split-ids"])
        pairs = sub["union-counts"]
        sub["union-counts"] = sorted(pairs[i : i + 2] for i in range(0, len(pairs), 2))
    in_flight = json.loads(json.dumps(out["asyncInFlight"]))
    for sub in in_flight[ASYNC]["subtasks"]:
        sub["elements"] = sorted(sub["elements"], key=canonical)
    return {**out, "operatorState": op_state, "asyncInFlight": in_flight}


def doubled(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A ``transform`` fn the restore tests write with: the batch with its numeric ``value`` doubled."""
    i = batch.schema.get_field_index("value")
    return batch.set_column(i, batch.schema.field(i), pc.multiply(batch.column(i), 2))


# ---------------------------------------------------------------------------------------------
# UidJob (fixtures/java/versioned): the same small job on every Flink version 1.17 ... 2.3

#: The Flink versions whose UidJob savepoints are in fixtures/flink/<major.minor>/ and that restore them.
UID_JOB_VERSIONS = ("1.15.4", "1.16.3", "1.17.2", "1.20.3", "2.0.1", "2.3.0")
#: The UidJob savepoint the restore tests start from, and its job shapes per keyed uid: as written (p 3,
#: maxP 10 / 128) and after ``kg rescale --operator keyed-long --to 4 -m 256``.
UID_CASE = "uid-heap-canonical-p3"
UID_OWN_P = {"keyed-string": 3, "keyed-long": 3}
UID_OWN_M = {"keyed-string": 10, "keyed-long": 128}
UID_NEW_P = {"keyed-string": 3, "keyed-long": 4}
UID_NEW_M = {"keyed-string": 10, "keyed-long": 256}
#: The stateless operators chained behind each keyed one, and every operator of the job.
UID_CHAINS = {"keyed-string": ("string-drop", "string-sink"), "keyed-long": ("long-drop", "long-sink")}
UID_JOB_UIDS = (
    "uid-source",
    "keyed-string",
    "string-drop",
    "string-sink",
    "keyed-long",
    "long-drop",
    "long-sink",
)
UID_JOB_CASES = (
    "uid-heap-canonical-p3",
    "uid-heap-native-p3",
    "uid-heap-checkpoint-p3",
    "uid-rocksdb-canonical-p3",
    "uid-rocksdb-native-p3",
    "uid-rocksdb-incremental-p3",
)
UID_JOB_MAIN = "kg.versioned.UidJob"
VERSIONED_BUILD_SH = ROOT / "fixtures" / "java" / "versioned" / "build.sh"
#: Where other versions' jars are kept (``KG_FLINK_LIBS`` overrides): ``<dir>/flink-<version>/*.jar``.
FLINK_LIBS = Path(os.environ.get("KG_FLINK_LIBS", ROOT / "fixtures" / "java" / "build" / "flink-libs"))
#: Flink 1.x reflects into the JDK: Java 17 must open these packages to it (harmless for 2.x).
ADD_OPENS = tuple(
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in (
        "java.lang",
        "java.lang.reflect",
        "java.io",
        "java.net",
        "java.nio",
        "sun.nio.ch",
        "java.text",
        "java.time",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
    )
)
UID_NUM_RECORDS = 600
UID_NUM_KEYS = 120
UID_KEYED = ("keyed-string", "keyed-long")


def uid_case(version: str, case: str) -> Path:
    """The fixture directory of a UidJob case written by ``version`` (``fixtures/flink/1.20/<case>``)."""
    return ROOT / "fixtures" / "flink" / version.rsplit(".", 1)[0] / case


def flink_lib(version: str) -> Path | None:
    """Return the directory of ``version``'s Flink jars, fetching them into FLINK_LIBS if needed.

    2.3.0 is the installed ``apache-flink-libraries`` (None: build.sh finds it). Other versions are read
    from ``FLINK_LIBS/flink-<version>``; when absent, ``pip download`` fetches that version's
    ``apache-flink-libraries`` archive (an sdist, never installed) and only its ``deps/lib/*.jar`` are
    kept, so the venv's 2.3.0 stays as it is.

    Raises:
        FlinkHarnessError: The download or the extraction failed.
    """
    if version == "2.3.0":
        return None
    lib = FLINK_LIBS / f"flink-{version}"
    if (lib / f"flink-dist-{version}.jar").is_file():
        return lib
    import tarfile
    import tempfile
    import zipfile

    FLINK_LIBS.mkdir(parents=True, exist_ok=True)
    # Staged inside FLINK_LIBS, so the final rename never crosses file systems and a failure leaves nothing.
    with tempfile.TemporaryDirectory(dir=FLINK_LIBS, prefix=".fetch-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"apache-flink-libraries=={version}",
             "-d", tmp],
            capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        archives = [p for p in Path(tmp).iterdir() if p.name.endswith((".tar.gz", ".whl", ".zip"))]
        if proc.returncode != 0 or len(archives) != 1:
            raise FlinkHarnessError(
                f"cannot fetch the Flink {version} jars (pip download apache-flink-libraries=={version}):\n"
                f"{proc.stderr[-2000:]}"
            )
        staging = Path(tmp) / "lib"
        staging.mkdir()
        archive = archives[0]
        if archive.name.endswith(".tar.gz"):
            with tarfile.open(archive) as tar:
                for member in tar.getmembers():
                    if member.isfile() and "/deps/lib/" in member.name and member.name.endswith(".jar"):
                        source = tar.extractfile(member)
                        assert source is not None
                        (staging / Path(member.name).name).write_bytes(source.read())
        else:
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if "/lib/" in name and name.endswith(".jar"):
                        (staging / Path(name).name).write_bytes(zf.read(name))
        if not (staging / f"flink-dist-{version}.jar").is_file():
            raise FlinkHarnessError(f"{archive.name} holds no flink-dist-{version}.jar")
        staging.rename(lib)
    return lib


def build_versioned_classpath(version: str, build_sh: Path | None = None) -> str:
    """Compile fixtures/java/versioned against ``version``'s jars (once) and return the classpath.

    ``build_sh``: another build script with the same arguments (``ASYNC_BUILD_SH``: AsyncJob, 2.x only).

    Raises:
        FlinkHarnessError: java/javac or the jars are missing, or the source does not compile.
    """
    script = build_sh or VERSIONED_BUILD_SH
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise FlinkHarnessError(f"the flink tests need `{tool}` (Java 17) on PATH; {INSTALL_HINT}")
    with _build_lock():
        lib = flink_lib(version)
        cmd = ["bash", str(script), version] + ([str(lib)] if lib is not None else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_tool_env(), timeout=600, check=False)
    if proc.returncode != 0:
        raise FlinkHarnessError(f"{script} {version} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1]


@dataclass(frozen=True)
class UidRestoreRequest:
    """One restore of a UidJob savepoint: parallelism and maxParallelism per keyed operator (chain head).

    ``max_parallelism`` maps a keyed uid to the value set with ``setMaxParallelism`` on it (explicit, so a
    savepoint operator of its chain recording another value is refused); an absent uid is left unset.
    """

    savepoint: Path
    parallelism: Mapping[str, int]
    max_parallelism: Mapping[str, int]
    allow_non_restored_state: bool = False
    timeout_seconds: int = 120
    #: The restoring job's state backend (``"rocksdb"`` for RocksDB NATIVE / incremental snapshots);
    #: None keeps the cluster's hashmap.
    backend: str | None = None
    #: Uids left out of the restoring job: a keyed uid takes its chain (drop filter, sink) along, a
    #: stateless one (``"string-sink"``) goes alone. Empty: the job as generated.
    drop: Sequence[str] = ()
    #: Keyed uid -> uid of a new stateless map chained right after it (between it and its drop filter).
    add_stateless: Mapping[str, str] | None = None
    #: Uid as generated -> the uid the restoring job sets instead (a job whose uids changed).
    uids: Mapping[str, str] | None = None
    #: Uids as generated that the restoring job does not set (Flink hashes the graph for those).
    no_uid: Sequence[str] = ()

    def to_json(self, out: Path) -> dict[str, Any]:
        doc = {
            "savepoint": str(Path(self.savepoint).resolve()),
            "parallelism": dict(self.parallelism),
            "max_parallelism": dict(self.max_parallelism),
            "allow_non_restored_state": self.allow_non_restored_state,
            "timeout_seconds": self.timeout_seconds,
            "out": str(out),
        }
        if self.backend is not None:
            doc["backend"] = self.backend
        if self.drop:
            doc["drop"] = list(self.drop)
        if self.add_stateless:
            doc["add_stateless"] = dict(self.add_stateless)
        if self.uids:
            doc["uids"] = dict(self.uids)
        if self.no_uid:
            doc["no_uid"] = list(self.no_uid)
        return doc


@dataclass(frozen=True)
class SqlRestoreRequest:
    """One restore of a SqlJob savepoint (fixtures/flink/README-sql.md), run in ``UidJob restore``'s batch.

    ``uids`` maps each query to its aggregate's uid in the savepoint (its ``expected-sql-state.json``); the
    queries run at ``parallelism``; ``max_parallelism`` None sets none (``pipeline.max-parallelism`` unset).
    """

    savepoint: Path
    uids: Mapping[str, str]
    parallelism: int
    max_parallelism: int | None = None
    timeout_seconds: int = 120

    def to_json(self, out: Path) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "sql": True,
            "savepoint": str(Path(self.savepoint).resolve()),
            "uids": dict(self.uids),
            "parallelism": self.parallelism,
            "timeout_seconds": self.timeout_seconds,
            "out": str(out),
        }
        if self.max_parallelism is not None:
            doc["max_parallelism"] = self.max_parallelism
        return doc


def sql_case_queries(case: Path) -> list[dict[str, Any]]:
    """The queries of a SqlJob case's ``expected-sql-state.json``: name, uid and per key its last result."""
    return list(json.loads((case / "expected-sql-state.json").read_text(encoding="utf-8"))["queries"])


def assert_sql_job_restored(dump: Dump, case: Path, max_parallelism: int) -> None:
    """Assert Flink restored every key of every query with the result the job had emitted for it.

    After the restore the job reads every id again; each key's first change is an ``-U`` of the restored
    result (an ``+I`` if Flink found no state for the key under its key group). Every query's chain ran at
    ``max_parallelism``.
    """
    error = restore_error(dump)
    assert error is None, f"Flink refused the restore:\n{error}"
    for query in sql_case_queries(case):
        restored = dump["queries"][query["name"]]
        assert restored["maxParallelism"] == max_parallelism, query["name"]
        got = {canonical(k["key"]): k["restored"] for k in restored["keys"]}
        want = {canonical(k["key"]): k["result"] for k in query["keys"]}
        assert got == want, query["name"]


def run_uid_restores(
    version: str, requests: Sequence[UidRestoreRequest | SqlRestoreRequest], workdir: Path, classpath: str
) -> list[Dump]:
    """Restore every request with Flink ``version`` in one JVM; return the dumps in request order.

    Raises:
        FlinkHarnessError: The java process failed, timed out or wrote no dump.
    """
    entries = [{k: v for k, v in r.to_json(Path("-")).items() if k != "out"} for r in requests]
    command = ["java", *ADD_OPENS, *JVM_FLAGS, "-cp", classpath, UID_JOB_MAIN, "restore"]
    return run_java_batch(f"UidJob ({version})", command, entries, workdir)


def uid_expected_value(operator: str, key: str) -> int:
    """The state UidJob's savepoints hold for a key: ``count`` 5 (String keys), ``sum`` of its ids (Long)."""
    per_key = UID_NUM_RECORDS // UID_NUM_KEYS
    if operator == "keyed-string":
        return per_key
    k = int(key) // 1_000_000_007 + 60
    return sum(k + UID_NUM_KEYS * j for j in range(per_key))


def assert_uid_job_restored(
    dump: Dump, parallelism: Mapping[str, int], max_parallelism: Mapping[str, int]
) -> None:
    """Assert Flink restored every key of both keyed operators once, with its value, where kg places it.

    Each key's first record after the restore read the key's restored state through Flink's own key-group
    lookup, so a key stored under a wrong key group reads as missing (None) here.
    """
    error = restore_error(dump)
    assert error is None, f"Flink refused the restore:\n{error}"
    for op in UID_KEYED:
        keys = dump["keyed"][op]
        assert len(keys) == UID_NUM_KEYS, op
        for key, entry in keys.items():
            assert entry["restored"] == uid_expected_value(op, key), (op, key)
            key_type = "string" if op == "keyed-string" else "long"
            value: str | int = key if key_type == "string" else int(key)
            group = key_group_for_hash(hash_code(value, key_type), max_parallelism[op])
            assert entry["keyGroup"] == group, (op, key)
            assert entry["subtask"] == operator_index_for_key_group(
                max_parallelism[op], parallelism[op], group
            )


# ---------------------------------------------------------------------------------------------
# AsyncJob (fixtures/java/src/kg/fixtures/AsyncJob.java, Flink 2.x only): the async state API on ForSt

ASYNC_JOB_MAIN = "kg.fixtures.AsyncJob"
ASYNC_BUILD_SH = ROOT / "fixtures" / "java" / "async" / "build.sh"
ASYNC_CASE = "async-forst-native-p3"
ASYNC_KEYED = "async-keyed"
#: Event-time timers at EVENT_BASE + i for even ids, processing-time ones at the case's base + i for ids
#: divisible by 3 (AsyncJob.java): 300 + 200.
ASYNC_EVENT_BASE = 4_102_444_800_000
ASYNC_TIMERS = 500


def async_request(savepoint: Path, parallelism: int, max_parallelism: int | None = None) -> dict[str, Any]:
    """An AsyncJob restore as an entry of RestoreDump's batch (``run_restores``): ForSt, every timer awaited.

    ``max_parallelism`` None: the restoring job sets none.
    """
    entry: dict[str, Any] = {
        "job": "async",
        "savepoint": str(Path(savepoint).resolve()),
        "parallelism": parallelism,
        "timers": ASYNC_TIMERS,
    }
    if max_parallelism is not None:
        entry["max_parallelism"] = max_parallelism
    return entry


def run_async_restores(
    version: str, requests: Sequence[Mapping[str, Any]], workdir: Path, classpath: str
) -> list[Dump]:
    """Restore AsyncJob savepoints with Flink ``version`` in one JVM; return the dumps in request order.

    A request is AsyncJob's batch entry without ``out``: ``savepoint``, ``parallelism``, optional
    ``max_parallelism`` (absent: the job sets none), ``timers`` (how many to wait for), ``backend``.

    Raises:
        FlinkHarnessError: The java process failed, timed out or wrote no dump.
    """
    entries = [{**r, "savepoint": str(Path(r["savepoint"]).resolve())} for r in requests]
    command = ["java", *JVM_FLAGS, "-cp", classpath, ASYNC_JOB_MAIN, "restore"]
    return run_java_batch(f"AsyncJob ({version})", command, entries, workdir)


def async_expected_timers(case: Path) -> Counter[str]:
    """The timers AsyncJob's savepoint holds, as (key, domain, timestamp) texts: what a restore must fire."""
    report = json.loads((case / "async-job-report.json").read_text(encoding="utf-8"))
    base = report["processingTimerBase"]
    timers: Counter[str] = Counter()
    for i in range(UID_NUM_RECORDS):
        k = i % UID_NUM_KEYS
        key = f"k-{k}-\u00e9\U0001f600" if k % 50 == 7 else f"k-{k}"
        if i % 2 == 0:
            timers[canonical([key, "EVENT_TIME", ASYNC_EVENT_BASE + i])] += 1
        if i % 3 == 0:
            timers[canonical([key, "PROCESSING_TIME", base + i])] += 1
    return timers


def assert_async_job_restored(
    dump: Dump, parallelism: int, max_parallelism: int, expected: Counter[str]
) -> None:
    """Assert Flink restored every key's count (5) and fired every timer once, where Flink places its key.

    A key or timer under a wrong key group reads no count (None) or fires nowhere; each key's first record,
    and each timer when it fired, read the count through Flink's own lookup.
    """
    error = restore_error(dump)
    assert error is None, f"Flink refused the restore:\n{error}"
    keys = dump["keyed"]
    assert len(keys) == UID_NUM_KEYS
    for key, entry in keys.items():
        assert entry["restored"] == UID_NUM_RECORDS // UID_NUM_KEYS, key
        _assert_placed(key, entry, parallelism, max_parallelism)
    fired = Counter(canonical([t["key"], t["domain"], t["timestamp"]]) for t in dump["timers"])
    assert fired == expected
    for timer in dump["timers"]:
        assert timer["count"] == UID_NUM_RECORDS // UID_NUM_KEYS, timer
        _assert_placed(timer["key"], timer, parallelism, max_parallelism)


def _assert_placed(key: str, entry: Mapping[str, Any], parallelism: int, max_parallelism: int) -> None:
    group = key_group_for_hash(hash_code(key, "string"), max_parallelism)
    assert entry["keyGroup"] == group, key
    assert entry["subtask"] == operator_index_for_key_group(max_parallelism, parallelism, group), key


# ---------------------------------------------------------------------------------------------
# FinishedJob (fixtures/java/src/kg/fixtures/FinishedJob.java): savepoints with FINISHED operators

FINISHED_JOB_MAIN = "kg.fixtures.FinishedJob"


def run_finished_restores(requests: Sequence[Mapping[str, Any]], workdir: Path, classpath: str) -> list[Dump]:
    """Restore FinishedJob savepoints in one JVM (``FinishedJob restore``); return the dumps in order.

    A request is FinishedJob's batch entry without ``out``: ``savepoint``, ``job`` (``"fully"`` or
    ``"partially"``), ``parallelism`` (uid -> p), optional ``added_operator``, ``tag_edge``,
    ``allow_non_restored_state``, ``timeout_seconds``. A restore Flink refuses is a dump whose ``error``
    is Flink's message chain (``restore_error``); anything else going wrong raises.

    Raises:
        FlinkHarnessError: The java process failed, timed out, or could not run a restore.
    """
    entries = [{**r, "savepoint": str(Path(r["savepoint"]).resolve())} for r in requests]
    command = ["java", *JVM_FLAGS, "-cp", classpath, FINISHED_JOB_MAIN, "restore"]
    dumps = run_java_batch("FinishedJob", command, entries, workdir)
    for request, dump in zip(requests, dumps, strict=True):
        if dump.get("batchError"):
            raise FlinkHarnessError(f"FinishedJob could not run {request}: {dump['error']}")
    return dumps


# ---------------------------------------------------------------------------------------------
# Retained checkpoints whose absolute paths name the generator's temp directory


def relocated_checkpoint(metadata: Path, dest: Path) -> Path:
    """Copy a checkpoint into ``dest`` with its absolute file handles pointing at the fixture's copies.

    Flink reads a checkpoint's ``shared/`` files only at the absolute paths in ``_metadata``, and the
    generator's temp directory (``/tmp/kg-flink-fixtures/...``) is gone on another machine; kg finds them
    beside the checkpoint (``flink.io.paths``), so kg's metadata writer rewrites the handles to those files
    for Flink's own reference restore. Returns the new ``_metadata``.
    """
    from dataclasses import replace

    from keygroup_cli.flink.io.paths import local_path
    from keygroup_cli.flink.io.stream_handles import FileHandle
    from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle, LocalHandle
    from keygroup_cli.flink.metadata.locate import read_flink_metadata
    from keygroup_cli.flink.metadata.writer import write_metadata

    snapshot = read_flink_metadata(metadata)
    shutil.copytree(snapshot.directory, dest)

    def moved(entry: LocalHandle) -> LocalHandle:
        if not isinstance(entry.handle, FileHandle):
            return entry
        found = local_path(entry.handle, snapshot.directory)
        return replace(entry, handle=FileHandle(Path(str(found)).resolve().as_uri(), entry.handle.size))

    operators = []
    for op in snapshot.metadata.operators:
        subtasks = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, IncrementalKeyedHandle):
                keyed = replace(
                    keyed,
                    shared=tuple(moved(e) for e in keyed.shared),
                    private=tuple(moved(e) for e in keyed.private),
                )
            subtasks.append(replace(sub, managed_keyed_state=keyed))
        operators.append(replace(op, subtasks=tuple(subtasks)))
    (dest / "_metadata").write_bytes(write_metadata(replace(snapshot.metadata, operators=tuple(operators))))
    return dest / "_metadata"
