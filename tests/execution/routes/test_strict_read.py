"""A rescale refuses every block ``kg verify`` refuses, though the CLI no longer decodes blocks up front.

``kg rescale`` checks a savepoint's metadata-level structure first (sizes, ranges, offsets, headers,
operator streams: ``require_intact(blocks=False)``) and leaves key-group blocks to the read tasks, which
decode them strictly (``decode_keyed_file(strict=True)``), on Spark's executors too; blocks copied as
bytes are checked as ``kg verify`` checks them in the pass that copies them. Either way a corrupt block is
exit 3. A snappy frame whose CRC32C does not hold decodes to the right bytes, so only that
strictness refuses it: Flink itself reads frames unchecked.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import run
from keygroup_cli.flink.check.verify import verify_flink
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata

ROOT = Path(__file__).resolve().parents[3]
SNAPPY = ROOT / "fixtures" / "flink" / "2.3" / "heap-snappy-files-p3-maxp128-long"


def _bad_crc(tmp_path: Path) -> Path:
    """Copy the fixture and break the masked CRC32C of the first chunk of subtask 1's first key group."""
    copy = tmp_path / "in.sp"
    shutil.copytree(SNAPPY, copy)
    metadata = read_flink_metadata(copy).metadata
    handle = next(
        s.managed_keyed_state
        for op in metadata.operators
        for s in op.subtasks
        if s.index == 1 and isinstance(s.managed_keyed_state, KeyGroupsHandle)
    )
    path = copy / handle.delegate.relative_path
    data = bytearray(path.read_bytes())
    start = next(off for off in handle.offsets if off)
    # Stream identifier chunk (10 bytes), then a chunk: type, 3-byte length, 4-byte CRC, data.
    assert data[start : start + 10] == b"\xff\x06\x00\x00sNaPpY"
    crc_at = start + 10 + 4
    (crc,) = struct.unpack_from("<I", data, crc_at)
    struct.pack_into("<I", data, crc_at, crc ^ 0x1)
    path.write_bytes(bytes(data))
    return copy


def _kg(*args: str | Path, engine: str = "local") -> tuple[int, dict[str, object]]:
    with CliRunner().isolation() as (out, err, _):
        code = run([*map(str, args), "--json", "--engine", engine])
    text = out.getvalue().decode() or err.getvalue().decode()
    return code, json.loads(text)


def test_the_check_before_a_rescale_reads_no_block(tmp_path: Path) -> None:
    broken = _bad_crc(tmp_path)
    deep = verify_flink(broken)
    assert [f.code for f in deep.findings] == ["FLINK_SNAPPY_CRC"]
    shallow = verify_flink(broken, blocks=False)
    assert shallow.findings == ()
    assert shallow.files == deep.files


@pytest.mark.parametrize(
    ("args", "engine"),
    [
        (("--to", "4", "--max-parallelism", "1024"), "local"),
        (("--to", "4", "--max-parallelism", "1024"), "spark"),
        (("--to", "4"), "local"),
    ],
    ids=["read-tasks-local", "read-tasks-spark", "copied-as-bytes"],
)
def test_a_rescale_refuses_a_frame_whose_crc_does_not_hold(
    tmp_path: Path, args: tuple[str, ...], engine: str
) -> None:
    broken = _bad_crc(tmp_path)
    before = {p.name: p.read_bytes() for p in broken.iterdir()}
    dest = tmp_path / "out"
    code, doc = _kg("rescale", broken, *args, "--out", dest, engine=engine)
    # Exit 3 (invalid input) with the reader's code, also when the block failed inside a Spark task.
    assert code == 3, doc
    error = doc["error"]
    assert isinstance(error, dict) and "CRC" in str(error["message"]), error
    # Read tasks report the reader's code; a copy reports kg verify's finding for the block it copies.
    assert error["code"] == ("SNAPPY_CRC" if args[-1] == "1024" else "INPUT_FAILS_VERIFY")
    assert not dest.exists()
    assert {p.name: p.read_bytes() for p in broken.iterdir()} == before
    # The intact fixture goes through the same command.
    assert _kg("rescale", SNAPPY, *args, "--out", tmp_path / "ok")[0] == 0
