"""``kg write``: exit codes, --json and --dry-run on a real Flink 2.3 savepoint (export → edit → write)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from keygroup_cli.flink import state_table
from tests.kg_fixture_state import FLINK_FIXTURES

HEAP = FLINK_FIXTURES / "heap-files-p3-maxp128-string"
TYPED = FLINK_FIXTURES / "typed-heap-canonical-p2"


def test_export_edit_write_round_trip(kg, tmp_path: Path) -> None:
    exported = tmp_path / "sum.parquet"
    assert kg("export", HEAP, "-o", "keyed-state", "--state", "sum", "--out", exported).exit_code == 0
    table = pq.read_table(exported)
    fixed = table.filter(pc.equal(table.column("key"), "key-8"))
    fixed = fixed.set_column(fixed.schema.get_field_index("value"), "value", pa.array([0], pa.int64()))
    pq.write_table(fixed, tmp_path / "fix.parquet")
    out = tmp_path / "sp-fixed"
    args = ("write", HEAP, "-o", "keyed-state", "--state", "sum", "--mode", "upsert", "--data")
    dry = kg(*args, tmp_path / "fix.parquet", "--out", out, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert not out.exists()
    result = kg(*args, tmp_path / "fix.parquet", "--out", out, "--json")
    assert result.exit_code == 0, result.stderr
    doc, planned = result.json(), dry.json()
    assert doc["command"] == "write" and doc["dry_run"] is False and planned["dry_run"] is True
    changes = doc["key_group_changes"]
    assert (
        changes
        == planned["key_group_changes"]
        == [
            {
                "operator_id": doc["operators"][0]["operator_id"],
                "state": "sum",
                "key_group": changes[0]["key_group"],
                "rows_before": changes[0]["rows_before"],
                "written_rows": 1,
                "deleted_rows": 1,
                "kept_rows": changes[0]["kept_rows"],
            }
        ]
    )
    assert doc["operators"][0]["uid"] == "keyed-state"
    (sum_state,) = doc["operators"][0]["states"]
    assert sum_state["name"] == "sum" and sum_state["rows_before"] == sum_state["rows_after"] == 200
    after = {r["key"]: r["value"] for r in state_table(out, "keyed-state", "sum").to_pylist()}
    before = {r["key"]: r["value"] for r in table.to_pylist()}
    assert after == before | {"key-8": 0}
    again = kg(*args, tmp_path / "fix.parquet", "--out", out)
    assert again.exit_code == 2 and "exists" in again.stderr


def test_refusals_have_their_exit_codes(kg, tmp_path: Path) -> None:
    kryo = tmp_path / "kryo.parquet"
    pq.write_table(state_table(TYPED, "typed-state", "kryo"), kryo)
    args = ("write", TYPED, "-o", "typed-state", "--state", "kryo", "--mode", "upsert", "--data", kryo)
    unsupported = kg(*args, "--out", tmp_path / "o1")
    assert (
        unsupported.exit_code == 4
        and "'value'" in unsupported.stderr
        and "Traceback" not in unsupported.stderr
    )
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    bad_data = kg(
        "write",
        HEAP,
        "-o",
        "keyed-state",
        "-s",
        "sum",
        "--mode",
        "delete",
        "--data",
        tmp_path / "junk.parquet",
        "--out",
        tmp_path / "o2",
    )
    assert bad_data.exit_code == 2 and "not a Parquet or Arrow file" in bad_data.stderr
    no_state = kg(
        "write",
        HEAP,
        "-o",
        "keyed-state",
        "-s",
        "nope",
        "--mode",
        "delete",
        "--data",
        kryo,
        "--out",
        tmp_path / "o3",
    )
    assert no_state.exit_code == 2 and "no state 'nope'" in no_state.stderr
    bad_time = kg(
        "write",
        HEAP,
        "-o",
        "keyed-state",
        "-s",
        "sum",
        "--mode",
        "upsert",
        "--data",
        kryo,
        "--out",
        tmp_path / "o4",
        "--ttl-timestamp",
        "yesterday",
    )
    assert bad_time.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.parquet", "kryo.parquet"]


def test_help_has_examples(kg) -> None:
    result = kg("write", "--help")
    assert result.exit_code == 0 and "Examples:" in result.stdout and "--mode" in result.stdout
