"""The rescale request is the one value that flows: routes and plans take it whole, never its fields.

A new field of ``RescaleRequest`` is then declared in the request, read where a plan uses it and given a CLI
option; no route or plan function in between has to forward it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from keygroup_cli.planning.migration import MigrationRequest
from keygroup_cli.planning.request import RescaleRequest

#: Where a request travels from the entry points to the plans.
MODULES = (
    "keygroup_cli.execution.routes.plan",
    "keygroup_cli.execution.routes.rescale",
    "keygroup_cli.execution.routes.savepoint",
    "keygroup_cli.execution.routes.savepoint_plan",
    "keygroup_cli.execution.routes.snapshot",
    "keygroup_cli.execution.routes.operator_state",
    "keygroup_cli.planning.plan",
    "keygroup_cli.planning.savepoint",
)
#: The public conveniences that build the request once from keywords (``keygroup_cli.rescale``, ``plan``,
#: ``plan_rescale``).
CONVENIENCES = {
    "keygroup_cli.execution.routes.rescale.rescale",
    "keygroup_cli.execution.routes.plan.plan",
    "keygroup_cli.planning.plan.plan_rescale",
}
#: A request's fields, and the names they were forwarded under.
FIELDS = {f.name for f in dataclasses.fields(RescaleRequest)} | {"expected_parallelism"}


def _functions() -> list[tuple[str, object]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__ == name:
                found.append((f"{name}.{attr}", value))
            elif inspect.isclass(value) and value.__module__ == name:
                for method, fn in vars(value).items():
                    if inspect.isfunction(fn):
                        found.append((f"{name}.{attr}.{method}", fn))
    return found


#: The functions a request passes through from ``run_rescale`` / ``plan_rescale_input`` to the plans that read
#: it: each takes the request whole.
PATH = (
    "execution.routes.rescale.run_rescale",
    "execution.routes.rescale._savepoint_route",
    "execution.routes.rescale._rescale_remote",
    "execution.routes.rescale._snapshot_route",
    "execution.routes.plan.plan_rescale_input",
    "execution.routes.plan.open_rescale_input",
    "execution.routes.plan.plan_input",
    "execution.routes.plan._open",
    "execution.routes.plan._plan_snapshot",
    "execution.routes.savepoint.open_input",
    "execution.routes.savepoint.require_rescalable",
    "execution.routes.savepoint.execute_savepoint_plan",
    "execution.routes.savepoint_plan.plan_savepoint",
    "execution.routes.savepoint_plan._checked_key_types",
    "planning.plan.plan_snapshot",
    "planning.savepoint.plan_savepoint_operators",
)


def test_routes_and_plans_take_the_request_whole() -> None:
    functions = dict(_functions())
    for name in PATH:
        parameters = set(inspect.signature(functions[f"keygroup_cli.{name}"]).parameters)
        assert "request" in parameters, name
        assert not FIELDS & parameters, f"{name} takes {sorted(FIELDS & parameters)} beside the request"
    # Nothing that takes the request takes one of its fields too.
    spread = sorted(
        name
        for name, fn in functions.items()
        if "request" in (params := set(inspect.signature(fn).parameters)) and FIELDS & params
    )
    assert not spread, spread
    # What is left of the path before this refactor: no function forwards the fields one by one.
    for gone in ("rescale_snapshot", "rescale_operator_tables", "_snapshot_plan"):
        assert not any(name.endswith(f".{gone}") for name in functions), gone


def test_the_conveniences_build_the_request_the_routes_take() -> None:
    from keygroup_cli.execution.routes.plan import plan
    from keygroup_cli.execution.routes.rescale import rescale

    for convenience in (plan, rescale):
        keywords = set(inspect.signature(convenience).parameters)
        assert FIELDS - {"expected_parallelism", "compression"} <= keywords


@pytest.mark.parametrize("operators", [None, (), []])
def test_no_operators_means_every_operator(operators: list[str] | tuple[str, ...] | None) -> None:
    assert RescaleRequest(4, operators=operators).operators is None


def test_one_spelling_per_request() -> None:
    listed = RescaleRequest(4, operators=["a", "b"], migration=MigrationRequest())
    assert listed == RescaleRequest(4, operators=("a", "b")) == RescaleRequest.of(4, operators=["a", "b"])
    assert listed.operators == ("a", "b") and listed.migration is None
    renamed = MigrationRequest(renames=(("a", "c"),))
    assert RescaleRequest(4, migration=renamed).migration == renamed
