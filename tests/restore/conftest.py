"""Session fixtures for the real-Flink suite (marker ``flink``): compile once, restore in batches."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from tests.restore.harness import Dump, RestoreRequest, build_classpath, run_restores

RestoreRunner = Callable[[Sequence[RestoreRequest | Mapping[str, Any]]], list[Dump]]


@pytest.fixture(scope="session")
def flink_classpath() -> str:
    """Classpath of fixtures/java compiled against the Flink 2.3.0 jars (fails if they are missing)."""
    return build_classpath()


@pytest.fixture(scope="session")
def restore_savepoints(flink_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> RestoreRunner:
    """Return ``run(requests) -> dumps``: one JVM per call, so pass a module's requests at once."""

    def run(requests: Sequence[RestoreRequest | Mapping[str, Any]]) -> list[Dump]:
        return run_restores(requests, tmp_path_factory.mktemp("restore-dump"), flink_classpath)

    return run
