"""Containment: the one resolver every file reference of an input goes through before kg opens it.

A reference is what an input names: a path relative to its directory, an absolute path, a ``file:`` URI
or an object-store URI (``s3://…``, and the other schemes ``storage.locations`` knows). ``contain``
normalizes it (``.`` and ``..``, percent-encoding, and for local paths every symbolic link) and returns
where it leads if that lies inside one of the input's roots (``input_roots``); otherwise it raises
``InvalidInputError`` with code ``STATE_FILE_OUTSIDE`` and one sentence (``outside_error``), worded
the same for every reference and every command.

The roots of an input:

- a directory that is not a ``chk-<n>`` directory (a savepoint, a kg snapshot): that directory only;
- a ``chk-<n>`` directory (a retained checkpoint): that directory, and the ``shared/``, ``taskowned/``
  and ``dstl/`` folders of the job directory it sits in (``dstl/`` where the changelog backend's files
  are when its base path is inside the job directory); never a sibling ``chk-<m>``;
- on an object store the same, as prefixes;
- every root named in ``KG_STATE_ROOTS`` (``os.pathsep``-separated local paths or object-store prefixes,
  ``/data/extra:s3://bucket/shared``);
- for a scratch view kg wrote of an input (``RootedDirectory``), the roots of that input as well.

This module knows no Flink format: callers hand it the reference text and the input's directory.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import quote, unquote, urlparse

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.storage.locations import SCHEMES, Location, is_remote, is_uri, location

#: More places (``os.pathsep``-separated directories or object-store prefixes) an input may read from.
STATE_ROOTS_ENV = "KG_STATE_ROOTS"
#: The code of every refusal.
OUTSIDE_CODE = "STATE_FILE_OUTSIDE"
#: The folders of a checkpoint's job directory its handles may name.
JOB_FOLDERS = ("shared", "taskowned", "dstl")

_CHECKPOINT_DIR = re.compile(r"chk-\d+")

#: An object-store place, normalized: (scheme as pyarrow knows it, bucket or host, absolute path).
_Prefix = tuple[str, str, str]


def outside_error(reference: object, target: object) -> InvalidInputError:
    """Return the one refusal: ``reference`` (what the input names) leads to ``target``, outside its roots."""
    where = "" if str(target) == str(reference) else f" (it leads to {target})"
    return InvalidInputError(
        f"{reference}: not read, it lies outside the input{where}; name a directory that holds it in "
        f"{STATE_ROOTS_ENV} to allow it",
        code=OUTSIDE_CODE,
    )


class RootedDirectory(type(Path())):  # type: ignore[misc]
    """A local directory (a scratch view kg wrote of an input) that may read where that input may.

    It carries those roots itself (``extra_roots``), so the trust lives with the view and nowhere else.
    """

    extra_roots: tuple[Path, ...] = ()
    extra_prefixes: tuple[_Prefix, ...] = ()


def rooted_directory(view: Path, origin: Path | Location) -> Path:
    """Return ``view`` as a directory whose references may lead where ``origin``'s may."""
    directory = RootedDirectory(view)
    roots = input_roots(origin)
    directory.extra_roots = roots.local
    directory.extra_prefixes = roots.remote
    return directory


@dataclass(frozen=True)
class Roots:
    """Where one input's references may lead: local directories (links resolved) and object-store prefixes."""

    local: tuple[Path, ...]
    remote: tuple[_Prefix, ...]
    #: Directories resolved already, for the many files of one input that share a few directories.
    _resolved: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def admits_local(self, path: Path | str) -> bool:
        """Return whether ``path``, every link resolved, lies in a local root."""
        real = self.realpath(path)
        for root in self.local:
            text = str(root)
            if real == text or real.startswith(text if text.endswith(os.sep) else text + os.sep):
                return True
        return False

    def realpath(self, path: Path | str) -> str:
        """Return ``os.path.realpath(path)``, its directory's part resolved once per these roots."""
        head, tail = os.path.split(os.fspath(path))
        if not head or tail in ("", ".", ".."):
            return os.path.realpath(path)
        directory = self._resolved.get(head)
        if directory is None:
            directory = self._resolved[head] = os.path.realpath(head)
        joined = os.path.join(directory, tail)
        return os.path.realpath(joined) if os.path.islink(joined) else joined

    def admits_remote(self, prefix: _Prefix) -> bool:
        """Return whether the normalized object-store place ``prefix`` lies under a root prefix."""
        scheme, netloc, path = prefix
        return any(
            scheme == s and netloc == n and (path == p or path.startswith(p.rstrip("/") + "/"))
            for s, n, p in self.remote
        )


