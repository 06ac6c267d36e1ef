"""kg: inspect, check and rescale the keyed state of Apache Flink jobs.

The public Python API is loaded lazily (module ``__getattr__``), so ``import keygroup_cli`` and commands
such as ``kg ranges`` stay fast and never load pyarrow or Spark:

- ``open_snapshot(path)``: open a kg snapshot (``keygroup_cli.snapshot``);
- ``plan_rescale(snapshot, new_parallelism, ...)``: the plan, reading no data (``keygroup_cli.planning``);
- ``rescale(source, dest, new_parallelism, ...)``: rescale and commit (``keygroup_cli.execution.rescale``).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name → module that defines it, imported on first access.
_LAZY = {
    "open_snapshot": "keygroup_cli.snapshot",
    "plan_rescale": "keygroup_cli.planning",
    "rescale": "keygroup_cli.execution.rescale",
    "RescaleResult": "keygroup_cli.execution.rescale",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'keygroup_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["RescaleResult", "__version__", "open_snapshot", "plan_rescale", "rescale"]
