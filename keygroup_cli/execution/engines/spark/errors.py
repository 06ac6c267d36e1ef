"""The Spark engine's failures as kg errors: a kg error inside a task, a failed Spark job, Ctrl-C.

A task wraps its body in ``naming_kg_errors``, which passes a kg error on through Spark as a marked
one-line message; the driver runs its Spark jobs inside ``spark_failures``, which turns that message back
into the kg error it was, any other failure into one ``ExecutionError`` line, and Ctrl-C into
``KeyboardInterrupt`` with Spark's jobs cancelled.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from keygroup_cli.core.errors import (
    ExecutionError,
    InvalidArgumentError,
    InvalidInputError,
    KgError,
    MissingDependencyError,
    UnsupportedFormatError,
    environment_error,
)
from keygroup_cli.execution.engines.spark.jvm import keep_console_log

if TYPE_CHECKING:
    from pyspark import SparkContext


#: Marks a kg error raised inside a task, so the driver re-raises it as what it was (see spark_failures).
TASK_ERROR = "kg-task-error"
TASK_ERRORS: dict[str, type[KgError]] = {
    cls.__name__: cls
    for cls in (
        InvalidInputError,
        UnsupportedFormatError,
        InvalidArgumentError,
        ExecutionError,
        # A NATIVE write task imports rocksdict on its executor: a worker without it is exit 6 there too.
        MissingDependencyError,
    )
}


@contextlib.contextmanager
def naming_kg_errors() -> Iterator[None]:
    """Turn a kg error inside a task into one Spark passes on with its class, code and message.

    A read task that finds a corrupt block raises ``InvalidInputError``; Spark reports any task failure
    as a py4j error carrying the worker's traceback, from which ``spark_failures`` recovers the original
    (exit 3 for a corrupt input, not 5 for "a task failed").
    """
    try:
        yield
    except KgError as exc:
        # Named by its nearest class the driver knows: a subclass (``ValueNotEncodable``) keeps its exit code.
        known = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in TASK_ERRORS), "ExecutionError")
        raise RuntimeError(f"{TASK_ERROR}:{known}:{exc.code}:{exc.message}") from None
    except OSError as exc:
        # No space or another refusal of the executor's file system: exit 5 with its one line, not
        # "a Spark task failed" with the worker's traceback.
        known = environment_error(exc)
        if known is None:
            raise
        raise RuntimeError(f"{TASK_ERROR}:{type(known).__name__}:{known.code}:{known.message}") from None


@contextlib.contextmanager
def spark_failures(sc: SparkContext) -> Iterator[None]:
    """Cancel Spark's jobs on Ctrl-C; turn a failed Spark job into one line (``ExecutionError``).

    A Ctrl-C that reaches py4j in the middle of a call comes back as a py4j error ("Answer from Java side
    is empty"), not as ``KeyboardInterrupt``: a SIGINT handler notes it, so it is reported as what it was.

    A Ctrl-C that comes while this thread runs a finalizer is dropped by Python ("Exception ignored in"):
    py4j frees Java objects from weakref callbacks, which block on the gateway, so it does come there, and
    the run would go on to commit. Such a ``KeyboardInterrupt`` is kept quiet and raised once the block
    ends.
    """
    interrupted = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    previous_hook = sys.unraisablehook

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.set()
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    def on_unraisable(unraisable: Any) -> None:
        if not (interrupted.is_set() and issubclass(unraisable.exc_type, KeyboardInterrupt)):
            previous_hook(unraisable)

    watching = threading.current_thread() is threading.main_thread()
    if watching:
        signal.signal(signal.SIGINT, on_sigint)
        sys.unraisablehook = on_unraisable
    try:
        yield
        if interrupted.is_set():
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            sc.cancelAllJobs()
        raise
    except (ExecutionError, MissingDependencyError):
        raise
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark wrap task failures in many types
        if interrupted.is_set():
            raise KeyboardInterrupt from None
        named = re.search(rf"{TASK_ERROR}:(\w+):(\w+):([^\n]*)", str(exc))
        kind = TASK_ERRORS.get(named.group(1)) if named else None
        if named and kind is not None:
            # A kg error inside a task (a corrupt block, say) is reported as what it was.
            raise kind(named.group(3), code=named.group(2)) from None
        console_log = keep_console_log()
        raise ExecutionError(
            f"a Spark task failed: {worker_cause(exc)} (details: {console_log or 'rerun with --verbose'})",
            code="SPARK_TASK_FAILED",
        ) from exc
    finally:
        if watching:
            signal.signal(signal.SIGINT, previous)
            sys.unraisablehook = previous_hook


def worker_cause(exc: BaseException) -> str:
    """Return the one line of a failed Spark job's text that says why (py4j's text is a stack trace)."""
    text = str(exc)
    mismatch = re.search(r"PYTHON_VERSION_MISMATCH\][^\n]*?(\d+\.\d+)[^\n]*?(\d+\.\d+)", text)
    if "PYTHON_VERSION_MISMATCH" in text:
        found = f" (worker {mismatch.group(1)}, driver {mismatch.group(2)})" if mismatch else ""
        return f"their Python version differs from kg's{found}"
    said = re.search(r"Error from python worker:\s*\n\s*([^\n]+)", text)
    code = re.search(r"terminated with code: (-?\d+)", text)
    if said:
        return f"the worker said {said.group(1).strip()!r}" + (f" and exited {code.group(1)}" if code else "")
    for pattern in (
        r"Cannot run program \"[^\"]*\"[^\n]*",
        r"(?:ModuleNotFoundError|ImportError): [^\n]*",
        r"Python worker exited unexpectedly[^\n]*",
        r"\w+(?:Error|Exception): [^\n]*",
    ):
        cause = re.search(pattern, text)
        if cause and "An error occurred while calling" not in cause.group(0):
            return cause.group(0).strip()[:300]
    lines = [line for line in text.strip().splitlines() if "An error occurred while calling" not in line]
    return (lines[0].lstrip(": ") if lines else type(exc).__name__)[:300]


__all__ = [
    "TASK_ERROR",
    "TASK_ERRORS",
    "naming_kg_errors",
    "spark_failures",
    "worker_cause",
]
