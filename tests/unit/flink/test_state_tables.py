"""read_state: one keyed state as a typed Arrow table, for every layout (Python API)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import keygroup_cli as kg
from tests.kg_fixture_state import FLINK_FIXTURES, expected


@pytest.mark.parametrize("case", ["rocksdb-native-files-p2-maxp128-long", "heap-files-p3-maxp128-long"])
def test_read_state_returns_the_jobs_list_values(case: str) -> None:
    table = kg.read_state(FLINK_FIXTURES / case, "keyed-state", "ids")
    assert isinstance(table, pa.Table)
    assert table.schema.field("key").type == pa.int64()
    assert table.schema.field("value").type == pa.list_(pa.int64())
    want = {k["key"]: k["ids"] for k in expected(case)["keyedOperators"][0]["keys"]}
    assert {r["key"]: r["value"] for r in table.to_pylist()} == want


def test_ttl_values_keep_their_timestamp() -> None:
    table = kg.read_state(FLINK_FIXTURES / "typed-heap-canonical-p2", "typed-state", "ttl-map")
    assert table.schema.field("value").type == pa.struct(
        [("value", pa.int64()), ("ttl_last_access", pa.int64())]
    )
    assert table.num_rows == 24 and all(r["value"]["ttl_last_access"] > 0 for r in table.to_pylist())
