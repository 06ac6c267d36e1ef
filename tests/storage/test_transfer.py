"""Bounded concurrency, retries and the metadata-last commit, on the local file system."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from keygroup_cli.core.errors import ExecutionError, InvalidArgumentError, InvalidInputError
from keygroup_cli.storage import location
from keygroup_cli.storage.transfer import commit_upload, in_flight, require_empty, retrying


def test_in_flight_keeps_input_order_and_bounds_concurrency():
    running = peak = 0
    lock = threading.Lock()

    def work(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02 if i % 3 == 0 else 0.001)  # some requests are slower than later ones
        with lock:
            running -= 1
        return i * 10

    assert list(in_flight(work, range(40), capacity=4, ordered=True)) == [i * 10 for i in range(40)]
    assert 1 < peak <= 4


def test_unordered_in_flight_yields_every_result_once():
    def work(i: int) -> int:
        time.sleep(0.01 * (5 - i % 5))
        return i

    results = list(in_flight(work, range(25), capacity=5, ordered=False))
    assert sorted(results) == list(range(25)) and results != list(range(25))


def test_in_flight_raises_the_first_failure():
    def work(i: int) -> int:
        if i == 7:
            raise InvalidInputError("boom", code="X")
        return i

    with pytest.raises(InvalidInputError, match="boom"):
        list(in_flight(work, range(50), capacity=3))


def test_retrying_retries_throttling_and_not_refusals():
    calls = []

    def throttled() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("AWS Error SLOW_DOWN during PutObject operation: 503 Slow Down")
        return "ok"

    assert retrying(throttled, "put", base=0.001) == "ok" and len(calls) == 3

    refused = []

    def missing() -> None:
        refused.append(1)
        raise InvalidInputError("x: no such file or object", code="OBJECT_NOT_FOUND")

    with pytest.raises(InvalidInputError):
        retrying(missing, "get", base=0.001)
    assert len(refused) == 1

    def always() -> None:
        raise OSError("503 Service Unavailable")

    with pytest.raises(ExecutionError, match="503"):
        retrying(always, "put", attempts=3, base=0.001)


def _tree(root: Path) -> Path:
    (root / "op").mkdir(parents=True)
    for i in range(12):
        (root / "op" / f"file-{i:02d}").write_bytes(bytes([i]) * (1000 + i))
    (root / "_metadata").write_bytes(b"meta")
    return root


def test_commit_upload_writes_the_commit_file_last(tmp_path):
    local = _tree(tmp_path / "local")
    target = location(str(tmp_path / "target"))
    order: list[str] = []

    def report(stage: str, done: int, total: int | None) -> None:
        present = sorted(
            p.name for p in (tmp_path / "target").rglob("*") if p.is_file() and p.name != ".kg-writer"
        )
        if "_metadata" in present:
            order.append(f"metadata with {len(present) - 1} state files")

    names = commit_upload(local, target, "_metadata", report, capacity=3)
    assert len(names) == 13
    assert order and order[0] == "metadata with 12 state files"
    assert all((tmp_path / "target" / n).read_bytes() == (local / n).read_bytes() for n in names)
    assert not (tmp_path / "target" / ".kg-writer").exists()  # the writer mark goes once committed


def test_a_failed_upload_leaves_no_commit_file_and_deletes_what_it_wrote(tmp_path):
    local = _tree(tmp_path / "local")
    # A directory where a state file should go: that one upload fails.
    (tmp_path / "target" / "op" / "file-05").mkdir(parents=True)
    target = location(str(tmp_path / "target"))
    with pytest.raises(Exception):  # noqa: B017 - whatever the file system raises for it
        commit_upload(local, target, "_metadata", capacity=2)
    left = sorted(p.name for p in (tmp_path / "target").rglob("*") if p.is_file())
    assert "_metadata" not in left and left == []


def test_an_occupied_target_is_refused(tmp_path):
    (tmp_path / "t").mkdir()
    require_empty(location(str(tmp_path / "t")))  # an empty directory is fine
    (tmp_path / "t" / "x").write_bytes(b"1")
    with pytest.raises(InvalidArgumentError, match="holds objects already"):
        require_empty(location(str(tmp_path / "t")))
