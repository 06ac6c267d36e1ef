"""Where an engine's exchange lives: a hidden, marked prefix every executor reaches, removed after the job.

A re-key through a store (``execution.engines.spill``) has its read tasks leave files that its write tasks
read back. They go under ``ROOT/.kg-exchange-<id>/``, where ``ROOT`` is a local directory every executor
mounts at the same path, or an object-store prefix (by default the output's own, ``--out s3://…``; else
``spark.kg.exchange.dir``). ``new_exchange`` writes a writer mark there first (``.kg-writer``: host, pid,
start time), so what a killed kg left behind is kg's and provably orphaned once that process is gone;
``remove_exchange`` deletes everything under it, the mark last; ``stale_exchanges`` finds the prefixes
under a root whose writer is gone, which ``kg clean ROOT`` removes.

One flat level (``.kg-exchange-<id>``, not ``.kg-exchange/<id>``): object stores have no directories, and
pyarrow re-creates an empty "directory" marker for a prefix it leaves empty, so a removal leaves at most
ROOT's own marker, never an empty ``.kg-exchange/`` inside a committed savepoint.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

from keygroup_cli.core.errors import ExecutionError, KgError
from keygroup_cli.storage.locations import Location, location
from keygroup_cli.storage.transfer import WRITER_MARK, in_flight, retrying
from keygroup_cli.storage.writer import Writer

#: The name prefix of an exchange's directory (or object-store prefix) under its root.
EXCHANGE_PREFIX = ".kg-exchange-"
#: Spill files deleted at once: a local unlink frees the file's cached pages (0.03 s per 100 MB here, on
#: the threads at hand), an object store takes one request per object.
DELETES_IN_FLIGHT = 8


def new_exchange(root: str | Location) -> Location:
    """Create ``ROOT/.kg-exchange-<id>`` with this process's writer mark in it; return its location.

    Raises:
        KgError: The store refused the mark (access denied, unreachable: a one-line error).
    """
    where = location(root) / f"{EXCHANGE_PREFIX}{uuid.uuid4().hex}"
    mark = where / WRITER_MARK
    retrying(lambda: mark.write_bytes(Writer.me().to_json().encode()), str(mark))
    return where


def remove_exchange(where: Location, *, check: bool = False) -> None:
    """Delete everything under the exchange ``where``, its writer mark last.

    With ``check`` (a job that succeeded: the output is committed next) whatever cannot be removed is an
    error, so a committed output never holds a leftover exchange; otherwise (a failure or Ctrl-C is being
    raised already) removal is best effort.

    Raises:
        ExecutionError: With ``check``, objects remain (``EXCHANGE_NOT_REMOVED``).
    """

    def delete(name: str) -> None:
        target = where / name
        retrying(target.delete, str(target))

    try:
        names = [name for name, _size in where.walk_files()]
        spilled = [name for name in names if name != WRITER_MARK]
        for _ in in_flight(delete, spilled, DELETES_IN_FLIGHT, ordered=False):
            pass
        if WRITER_MARK in names:
            delete(WRITER_MARK)  # last: until it goes, `kg clean` sees whose exchange this is
        with contextlib.suppress(KgError, OSError):
            where.fs.delete_dir(where.path)
        left = [name for name, _size in where.walk_files()]
    except (KgError, OSError) as exc:
        if check:
            raise ExecutionError(
                f"{where}: the exchange could not be removed ({exc})", code="EXCHANGE_NOT_REMOVED"
            ) from None
        return
    if left and check:
        raise ExecutionError(
            f"{where}: {len(left)} file(s) of the exchange could not be removed", code="EXCHANGE_NOT_REMOVED"
        )


@dataclass(frozen=True, slots=True)
class StaleExchange:
    """An exchange prefix under a root, its writer (None: no readable mark) and whether it is gone."""

    where: Location
    writer: Writer | None
    removable: bool


def stale_exchanges(root: str | Location) -> list[StaleExchange]:
    """Return the exchanges under ``root`` that this process does not own, and whether their writer is gone.

    ``removable`` only when the writer mark says the writer provably no longer runs (same host, process
    gone); an exchange without a readable mark is listed, never judged gone.
    """
    base = location(root)
    found = []
    with contextlib.suppress(KgError, OSError):
        for child in base.iterdir():
            if not child.name.startswith(EXCHANGE_PREFIX):
                continue
            mark = child / WRITER_MARK
            writer = Writer.from_json(mark.read_bytes()) if mark.is_file() else None
            if writer is not None and writer.is_me():
                continue
            found.append(StaleExchange(child, writer, writer is not None and writer.gone()))
    return found


__all__ = ["EXCHANGE_PREFIX", "StaleExchange", "new_exchange", "remove_exchange", "stale_exchanges"]
