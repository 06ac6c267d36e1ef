"""kg rescale on a Flink savepoint: a new savepoint, the same logical state, refusals that write nothing.

Real Flink restoring these outputs is proven in tests/restore; here the outputs are read back by kg's own
savepoint reader and compared with the input's state.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.core.errors import (
    ExecutionError,
    InvalidArgumentError,
    InvalidInputError,
)
from keygroup_cli.core.keygroups import key_group_range_for_operator_index
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.write import commit
from keygroup_cli.snapshot.diff import diff_snapshots
from tests.execution.snapshots import tree_digest

FIXTURES = Path(__file__).parents[3] / "fixtures" / "flink" / "2.3"


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fixture savepoints decoded once, as the truth the rescaled savepoints are compared with."""
    out = tmp_path_factory.mktemp("originals")
    names = (
        "heap-files-p3-maxp128-long",
        "heap-inline-p3-maxp10-string",
        "rocksdb-canonical-snappy-p2-maxp256-string",
    )
    return {name: savepoint_to_snapshot(FIXTURES / name, out / name) and out / name for name in names}


def _same_state(original_kg: Path, savepoint: Path, tmp_path: Path) -> None:
    back = tmp_path / "back.kg"
    savepoint_to_snapshot(savepoint, back)
    diff = diff_snapshots(original_kg, back)
    # Every operator is in the rescaled savepoint, those without state too, with the same state.
    for op in diff.operators:
        assert op.same, op


def _stateless(savepoint: Path) -> set[str]:
    return {op.operator_id for op in read_flink_metadata(savepoint).metadata.operators if not op.has_state}


@pytest.mark.parametrize(
    ("name", "new_p", "new_max"),
    [
        ("heap-files-p3-maxp128-long", 4, None),
        ("heap-files-p3-maxp128-long", 1, 1024),
        ("heap-inline-p3-maxp10-string", 7, 64),
        ("rocksdb-canonical-snappy-p2-maxp256-string", 3, None),
    ],
)
def test_savepoint_in_savepoint_out(originals, tmp_path, name, new_p, new_max):
    source = FIXTURES / name
    before = tree_digest(source)
    result = rescale(source, tmp_path / "sp", new_p, new_max_parallelism=new_max, engine="local")
    assert tree_digest(source) == before  # the input is never modified
    assert result.output == tmp_path / "sp" and result.savepoint is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp"]  # no scratch or staging left behind
    written = read_flink_metadata(tmp_path / "sp").metadata
    original = read_flink_metadata(source).metadata
    assert written.version == original.version
    for op in written.operators:
        assert op.parallelism == new_p
        assert op.max_parallelism == (new_max or original.operators[0].max_parallelism)
        for sub in op.subtasks:
            if sub.managed_keyed_state is not None:
                want = key_group_range_for_operator_index(op.max_parallelism, new_p, sub.index)
                got = sub.managed_keyed_state
                assert (got.key_group_start, got.key_group_end) == (want.start, want.end)
    _same_state(originals[name], tmp_path / "sp", tmp_path)


def test_rescaling_a_rescaled_savepoint_keeps_union_state_once(originals, tmp_path):
    name = "heap-files-p3-maxp128-long"
    first = rescale(FIXTURES / name, tmp_path / "a", 4, engine="local").output
    second = rescale(first, tmp_path / "b", 2, engine="local").output
    _same_state(originals[name], second, tmp_path)
    (op,) = (o for o in read_flink_metadata(second).metadata.operators if o.uid == "op-state")
    union = [
        sum(len(e.offsets) for e in s.managed_operator_state.states if e.name == "union-counts")
        for s in op.subtasks
    ]
    assert union == [6, 0]  # Flink hands each subtask the concatenation: every element once


def test_from_keeps_operators_at_other_parallelism(tmp_path):
    # The fixture's source runs at parallelism 1; `--from 3 --to 4` rescales only the operators at 3.
    result = rescale(
        FIXTURES / "heap-files-p3-maxp128-long", tmp_path / "sp", 4, from_parallelism=3, engine="local"
    )
    written = {op.operator_id: op.parallelism for op in read_flink_metadata(result.output).metadata.operators}
    source = FIXTURES / "heap-files-p3-maxp128-long"
    # Every operator is written, stateless ones too (a job that sets no maxParallelism needs them).
    assert set(written) == {op.operator_id for op in read_flink_metadata(source).metadata.operators}
    assert _stateless(source)
    for op in read_flink_metadata(source).metadata.operators:
        assert written[op.operator_id] == (4 if op.parallelism == 3 else op.parallelism)


