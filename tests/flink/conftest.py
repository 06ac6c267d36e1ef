"""The keyed-state walk's unit tests run on the native kernels; the rest of the suite on the Python reference.

kg's default (``KG_NATIVE=auto``) loads the kernels only for work of 32 MiB of blocks or more, so every
other test, on small fixtures, walks blocks in Python. The modules below, which drive the walk itself
(scan, boundary proof, String hashes, windows, damaged blocks and their errors), run with
``KG_NATIVE=1`` instead: one suite run covers both routes, and ``test_native_kernels`` holds them to each
other byte for byte. An explicit ``KG_NATIVE`` (``KG_NATIVE=0 pytest``, ``KG_NATIVE=1 pytest``) runs the
whole suite one way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from keygroup_cli.flink.kernels import native as native_kernels

#: Test modules that walk keyed-state blocks, run on the kernels when ``KG_NATIVE`` is not set.
ON_KERNELS = {
    "test_block_check",
    "test_enum_and_offset_guards",
    "test_keyed_entries",
    "test_keyed_state",
    "test_keyed_state_columns",
    "test_keyed_windows",
}


@pytest.fixture(autouse=True)
def _walk_on_kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    module = request.node.module.__name__.rsplit(".", 1)[-1]
    if module in ON_KERNELS and native_kernels.NATIVE_ENV not in os.environ:
        monkeypatch.setenv(native_kernels.NATIVE_ENV, "1")
        assert native_kernels.kernels() is not None, "the [native] extra is part of the test install"
    yield
