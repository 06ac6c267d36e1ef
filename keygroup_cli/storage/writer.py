"""Who is writing an output: host, pid and process start time, so a crashed writer can be proven gone.

A process killed with SIGKILL leaves its staging directory (or, on an object store, its uploaded objects)
behind. Both carry a writer mark; ``Writer.gone()`` is true only when the writer provably no longer runs:
on the same host, and no process with that pid, or one with another start time (pids are reused). A mark
from another host is never judged gone: that needs a human (``kg clean --force``).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Writer:
    """Who writes an output: host, pid and that process's start time."""

    host: str
    pid: int
    started: str | None

    @classmethod
    def me(cls) -> Writer:
        """Return this process."""
        return cls(socket.gethostname(), os.getpid(), process_start_time(os.getpid()))

    def to_json(self, **extra: Any) -> str:
        """Return the mark's text."""
        return json.dumps({"host": self.host, "pid": self.pid, "started": self.started, **extra})

    @classmethod
    def from_json(cls, text: str | bytes) -> Writer | None:
        """Parse a mark; None when it is not one."""
        try:
            doc = json.loads(text)
            return cls(str(doc["host"]), int(doc["pid"]), doc.get("started"))
        except (ValueError, KeyError, TypeError):
            return None

    def is_me(self) -> bool:
        """Return whether this process wrote the mark."""
        return self.host == socket.gethostname() and self.pid == os.getpid()

    def gone(self) -> bool:
        """Return whether the writer provably no longer runs (only decidable on the same host)."""
        if self.host != socket.gethostname() or self.is_me():
            return False
        started = process_start_time(self.pid)
        if started is None:
            return not pid_exists(self.pid)
        return self.started is not None and started != self.started

    def describe(self) -> str:
        """Return ``pid N on HOST``."""
        return f"pid {self.pid} on {self.host}"


def process_start_time(pid: int) -> str | None:
    """Return a process's start time in clock ticks since boot (``/proc/<pid>/stat``), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: the fields follow the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def pid_exists(pid: int) -> bool:
    """Return whether a process with ``pid`` exists (on this host)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["Writer", "pid_exists", "process_start_time"]
