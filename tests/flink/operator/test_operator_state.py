"""Decode Flink operator-state files (split, union, broadcast, async in-flight) and write them back."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
from kg_fixture_state import (
    CANONICAL_CASES,
    FLINK_FIXTURES,
    expected,
    logical_async_elements,
    logical_operator_state,
)

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.operator.codec import decode_operator_file, write_operator_file
from keygroup_cli.flink.operator.header import OperatorStateHeader, operator_header_end, read_operator_header


def _operator_files(
    case: str,
) -> list[tuple[str, int, OperatorStateHandle, bytes, OperatorStateHeader, pa.Table]]:
    snapshot = read_flink_metadata(FLINK_FIXTURES / case)
    out = []
    for op in snapshot.metadata.operators:
        for subtask in op.subtasks:
            handle = subtask.managed_operator_state
            if handle is None:
                continue
            with StreamSource(handle.delegate, snapshot.directory) as src:
                data = src.read(0, src.size)
                end = operator_header_end(data, [o for e in handle.states for o in e.offsets], len(data))
                header = read_operator_header(data[:end], case, end)
                table = decode_operator_file(src, handle, header)
            out.append((op.name or "", subtask.index, handle, data, header, table))
    return out


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_operator_state_equals_flinks_expected_state(case: str) -> None:
    data = expected(case)
    files = _operator_files(case)
    op_state = {i: logical_operator_state(t) for name, i, _h, _d, _hd, t in files if name == "op-state"}
    want = data["operatorState"][0]
    assert sorted(op_state) == [s["index"] for s in want["subtasks"]]
    for sub in want["subtasks"]:
        got = op_state[sub["index"]]
        assert got["split-ids"] == sub["split-ids"]
        assert got["union-counts"] == sub["union-counts"]
        assert got["bcast"] == want["bcast"]
    in_flight = {i: logical_async_elements(t) for name, i, _h, _d, _hd, t in files if name == "async-wait"}
    for sub in data["asyncInFlight"]["subtasks"]:
        assert in_flight[sub["index"]] == {(e["value"], e["timestamp"]) for e in sub["elements"]}
    source = [t for name, _i, _h, _d, _hd, t in files if name.startswith("Source")]
    assert len(source) == 1 and source[0].num_rows == 0  # the split list is registered but empty


@pytest.mark.parametrize("case", CANONICAL_CASES)
def test_decode_then_encode_reproduces_flinks_bytes_and_offsets(case: str) -> None:
    for _name, _i, handle, data, header, table in _operator_files(case):
        end = header.end
        assert end is not None
        out = io.BytesIO()
        written = write_operator_file(out, data[:end], header, table, compressed=header.compressed)
        # Flink lists states in HashMap order in _metadata; the offsets per state are what matters.
        assert {e.name: e.offsets for e in written.states} == {e.name: e.offsets for e in handle.states}
        assert {e.name: e.mode for e in written.states} == {e.name: e.mode for e in handle.states}
        assert out.getvalue() == data


def test_compression_can_be_switched_and_read_back() -> None:
    _name, _i, handle, data, header, table = next(
        f for f in _operator_files("heap-files-p3-maxp128-long") if f[0] == "op-state"
    )
    assert header.end is not None
    out = io.BytesIO()
    written = write_operator_file(out, data[: header.end], header, table, compressed=True)
    raw = out.getvalue()
    new_header = read_operator_header(raw[: header.end], "x", header.end)
    assert new_header.compressed
    src = _Bytes(raw)
    again = decode_operator_file(src, OperatorStateHandle(4, written.states, None), new_header)  # type: ignore[arg-type]
    assert again.sort_by([("state", "ascending"), ("position", "ascending")]).equals(
        table.sort_by([("state", "ascending"), ("position", "ascending")])
    )


def test_unknown_state_is_refused() -> None:
    _name, _i, _handle, data, header, _table = _operator_files("heap-files-p3-maxp128-long")[0]
    assert header.end is not None
    rows = [{"state": "nope", "position": 0, "entry_key": None, "value": b"x"}]
    with pytest.raises(InvalidInputError, match="'nope' is not in the savepoint"):
        write_operator_file(io.BytesIO(), data[: header.end], header, rows, compressed=False)


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data, self.size, self.source = data, len(data), "<test>"

    def read(self, start: int, end: int) -> bytes:
        return self.data[start:end]