def input_roots(directory: Path | Location) -> Roots:
    """Return the roots of the input in ``directory`` (where its ``_metadata`` or ``_manifest.json`` is)."""
    local: list[Path] = []
    remote: list[_Prefix] = []
    own = _as_local(directory)
    if own is not None:
        local.extend(_own_places(Path(os.path.realpath(own))))
    else:
        assert isinstance(directory, Location)
        remote.extend(_prefix(str(p)) for p in _own_places(directory))
    for entry in _split_roots(os.environ.get(STATE_ROOTS_ENV, "")):
        if not entry:
            continue
        if is_uri(entry) and urlparse(entry).scheme.lower() != "file":
            remote.append(_prefix(entry))
        else:
            local.append(Path(unquote(urlparse(entry).path) if is_uri(entry) else entry))
    local.extend(getattr(directory, "extra_roots", ()))
    remote.extend(getattr(directory, "extra_prefixes", ()))
    return Roots(tuple(Path(os.path.realpath(p)) for p in local), tuple(remote))


def _split_roots(value: str) -> list[str]:
    """Split ``KG_STATE_ROOTS`` at ``os.pathsep``; a ``:`` that starts a URI's ``//`` does not split."""
    if os.pathsep != ":":
        return value.split(os.pathsep)
    return re.split(r":(?!//)", value)


def _own_places(directory: Path | Location) -> list[Path | Location]:
    places: list[Path | Location] = [directory]
    if _CHECKPOINT_DIR.fullmatch(directory.name):
        places.extend(directory.parent / folder for folder in JOB_FOLDERS)
    return places


def contain(
    reference: str,
    directory: Path | Location,
    *,
    relative: bool = False,
    roots: Roots | None = None,
    locate: bool = True,
) -> Path | Location | None:
    """Return the file ``reference`` (named by the input in ``directory``) leads to, if inside its roots.

    With ``relative`` the reference is a path relative to ``directory`` (which it may not leave).
    ``roots`` are ``input_roots(directory)``, computed once by a caller that resolves many references.
    Without ``locate`` an object-store place inside the roots is only judged: None is returned, and no
    file system object is made for it (a caller that checks every reference before reading any).

    An absolute local path or ``file:`` URI that does not lead inside (a checkpoint copied elsewhere: its
    old place is gone or is another directory) falls back to the file of the same name beside
    ``_metadata``, under the job's folder it names (``shared/``, ``dstl/<job id>/dstl/``…) or in the
    folder of its parent's name beside the input, each only if that lies inside the roots; if it exists
    nowhere, the last of those inside is returned (so that it is reported missing there). An
    object-store URI falls back the same way to a copy on the input's own file system, then is read
    where it is if that lies inside the roots (a ``Location``).

    Raises:
        InvalidInputError: ``STATE_FILE_OUTSIDE``: it leads outside every root (``outside_error``);
            ``STATE_FILE_UNREADABLE``: no file can have that name (a NUL byte, a malformed URI).
        UnsupportedFormatError: ``REMOTE_STATE_FILE``: a file system kg does not know, or a local path
            named by an input on an object store.
    """
    roots = input_roots(directory) if roots is None else roots
    try:
        if "\0" in reference:
            raise ValueError("a NUL byte in the name")
        return _contain(reference, directory, relative, roots, locate)
    except ValueError as exc:
        raise InvalidInputError(
            f"{reference!r}: cannot read state file: not a file name ({exc})", code="STATE_FILE_UNREADABLE"
        ) from None


def _contain(
    reference: str, directory: Path | Location, relative: bool, roots: Roots, locate: bool
) -> Path | Location | None:
    if relative:
        return _relative(reference, directory, roots)
    parsed = urlparse(reference) if urlparse(reference).scheme else None  # file:/x, file:///x, s3://…
    if parsed is None and not PurePosixPath(reference).is_absolute():
        return _relative(reference, directory, roots)
    if parsed is not None and parsed.scheme.lower() != "file":
        if not is_remote(reference) or parsed.scheme.lower() not in SCHEMES:
            raise UnsupportedFormatError(
                f"{reference}: state on a file system kg does not know ({parsed.scheme}://)",
                code="REMOTE_STATE_FILE",
            )
        return _object_store(reference, directory, roots, locate)
    local = _as_local(directory)
    if local is None:
        raise UnsupportedFormatError(
            f"{reference}: a local path in the _metadata of {directory}, which is on an object store",
            code="REMOTE_STATE_FILE",
        )
    path = Path(os.path.normpath(unquote(parsed.path) if parsed is not None else reference))
    if roots.admits_local(path):
        return path
    copies = _copies(path.parts, local)
    for candidate in copies:
        if candidate.exists() and roots.admits_local(candidate):
            return candidate
    inside = [c for c in copies if roots.admits_local(c)]
    if inside and not os.path.lexists(path):
        # Gone from where it was written and from every place a copy of it may be: reported missing
        # where the input's own copy would be (nothing outside is opened).
        return inside[-1]
    raise outside_error(reference, os.path.realpath(path))


