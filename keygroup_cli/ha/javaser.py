"""Read the few fields kg needs from the Java-serialized objects in Flink's HA stores.

Flink stores, per completed checkpoint, a ``RetrievableStreamStateHandle`` (ZooKeeper znode data; in a
Kubernetes ConfigMap wrapped in ``KubernetesStateHandleStore.StateHandleWithDeleteMarker``) that points to
a file in ``high-availability.storageDir`` holding the Java-serialized ``CompletedCheckpoint``
(``FileSystemStateStorageHelper.store``). The leader's ``connection_info`` znode is an
``ObjectOutputStream`` with ``writeUTF(address)`` then ``writeObject(UUID sessionId)``
(``ZooKeeperUtils.writeLeaderInformationToZooKeeper``).

The object streams are parsed with ``javaobj-py3`` (imported lazily: the ``[ha]`` extra). When a
``CompletedCheckpoint`` does not parse (a class kg has never seen), ``scan_strings`` still finds the
``externalPointer`` among the stream's string literals.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from keygroup_cli.core.errors import InvalidInputError, MissingDependencyError

HA_EXTRA_HINT = (
    "pip install -e '.[ha]' in kg's checkout, or the kg wheel with [ha] (docs/how-to/install.md#extras)"
)
_STREAM_MAGIC = b"\xac\xed\x00\x05"
_TC_STRING = 0x74
_TC_LONGSTRING = 0x7C


@dataclass(frozen=True, slots=True)
class StoreHandle:
    """A ``RetrievableStreamStateHandle``: the HA storage file that holds the real object.

    Attributes:
        uri: ``FileStateHandle.filePath`` as Flink wrote it (``file:/ha/cluster/completedCheckpoint…``).
        size: ``FileStateHandle.stateSize`` in bytes.
        marked_for_deletion: ``StateHandleWithDeleteMarker.markedForDeletion`` (Kubernetes only).
    """

    uri: str
    size: int
    marked_for_deletion: bool = False


@dataclass(frozen=True, slots=True)
class CompletedCheckpointInfo:
    """The fields of a ``CompletedCheckpoint`` kg reads.

    Attributes:
        checkpoint_id: ``checkpointID``.
        external_pointer: ``externalPointer``: the ``chk-N`` or savepoint directory.
        metadata_uri: ``metadataHandle``'s file path (the ``_metadata`` file), when it is a file.
        kind: ``"checkpoint"`` or ``"savepoint"`` (``props.checkpointType`` is a ``SavepointType``: the
            savepoint the job was started from, kept in the store until a checkpoint subsumes it).
        type_name: ``props.checkpointType.name`` (``Checkpoint``, ``Full Checkpoint``, ``Savepoint``…).
        unclaimed: ``props.unclaimed``: a savepoint restored in NO_CLAIM mode.
        timestamp: ``timestamp`` (ms since the epoch) when the checkpoint was triggered, if read.
        parsed: ``"javaobj"`` (every field parsed) or ``"strings"`` (the string-literal fallback).
    """

    checkpoint_id: int | None
    external_pointer: str
    metadata_uri: str | None
    kind: str
    type_name: str | None
    unclaimed: bool
    timestamp: int | None
    parsed: str


@dataclass(frozen=True, slots=True)
class LeaderInformation:
    """A leader's ``connection_info``: its RPC address and leader session id."""

    address: str
    session_id: str


def _javaobj() -> Any:
    try:
        import javaobj.v2 as javaobj
    except ImportError:
        raise MissingDependencyError(
            f"reading a Flink HA store needs javaobj-py3: {HA_EXTRA_HINT}", code="HA_EXTRA_MISSING"
        ) from None
    return javaobj


def load(data: bytes, what: str) -> Any:
    """Parse one Java object stream and return its first object.

    Raises:
        InvalidInputError: Not a Java object stream, or one javaobj cannot parse.
    """
    if not data.startswith(_STREAM_MAGIC):
        raise InvalidInputError(f"{what}: not a Java serialization stream", code="HA_ENTRY_UNREADABLE")
    javaobj = _javaobj()
    try:
        return javaobj.loads(data)
    except Exception as exc:  # noqa: BLE001 - javaobj raises bare Exceptions for unknown content
        raise InvalidInputError(
            f"{what}: cannot parse the Java-serialized object: {exc}", code="HA_ENTRY_UNREADABLE"
        ) from None


def class_name(obj: Any) -> str:
    """Return the Java class name of a parsed instance ('' for anything else)."""
    desc = getattr(obj, "classdesc", None)
    return str(getattr(desc, "name", "") or "")


def fields(obj: Any) -> dict[str, Any]:
    """Return an instance's serialized fields by name, over its whole class hierarchy."""
    data = getattr(obj, "field_data", None)
    if not isinstance(data, dict):
        return {}
    return {field.name: value for per_class in data.values() for field, value in per_class.items()}


def _string(value: Any) -> str | None:
    return None if value is None else str(value)


def _path_uri(path: Any) -> str:
    """Return the URI string of an ``org.apache.flink.core.fs.Path`` (its ``java.net.URI`` field)."""
    uri = fields(path).get("uri")
    text = fields(uri).get("string")
    if text is None:
        raise ValueError(f"no URI in {class_name(path) or type(path).__name__}")
    return str(text)


