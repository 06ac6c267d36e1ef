"""Native kernels for the per-entry loops of the keyed-state walk: numba, optional (the ``[native]`` extra).

The walk of a key-group block (``keyed_decode._scan_window``), the proof of its entry boundaries
(``keyed_decode._structure``), the hash of its String keys (``keyed_entries._key_hash_codes``) and the
copy of each entry's bytes on the byte-level re-key (``entry_parts.copy_ranges``) step through the block
one entry at a time. In Python that costs about 250 ns per entry; compiled by numba, a
few ns. The Python code stays the reference: each kernel here returns exactly what its Python counterpart
returns, for any bytes, and where a kernel meets a case it does not cover it answers ``DEFER`` and the
Python code decides (so every error message stays the reference's). The byte re-key's read side has one
fused kernel (``rekey_window``): the walk, its proof, the prefix check, the key hash and both key groups of a
window in one pass, where the reference takes five steps (``entry_parts.PartCutter.walk``).

``KG_NATIVE`` chooses: ``0`` the Python code, ``1`` the kernels (an error, ``NATIVE_KERNELS_MISSING``, if
numba cannot be imported), ``auto`` (the default) the kernels when numba imports and the process has work
enough to pay for them: once its walks have covered ``AUTO_AFTER_BYTES`` of blocks, or from its first walk
when a caller says (``expect``) that it is about to walk that much. Importing numba and
loading the cached kernels costs 0.5-1.3 s of CPU per process; with them a re-key saves about 17 ms of
CPU per MB (3.5 s on 206 MB), so they pay from some 30-75 MB on. So a small savepoint, a ``kg get`` (one
block) or a Spark task of a few key groups stays in Python, a large one switches to the kernels after its
first 32 MiB (both give the same result, so the switch may come mid-block). numba is
imported here only, never by commands that read metadata only. Its compile cache
lives in kg's cache directory (``$KG_CACHE_DIR/numba`` unless ``NUMBA_CACHE_DIR`` is set), so a machine
compiles once and Spark workers on it share the result.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from keygroup_cli.core.cache import cache_directory
from keygroup_cli.core.errors import MissingDependencyError

#: The environment switch: 0 (Python), 1 (kernels, or an error), auto (kernels when numba imports).
NATIVE_ENV = "KG_NATIVE"
#: A kernel's answer for bytes it does not decide: the Python reference takes them.
DEFER = 2


@dataclass(frozen=True, slots=True)
class Kernels:
    """The compiled kernels of ``numba_kernels``."""

    scan: Any
    structure: Any
    string_hashes: Any
    copy_ranges: Any
    frame_entries: Any
    sort_parts: Any
    rekey_window: Any
    frame_bucket: Any
    check_block: Any
    #: ``splice``'s kernels: an edit of a block done on its bytes (``flink.write.edit_copy``).
    splice_match: Any
    splice_block: Any
    ttl_expired: Any


#: In ``auto`` mode, the bytes of blocks a process walks in Python before it loads the kernels.
AUTO_AFTER_BYTES = 32 << 20

_compiled: dict[str, Kernels | None] = {}
#: Held while the kernels load: worker threads may ask for them at once (``keygroup_cli.core.workers``).
_loading = threading.Lock()
_walked = [0]


def mode() -> str:
    """Return ``KG_NATIVE``'s setting: ``0``, ``1`` or ``auto`` (anything else reads as ``auto``)."""
    value = os.environ.get(NATIVE_ENV, "auto").strip().lower()
    return value if value in ("0", "1") else "auto"


def kernels_expected() -> bool:
    """Return whether a large walk will run the kernels: ``KG_NATIVE`` is not 0 and numba is installed.

    Nothing is imported: this is what an engine choice asks before any work.
    """
    return mode() != "0" and importlib.util.find_spec("numba") is not None


def kernels(walking: int = 0) -> Kernels | None:
    """Return the kernels ``KG_NATIVE`` asks for; None: the Python reference.

    ``walking`` is the size of the block (or window) the caller is about to walk for the first time; in
    ``auto`` mode the kernels load once these sizes add up to ``AUTO_AFTER_BYTES`` in this process.

    Raises:
        MissingDependencyError: ``KG_NATIVE=1`` and numba cannot be imported (``NATIVE_KERNELS_MISSING``).
    """
    setting = mode()
    if setting == "0":
        return None
    if setting == "auto" and "numba" not in _compiled:
        _walked[0] += walking
        if _walked[0] < AUTO_AFTER_BYTES:
            return None
    if "numba" not in _compiled:
        with _loading:
            if "numba" not in _compiled:
                _compiled["numba"] = _load()
    loaded = _compiled["numba"]
    if loaded is None and setting == "1":
        raise MissingDependencyError(
            "KG_NATIVE=1 asks for kg's native kernels, but numba cannot be imported; install the [native] "
            "extra (pip install 'keygroup-cli[native]') or set KG_NATIVE=0",
            code="NATIVE_KERNELS_MISSING",
        )
    return loaded


