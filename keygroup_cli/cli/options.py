"""Shared click options, so every command spells a flag the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from keygroup_cli.cli.render import Output

F = TypeVar("F", bound=Callable[..., Any])

KEY_TYPE_CHOICES = ("string", "long", "int", "boolean")


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        out = ctx.find_object(Output)
        if out is not None:
            out.json = True
    return value


def _set_quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        out = ctx.find_object(Output)
        if out is not None:
            out.quiet = True
    return value


def output_options(func: F) -> F:
    """Accept ``--json`` and ``--quiet`` after the command name too (``kg ranges ... --json``)."""
    func = click.option(
        "--json",
        "json_output",
        is_flag=True,
        expose_value=False,
        callback=_set_json,
        is_eager=True,
        help="Print exactly one JSON document on stdout.",
    )(func)
    func = click.option(
        "-q",
        "--quiet",
        is_flag=True,
        expose_value=False,
        callback=_set_quiet,
        is_eager=True,
        help="No progress bars or warnings on stderr.",
    )(func)
    return func


def max_parallelism_option(required: bool = True, help: str | None = None) -> Callable[[F], F]:
    """``--max-parallelism/-m M``: the number of key groups (1..32768)."""
    return click.option(
        "--max-parallelism",
        "-m",
        "max_parallelism",
        type=int,
        required=required,
        metavar="M",
        help=help or "maxParallelism, i.e. the number of key groups (1..32768).",
    )


def key_type_option(func: F) -> F:
    """``--key-type``: the Java type of the keys."""
    return click.option(
        "--key-type",
        "-t",
        type=click.Choice(KEY_TYPE_CHOICES),
        default="string",
        show_default=True,
        help="Java type of the key: String, Long, Integer or Boolean.",
    )(func)