def _file_handle(handle: Any) -> tuple[str, int]:
    """Return (uri, size) of a ``FileStateHandle`` (or ``RelativeFileStateHandle``)."""
    values = fields(handle)
    if "filePath" not in values:
        raise ValueError(f"{class_name(handle) or type(handle).__name__} is not a file handle")
    return _path_uri(values["filePath"]), int(values.get("stateSize") or 0)


def parse_store_handle(data: bytes, what: str) -> StoreHandle:
    """Parse a znode's data or a decoded ConfigMap value into the storage file it points to.

    Accepts a ``RetrievableStreamStateHandle``, bare or in a ``StateHandleWithDeleteMarker``.

    Raises:
        InvalidInputError: Anything else.
    """
    obj = load(data, what)
    marked = False
    try:
        if class_name(obj).endswith("StateHandleWithDeleteMarker"):
            values = fields(obj)
            marked = bool(values.get("markedForDeletion"))
            obj = values["inner"]
        wrapped = fields(obj).get("wrappedStreamStateHandle", obj)
        uri, size = _file_handle(wrapped)
    except (KeyError, ValueError, TypeError) as exc:
        raise InvalidInputError(
            f"{what}: unexpected HA state handle {class_name(obj)!r}: {exc}", code="HA_ENTRY_UNREADABLE"
        ) from None
    return StoreHandle(uri, size, marked)


def parse_completed_checkpoint(data: bytes, what: str) -> CompletedCheckpointInfo:
    """Return the checkpoint id, pointer, metadata file and type of a serialized ``CompletedCheckpoint``.

    Raises:
        InvalidInputError: The stream does not parse, or holds no ``externalPointer``.
    """
    obj = load(data, what)
    values = fields(obj)
    pointer = values.get("externalPointer")
    if pointer is None:
        raise InvalidInputError(
            f"{what}: {class_name(obj) or 'object'} has no externalPointer", code="HA_ENTRY_UNREADABLE"
        )
    metadata_uri = None
    try:
        metadata_uri = _file_handle(values.get("metadataHandle"))[0]
    except (ValueError, TypeError):
        pass
    props = fields(values.get("props"))
    snapshot_type = props.get("checkpointType")
    # 1.15+: a CheckpointType or SavepointType instance with a ``name``; up to 1.14 an enum constant.
    type_class = class_name(snapshot_type)
    type_name = _string(fields(snapshot_type).get("name")) or _enum_constant(snapshot_type)
    is_savepoint = type_class.endswith("SavepointType") or "SAVEPOINT" in (type_name or "").upper()
    checkpoint_id = values.get("checkpointID")
    timestamp = values.get("timestamp")
    return CompletedCheckpointInfo(
        checkpoint_id=None if checkpoint_id is None else int(checkpoint_id),
        external_pointer=str(pointer),
        metadata_uri=metadata_uri,
        kind="savepoint" if is_savepoint else "checkpoint",
        type_name=type_name,
        unclaimed=bool(props.get("unclaimed")),
        timestamp=None if timestamp is None else int(timestamp),
        parsed="javaobj",
    )


def _enum_constant(value: Any) -> str | None:
    constant = getattr(value, "value", None)
    return None if constant is None else str(constant)


def scan_strings(data: bytes) -> list[str]:
    """Return every string literal (``TC_STRING``/``TC_LONGSTRING``) a Java object stream seems to hold.

    A heuristic for streams javaobj cannot parse: each ``0x74`` byte followed by a length that fits and
    decodes as UTF-8 counts. Class and field names (in class descriptors, not behind ``0x74``) are
    mostly skipped; callers filter by what the string must look like.
    """
    found: list[str] = []
    i = 0
    while i < len(data):
        tag = data[i]
        if tag in (_TC_STRING, _TC_LONGSTRING):
            width = 2 if tag == _TC_STRING else 8
            if i + 1 + width <= len(data):
                (length,) = struct.unpack_from(">H" if width == 2 else ">Q", data, i + 1)
                start = i + 1 + width
                if 0 < length <= len(data) - start:
                    try:
                        found.append(data[start : start + length].decode("utf-8"))
                        i = start + length
                        continue
                    except UnicodeDecodeError:
                        pass
        i += 1
    return found


_POINTER = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?/.*")


def pointer_candidates(data: bytes) -> list[str]:
    """Return the path-like string literals of a stream (``file:/…``, ``s3://…``, ``/…``), in order."""
    return [s for s in scan_strings(data) if _POINTER.match(s) and "\n" not in s]


def parse_leader_information(data: bytes) -> LeaderInformation | None:
    """Return the address and session id in a ``connection_info`` znode (None when it is empty).

    The stream is ``writeUTF(address)`` in a block-data record, then a ``java.util.UUID`` whose
    serialized fields are ``leastSigBits`` then ``mostSigBits`` (alphabetical, as Java writes them).
    """
    if not data:
        return None
    if not data.startswith(_STREAM_MAGIC) or len(data) < 8 + 16:
        return LeaderInformation(address="?", session_id="?")
    address = "?"
    # TC_BLOCKDATA (0x77), one length byte, then writeUTF: a u16 length and modified UTF-8.
    if data[4] == 0x77:
        (length,) = struct.unpack_from(">H", data, 6)
        address = data[8 : 8 + length].decode("utf-8", errors="replace")
    least, most = struct.unpack_from(">qq", data, len(data) - 16)
    return LeaderInformation(address=address, session_id=_uuid(most, least))


def _uuid(most: int, least: int) -> str:
    value = ((most & (2**64 - 1)) << 64) | (least & (2**64 - 1))
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
