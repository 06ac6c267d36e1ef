"""The ``kg`` command: root group, global flags and the single error → exit-code boundary."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import signal
import sys
import traceback

import click

from keygroup_cli import __version__
from keygroup_cli.cli.options import (
    DEBUG_ENVVAR,
    JSON_ENVVAR,
    QUIET_ENVVAR,
    debug_option,
    json_option,
    quiet_option,
    table_option,
)
from keygroup_cli.cli.render import Output
from keygroup_cli.core.allocator import (
    is_memory_failure,
    keep_freed_memory,
    not_enough_memory,
    release_headroom,
    reserve_headroom,
)
from keygroup_cli.core.errors import ExitCode, KgError, environment_error

#: Command name → module under ``keygroup_cli.cli.commands`` exposing ``command``. Loaded on first use, so
#: ``kg ranges`` never pays for pyarrow or Spark.
COMMANDS: dict[str, str] = {
    "advise": "advise",
    "check": "check",
    "clean": "clean",
    "compact": "compact",
    "completion": "completion",
    "convert": "convert",
    "diff": "diff",
    "doctor": "doctor",
    "export": "export",
    "gc": "gc",
    "generate": "generate",
    "get": "get",
    "inspect": "inspect",
    "key": "key",
    "migrate": "migrate",
    "plan": "plan",
    "ranges": "ranges",
    "rescale": "rescale",
    "verify": "verify",
    "write": "write",
}

ROOT_EPILOG = """\b
Examples:
  kg ranges --max-parallelism 128 --parallelism 3
  kg key user-42 --key-type string --max-parallelism 128 --parallelism 4
  kg plan --from 3 --to 4 --max-parallelism 128
  kg check path/to/savepoint --parallelism 8
  kg rescale snapshot/ --to 4 --out rescaled/

