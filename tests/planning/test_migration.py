"""The migration plan (keygroup_cli/planning/migration.py) on real Flink 1.20 (V4) and 2.3 (V6) metadata."""

from __future__ import annotations

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.keygroups import operator_id_for_uid
from keygroup_cli.flink.io.stream_handles import ByteStreamHandle, FileHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.reader import CheckpointMetadata, parse_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from keygroup_cli.planning.migration import MigrationRequest, parse_pair, plan_migration
from tests.conftest import FIXTURES

V6 = FIXTURES / "flink" / "2.3" / "uid-heap-canonical-p3"
V4 = FIXTURES / "flink" / "1.20" / "uid-heap-canonical-p3"
INCREMENTAL = [FIXTURES / "flink" / v / "uid-rocksdb-incremental-p3" for v in ("1.20", "2.3")]
LONG = operator_id_for_uid("keyed-long")
STRING = operator_id_for_uid("keyed-string")


def _metadata(path) -> CheckpointMetadata:
    return read_flink_metadata(path).metadata


def _ops(metadata: CheckpointMetadata) -> dict[str, object]:
    return {op.operator_id: op for op in metadata.operators}


def _leaves(value, kinds):
    """Every handle of one of ``kinds`` anywhere in ``value`` (dataclasses and tuples walked)."""
    import dataclasses

    if isinstance(value, kinds):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _leaves(v, kinds)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _leaves(getattr(value, f.name), kinds)


def test_rename_on_v6_moves_id_uid_and_name_and_keeps_the_rest() -> None:
    old = _metadata(V6)
    plan = plan_migration(old, MigrationRequest(renames=(("keyed-long", "keyed-long-v2"),)))
    new_id = operator_id_for_uid("keyed-long-v2")
    ops = _ops(plan.metadata)
    assert LONG not in ops and new_id in ops
    moved = ops[new_id]
    assert (moved.uid, moved.name) == ("keyed-long-v2", "keyed-long-v2")
    before = _ops(old)[LONG]
    assert moved.subtasks == before.subtasks  # relative handles stay as they were
    assert plan.metadata.checkpoint_id == old.checkpoint_id
    assert [op.operator_id for op in plan.metadata.operators] == [
        new_id if op.operator_id == LONG else op.operator_id for op in old.operators
    ]
    [change] = plan.changes
    assert (change.action, change.operator_id, change.new_operator_id, change.has_state) == (
        "rename",
        LONG,
        new_id,
        True,
    )
    # What the writer encodes reads back identically (the commit's own check).
    assert parse_metadata(write_metadata(plan.metadata)) == plan.metadata


def test_rename_on_v4_changes_the_id_only() -> None:
    plan = plan_migration(_metadata(V4), MigrationRequest(renames=(("keyed-long", "x"),)))
    moved = _ops(plan.metadata)[operator_id_for_uid("x")]
    assert (moved.uid, moved.name) == (None, None)
    assert parse_metadata(write_metadata(plan.metadata)) == plan.metadata


def test_drop_removes_the_operator_and_its_files() -> None:
    old = _metadata(V6)
    plan = plan_migration(old, MigrationRequest(drops=("keyed-string",)))
    assert STRING not in _ops(plan.metadata)
    assert len(plan.metadata.operators) == len(old.operators) - 1
    dropped = {h.relative_path for h in _leaves(_ops(old)[STRING], RelativeFileHandle)}
    assert dropped and not dropped & {f.target for f in plan.files}
    kept = {h.relative_path for op in plan.metadata.operators for h in _leaves(op, RelativeFileHandle)}
    assert kept == {f.target for f in plan.files}


def test_assign_uid_needs_an_operator_without_uid() -> None:
    with pytest.raises(InvalidArgumentError) as err:
        plan_migration(_metadata(V6), MigrationRequest(assignments=((LONG, "x"),)))
    assert err.value.code == "OPERATOR_HAS_UID" and "--rename keyed-long=x" in err.value.message
    # V4 records no uids: the id is all there is.
    plan = plan_migration(_metadata(V4), MigrationRequest(assignments=((LONG.upper(), "x"),)))
    assert operator_id_for_uid("x") in _ops(plan.metadata)
    assert plan.changes[0].action == "assign-uid"


def test_assign_uid_by_uid_is_refused() -> None:
    with pytest.raises(InvalidArgumentError) as err:
        plan_migration(_metadata(V4), MigrationRequest(assignments=(("keyed-long", "x"),)))
    assert err.value.code == "OPERATOR_NOT_IN_SAVEPOINT"


