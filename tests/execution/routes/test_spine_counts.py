"""One savepoint rescale reads each input file once and encodes its output ``_metadata`` once (#21).

For each route of a savepoint rescale (key groups copied as bytes; keys re-hashed; a heap layout rewritten
first; ``--format native``'s database-building tasks), counted in this process on the local engine
(``spine_counter``):

- the input ``_metadata`` is read from storage once;
- each input state file's header is read once;
- each input operator-state stream is decoded once;
- the output ``_metadata`` is encoded once.

The object-store variant is ``tests/storage/test_s3_spine_counts.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.execution.spine_counter import assert_each_once, count_rescale

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "flink"

ROUTES = [
    # (fixture, new parallelism, new maxParallelism): copy as bytes, re-hash.
    ("2.3/rocksdb-canonical-p3-maxp128-string", 4, None),
    ("2.3/rocksdb-canonical-p3-maxp128-string", 4, 1024),
    ("2.3/rocksdb-canonical-snappy-p3-maxp128-long", 2, 256),
    ("2.3/uid-heap-canonical-p3", 4, None),
    ("2.3/uid-heap-canonical-p3", 2, 1024),
    # A heap checkpoint and a RocksDB NATIVE savepoint: rewritten in the canonical layout first.
    ("2.3/heap-checkpoint-p2-maxp128-string", 3, None),
    ("2.3/heap-checkpoint-p2-maxp128-string", 3, 256),
    ("2.3/uid-rocksdb-native-p3", 4, None),
]


def state_files(savepoint: Path, without: frozenset[str] = frozenset()) -> tuple[int, int, frozenset[str]]:
    """Return how many state files (keyed and operator) and operator-state streams ``savepoint`` has,
    and the names of its files; ``without``: operator ids whose files are left out of the counts."""
    metadata = read_flink_metadata(savepoint).metadata
    files: set[str] = set()
    streams = 0
    for op in metadata.operators:
        if op.operator_id in without:
            continue
        for sub in op.subtasks:
            for handle in (sub.managed_keyed_state, sub.managed_operator_state):
                if isinstance(handle, KeyGroupsHandle | OperatorStateHandle):
                    files.add(str(getattr(handle.delegate, "relative_path", handle.delegate)))
            streams += isinstance(sub.managed_operator_state, OperatorStateHandle)
    names = frozenset(p.name for p in savepoint.rglob("*") if p.is_file())
    return len(files), streams, names


@pytest.mark.parametrize(("case", "to", "max_parallelism"), ROUTES)
def test_a_savepoint_rescale_reads_each_input_file_once(case, to, max_parallelism, tmp_path, monkeypatch):
    source = FIXTURES / case
    assert source.is_dir(), source
    files, streams, names = state_files(source)
    counts = count_rescale(monkeypatch, str(source), str(tmp_path / "out"), to, max_parallelism, names)
    assert_each_once(counts, state_files=files, operator_streams=streams)
    assert (tmp_path / "out" / "_metadata").is_file()


def test_a_native_rescale_reads_each_input_file_once(tmp_path, monkeypatch):
    # --format native at the same maxParallelism: each new subtask's read tasks are the overlaps of the old
    # files with its range, and its write task builds its database; each input file is still read once.
    # (Re-hashed, NATIVE write tasks read what canonical ones read.)
    source = FIXTURES / "2.3/rocksdb-canonical-p3-maxp128-string"
    files, streams, names = state_files(source)
    out = tmp_path / "out"
    counts = count_rescale(monkeypatch, str(source), str(out), 2, None, names, output_format="native")
    assert_each_once(counts, state_files=files, operator_streams=streams)
    properties = read_flink_metadata(out).metadata.properties
    assert properties is not None and properties.format_type == "NATIVE"


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "{sp}"],
        ["inspect", "{sp}", "--key-groups"],
        ["check", "{sp}", "-p", "4"],
        ["check", "{sp}", "-p", "4", "--deep"],
        ["verify", "{sp}"],
        ["plan", "{sp}", "--to", "4", "-m", "1024"],
        ["rescale", "{sp}", "--to", "4", "--dry-run", "--out", "{out}"],
    ],
    ids=lambda argv: " ".join(a for a in argv if not a.startswith("{")),
)
def test_every_command_reads_the_input_metadata_once(argv, monkeypatch, tmp_path):
    """inspect, check, verify, plan and a dry run work on the savepoint opened once (#21)."""
    from click.testing import CliRunner

    from keygroup_cli.cli import cli
    from tests.execution.spine_counter import counting

    source = FIXTURES / "2.3/rocksdb-canonical-p3-maxp128-string"
    names = frozenset(p.name for p in source.rglob("*") if p.is_file())
    with counting(monkeypatch, str(source), names) as counts:
        args = [a.replace("{sp}", str(source)).replace("{out}", str(tmp_path / "out")) for a in argv]
        result = CliRunner().invoke(cli, ["--json", *args])
    assert result.exit_code == 0, result.output + result.stderr
    assert counts.metadata_reads == 1
    assert all(n == 1 for n in counts.header_reads.values()), counts.header_reads
    assert all(n == 1 for n in counts.operator_decodes.values()), counts.operator_decodes


MIGRATION_ROUTES = [
    # Operator migration in the rescale's pass, on each route: copy as bytes, re-hash, a layout rewritten.
    ("2.3/uid-heap-canonical-p3", 4, None),
    ("2.3/uid-heap-canonical-p3", 4, 256),
    ("2.3/uid-heap-checkpoint-p3", 2, 64),
    ("2.3/uid-rocksdb-native-p3", 4, None),
]


@pytest.mark.parametrize(("case", "to", "max_parallelism"), MIGRATION_ROUTES)
def test_a_rescale_with_surgery_reads_the_input_once_and_a_dropped_operator_never(
    case, to, max_parallelism, tmp_path, monkeypatch
):
    """``kg rescale --rename --drop``: planned on the opened input; no second read, no second savepoint."""
    from keygroup_cli.core.keygroups import operator_id_for_uid
    from keygroup_cli.planning.migration import MigrationRequest

    source = FIXTURES / case
    dropped = operator_id_for_uid("keyed-string")
    files, streams, names = state_files(source, without=frozenset({dropped}))
    migration = MigrationRequest(renames=(("keyed-long", "keyed-long-v2"),), drops=("keyed-string",))
    dest = str(tmp_path / "out")
    counts = count_rescale(monkeypatch, str(source), dest, to, max_parallelism, names, migration)
    assert_each_once(counts, state_files=files, operator_streams=streams)
    kept = {n.rsplit("/", 1)[-1] for n in counts.header_reads}
    assert not kept & _files_of(source, dropped), "a dropped operator's state is never read"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no intermediate savepoint
    ids = {op.operator_id for op in read_flink_metadata(tmp_path / "out").metadata.operators}
    assert operator_id_for_uid("keyed-long-v2") in ids and dropped not in ids


def _files_of(savepoint: Path, operator_id: str) -> set[str]:
    """Return the names of the files ``operator_id``'s handles name (RocksDB database files included)."""
    (op,) = (o for o in read_flink_metadata(savepoint).metadata.operators if o.operator_id == operator_id)
    found: set[str] = set()

    def walk(value: object) -> None:
        for attr in ("relative_path", "path"):
            name = getattr(value, attr, None)
            if isinstance(name, str):
                found.add(name.rsplit("/", 1)[-1])
        if isinstance(value, tuple):
            for v in value:
                walk(v)
        elif hasattr(value, "__dataclass_fields__"):
            for f in value.__dataclass_fields__:
                walk(getattr(value, f))

    walk(op)
    assert found, operator_id
    return found