Exit codes: 0 ok, 1 check failed, 2 usage, 3 invalid snapshot, 4 unsupported,
5 execution failed, 6 missing dependency, 7 job may be live, 70 internal error,
130 interrupted.
"""


class LazyGroup(click.Group):
    """A click group that imports a command's module only when that command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if _module_exists(COMMANDS[name]))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = COMMANDS.get(cmd_name)
        if module_name is None or not _module_exists(module_name):
            return None
        module = importlib.import_module(f"keygroup_cli.cli.commands.{module_name}")
        command: click.Command = module.command
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Resolve the command; a mistyped name fails with the nearest names (``Did you mean 'rescale'?``)."""
        name = args[0]
        if not ctx.resilient_parsing and not name.startswith("-") and self.get_command(ctx, name) is None:
            known = self.list_commands(ctx)
            # Prefixes first (``kg resc``), then difflib's near misses (``kg rescal``, ``kg inspcet``).
            suggestions = [c for c in known if c.startswith(name)] or difflib.get_close_matches(
                name, known, n=3
            )
            message = f"No such command {name!r}."
            if suggestions:
                quoted = [repr(s) for s in suggestions]
                hint = quoted[0] if len(quoted) == 1 else f"one of {', '.join(quoted)}"
                message += f" Did you mean {hint}?"
            raise click.UsageError(message, ctx)
        return super().resolve_command(ctx, args)


def _module_exists(module_name: str) -> bool:
    return importlib.util.find_spec(f"keygroup_cli.cli.commands.{module_name}") is not None


@click.group(cls=LazyGroup, epilog=ROOT_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@json_option()
@quiet_option()
@table_option(default="rich", show_default=True)
@debug_option
@click.option("--no-color", is_flag=True, help="Plain output without colours (NO_COLOR is honoured too).")
@click.version_option(__version__, prog_name="kg")
@click.pass_context
def cli(
    ctx: click.Context, json_output: bool, quiet: bool, table_style: str, debug: bool, no_color: bool
) -> None:
    """Inspect, check and rescale the keyed state of Apache Flink jobs."""
    ctx.obj = Output(json=json_output, quiet=quiet, debug=debug, no_color=no_color, table=table_style)


def main(argv: list[str] | None = None) -> None:
    """Run kg and exit with a documented code; the one place exceptions become exit codes.

    The ``kg`` process keeps the buffers it frees for reuse (``core.allocator.keep_freed_memory``).

    Ctrl-C (SIGINT) interrupts every command at any moment, Spark's start included (exit 130), also when
    kg was started with SIGINT ignored (a background job of a non-interactive shell, a runner's subshell):
    Python would keep the SIG_IGN it inherits.
    """
    keep_freed_memory()
    reserve_headroom()  # under an address-space limit: room for the cleanup and report once memory ran out
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(run(argv))


def run(argv: list[str] | None = None) -> int:
    """Run kg and return its exit code instead of exiting (used by ``main`` and tests)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # Without standalone mode click *returns* the code a command passed to ctx.exit() instead of raising.
        returned = cli.main(args=args, prog_name="kg", standalone_mode=False)
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.exceptions.Abort:
        _fallback_output(args).failure("INTERRUPTED", "Interrupted.", command=_command_name(args))
        return ExitCode.INTERRUPTED
    except KeyboardInterrupt:
        _fallback_output(args).failure("INTERRUPTED", "Interrupted.", command=_command_name(args))
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        out = _fallback_output(args)
        if out.json:
            out.failure("USAGE", exc.format_message(), command=_command_name(args))
        else:
            exc.show(file=sys.stderr)
        return exc.exit_code
    except KgError as exc:
        _fallback_output(args).failure(exc.code, exc.message, command=_command_name(args))
        return int(exc.exit_code)
    except OSError as exc:
        # What the file system refuses (permissions, no space, a read-only mount) is the environment's
        # answer, not a bug: one line and exit 5. Any other OSError falls through to the bug handler.
        refused = environment_error(exc)
        if refused is None:
            return _memory(args, exc) if is_memory_failure(exc) else _internal(args, exc)
        out = _fallback_output(args)
        if out.debug:
            traceback.print_exc()
        out.failure(refused.code, refused.message, command=_command_name(args))
        return int(refused.exit_code)
    except Exception as exc:  # noqa: BLE001 - the documented boundary: anything else is a bug
        # Memory that ran out (MemoryError, pyarrow's ArrowMemoryError, a thread or library that could not
        # be mapped) is the environment's answer too: one line and exit 5.
        return _memory(args, exc) if is_memory_failure(exc) else _internal(args, exc)
    return int(returned) if isinstance(returned, int) else ExitCode.OK


def _memory(args: list[str], exc: BaseException) -> int:
    """Report memory that ran out: one line (``NOT_ENOUGH_MEMORY``, exit 5); the traceback under --debug."""
    release_headroom()  # what was kept for this: the report itself allocates
    out = _fallback_output(args)
    if out.debug:
        traceback.print_exc()
    error = not_enough_memory()
    out.failure(error.code, error.message, command=_command_name(args))
    return int(error.exit_code)


def _internal(args: list[str], exc: BaseException) -> int:
    """Report a bug: one line (exit 70), with the traceback only under ``--debug``."""
    out = _fallback_output(args)
    if out.debug:
        traceback.print_exc()
    message = f"internal error: {type(exc).__name__}: {exc}"
    if not out.debug:
        message += " (rerun with --debug for the traceback)"
    out.failure("INTERNAL", message, command=_command_name(args))
    return ExitCode.INTERNAL


def _fallback_output(args: list[str]) -> Output:
    """Return an Output built from the raw flags: the click context is gone once an error escapes it."""
    return Output(
        json="--json" in args or _env_flag(JSON_ENVVAR),
        quiet="--quiet" in args or "-q" in args or _env_flag(QUIET_ENVVAR),
        debug="--debug" in args or _env_flag(DEBUG_ENVVAR),
        no_color="--no-color" in args,
    )


def _env_flag(name: str) -> bool:
    """Return a boolean environment variable as click reads flags (``1``/``true``/``yes``/``on``)."""
    return os.environ.get(name, "").strip().lower() in {"1", "true", "t", "yes", "y", "on"}


def _command_name(args: list[str]) -> str | None:
    return next((a for a in args if a in COMMANDS), None)


__all__ = ["cli", "main", "run"]