@pytest.mark.parametrize(
    "request_, code",
    [
        (MigrationRequest(renames=(("nope", "x"),)), "OPERATOR_NOT_IN_SAVEPOINT"),
        (MigrationRequest(drops=("nope",)), "OPERATOR_NOT_IN_SAVEPOINT"),
        (MigrationRequest(renames=(("keyed-long", "keyed-string"),)), "OPERATOR_ID_TAKEN"),
        (MigrationRequest(renames=(("keyed-long", "a"), ("keyed-string", "a"))), "OPERATOR_ID_TAKEN"),
        (MigrationRequest(renames=(("keyed-long", "a"),), drops=("keyed-long",)), "OPERATOR_CHANGED_TWICE"),
    ],
)
def test_refusals(request_: MigrationRequest, code: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        plan_migration(_metadata(V6), request_)
    assert err.value.code == code and err.value.exit_code == 2


def test_rename_onto_state_allowed_once_that_state_moves_or_goes() -> None:
    old = _metadata(V6)
    swapped = plan_migration(
        old, MigrationRequest(renames=(("keyed-long", "keyed-string"), ("keyed-string", "keyed-long")))
    )
    assert _ops(swapped.metadata)[STRING].subtasks == _ops(old)[LONG].subtasks
    assert _ops(swapped.metadata)[LONG].subtasks == _ops(old)[STRING].subtasks
    dropped = plan_migration(
        old, MigrationRequest(renames=(("keyed-long", "keyed-string"),), drops=("keyed-string",))
    )
    assert _ops(dropped.metadata)[STRING].subtasks == _ops(old)[LONG].subtasks


def test_rename_onto_a_stateless_entry_replaces_it() -> None:
    old = _metadata(V6)
    sink = operator_id_for_uid("long-sink")
    assert not _ops(old)[sink].has_state
    plan = plan_migration(old, MigrationRequest(renames=(("keyed-long", "long-sink"),)))
    assert plan.changes[0].replaces == sink
    assert len(plan.metadata.operators) == len(old.operators) - 1
    assert _ops(plan.metadata)[sink].subtasks == _ops(old)[LONG].subtasks


@pytest.mark.parametrize("case", INCREMENTAL)
def test_absolute_handles_become_relative_copies(case) -> None:
    # A RocksDB incremental checkpoint names its shared/ files by absolute path.
    old = _metadata(case)
    assert list(_leaves(old.operators, FileHandle))
    plan = plan_migration(old, MigrationRequest())
    assert not list(_leaves(plan.metadata.operators, FileHandle))
    relative = {h.relative_path for h in _leaves(plan.metadata.operators, RelativeFileHandle)}
    assert relative == {f.target for f in plan.files} and len(relative) == len(plan.files)
    assert all("/" not in name for name in relative)
    # Inline state stays inline.
    assert list(_leaves(plan.metadata.operators, ByteStreamHandle)) == list(
        _leaves(old.operators, ByteStreamHandle)
    )


@pytest.mark.parametrize("value", ["a", "=b", "a=", ""])
def test_parse_pair_refuses(value: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        parse_pair(value, "--rename")
    assert err.value.code == "INVALID_OPTION"


def test_parse_pair_splits_at_the_last_equals() -> None:
    assert parse_pair("a=b=c", "--rename") == ("a=b", "c")


# ---------------------------------------------------------------------------------------------
# apply_migration(): the migration of kg rescale, applied in memory to the opened savepoint


def test_operate_renames_and_drops_in_memory_and_keeps_what_was_read() -> None:
    from keygroup_cli.flink.savepoint import open_savepoint
    from keygroup_cli.planning.migration import apply_migration

    opened = open_savepoint(V6)
    keyed = opened.keyed_streams  # read before the migration: kept under the new ids, not read again
    request = MigrationRequest(renames=(("keyed-long", "keyed-long-v2"),), drops=("keyed-string",))
    migrated = apply_migration(opened, request, ["keyed-long"])
    new_id = operator_id_for_uid("keyed-long-v2")
    assert [(c.action, c.operator_id, c.new_operator_id) for c in migrated.changes] == [
        ("drop", STRING, None),
        ("rename", LONG, new_id),
    ]
    changed = migrated.savepoint
    ops = _ops(changed.metadata)
    assert STRING not in ops and LONG not in ops and ops[new_id].uid == "keyed-long-v2"
    assert changed.metadata.checkpoint_id == opened.metadata.checkpoint_id
    assert changed.metadata_path == opened.metadata_path and changed.raw == b""
    streams = changed.keyed_streams_read()
    assert streams is not None and set(streams) == {new_id}
    assert [s.operator_id for s in streams[new_id]] == [new_id] * 3
    assert [s.raw_header for s in streams[new_id]] == [s.raw_header for s in keyed[LONG]]
    # The rescale's --operator keyed-long (the old uid) names the renamed operator by its new id.
    assert migrated.operators == (new_id,)
    assert opened.metadata.operators == read_flink_metadata(V6).metadata.operators  # input untouched


def test_operate_without_surgery_is_the_savepoint_itself() -> None:
    from keygroup_cli.flink.savepoint import open_savepoint
    from keygroup_cli.planning.migration import apply_migration

    opened = open_savepoint(V4)
    migrated = apply_migration(opened, MigrationRequest(), ("keyed-long",))
    assert migrated.savepoint is opened and migrated.changes == () and migrated.operators == ("keyed-long",)


def test_operate_labels_prefer_the_new_names_and_refuse_a_dropped_operator() -> None:
    from keygroup_cli.flink.savepoint import open_savepoint
    from keygroup_cli.planning.migration import apply_migration

    opened = open_savepoint(V6)
    # A swap: after it, "keyed-long" names what was keyed-string.
    swap = MigrationRequest(renames=(("keyed-long", "keyed-string"), ("keyed-string", "keyed-long")))
    assert apply_migration(opened, swap, ["keyed-long"]).operators == ("keyed-long",)
    assert _ops(apply_migration(opened, swap).savepoint.metadata)[LONG].uid == "keyed-long"
    with pytest.raises(InvalidArgumentError) as err:
        apply_migration(opened, MigrationRequest(drops=("keyed-long",)), ["keyed-long"])
    assert err.value.code == "OPERATOR_DROPPED"