def test_a_new_max_parallelism_reaches_operators_from_leaves_behind(originals, tmp_path):
    # Flink checks every operator's maxParallelism at restore: the source at 1 keeps its parallelism
    # but takes maxParallelism 1024 with the rest.
    name = "heap-files-p3-maxp128-long"
    result = rescale(
        FIXTURES / name, tmp_path / "sp", 4, from_parallelism=3, new_max_parallelism=1024, engine="local"
    )
    original = {
        op.operator_id: op.parallelism for op in read_flink_metadata(FIXTURES / name).metadata.operators
    }
    for op in read_flink_metadata(result.output).metadata.operators:
        assert op.max_parallelism == 1024
        assert op.parallelism == (4 if original[op.operator_id] == 3 else original[op.operator_id])
    _same_state(originals[name], result.output, tmp_path)


def test_spark_engine_writes_the_same_savepoint_state(originals, spark, tmp_path):
    name = "heap-inline-p3-maxp10-string"
    result = rescale(FIXTURES / name, tmp_path / "sp", 4, new_max_parallelism=64, spark=spark)
    assert result.engine == "spark"
    _same_state(originals[name], result.output, tmp_path)


@pytest.mark.parametrize(
    ("name", "kwargs", "error", "message"),
    [
        (
            "rocksdb-native-p2-maxp128-string",
            {"from_parallelism": 3},
            InvalidArgumentError,
            "--from 3 does not match",
        ),
        (
            "heap-checkpoint-p2-maxp128-string",
            {"from_parallelism": 3},
            InvalidArgumentError,
            "--from 3 does not match",
        ),
        (
            "heap-files-p3-maxp128-long",
            {"from_parallelism": 5},
            InvalidArgumentError,
            "--from 5 does not match",
        ),
        (
            "heap-files-p3-maxp128-long",
            {"new_max_parallelism": 2},
            InvalidArgumentError,
            "Maximum parallelism",
        ),
        ("heap-files-p3-maxp128-long", {"operators": ["nope"]}, InvalidArgumentError, "no operator 'nope'"),
    ],
)
def test_refusals_write_nothing(tmp_path, name, kwargs, error, message):
    with pytest.raises(error, match=message):
        rescale(FIXTURES / name, tmp_path / "sp", 4, engine="local", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_existing_destination_is_refused(tmp_path):
    (tmp_path / "sp").mkdir()
    with pytest.raises(InvalidArgumentError, match="destination exists"):
        rescale(FIXTURES / "heap-files-p3-maxp128-long", tmp_path / "sp", 4, engine="local")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp"]


def test_a_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    def broken(*_args, **_kwargs):
        raise ExecutionError("disk full", code="WRITE_FAILED")

    monkeypatch.setattr(commit, "write_metadata", broken)
    with pytest.raises(ExecutionError, match="disk full"):
        rescale(FIXTURES / "heap-files-p3-maxp128-long", tmp_path / "sp", 4, engine="local")
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_state_file_is_refused_and_nothing_is_left(tmp_path):
    source = tmp_path / "in"
    shutil.copytree(FIXTURES / "heap-files-p3-maxp128-long", source)
    state_files = [p for p in source.iterdir() if p.name != "_metadata" and p.suffix != ".json"]
    victim = max(state_files, key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(InvalidInputError) as info:
        rescale(source, tmp_path / "sp", 4, engine="local")
    assert "Traceback" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_cli_rescales_a_savepoint(kg, tmp_path):
    source = FIXTURES / "heap-files-p3-maxp128-long"
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "sp", "--engine", "local", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["output_format"] == "flink-savepoint"
    keyed = next(op for op in doc["operators"] if op["uid"] == "keyed-state")
    # Same maxParallelism: key groups copied as bytes, entries not decoded (so not counted).
    assert keyed["mode"] == "regroup" and keyed["keyed_rows"] is None
    written = read_flink_metadata(tmp_path / "sp").metadata
    (op,) = (o for o in written.operators if o.uid == "keyed-state")
    sizes = [s.managed_keyed_state.delegate.size for s in op.subtasks]
    assert [s["keyed_file_bytes"] for s in keyed["subtasks"]] == sizes
    assert kg("check", tmp_path / "sp", "--parallelism", "4").exit_code == 0

    rehash = kg(
        "rescale", source, "--to", "4", "-m", "256", "--out", tmp_path / "m", "--engine", "local", "--json"
    )
    assert rehash.exit_code == 0, rehash.stderr
    doc = rehash.json()
    assert {op["mode"] for op in doc["operators"]} <= {"none", "rehash"}
    assert doc["savepoint"]["keyed_rows"] == sum(op["keyed_rows"] for op in doc["operators"]) > 0
    assert kg("check", tmp_path / "m", "--parallelism", "4", "--max-parallelism", "256").exit_code == 0


def test_copying_key_groups_starts_no_spark(tmp_path, monkeypatch):
    # Same maxParallelism: kg copies key-group blocks itself; a JVM would only cost seconds.
    import keygroup_cli.execution.engines.spark.jobs as spark_engine

    def refuse(*_args, **_kwargs):
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(spark_engine, "spark_session", refuse)
    monkeypatch.setattr(spark_engine, "spark_context", refuse)
    result = rescale(FIXTURES / "heap-files-p3-maxp128-long", tmp_path / "sp", 4, engine="spark")
    assert result.engine == "local" and result.regrouped is not None


@pytest.mark.parametrize("new_max", [None, 256])
def test_no_kg_snapshot_is_written_on_the_way(originals, tmp_path, monkeypatch, new_max):
    # Operator state is redistributed in memory and keyed state by tasks that write savepoint files:
    # nothing in a savepoint -> savepoint rescale writes Parquet (a kg snapshot's files).
    import pyarrow.parquet as pq

    name = "heap-files-p3-maxp128-long"
    with monkeypatch.context() as patch:

        def refuse(*_args, **_kwargs):
            raise AssertionError("a Parquet file was written")

        patch.setattr(pq, "ParquetWriter", refuse)
        patch.setattr(pq, "write_table", refuse)
        result = rescale(FIXTURES / name, tmp_path / "sp", 4, new_max_parallelism=new_max, engine="local")
    _same_state(originals[name], tmp_path / "sp", tmp_path)
    # kg's view of the result counts the operator state in the savepoint's own streams.
    written = read_flink_metadata(tmp_path / "sp").metadata
    (op,) = (o for o in written.operators if o.uid == "op-state")
    view = result.operator(op.operator_id)
    assert [f.bytes for f in view.operator_files] == [
        s.managed_operator_state.delegate.size for s in op.subtasks if s.managed_operator_state
    ]


def test_surgery_in_the_pass_is_the_same_on_spark_and_local(spark, tmp_path):
    """``--rename``/``--drop`` with a new maxParallelism: Spark's tasks write what the local engine writes."""
    from keygroup_cli.core.keygroups import operator_id_for_uid
    from keygroup_cli.planning.migration import MigrationRequest

    source = FIXTURES / "uid-heap-canonical-p3"
    migration = MigrationRequest(renames=(("keyed-long", "keyed-long-v2"),), drops=("keyed-string",))
    runs = {
        engine: rescale(
            source,
            tmp_path / engine,
            4,
            new_max_parallelism=256,
            migration=migration,
            engine=engine,
            spark=session,
        )  # fmt: skip
        for engine, session in (("local", None), ("spark", spark))
    }
    assert runs["spark"].engine == "spark"
    assert [c.action for c in runs["spark"].plan.migration] == ["drop", "rename"]
    for engine in runs:
        ops = read_flink_metadata(tmp_path / engine).metadata.operators
        assert {o.uid for o in ops if o.has_state} == {"uid-source", "keyed-long-v2"}
        assert operator_id_for_uid("keyed-string") not in {o.operator_id for o in ops}
        savepoint_to_snapshot(tmp_path / engine, tmp_path / f"{engine}.kg")
    diff = diff_snapshots(tmp_path / "local.kg", tmp_path / "spark.kg")
    assert diff.operators and all(op.same for op in diff.operators)
