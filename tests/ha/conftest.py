"""Fixtures of the HA suite: the fixture Java classes (compiled once) and ZooKeeper servers."""

from __future__ import annotations

import pytest

from tests.restore.harness import build_classpath


@pytest.fixture(scope="session")
def ha_classpath() -> str:
    """Classpath of fixtures/java (HaJob, HaStoreGen, RestoreDump) against the Flink 2.3.0 jars."""
    return build_classpath()
