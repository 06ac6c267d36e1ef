"""kg: inspect, check and rescale the keyed state of Apache Flink jobs.

The public Python API is loaded lazily (module ``__getattr__``), so ``import keygroup_cli`` and commands
such as ``kg ranges`` stay fast and never load pyarrow or Spark:

- ``open_snapshot(path)``: open a kg snapshot (``keygroup_cli.snapshot``);
- ``open_savepoint(path)``: open a Flink savepoint or checkpoint once (``keygroup_cli.flink.savepoint``);
- ``read_state(path, operator, state, engine="local")``: one keyed state as a typed ``pyarrow.Table``, or
  with ``engine="spark"`` a Spark DataFrame (``keygroup_cli.execution.routes.state_data``);
- ``plan_rescale(snapshot, new_parallelism, ...)``: the plan, reading no data
  (``keygroup_cli.planning.plan``);
- ``plan(source, new_parallelism, ...)``: what ``rescale()`` with the same arguments would do, as a
  ``PlannedRescale`` (the route, the plan, every refusal already raised), from a kg snapshot or a Flink
  savepoint, writing nothing and reading no keyed state: what ``kg plan`` and ``--dry-run`` print
  (``keygroup_cli.execution.routes.plan``); ``plan_rescale_input(source, RescaleRequest(...))`` the same, with
  the request as a value;
- ``rescale(source, dest, new_parallelism, ...)``: rescale and commit
  (``keygroup_cli.execution.routes.rescale``);
- ``run_rescale(source, dest, RescaleRequest(...), EngineOptions(...))``: the same, with the request and
  the engine as values (``keygroup_cli.planning.request``, ``keygroup_cli.execution.options``);
- ``write_state(savepoint, out, operator, state, mode, data)``, ``compact_state(savepoint, out, ...)`` and
  ``transform(savepoint, out, operator, state, fn)``: change keyed state from data, by rule, or through a
  function of Arrow record batches, and commit a new savepoint (``keygroup_cli.execution.routes.state_edit``).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name → module that defines it, imported on first access.
_LAZY = {
    "open_snapshot": "keygroup_cli.snapshot",
    "open_savepoint": "keygroup_cli.flink.savepoint",
    "plan_rescale": "keygroup_cli.planning.plan",
    "plan": "keygroup_cli.execution.routes.plan",
    "plan_rescale_input": "keygroup_cli.execution.routes.plan",
    "PlannedRescale": "keygroup_cli.execution.routes.plan",
    "rescale": "keygroup_cli.execution.routes.rescale",
    "run_rescale": "keygroup_cli.execution.routes.rescale",
    "RescaleRequest": "keygroup_cli.planning.request",
    "EngineOptions": "keygroup_cli.execution.options",
    "RescaleResult": "keygroup_cli.execution.routes.rescale",
    "read_state": "keygroup_cli.execution.routes.state_data",
    "transform": "keygroup_cli.execution.routes.state_edit",
    "write_state": "keygroup_cli.execution.routes.state_edit",
    "compact_state": "keygroup_cli.execution.routes.state_edit",
    "StateEditResult": "keygroup_cli.execution.routes.state_edit",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'keygroup_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "EngineOptions",
    "PlannedRescale",
    "RescaleRequest",
    "RescaleResult",
    "StateEditResult",
    "__version__",
    "compact_state",
    "open_savepoint",
    "open_snapshot",
    "plan",
    "plan_rescale",
    "plan_rescale_input",
    "read_state",
    "rescale",
    "run_rescale",
    "transform",
    "write_state",
]
