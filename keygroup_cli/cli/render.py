"""Text (rich) and JSON rendering, on the right stream.

Results go to stdout; progress, warnings and errors go to stderr. Under ``--json`` stdout carries exactly
one JSON document: ``{"schema_version": 1, "command": ..., ...result}`` or, on failure,
``{"schema_version": 1, "command": ..., "error": {"code": ..., "message": ...}}``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import click
from rich.console import Console

#: Version of the JSON documents kg prints; bumped only with a **Breaking:** changelog entry.
SCHEMA_VERSION = 1


class Output:
    """Where and how a command's result, warnings and errors are written."""

    def __init__(
        self, *, json: bool = False, quiet: bool = False, debug: bool = False, no_color: bool = False
    ):
        self.json = json
        self.quiet = quiet
        self.debug = debug
        self.no_color = no_color or "NO_COLOR" in os.environ
        self._stdout: Console | None = None
        self._stderr: Console | None = None

    @property
    def stdout(self) -> Console:
        """Return the rich console on stdout (results)."""
        if self._stdout is None:
            self._stdout = self._console(sys.stdout)
        return self._stdout

    @property
    def stderr(self) -> Console:
        """Return the rich console on stderr (progress, warnings, errors)."""
        if self._stderr is None:
            self._stderr = self._console(sys.stderr)
        return self._stderr

    def _console(self, stream: Any) -> Console:
        width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
        return Console(
            file=stream,
            no_color=self.no_color,
            highlight=False,
            soft_wrap=False,
            width=width,
            emoji=False,
        )

    @property
    def progress_enabled(self) -> bool:
        """Return whether progress bars may be drawn (stderr is a terminal, not quiet, not JSON)."""
        return not (self.quiet or self.json) and sys.stderr.isatty()

    def result(self, command: str, document: Mapping[str, Any], text: Callable[[Console], None]) -> None:
        """Emit a command's result: the JSON document under ``--json``, else ``text(stdout_console)``."""
        if self.json:
            self.emit_json({"schema_version": SCHEMA_VERSION, "command": command, **document})
        else:
            text(self.stdout)

    def emit_json(self, document: Mapping[str, Any]) -> None:
        """Write one JSON document to stdout."""
        sys.stdout.write(json.dumps(document, ensure_ascii=False, allow_nan=False))
        sys.stdout.write("\n")
        sys.stdout.flush()

    def warn(self, message: str) -> None:
        """Write a one-line warning to stderr unless quiet."""
        if not self.quiet:
            self.stderr.print(f"kg: warning: {message}", markup=False, highlight=False)

    def failure(self, code: str, message: str, *, command: str | None) -> None:
        """Report a failure: one line on stderr, and the JSON error document under ``--json``."""
        sys.stderr.write(f"kg: error: {message}\n")
        sys.stderr.flush()
        if self.json:
            self.emit_json(
                {
                    "schema_version": SCHEMA_VERSION,
                    "command": command,
                    "error": {"code": code, "message": message},
                }
            )


def output_for(ctx: click.Context) -> Output:
    """Return the Output the root group stored, honouring a command-level ``--json``."""
    out = ctx.find_object(Output)
    if out is None:
        out = Output()
        ctx.obj = out
    return out
