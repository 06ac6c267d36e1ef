"""What the Spark engine's tasks do with their records, without a Spark session.

A reduce task receives its shuffle blocks in whatever order Spark delivers them; it must hand its file
writer each bucket whole, buckets ascending, each bucket's blocks in (read task, batch) order, so the file
does not depend on the shuffle's order. And a state read as a DataFrame must come in Spark's units.
"""

from __future__ import annotations

import random

import pyarrow as pa

from keygroup_cli.execution.engines.spark.data import _spark_arrow_schema
from keygroup_cli.execution.engines.spark.tasks import _buckets, partition_of_key
from keygroup_cli.execution.engines.spill import ipc_bytes


def _block(bucket: int, order: int, seq: int) -> bytes:
    # Each row names where it came from, so the order it comes back in can be read off the table.
    return ipc_bytes(pa.table({"bucket": [bucket] * 2, "order": [order] * 2, "seq": [seq, seq]}))


def test_a_reduce_task_reassembles_buckets_in_input_order_whatever_the_shuffle_order() -> None:
    keys = [(7, bucket, order, seq) for bucket in (3, 0, 5) for order in (2, 0, 1) for seq in (1, 0)]
    records = [(key, _block(*key[1:])) for key in keys]
    random.Random(4).shuffle(records)
    received = [0]
    tables = list(_buckets(records, received))
    assert [t.column("bucket").unique().to_pylist() for t in tables] == [[0], [3], [5]]
    for table in tables:
        seen = list(zip(table.column("order").to_pylist(), table.column("seq").to_pylist(), strict=True))
        assert seen == sorted(seen) and len(seen) == 12
    assert received == [len(keys) * 2]
    assert {partition_of_key(key) for key, _ in records} == {7}


def test_spark_gets_microsecond_timestamps_however_deep() -> None:
    schema = pa.schema(
        [
            pa.field("at", pa.timestamp("ns", "UTC")),
            pa.field("nested", pa.struct([pa.field("t", pa.timestamp("ns"))])),
            pa.field("times", pa.list_(pa.timestamp("ms"))),
            pa.field("by", pa.map_(pa.string(), pa.timestamp("ns"))),
            pa.field("n", pa.int64()),
        ]
    )
    conformed = _spark_arrow_schema(schema)
    assert conformed.field("at").type == pa.timestamp("us", "UTC")
    assert conformed.field("nested").type.field("t").type == pa.timestamp("us")
    assert conformed.field("times").type.value_type == pa.timestamp("us")
    assert conformed.field("by").type.item_type == pa.timestamp("us")
    assert conformed.field("n").type == pa.int64()
