from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.findings import FINDING_CODES, Severity
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.checksums import file_digest
from keygroup_cli.snapshot.synthetic import SyntheticOperator, generate_snapshot
from keygroup_cli.snapshot.verify import verify_snapshot


@pytest.fixture
def snap(tmp_path: Path) -> Path:
    dest = tmp_path / "snap"
    generate_snapshot(
        dest,
        [SyntheticOperator("counter", "string", 60, 2, 16), SyntheticOperator("bin", "binary", 20, 2, 8)],
        seed=2,
        created_at="2026-01-01T00:00:00Z",
    )
    return dest


def _codes(path: Path) -> list[str]:
    report = verify_snapshot(path)
    assert all(f.code in FINDING_CODES for f in report.findings)
    return sorted({f.code for f in report.findings})


def _manifest(path: Path) -> dict:
    return json.loads((path / "_manifest.json").read_text())


def _save(path: Path, manifest: dict) -> None:
    (path / "_manifest.json").write_text(json.dumps(manifest))


def _rewrite(
    path: Path, transform: Callable[[pa.Table], pa.Table], *, keyed: bool = True, recount: bool = False
) -> str:
    """Rewrite counter's first keyed (or operator) file with plain pyarrow; re-digest it in the manifest."""
    manifest = _manifest(path)
    entry = manifest["operators"][0]["keyed_files" if keyed else "operator_files"][0]
    target = path / entry["path"]
    table = transform(pq.read_table(target))
    pq.write_table(table, target)
    entry["bytes"], entry["xxh64"] = file_digest(target)
    if recount:
        kg = table.column("key_group").to_numpy() - entry["key_group_start"]
        size = entry["key_group_end"] - entry["key_group_start"] + 1
        entry["key_group_rows"] = np.bincount(kg[(kg >= 0) & (kg < size)], minlength=size).tolist()
        entry["rows"] = sum(entry["key_group_rows"])
    _save(path, manifest)
    return entry["path"]


def test_generated_snapshot_is_clean(snap: Path) -> None:
    progress: list[tuple[int, int | None]] = []
    report = verify_snapshot(snap, on_progress=lambda _s, done, total: progress.append((done, total)))
    assert report.ok and report.findings == ()
    assert report.files == 8 and progress[-1] == (8, 8)
    operators = open_snapshot(snap).manifest.operators
    assert report.rows == sum(f.rows for op in operators for f in op.files)


def test_missing_extra_and_resized_files(snap: Path) -> None:
    (snap / "counter" / "keyed-00001.parquet").unlink()
    (snap / "counter" / "stray.txt").write_text("x")
    with (snap / "counter" / "operator-00000.parquet").open("ab") as fh:
        fh.write(b"\0")
    report = verify_snapshot(snap)
    assert not report.ok
    found = {(f.code, f.subject) for f in report.findings}
    assert found == {
        ("FILE_MISSING", "counter/keyed-00001.parquet"),
        ("FILE_EXTRA", "counter/stray.txt"),
        ("FILE_SIZE_MISMATCH", "counter/operator-00000.parquet"),
    }
    assert all(f.message.startswith(f.subject + ": ") for f in report.findings)


def test_same_size_corruption(snap: Path) -> None:
    path = snap / "counter" / "keyed-00000.parquet"
    data = bytearray(path.read_bytes())
    data[4] ^= 0xFF
    path.write_bytes(bytes(data))
    assert _codes(snap) == ["FILE_CHECKSUM_MISMATCH"]


def test_unreadable_file_with_matching_digest(snap: Path) -> None:
    manifest = _manifest(snap)
    entry = manifest["operators"][0]["keyed_files"][0]
    (snap / entry["path"]).write_bytes(b"garbage, not parquet")
    entry["bytes"], entry["xxh64"] = file_digest(snap / entry["path"])
    _save(snap, manifest)
    assert _codes(snap) == ["FILE_UNREADABLE", "KEY_GROUP_COUNTS_MISMATCH"] or _codes(snap) == [
        "FILE_UNREADABLE"
    ]


def test_row_in_wrong_key_group(snap: Path) -> None:
    def move(t: pa.Table) -> pa.Table:
        kg = t.column("key_group").to_pylist()
        kg[0] = 1 if kg[0] == 0 else 0
        return t.set_column(0, pa.field("key_group", pa.int32(), False), pa.array(kg, pa.int32())).sort_by(
            "key_group"
        )

    _rewrite(snap, move, recount=True)
    report = verify_snapshot(snap)
    assert [f.code for f in report.findings] == ["KEY_GROUP_WRONG_FOR_KEY"]
    assert "Flink assigns" in report.findings[0].message


