"""Shared click options, so every command spells a flag the same way.

One short flag has one meaning in every command (``tests/cli/test_options.py`` enforces
``SHORT_FLAGS``), and the options people set once per environment (a CI job, a laptop) also read a
``KG_*`` environment variable, shown in ``--help``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.shell_completion import CompletionItem, split_arg_string

from keygroup_cli.cli.render import TABLE_STYLES, Output
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.keygroups import UPPER_BOUND_MAX_PARALLELISM, explain_bounds

if TYPE_CHECKING:
    from keygroup_cli.planning.migration import MigrationRequest

F = TypeVar("F", bound=Callable[..., Any])

KEY_TYPE_CHOICES = ("string", "long", "int", "boolean")

#: The one meaning of each short flag, and the long names that may carry it. A command that has the
#: meaning uses the short flag; no command gives it another one.
SHORT_FLAGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "-f": ("file of keys, one per line", ("--keys-file",)),
    "-h": ("help", ("--help",)),
    "-k": ("a key, repeatable", ("--key",)),
    "-m": (
        "maxParallelism: the number of key groups (the new one, where there is a new one)",
        ("--max-parallelism",),
    ),
    "-n": ("number of distinct keys", ("--keys",)),
    "-o": ("operator uid (or spec), repeatable", ("--operator",)),
    "-p": (
        "parallelism: the one to check, produce or show (the new one, where there is a new one)",
        ("--parallelism", "--to"),
    ),
    "-q": ("quiet: no progress or warnings on stderr", ("--quiet",)),
    "-s": ("one state of an operator, by name", ("--state",)),
    "-t": ("Java type of the keys", ("--key-type",)),
}

#: Environment variables of the global output flags (``KG_ENGINE``/``KG_MASTER`` live on ``kg rescale``).
JSON_ENVVAR = "KG_JSON"
QUIET_ENVVAR = "KG_QUIET"
DEBUG_ENVVAR = "KG_DEBUG"
TABLE_ENVVAR = "KG_TABLE"


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


def _set_table(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # Only a --table typed after the command name overrides the root's: KG_TABLE already set that one,
    # and must not undo a root --table given on the command line.
    source = ctx.get_parameter_source(param.name or "")
    if value is not None and source is click.core.ParameterSource.COMMANDLINE:
        out = ctx.find_object(Output)
        if out is not None:
            out.table = value
    return value


def json_option(**kwargs: Any) -> Callable[[F], F]:
    """``--json`` (env ``KG_JSON``): print exactly one JSON document on stdout."""
    return click.option(
        "--json",
        "json_output",
        is_flag=True,
        envvar=JSON_ENVVAR,
        show_envvar=True,
        help="Print exactly one JSON document on stdout.",
        **kwargs,
    )


def quiet_option(**kwargs: Any) -> Callable[[F], F]:
    """``-q/--quiet`` (env ``KG_QUIET``): no progress bars or warnings on stderr.

    A warning about what is written stays (``Output.warn(even_quiet=True)``).
    """
    return click.option(
        "-q",
        "--quiet",
        is_flag=True,
        envvar=QUIET_ENVVAR,
        show_envvar=True,
        help="No progress bars or warnings on stderr (a warning about what is written stays).",
        **kwargs,
    )


def table_option(**kwargs: Any) -> Callable[[F], F]:
    """``--table rich|plain|tsv`` (env ``KG_TABLE``): how tables are printed."""
    return click.option(
        "--table",
        "table_style",
        type=click.Choice(TABLE_STYLES),
        envvar=TABLE_ENVVAR,
        show_envvar=True,
        help="How tables are printed: rich (boxes; the default), plain (aligned columns, spaces only) or "
        "tsv (a header line, then tab-separated rows; no title). JSON output is unaffected.",
        **kwargs,
    )


def debug_option(func: F) -> F:
    """``--debug`` (env ``KG_DEBUG``): show the traceback of internal errors."""
    return click.option(
        "--debug",
        is_flag=True,
        envvar=DEBUG_ENVVAR,
        show_envvar=True,
        help="Show the traceback of internal errors.",
    )(func)


def output_options(func: F) -> F:
    """Accept ``--json``, ``--quiet`` and ``--table`` after the command name too (``kg ranges --json``)."""
    func = json_option(expose_value=False, callback=_set_json, is_eager=True)(func)
    func = quiet_option(expose_value=False, callback=_set_quiet, is_eager=True)(func)
    func = table_option(expose_value=False, callback=_set_table, is_eager=True)(func)
    return func


def max_parallelism_option(
    required: bool = True,
    help: str | None = None,
    *,
    multiple: bool = False,
    metavar: str = "M",
    default: int | None = None,
    type: Any = int,
) -> Callable[[F], F]:
    """``-m/--max-parallelism M``: the number of key groups (1..32768)."""
    return click.option(
        "--max-parallelism",
        "-m",
        "max_parallelism",
        type=type,
        required=required,
        multiple=multiple,
        metavar=metavar,
        help=help or "maxParallelism, i.e. the number of key groups (1..32768).",
        **_given_default(default),
    )


def _given_default(default: Any) -> dict[str, Any]:
    """Return ``default=`` for click only when there is one.

    click 8.3+ takes an explicit ``default=None`` as a value, so a required option given none would pass
    as None (``kg key 5`` without ``-m`` was an internal error).
    """
    return {} if default is None else {"default": default}


def parallelism_option(
    help: str,
    *,
    required: bool = False,
    multiple: bool = False,
    metavar: str = "P",
    default: int | None = None,
    show_default: bool = False,
    type: Any = int,
) -> Callable[[F], F]:
    """``-p/--parallelism P``: the parallelism to check, produce or show."""
    return click.option(
        "--parallelism",
        "-p",
        "parallelism",
        type=type,
        required=required,
        multiple=multiple,
        **_given_default(default),
        show_default=show_default,
        metavar=metavar,
        help=help,
    )


def to_parallelism_option(help: str = "New parallelism.", *, required: bool = True) -> Callable[[F], F]:
    """``-p/--to Q``: the new parallelism of ``kg plan`` and ``kg rescale`` (``-p`` as in ``kg check``).

    ``required=False`` where a FlinkDeployment may give it; the command then calls ``require_option``.
    """
    return click.option("--to", "-p", "to_parallelism", type=int, required=required, metavar="Q", help=help)


def require_option(ctx: click.Context, name: str) -> None:
    """Raise click's own "Missing option" error for the parameter ``name`` of ``ctx``'s command."""
    param = next(p for p in ctx.command.params if p.name == name)
    raise click.MissingParameter(ctx=ctx, param=param)


def subtasks_option(
    help: str = "Also list every new subtask (key groups, rows, bytes) and every transfer.",
) -> Callable[[F], F]:
    """``--subtasks``: the per-subtask detail a command's summary leaves out (``kg inspect``'s flag too)."""
    return click.option("--subtasks", is_flag=True, help=help)


def savepoint_format_option() -> Callable[[F], F]:
    """``--format canonical|native``: the keyed state of the savepoint a rescale writes.

    Not given (None), kg writes canonical, or native where only a NATIVE savepoint restores the state (the
    async state API's, ``execution.routes.savepoint_plan.choose_output_format``), and says so.
    """
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(["canonical", "native"]),
        default=None,
        help="A savepoint's keyed state: canonical (every backend), or native (RocksDB/ForSt database "
        "files).  [default: canonical]",
    )


def operator_option(help: str = "Only this operator (repeatable).", metavar: str = "UID") -> Callable[[F], F]:
    """``-o/--operator UID`` (repeatable): the operators a command works on; TAB completes them."""
    return click.option(
        "--operator",
        "-o",
        "operators",
        multiple=True,
        metavar=metavar,
        help=help,
        shell_complete=complete_operators,
    )


def one_operator_option(help: str = "The operator (uid or operator id).") -> Callable[[F], F]:
    """``-o/--operator UID``, required, once: the operator a command reads or writes; TAB completes it."""
    return click.option(
        "--operator", "-o", required=True, metavar="UID", help=help, shell_complete=complete_operators
    )


#: The names commands give the snapshot or savepoint argument whose operators ``-o <TAB>`` completes.
_PATH_PARAMS = ("snapshot", "savepoint", "path")


def complete_operators(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Complete ``-o/--operator`` with the operators of the command's snapshot argument (``ctx.params``).

    Each operator is offered by its uid, else by its id shortened as text output prints it (its name is the
    help); what was typed also matches a name or a full id. Only ``_metadata`` or the manifest is read, on a
    local path: never keyed state, an object store, an HA store or a JVM. Any error completes nothing.
    """
    try:
        path = _path_param(ctx.params) or _path_param(_typed_params(ctx))
        if path is None or "://" in path:
            return []
        return _operator_items(path, incomplete)
    except Exception:  # a TAB must never print a traceback into the shell: no completions instead
        return []


def _path_param(params: Mapping[str, Any]) -> str | None:
    """Return the snapshot argument among a command's parsed ``params``, if given."""
    return next((params[n] for n in _PATH_PARAMS if isinstance(params.get(n), str)), None)


def _typed_params(ctx: click.Context) -> dict[str, Any]:
    """Return the command's params parsed again from the words typed before the ``-o`` being completed.

    Click parses the words up to ``-o``, which still awaits its value, and stops there, before the
    positional arguments: parsed without that last option they fill ``params``. The words are what click's
    completion scripts pass (``COMP_WORDS``, and ``COMP_CWORD`` the index of the word completed, or under
    fish the word itself).
    """
    words = split_arg_string(os.environ.get("COMP_WORDS", ""))
    cword = os.environ.get("COMP_CWORD", "")
    words = words[1 : int(cword)] if cword.isdigit() else words[1:]
    if not cword.isdigit() and cword and words and words[-1] == cword:
        words.pop()  # fish: the word being completed
    if ctx.info_name not in words:
        return {}
    args = words[words.index(ctx.info_name) + 1 :]
    while args and args[-1].startswith("-"):
        args.pop()  # the option awaiting the value being completed
    sub = ctx.command.make_context(ctx.info_name, args, parent=ctx.parent, resilient_parsing=True)
    return sub.params


def _operator_items(path: str, incomplete: str) -> list[CompletionItem]:
    """Return the completions of ``incomplete`` among the operators of the local input at ``path``."""
    from keygroup_cli.cli.render import short_ids
    from keygroup_cli.flink import try_open_savepoint
    from keygroup_cli.ha import is_ha_source

    if is_ha_source(path):
        return []
    savepoint = try_open_savepoint(path)  # _metadata only
    if savepoint is not None:
        operators: list[Any] = list(savepoint.metadata.operators)
    else:
        from keygroup_cli.snapshot import open_snapshot

        operators = list(open_snapshot(path).manifest.operators)
    short = short_ids(op.operator_id for op in operators)
    items = []
    for op in operators:
        shown = op.uid or short.get(op.operator_id, op.operator_id)
        help = op.name if op.name and op.name != shown else None
        for value in (shown, op.name, op.operator_id):
            if value and value.startswith(incomplete):
                items.append(CompletionItem(value, help=help))
                break
    return items


def migration_options(func: F) -> F:
    """``--rename OLD=NEW``, ``--assign-uid ID=UID``, ``--drop UID|ID`` (repeatable): operator migration.

    ``kg migrate`` and ``kg rescale`` spell, parse (``migration_request``) and refuse them alike.
    """
    func = click.option(
        "--drop", multiple=True, metavar="UID|ID", help="Drop an operator and its state; repeatable."
    )(func)
    func = click.option(
        "--assign-uid",
        multiple=True,
        metavar="ID=UID",
        help="Give the operator with 32-hex id ID (and no uid) the uid UID; repeatable.",
    )(func)
    return click.option(
        "--rename", multiple=True, metavar="OLD=NEW", help="Rename uid OLD (or id) to NEW; repeatable."
    )(func)


def migration_request(
    rename: tuple[str, ...], assign_uid: tuple[str, ...], drop: tuple[str, ...]
) -> MigrationRequest:
    """Return the ``MigrationRequest`` of ``migration_options``' values (exit 2 on a bad pair)."""
    from keygroup_cli.planning.migration import MigrationRequest, parse_pair

    return MigrationRequest(
        tuple(parse_pair(v, "--rename") for v in rename),
        tuple(parse_pair(v, "--assign-uid") for v in assign_uid),
        drop,
    )


def key_type_option(
    choices: tuple[str, ...] = KEY_TYPE_CHOICES,
    help: str = "Java type of the key: String, Long, Integer or Boolean.",
) -> Callable[[F], F]:
    """``-t/--key-type``: the Java type of the keys."""
    return click.option(
        "--key-type", "-t", type=click.Choice(choices), default="string", show_default=True, help=help
    )


def require_bounds(
    max_parallelism: int,
    parallelism: int,
    *,
    parallelism_option: str = "--parallelism",
    max_option: str = "--max-parallelism",
) -> None:
    """Refuse values outside Flink's bounds with Flink's words, the option, the bound and the fix (exit 2)."""
    refused = explain_bounds(
        max_parallelism, parallelism, parallelism_option=parallelism_option, max_option=max_option
    )
    if refused is not None:
        raise refused


def per_operator_values(values: tuple[str, ...], flag: str) -> tuple[int | None, dict[str, int]]:
    """Split ``N`` and ``UID=N`` values; bounds as Flink's ``checkParallelismPreconditions``."""
    default, per_op = None, {}
    for value in values:
        key, _, number = value.rpartition("=")
        try:
            n = int(number)
        except ValueError:
            raise InvalidArgumentError(
                f"{flag} {value}: expected N or UID=N", code="INVALID_OPTION"
            ) from None
        if not 0 < n <= UPPER_BOUND_MAX_PARALLELISM:
            kind = "maxParallelism" if flag == "--max-parallelism" else "parallelism"
            raise InvalidArgumentError(
                f"{flag} {value}: Operator parallelism not within bounds: {n} "
                f"(Flink allows a {kind} of 1 to {UPPER_BOUND_MAX_PARALLELISM})",
                code="PARALLELISM_OUT_OF_BOUNDS",
            )
        if key:
            per_op[key] = n
        else:
            default = n
    return default, per_op


def read_job_uids(path: Path) -> list[str]:
    """Return the uids listed in a ``--job-uids`` file: one a line; blank lines and ``#`` comments skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidArgumentError(
            f"--job-uids {path}: cannot read: {exc.strerror}", code="INVALID_OPTION"
        ) from None
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
