"""What a rescale is asked to do, as one value: the plan is a pure function of the opened input and this.

``RescaleRequest`` replaces the keywords every route used to copy and forward (``--to``, ``--from``,
``--operator``, ``--max-parallelism``, compression, and the operator migration of ``--rename``,
``--assign-uid`` and ``--drop``). It is the one value that flows: the CLI builds it, ``rescale()`` builds it
from its keywords, and the routes and plans take it whole, so a new field is declared here, read where a
plan uses it and given a CLI option, nothing more. How the work runs (engine, Spark master, a session,
an executor) is ``execution.options.EngineOptions``, apart: a plan never depends on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from keygroup_cli.planning.migration import MigrationRequest


@dataclass(frozen=True, slots=True)
class RescaleRequest:
    """A rescale request: the new parallelism, and what narrows or widens it."""

    #: The new parallelism of the selected operators.
    new_parallelism: int
    #: ``--from``: the parallelism every selected operator must have now (and, without ``operators``,
    #: what selects them).
    from_parallelism: int | None = None
    #: uids or operator ids to rescale (None: every operator); the others are copied unchanged. Kept as a
    #: tuple, an empty one as None.
    operators: Sequence[str] | None = None
    #: A new maxParallelism for the selected operators (keys are re-hashed).
    new_max_parallelism: int | None = None
    #: Snappy for a new savepoint's state files; None keeps what the input used.
    compression: bool | None = None
    #: ``--format``: ``"canonical"`` keyed files, or ``"native"``: one RocksDB database per subtask (a NATIVE
    #: savepoint that Flink's RocksDB and ForSt backends restore by ingesting its files). None (not given):
    #: canonical, unless the savepoint holds state Flink restores only from a NATIVE savepoint (the async
    #: state API's): then native, chosen when the input is opened (``execution.routes.plan``) and said so.
    output_format: str | None = None
    #: Operator migration (``--rename``, ``--assign-uid``, ``--drop``) applied in the same pass, planned on
    #: the opened savepoint (``planning.migration.apply_migration``); None or empty: none.
    migration: MigrationRequest | None = None

    def __post_init__(self) -> None:
        # One spelling per request: operators as a tuple (empty: every operator), no empty migration.
        operators = self.operators
        object.__setattr__(self, "operators", tuple(operators) if operators else None)
        if self.migration is not None and self.migration.empty:
            object.__setattr__(self, "migration", None)

    @classmethod
    def of(cls, new_parallelism: int, **fields: Any) -> RescaleRequest:
        """Return the request for these keywords (the constructor's; kept for callers of ``of``)."""
        return cls(new_parallelism, **fields)


__all__ = ["RescaleRequest"]