def test_unsorted_out_of_range_and_counts(snap: Path) -> None:
    _rewrite(snap, lambda t: t.take(pa.array(np.arange(t.num_rows)[::-1])))
    assert _codes(snap) == ["KEY_GROUPS_UNSORTED"]


def test_out_of_range_key_group(snap: Path) -> None:
    def outside(t: pa.Table) -> pa.Table:
        kg = t.column("key_group").to_pylist()
        kg[-1] = 15
        return t.set_column(0, pa.field("key_group", pa.int32(), False), pa.array(kg, pa.int32()))

    _rewrite(snap, outside)
    codes = _codes(snap)
    assert "KEY_GROUP_OUT_OF_RANGE" in codes and "KEY_GROUP_COUNTS_MISMATCH" in codes


def test_undeclared_state_and_bad_shapes(snap: Path) -> None:
    def mangle(t: pa.Table) -> pa.Table:
        states = t.column("state").cast(pa.string()).to_pylist()
        timer = states.index("_timer_state/event_user-timers")
        count = states.index("count")
        states[count] = "nope"
        values = t.column("value").to_pylist()
        values[timer] = b"a timer has no value"
        t = t.set_column(1, "state", pa.array(states).dictionary_encode())
        return t.set_column(5, "value", pa.array(values, pa.binary()))

    _rewrite(snap, mangle)
    report = verify_snapshot(snap)
    assert sorted(f.code for f in report.findings) == ["STATE_ROW_SHAPE", "STATE_UNDECLARED"]
    assert any("'nope'" in f.message for f in report.findings)


def test_schema_mismatch(snap: Path) -> None:
    _rewrite(snap, lambda t: t.set_column(2, "key", pc.binary_length(t.column("key")).cast(pa.int64())))
    assert _codes(snap) == ["FILE_SCHEMA_MISMATCH"]


def test_operator_positions_and_broadcast_shape(snap: Path) -> None:
    def mangle(t: pa.Table) -> pa.Table:
        positions = t.column("position").to_pylist()
        positions[0] = 7
        keys = t.column("entry_key").to_pylist()
        keys[-1] = None  # a broadcast entry without its key
        return t.set_column(1, "position", pa.array(positions, pa.int32())).set_column(
            2, "entry_key", pa.array(keys, pa.binary())
        )

    _rewrite(snap, mangle, keyed=False)
    assert _codes(snap) == ["OPERATOR_STATE_POSITIONS", "STATE_ROW_SHAPE"]


def test_replicated_union_copies_must_agree(snap: Path, tmp_path: Path) -> None:
    from keygroup_cli.execution.routes.rescale import rescale

    out = rescale(snap, tmp_path / "r", 3, operators=["counter"], engine="local").output
    assert verify_snapshot(out).ok  # the marked copies are identical

    def drop_a_union_element(t: pa.Table) -> pa.Table:
        union_rows = pc.equal(t.column("state").cast(pa.string()), "offsets").to_pylist()
        keep = [True] * t.num_rows
        keep[max(i for i, u in enumerate(union_rows) if u)] = False
        return t.filter(pa.array(keep))

    path = _rewrite(out, drop_a_union_element, keyed=False, recount=False)
    manifest = _manifest(out)
    entry = next(f for f in manifest["operators"][0]["operator_files"] if f["path"] == path)
    entry["rows"] = pq.read_metadata(out / path).num_rows
    _save(out, manifest)
    report = verify_snapshot(out)
    assert [f.code for f in report.findings] == ["UNION_REPLICAS_DIFFER"]
    assert "'offsets'" in report.findings[0].message


def test_replicated_marker_only_on_union_state(snap: Path) -> None:
    manifest = _manifest(snap)
    manifest["operators"][0]["states"][0]["replicated"] = True
    _save(snap, manifest)
    with pytest.raises(InvalidInputError, match="'replicated' must be a boolean on an operator-union"):
        open_snapshot(snap)


def test_operator_id_not_uid_hash_is_a_warning(snap: Path) -> None:
    manifest = _manifest(snap)
    manifest["operators"][0]["operator_id"] = "0" * 32
    _save(snap, manifest)
    report = verify_snapshot(snap)
    assert report.ok and [(f.code, f.severity) for f in report.findings] == [
        ("OPERATOR_ID_NOT_UID_HASH", Severity.WARNING)
    ]


def test_invalid_manifest_raises(snap: Path) -> None:
    (snap / "_manifest.json").write_text("{")
    with pytest.raises(InvalidInputError):
        verify_snapshot(snap)