def contain_file(path: Path | Location) -> Path | Location:
    """Return ``path`` (an input's ``_metadata`` or ``_manifest.json``) if, links resolved, it is inside.

    Raises:
        InvalidInputError: ``STATE_FILE_OUTSIDE``: it is a link that leads outside.
    """
    local = _as_local(path)
    if local is None:
        return path  # an object store has no links
    if not input_roots(local.parent).admits_local(local):
        raise outside_error(path, os.path.realpath(local))
    return path


def _relative(reference: str, directory: Path | Location, roots: Roots) -> Path | Location:
    normalized = posixpath.normpath(reference) if reference else ""
    if not reference or reference.startswith("/") or normalized == ".." or normalized.startswith("../"):
        raise outside_error(reference, f"{directory}/{normalized}")
    path = directory / normalized
    local = _as_local(path)
    if local is None:
        return path  # an object-store key below the input's own prefix (no links there)
    if not roots.admits_local(local):
        raise outside_error(reference, os.path.realpath(local))
    return path


def _object_store(
    reference: str, directory: Path | Location, roots: Roots, locate: bool
) -> Path | Location | None:
    scheme, netloc, path = _prefix(reference)
    parts = PurePosixPath(path).parts[1:]  # normalized: no "..", "/" first
    normalized = f"{urlparse(reference).scheme}://{netloc}{quote(path, safe='/')}"
    local = _as_local(directory)
    if local is not None:
        for candidate in _copies(parts, local):
            if candidate.exists() and roots.admits_local(candidate):
                return candidate
    elif roots.admits_remote((scheme, netloc, path)):
        # Under the input's own prefix: no request to look for a copy.
        return location(normalized) if locate else None
    else:
        assert isinstance(directory, Location)
        for copy in _remote_copies(parts, directory):
            if roots.admits_remote(_prefix(copy.uri)) and copy.exists():
                return copy
    if roots.admits_remote((scheme, netloc, path)):
        return location(normalized) if locate else None
    raise outside_error(reference, normalized)


def _copies(parts: tuple[str, ...], directory: Path) -> list[Path]:
    """Where a copy of the file at ``parts`` (its path's components, normalized) may be, beside ``directory``.

    Beside ``_metadata``; below the job directory, after its name in the path (``<job id>/shared/f``,
    ``<job id>/dstl/<job id>/dstl/f``); in the folder of the parent's name beside the input.
    """
    names = [p for p in parts if p not in ("/", "")]
    if not names:
        return []
    found = [directory / names[-1]]
    job = directory.parent
    if job.name in names[:-1]:
        found.append(job.joinpath(*names[names.index(job.name) + 1 :]))
    if len(names) >= 2:
        found.append(job / names[-2] / names[-1])
    return found


def _remote_copies(parts: tuple[str, ...], directory: Location) -> list[Location]:
    if not parts:
        return []
    found = [directory / parts[-1]]
    if len(parts) >= 2:
        found.append(directory.parent / parts[-2] / parts[-1])
    return found


def _prefix(uri: str) -> _Prefix:
    """Return ``uri`` normalized: its scheme as pyarrow knows it, its bucket, and its path without ``..``."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    path = posixpath.normpath("/" + unquote(parsed.path).lstrip("/"))
    return SCHEMES.get(scheme, scheme), parsed.netloc, "/" if path in ("/", "//") else path


def _as_local(place: Path | Location) -> Path | None:
    """Return ``place`` as a local ``Path`` (a ``file://`` location too), or None on an object store."""
    if isinstance(place, Location):
        return place.local_path
    return place


__all__ = [
    "JOB_FOLDERS",
    "OUTSIDE_CODE",
    "STATE_ROOTS_ENV",
    "RootedDirectory",
    "Roots",
    "contain",
    "contain_file",
    "input_roots",
    "outside_error",
    "rooted_directory",
]
