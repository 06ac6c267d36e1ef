"""Worker threads: how many, and a map that keeps its input's order whatever finishes first."""

from __future__ import annotations

import resource
import subprocess
import sys
import threading
import time

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.workers import DEFAULT_MAX, FD_RESERVE, WORKERS_ENV, ordered_map, worker_count


def test_worker_count_takes_the_request_then_the_environment_then_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert worker_count(5) == 5
    assert worker_count() == 3
    monkeypatch.delenv(WORKERS_ENV)
    assert 1 <= worker_count() <= DEFAULT_MAX


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_worker_count_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(WORKERS_ENV, value)
    with pytest.raises(InvalidArgumentError, match=WORKERS_ENV) as caught:
        worker_count()
    assert caught.value.code == "INVALID_WORKERS"
    assert "\n" not in str(caught.value)
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        worker_count(0)


def test_results_come_in_input_order_though_later_items_finish_first() -> None:
    finished: list[int] = []
    lock = threading.Lock()

    def slow_first(n: int) -> int:
        time.sleep(0.05 if n % 4 == 0 else 0.001)
        with lock:
            finished.append(n)
        return n * n

    assert list(ordered_map(slow_first, range(12), 3)) == [n * n for n in range(12)]
    assert finished != sorted(finished)  # they did run at once, and out of order
    assert len({*finished}) == 12


def test_calls_run_on_several_threads_at_once() -> None:
    barrier = threading.Barrier(3, timeout=10)

    def meet(n: int) -> str:
        barrier.wait()  # only returns once three calls are running together
        return threading.current_thread().name

    names = list(ordered_map(meet, range(3), 3))
    assert len(set(names)) == 3
    assert all(name.startswith("kg-worker") for name in names)


def test_one_worker_runs_in_the_callers_thread() -> None:
    me = threading.current_thread().name
    assert list(ordered_map(lambda _n: threading.current_thread().name, range(3), 1)) == [me] * 3


def test_the_first_failure_is_raised_and_the_rest_stop() -> None:
    started: list[int] = []
    stop = threading.Event()

    def fail_at_two(n: int) -> int:
        started.append(n)
        if n == 2:
            raise ValueError("item 2 is bad")
        if n > 2:
            stop.wait(5)  # a long task that checks the stop flag
            if stop.is_set():
                return -1
        return n

    got: list[int] = []
    began = time.monotonic()
    with pytest.raises(ValueError, match="item 2 is bad"):
        for value in ordered_map(fail_at_two, range(40), 2, stop):
            got.append(value)
    assert got in ([], [0], [0, 1])  # results before the failure may or may not have been handed on
    assert stop.is_set()
    assert time.monotonic() - began < 4  # running tasks saw the flag; nothing waited 5 s
    assert len(started) < 40  # items not yet started were cancelled


def test_at_most_two_calls_per_worker_run_ahead_of_the_consumer() -> None:
    started: list[int] = []

    def note(n: int) -> int:
        started.append(n)
        return n

    results = ordered_map(note, range(50), 2)
    assert next(results) == 0
    time.sleep(0.1)
    assert len(started) <= 5  # item 0 and at most 2 * workers more
    assert list(results) == list(range(1, 50))


def _under_limits(soft: int, hard: int, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child whose open-file limits are ``soft`` / ``hard`` (this process keeps its own)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


_FIT = (
    "import resource\n"
    "from keygroup_cli.core.errors import KgError\n"
    "from keygroup_cli.core.workers import workers_within_open_files\n"
    "try:\n"
    "    fit = workers_within_open_files(256, 4)\n"
    "except KgError as e:\n"
    "    print('error', e.code, e)\n"
    "else:\n"
    "    print(fit, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
)


def test_a_low_soft_limit_on_open_files_is_raised_for_every_worker() -> None:
    # macOS shells default to 256: four workers of 256 spill files each need 1,088.
    done = _under_limits(256, 4096, _FIT)
    assert done.stdout.split() == ["4", str(4 * 256 + FD_RESERVE)], done.stderr


def test_a_hard_limit_that_fits_fewer_workers_gets_fewer() -> None:
    done = _under_limits(256, 600, _FIT)
    assert done.stdout.split() == ["2", "600"], done.stderr


def test_a_hard_limit_too_low_for_one_worker_is_a_one_line_error() -> None:
    done = _under_limits(200, 200, _FIT)
    assert done.stdout.startswith("error OPEN_FILES_LIMIT this rescale keeps 256 spill files open"), (
        done.stderr
    )
    assert "raise it to at least 320" in done.stdout and done.stdout.count("\n") == 1
