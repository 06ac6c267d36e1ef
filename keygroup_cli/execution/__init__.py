"""Executors that apply a ``RescalePlan``: one protocol, a pyarrow engine and a Spark engine.

``get_executor("local" | "spark", **options)`` imports the engine's module only when asked, so metadata
commands never load Spark (or start a JVM). Both engines consume the same plan and write byte-identical
files through ``keygroup_cli.execution.tasks``; the caller (``keygroup_cli.execution.rescale``) owns the
staging directory, verification and the commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from keygroup_cli.errors import InvalidArgumentError
from keygroup_cli.planning import RescalePlan
from keygroup_cli.snapshot.model import KeyedFile, OperatorFile, Snapshot

#: ``on_progress(stage, completed, total)``: the core's progress callback (drawn by the CLI, if at all).
OnProgress = Callable[[str, int, "int | None"], None]

ENGINES = ("spark", "local")


@dataclass(frozen=True, slots=True)
class WrittenOperator:
    """The files an executor wrote (or copied) for one operator, as manifest entries."""

    operator_id: str
    keyed_files: tuple[KeyedFile, ...]
    operator_files: tuple[OperatorFile, ...]


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """What an executor wrote into the target directory, per operator in plan order."""

    engine: str
    operators: tuple[WrittenOperator, ...]

    def operator(self, operator_id: str) -> WrittenOperator:
        """Return the files written for ``operator_id``."""
        return next(o for o in self.operators if o.operator_id == operator_id)


class Executor(Protocol):
    """Applies a rescale plan: reads ``source``, writes every state file of the new snapshot to ``target``.

    The executor writes no manifest and never touches ``source``; ``target`` is an empty directory.
    """

    name: str

    def run(
        self, plan: RescalePlan, source: Snapshot, target: Path, on_progress: OnProgress | None = None
    ) -> ExecutionResult:
        """Write the new state files and return their manifest entries."""
        ...


def get_executor(name: str, **options: Any) -> Executor:
    """Return the executor called ``name`` (``local`` or ``spark``), importing it on demand.

    Args:
        name: The engine.
        **options: Engine options: for ``spark`` ``master``, ``session``, ``verbose``; for ``local``
            ``batch_rows``.

    Raises:
        InvalidArgumentError: An unknown engine.
        MissingDependencyError: Spark or Java is missing or broken (``spark`` only).
    """
    if name == "local":
        from keygroup_cli.execution.local import LocalExecutor

        return LocalExecutor(**_known(options, ("batch_rows",)))
    if name == "spark":
        from keygroup_cli.execution.spark import SparkExecutor

        return SparkExecutor(**_known(options, ("master", "session", "verbose", "batch_rows")))
    raise InvalidArgumentError(
        f"unknown engine {name!r}; expected one of {', '.join(ENGINES)}", code="UNKNOWN_ENGINE"
    )


class PendingExecutor:
    """An executor being created in a background thread, so a Spark session starts while kg reads input.

    Starting the JVM takes seconds and mostly waits on another process; decoding a savepoint or
    checksumming the input meanwhile hides most of it. ``result()`` waits for it and raises what creating
    it raised (e.g. ``MissingDependencyError``). The thread is a daemon: if kg fails first, it exits
    without waiting, and the JVM ends with it (it stops when its stdin, a pipe from kg, closes).
    """

    def __init__(self, name: str, **options: Any) -> None:
        self._executor: Executor | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._create, args=(name, options), daemon=True)
        self._thread.start()

    def _create(self, name: str, options: dict[str, Any]) -> None:
        try:
            self._executor = get_executor(name, **options)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of result()
            self._error = exc

    def result(self) -> Executor:
        """Wait for the executor and return it.

        Raises:
            KgError: Whatever ``get_executor`` raised.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._executor is not None
        return self._executor


def _known(options: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    # Options meant for the other engine are ignored, so callers can pass one set for either.
    return {k: v for k, v in options.items() if k in names and v is not None}


__all__ = [
    "ENGINES",
    "ExecutionResult",
    "Executor",
    "OnProgress",
    "PendingExecutor",
    "WrittenOperator",
    "get_executor",
]