def expect(walking: int) -> None:
    """Say that this process is about to walk ``walking`` bytes of blocks (a read task's, a copy's).

    In ``auto`` mode, as many as ``AUTO_AFTER_BYTES`` load the kernels at the next walk, instead of after
    the first ``AUTO_AFTER_BYTES`` walked in Python: work that will pay for them gets them from its start.
    Nothing is imported here.
    """
    if walking >= AUTO_AFTER_BYTES and mode() == "auto":
        _walked[0] = max(_walked[0], AUTO_AFTER_BYTES)


def warm_kernels() -> bool:
    """Load the kernels now, with every compiled form of them that numba's cache holds for this machine.

    For a process that will fork the workers of a large job (kg's prestarted Spark daemon,
    ``execution.engines.spark.daemon``): numba's import and its cached machine code (about 0.4 s of
    loading, most of it the first kernel's) are paid once, while the driver's JVM starts, and not by each
    worker's first task. Only forms whose cache key matches this machine and source are loaded, so
    nothing is compiled here. Return whether the kernels are loaded (False: ``KG_NATIVE=0`` or no numba).
    """
    if mode() == "0":
        return False
    expect(AUTO_AFTER_BYTES)
    loaded = kernels()
    if loaded is None:
        return False
    # The kernels Python calls; the helpers they call are compiled into their code.
    for field in dataclasses.fields(loaded):
        _load_cached(getattr(loaded, field.name))
    return True


def _load_cached(dispatcher: Any) -> None:
    # numba's cache index, read through its internals: any surprise leaves the kernel to load on first call.
    try:
        cache = dispatcher._cache
        codegen = dispatcher.targetctx.codegen()
        for key in cache._cache_file._load_index():
            signature = key[0]
            if key == cache._index_key(signature, codegen):
                dispatcher.compile(signature)
    except Exception:  # noqa: BLE001, S110 - best effort: the kernel loads when first called instead
        pass


def _load() -> Kernels | None:
    # numba reads NUMBA_CACHE_DIR once, when it is first imported.
    os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_directory() / "numba"))
    try:
        compiled = importlib.import_module("keygroup_cli.flink.kernels.compiled")
        splice = importlib.import_module("keygroup_cli.flink.kernels.splice")
    except ImportError:
        return None
    return Kernels(
        compiled.scan,
        compiled.structure,
        compiled.string_hashes,
        compiled.copy_ranges,
        compiled.frame_entries,
        compiled.sort_parts,
        compiled.rekey_window,
        compiled.frame_bucket,
        compiled.check_block,
        splice.splice_match,
        splice.splice_block,
        splice.ttl_expired,
    )


@functools.lru_cache(maxsize=64)
def state_mask(states: frozenset[int]) -> np.ndarray:
    """Return the kernels' form of a set of state ids: one flag per possible id (shared: never written to)."""
    mask = np.zeros(0x10000, dtype=np.bool_)
    mask[list(states)] = True
    return mask


def scan_window(
    found: Kernels, buf: bytes | bytearray | memoryview, states: frozenset[int], current: int | None
) -> tuple[np.ndarray, list[int], int, int | None, bool] | None:
    """``keyed_decode._scan_window`` by the scan kernel: the same result for the same bytes."""
    mask = state_mask(states)
    raw = np.frombuffer(buf, dtype=np.uint8)
    opened = -1 if current is None else current
    status, value_ends, run_starts, consumed, after = found.scan(raw, mask, opened)
    if status < 0:
        return None
    return value_ends, run_starts.tolist(), int(consumed), None if after < 0 else int(after), bool(status)


__all__ = [
    "AUTO_AFTER_BYTES",
    "DEFER",
    "NATIVE_ENV",
    "Kernels",
    "expect",
    "kernels",
    "kernels_expected",
    "mode",
    "scan_window",
    "state_mask",
    "warm_kernels",
]
