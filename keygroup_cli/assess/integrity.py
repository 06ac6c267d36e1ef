"""Deep verification of any kg input (a kg snapshot or a Flink savepoint/checkpoint), and the gate on it.

``verify_input`` dispatches on what ``path`` is: ``kg verify`` and ``kg check --deep`` call it.
``check_input`` is what ``kg check`` adds about the input's files: without ``--deep`` only what a stat
sees (every state file a Flink ``_metadata`` names is there, readable, with the size its handles need).
``require_intact`` is the gate of every writer, so kg writes nothing from an input its own ``kg verify``
rejects: a rescale calls it first with ``blocks=False`` (its pass checks or decodes every block), a
``kg migrate`` to an object store calls it whole before its server-side copies; a local ``kg migrate``
verifies its staged copy instead (``execution.routes.migrate``), the input's bytes read once either way.
(A savepoint kg writes is checked before it is committed by ``flink.write.commit``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from keygroup_cli.core.findings import Finding, fails_verify_error, first_error
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.storage.locations import Location

if TYPE_CHECKING:
    from keygroup_cli.core.findings import VerifyReport
    from keygroup_cli.flink import FlinkCheckpoint


def verify_input(
    path: str | Path | Location | FlinkCheckpoint,
    *,
    on_progress: OnProgress | None = None,
    blocks: bool = True,
    layout_headers: bool = True,
) -> VerifyReport:
    """Verify a kg snapshot (``snapshot.verify``) or a Flink savepoint/checkpoint (``flink.check.verify``).

    ``blocks=False`` leaves a Flink input's key-group blocks to the reader (``verify_flink``). ``path``
    may be an opened savepoint (``flink.savepoint.Savepoint``): what it read already is not read again.

    Raises:
        InvalidInputError: Neither kind, or its manifest / ``_metadata`` does not parse.
        UnsupportedFormatError: A format version kg does not read.
    """
    from keygroup_cli.flink import FlinkCheckpoint, is_flink_savepoint

    if isinstance(path, FlinkCheckpoint) or is_flink_savepoint(path):
        from keygroup_cli.flink import verify_flink

        return verify_flink(path, on_progress=on_progress, blocks=blocks, layout_headers=layout_headers)
    from keygroup_cli.snapshot.verify import verify_snapshot

    return verify_snapshot(path if isinstance(path, str | Path) else str(path), on_progress=on_progress)


def check_input(path: str | Path | Location | FlinkCheckpoint, *, deep: bool = False) -> list[Finding]:
    """Return ``kg check``'s findings about the input's own files.

    A Flink savepoint or checkpoint gets ``flink.metadata.state_files.state_file_findings`` (a stat per state
    file, no state read, no pyarrow); with ``deep`` every finding of ``verify_input`` too, less those the stat
    already made (they are worded alike). A kg snapshot gets nothing without ``deep``. ``path`` may be an
    opened savepoint: nothing it read is read again.

    Raises:
        InvalidInputError: ``_metadata`` (or a kg manifest) is missing or does not parse.
        UnsupportedFormatError: A format version kg does not read.
    """
    from keygroup_cli.flink import FlinkCheckpoint, is_flink_savepoint

    findings: list[Finding] = []
    if isinstance(path, FlinkCheckpoint) or is_flink_savepoint(path):
        from keygroup_cli.flink import Savepoint, open_savepoint, state_file_findings

        path = Savepoint.of(path) if isinstance(path, FlinkCheckpoint) else open_savepoint(path)
        findings = state_file_findings(path)
    if deep:
        seen = set(findings)
        findings += [f for f in verify_input(path).findings if f not in seen]
    return findings


def require_intact(
    path: str | Path | Location | FlinkCheckpoint,
    *,
    on_progress: OnProgress | None = None,
    blocks: bool = True,
    label: str | None = None,
    layout_headers: bool = True,
) -> None:
    """Refuse an input that ``kg verify`` rejects.

    With ``blocks=False`` a Flink input's key-group blocks are not decoded here (every keyed header is,
    serializer classes included, and every operator-state stream): the caller reads every block as
    strictly as ``kg verify`` does before anything is committed. ``kg rescale`` does: its read
    tasks decode every block (``decode_keyed_file(strict=True)``), and key groups copied as bytes are
    checked in the pass that copies them (``flink.write.regroup``, ``flink.check.verify.block_finding``).
    ``label`` names the input in the message (default: ``path``, or an opened savepoint's directory).
    ``layout_headers=False``: a heap or RocksDB layout's own headers are left to the check of its
    canonical rewrite (``flink.check.verify.verify_flink``).

    Raises:
        InvalidInputError: The first error finding, as one line (``INPUT_FAILS_VERIFY``).
    """
    report = verify_input(path, on_progress=on_progress, blocks=blocks, layout_headers=layout_headers)
    problem = first_error(report.findings)
    if problem is not None:
        name = label or (str(path) if isinstance(path, str | Path | Location) else str(path.directory))
        raise fails_verify_error(name, problem)


__all__ = ["check_input", "require_intact", "verify_input"]
