"""``execution.engines.spill``: stretches read back in read-task order; refusals in one line.

The engines' own agreement (local against Spark's shared-store exchange) is in test_spark_exchange.py; here
the descriptors are checked on real files, without Spark.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.execution.engines.spill import (
    SpilledTask,
    Stretch,
    attempt_file,
    read_stretches,
    subtask_stretches,
)


def _task(path: Path, pieces: list[tuple[int, int, bytes]]) -> SpilledTask:
    """Write ``(new subtask, bucket, bytes)`` pieces back to back into ``path``, as a read task would."""
    rows, offset = [], 0
    with path.open("wb") as out:
        for subtask, bucket, data in pieces:
            out.write(data)
            rows.append((subtask, bucket, offset, len(data), 1))
            offset += len(data)
    return SpilledTask(str(path), len(rows), np.array(rows, dtype=np.int64).reshape(-1, 5))


def test_a_subtasks_buckets_come_ascending_each_in_read_task_order(tmp_path: Path) -> None:
    # Two read tasks, each writing two batches: within a file buckets interleave across batches.
    first = _task(
        tmp_path / "r0", [(0, 1, b"a1"), (1, 5, b"A5"), (0, 0, b"a0"), (0, 1, b"b1"), (1, 5, b"B5")]
    )
    second = _task(tmp_path / "r1", [(0, 0, b"c0"), (0, 1, b"c1"), (1, 4, b"C4")])
    subtasks = subtask_stretches([first, second], 3)
    assert [s.entries for s in subtasks] == [5, 3, 0]

    def buckets(j: int) -> dict[int, bytes]:
        s = subtasks[j]
        out: dict[int, bytes] = {}
        for bucket in sorted(set(s.table[:, 1].tolist())):
            mine = s.table[s.table[:, 1] == bucket]
            stretches = [Stretch(s.paths[f], o, n) for f, _b, o, n in mine.tolist()]
            out[bucket] = bytes(read_stretches(stretches))
        return out

    assert buckets(0) == {0: b"a0c0", 1: b"a1b1c1"}
    assert buckets(1) == {4: b"C4", 5: b"A5B5"}
    assert buckets(2) == {} and subtasks[2].paths == ()


def test_each_attempt_gets_a_file_of_its_own(tmp_path: Path) -> None:
    names = {attempt_file(str(tmp_path), "0000-00003-a0") for _ in range(3)}
    assert len(names) == 3 and all(Path(n).parent == tmp_path for n in names)


def test_a_missing_or_short_spill_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ExecutionError, match="spill file .*gone.* is missing") as info:
        read_stretches([Stretch(str(tmp_path / "gone"), 0, 4)])
    assert info.value.code == "SPILL_MISSING" and info.value.exit_code == 5
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    with pytest.raises(ExecutionError, match="shorter than what was written") as info:
        read_stretches([Stretch(str(short), 1, 4)])
    assert info.value.code == "SPILL_MISSING"


def test_stretches_on_a_store_are_read_by_range_and_a_missing_object_is_one_error(tmp_path: Path) -> None:
    # A file:// URI goes through the storage layer as an object store does (ranged reads, no seek).
    data = bytes(range(256)) * 40
    (tmp_path / "f").write_bytes(data)
    uri = (tmp_path / "f").as_uri()
    stretches = [Stretch(uri, 10, 5), Stretch(uri, 15, 20), Stretch(uri, 1000, 3000), Stretch(uri, 0, 4)]
    assert bytes(read_stretches(stretches)) == data[10:35] + data[1000:4000] + data[0:4]
    with pytest.raises(ExecutionError, match="missing from the exchange") as info:
        read_stretches([Stretch((tmp_path / "gone").as_uri(), 0, 4)])
    assert info.value.code == "SPILL_MISSING"
    with pytest.raises(ExecutionError, match="shorter than what was written") as info:
        read_stretches([Stretch(uri, len(data) - 2, 4)])
    assert info.value.code == "SPILL_MISSING"
