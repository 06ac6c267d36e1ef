"""The kg exception hierarchy and its documented exit codes.

Every error a user can cause is a ``KgError``: it carries a stable machine-readable ``code`` (shown in
``--json`` output) and the ``exit_code`` the CLI ends with. Anything else that escapes is a bug (exit 70).
The table is documented in ``docs/reference/exit-codes.md``; changing it is a breaking change.
"""

from __future__ import annotations

import errno
from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of the ``kg`` command."""

    OK = 0
    CHECK_FAILED = 1
    USAGE = 2
    SNAPSHOT_INVALID = 3
    UNSUPPORTED = 4
    EXECUTION_FAILED = 5
    MISSING_DEPENDENCY = 6
    LEADER_LIVE = 7
    INTERNAL = 70
    INTERRUPTED = 130


class KgError(Exception):
    """Base of every error kg reports to the user as one line.

    Args:
        message: One line naming the problem (and the file, where there is one).
        code: A stable upper-case error code; defaults to the class's ``default_code``.
    """

    default_code = "KG_ERROR"
    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code


class InvalidArgumentError(KgError):
    """A value the user passed is out of bounds (Flink's own wording where Flink has one)."""

    default_code = "INVALID_ARGUMENT"
    exit_code = ExitCode.USAGE


class InvalidInputError(KgError):
    """A snapshot or savepoint is missing, truncated, corrupt or inconsistent."""

    default_code = "SNAPSHOT_INVALID"
    exit_code = ExitCode.SNAPSHOT_INVALID


class UnsupportedFormatError(KgError):
    """A format version, state backend, handle type or key type kg does not handle."""

    default_code = "UNSUPPORTED"
    exit_code = ExitCode.UNSUPPORTED


class ExecutionError(KgError):
    """Executing a plan failed; nothing was committed at the destination."""

    default_code = "EXECUTION_FAILED"
    exit_code = ExitCode.EXECUTION_FAILED


class MissingDependencyError(KgError):
    """An optional runtime (Java, Spark) is missing or broken; the message says what to install."""

    default_code = "MISSING_DEPENDENCY"
    exit_code = ExitCode.MISSING_DEPENDENCY


class LeaderLiveError(KgError):
    """A JobManager still leads the job in its HA store, so its state must not be rewritten now."""

    default_code = "HA_LEADER_LIVE"
    exit_code = ExitCode.LEADER_LIVE


#: What the file system can refuse whatever kg does: a one-line error, not a bug. ``errno`` names.
_ENVIRONMENT_ERRNOS = {
    "EACCES": "permission denied",
    "EPERM": "operation not permitted",
    "EROFS": "read-only file system",
    "ENOSPC": "no space left on device",
    "EDQUOT": "disk quota exceeded",
    "ENOTDIR": "a component of the path is not a directory",
    "EEXIST": "a component of the path is a file",
    "ENOENT": "no such file or directory",
    "ENAMETOOLONG": "file name too long",
    "EMFILE": "too many open files",
}


def no_input_error(path: object) -> InvalidInputError:
    """Return the one error every command gives for a path holding neither a savepoint nor a kg snapshot.

    The Flink and kg formats each look for their own commit file; where neither is there, both say the
    same (``SNAPSHOT_NOT_FOUND``, exit 3), whichever format the command tried first.
    """
    return InvalidInputError(
        f"{path}: not a Flink savepoint or checkpoint, nor a kg snapshot (no _metadata file, no chk-N "
        "directory, no _manifest.json; an uncommitted write has none of them)",
        code="SNAPSHOT_NOT_FOUND",
    )


def environment_error(exc: OSError, dest: object = None) -> KgError | None:
    """Return the ``KgError`` for an ``OSError`` the file system raised, or None if kg should not have.

    No space (``ENOSPC``, ``EDQUOT``) is ``NO_SPACE_LEFT``; any other refusal in ``_ENVIRONMENT_ERRNOS``
    is ``FILESYSTEM_ERROR``; both exit 5, and a write that fails so never commits (staging is removed).
    ``dest`` is the output being written, when known.
    """
    name = errno.errorcode.get(exc.errno or -1)
    if name not in _ENVIRONMENT_ERRNOS:
        return None
    code = "NO_SPACE_LEFT" if name in ("ENOSPC", "EDQUOT") else "FILESYSTEM_ERROR"
    reason = f"{_ENVIRONMENT_ERRNOS[name]} ({name}"
    if dest is not None:
        where = f"cannot write {dest}"
        reason += f" at {exc.filename})" if exc.filename is not None else ")"
    else:
        where = str(exc.filename) if exc.filename is not None else "kg"
        reason += ")"
    return ExecutionError(f"{where}: {reason}; nothing was committed", code=code)


def destination_error(dest: object, exc: OSError) -> InvalidArgumentError:
    """Return the error for a destination kg cannot create (``DESTINATION_NOT_WRITABLE``, exit 2)."""
    name = errno.errorcode.get(exc.errno or -1, "")
    reason = _ENVIRONMENT_ERRNOS.get(name, exc.strerror or str(exc))
    return InvalidArgumentError(
        f"cannot write {dest}: {reason} ({name or type(exc).__name__}); choose another --out",
        code="DESTINATION_NOT_WRITABLE",
    )


#: The name before kg 0.x's one vocabulary (issue 38); kept for callers that catch it.
InvalidSnapshotError = InvalidInputError
