"""What a killed kg left beside (or at) a destination, and its removal: the core of ``kg clean``.

Locally: staging and scratch directories (``.DEST.kg-staging-…``) whose writer mark names a process that
provably no longer runs. On an object store: an upload kg never committed (its writer mark is there, no
``_metadata`` or ``_manifest.json``), or the writer mark alone inside a committed one (a kill between the
commit and the mark's removal). Anything whose writer may still run, or that kg did not write, is
listed and left alone; ``force`` removes kg's own leftovers whatever their writer.

Either way, the exchange prefixes a Spark re-key left under ``dest`` (``.kg-exchange-<id>``, beside the
output's objects or in the directory ``spark.kg.exchange.dir`` named: ``storage.exchange``), by the same
rule.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from keygroup_cli.storage import transfer
from keygroup_cli.storage.exchange import remove_exchange, stale_exchanges
from keygroup_cli.storage.locations import Location, is_remote, location
from keygroup_cli.storage.staging import stale_staging
from keygroup_cli.storage.writer import Writer

COMMIT_FILES = ("_metadata", "_manifest.json")


@dataclass(frozen=True, slots=True)
class Leftover:
    """One thing a kg run left: where, who wrote it, and whether it was (or would be) removed."""

    path: str
    writer: str
    writer_gone: bool
    removed: bool


def clean(dest: str | os.PathLike[str], *, force: bool = False, dry_run: bool = False) -> list[Leftover]:
    """Find kg's leftovers for ``dest`` and remove those whose writer is provably gone (all with ``force``).

    ``dry_run`` removes nothing. ``dest`` itself, when committed, is never touched.
    """
    found = _clean_exchanges(dest, force, dry_run)
    if is_remote(dest):
        return found + _clean_upload(location(str(dest)), force, dry_run)
    for stale in stale_staging(Path(dest)):
        remove = (stale.removable or force) and not dry_run
        if remove:
            shutil.rmtree(stale.path, ignore_errors=True)
        writer = stale.writer.describe() if stale.writer is not None else "unknown (no writer mark)"
        found.append(Leftover(str(stale.path), writer, stale.removable, remove))
    return found


def _clean_exchanges(dest: str | os.PathLike[str], force: bool, dry_run: bool) -> list[Leftover]:
    found = []
    for stale in stale_exchanges(str(dest)):
        remove = (stale.removable or force) and not dry_run
        if remove:
            remove_exchange(stale.where)
        writer = stale.writer.describe() if stale.writer is not None else "unknown (no writer mark)"
        found.append(Leftover(str(stale.where), writer, stale.removable, remove))
    return found


def _clean_upload(target: Location, force: bool, dry_run: bool) -> list[Leftover]:
    if any((target / name).is_file() for name in COMMIT_FILES):
        # Committed: a savepoint or snapshot, never touched, except the writer mark a kill between the
        # commit and the mark's removal leaves inside it.
        return _clean_committed_mark(target, force, dry_run)
    writer = transfer.incomplete_upload(target, COMMIT_FILES[0])
    if writer is None:
        return []  # nothing of kg's there
    gone = writer.gone()
    remove = (gone or force) and not dry_run
    if remove:
        transfer.remove_upload(target)
    return [Leftover(str(target), writer.describe(), gone, remove)]


def _clean_committed_mark(target: Location, force: bool, dry_run: bool) -> list[Leftover]:
    mark = target / transfer.WRITER_MARK
    if not mark.is_file():
        return []
    writer = Writer.from_json(mark.read_bytes())
    gone = writer is not None and writer.gone()
    remove = (gone or force) and not dry_run
    if remove:
        mark.delete()
    described = writer.describe() if writer is not None else "unknown (unreadable writer mark)"
    return [Leftover(str(mark), described, gone, remove)]


__all__ = ["Leftover", "clean"]
