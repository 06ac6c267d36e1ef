"""Read a Flink job's HA state from an exported Kubernetes ConfigMap (``kubectl get cm … -o yaml``).

Flink's Kubernetes HA (``KubernetesStateHandleStore``, ``KubernetesCheckpointStoreUtil``; Flink 1.15 to
2.3) keeps, in the ConfigMap ``<cluster-id>-<job>-config-map``:

- ``checkpointID-<%019d id>``: base64 of a Java-serialized
  ``StateHandleWithDeleteMarker(RetrievableStreamStateHandle)``, pointing to the same kind of
  ``completedCheckpoint…`` file as ZooKeeper's entries. Entries whose ``markedForDeletion`` is set are
  being removed: Flink ignores them, and so does kg.
- ``counter``: the checkpoint id counter.

The leader is recorded in ``<cluster-id>-cluster-config-map``: the annotation
``control-plane.alpha.kubernetes.io/leader`` (holder, ``leaseDuration``, ``renewTime``) and the key
``org.apache.flink.k8s.leader.job-<job>`` = ``<session id>,<address>``. Export both ConfigMaps into one file
(``kubectl get cm A B -o yaml`` gives a ``List``) to let kg judge the leader too. An export is a
snapshot: the lease is judged against the time kg runs, so an old export of a live cluster looks expired.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, MissingDependencyError
from keygroup_cli.ha.javaser import HA_EXTRA_HINT, parse_store_handle
from keygroup_cli.ha.model import HaResolution, Leader
from keygroup_cli.ha.storage import read_storage_file, resolve_pointer

CHECKPOINT_KEY = re.compile(r"checkpointID-(\d{19})")
JOB_CONFIG_MAP = re.compile(r"(?P<cluster>.+)-(?P<job>[0-9a-f]{32})-config-map")
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"
LEADER_KEY_PREFIX = "org.apache.flink.k8s.leader."
SUFFIXES = (".yaml", ".yml", ".json")


def is_configmap_file(path: str) -> bool:
    """Return whether ``path`` is a local YAML/JSON file holding a ConfigMap (or a List of them)."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES or not p.is_file():
        return False
    try:
        head = p.read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return False
    return re.search(r"""["']?kind["']?\s*:\s*["']?(ConfigMap|List)\b""", head) is not None


def load_configmaps(path: str) -> list[dict[str, Any]]:
    """Return the ConfigMaps in an exported file (one ConfigMap, or a ``List`` of them).

    Raises:
        MissingDependencyError: A YAML file and PyYAML is not installed.
        InvalidInputError: The file does not parse or holds no ConfigMap.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: not UTF-8 text: {exc}", code="HA_CONFIGMAP_INVALID") from None
    try:
        document = json.loads(text)
    except RecursionError:
        raise InvalidInputError(
            f"{path}: JSON nested too deeply to be a ConfigMap export", code="HA_CONFIGMAP_INVALID"
        ) from None
    except ValueError:
        try:
            import yaml
        except ImportError:
            raise MissingDependencyError(
                f"reading a ConfigMap export in YAML needs PyYAML: {HA_EXTRA_HINT} (or export with -o json)",
                code="HA_EXTRA_MISSING",
            ) from None
        try:
            document = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise InvalidInputError(f"{path}: not valid YAML: {exc}", code="HA_CONFIGMAP_INVALID") from None
    items = (
        document.get("items", [])
        if isinstance(document, dict) and document.get("kind") == "List"
        else [document]
    )
    maps = [m for m in items if isinstance(m, dict) and m.get("kind") == "ConfigMap"]
    if not maps:
        raise InvalidInputError(f"{path}: no ConfigMap in the file", code="HA_CONFIGMAP_INVALID")
    return maps


def resolve_configmap(path: str, job: str | None = None, *, now: datetime | None = None) -> HaResolution:
    """Find the checkpoint a job would resume from in an exported HA ConfigMap.

    Args:
        path: The exported YAML or JSON file.
        job: The job id; may be omitted when the file holds one job's ConfigMap.
        now: The time the leader lease is judged against (default: now).

    Raises:
        InvalidArgumentError: Several jobs and no ``job``, or an unknown job.
        InvalidInputError: No checkpoint entry, or an entry that cannot be read.
    """
    maps = load_configmaps(path)
    chosen, cm = _job_configmap(path, maps, job)
    live, warnings = _live_checkpoints(path, cm)
    checkpoint_id, entry, handle = live[-1]
    found = resolve_pointer(read_storage_file(handle.uri, entry), checkpoint_id, entry)
    job_id = chosen or _job_from_pointer(found.pointer)
    leader, reasons = _leader(maps, job_id, now or datetime.now(timezone.utc))
    return HaResolution(
        store="kubernetes",
        source=path,
        job_id=job_id,
        entry=entry,
        checkpoint_id=checkpoint_id,
        kind=found.checkpoint.kind,
        type_name=found.checkpoint.type_name,
        pointer=found.pointer,
        handle_uri=handle.uri,
        parsed=found.checkpoint.parsed,
        checkpoint_ids=tuple(i for i, _, _ in live),
        layout="kubernetes",
        leader=leader,
        live_leader=bool(reasons),
        live_reasons=tuple(reasons),
        warnings=tuple(warnings) + found.warnings,
    )


def _job_configmap(path: str, maps: list[dict[str, Any]], job: str | None) -> tuple[str, dict[str, Any]]:
    """Return the job id (``""`` when its ConfigMap's name does not say) and the ConfigMap of ``job``.

    Raises:
        InvalidArgumentError: Several jobs and no ``job``, or an unknown job.
        InvalidInputError: No job ConfigMap at all.
    """
    job_maps = {}
    for m in maps:
        match = JOB_CONFIG_MAP.fullmatch(str(m.get("metadata", {}).get("name", "")))
        if match or any(CHECKPOINT_KEY.fullmatch(k) for k in (m.get("data") or {})):
            job_maps[match.group("job") if match else ""] = m
    if job is not None:
        if job not in job_maps:
            raise InvalidArgumentError(
                f"{path}: no ConfigMap of job {job} (<cluster-id>-{job}-config-map)", code="HA_JOB_NOT_FOUND"
            )
        return job, job_maps[job]
    if len(job_maps) == 1:
        return next(iter(job_maps.items()))
    if not job_maps:
        raise InvalidInputError(
            f"{path}: no job ConfigMap (<cluster-id>-<job>-config-map with checkpointID-… keys)",
            code="HA_NO_JOB",
        )
    raise InvalidArgumentError(
        f"{path}: {len(job_maps)} job ConfigMaps; choose one with --job ({', '.join(sorted(job_maps))})",
        code="HA_JOB_AMBIGUOUS",
    )


def _live_checkpoints(path: str, cm: dict[str, Any]) -> tuple[list[tuple[int, str, Any]], list[str]]:
    """Return the ConfigMap's checkpoint entries not marked for deletion, by id, and warnings on the others.

    Raises:
        InvalidInputError: No such entry, or an entry that cannot be read.
    """
    name = str(cm.get("metadata", {}).get("name", "?"))
    warnings: list[str] = []
    live: list[tuple[int, str, Any]] = []
    for key, value in (cm.get("data") or {}).items():
        match = CHECKPOINT_KEY.fullmatch(key)
        if not match:
            continue
        entry = f"{name}/{key}"
        handle = parse_store_handle(_decode(str(value), entry), entry)
        if handle.marked_for_deletion:
            warnings.append(f"{entry} is marked for deletion; Flink ignores it, and so does kg")
            continue
        live.append((int(match.group(1)), entry, handle))
    if not live:
        raise InvalidInputError(
            f"{path}: {name} holds no completed checkpoint (no checkpointID-… key that is not marked for "
            "deletion); the job would start from its configured savepoint, or without state",
            code="HA_NO_CHECKPOINT",
        )
    live.sort(key=lambda item: item[0])
    return live, warnings


def _decode(value: str, entry: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError(f"{entry}: value is not base64", code="HA_ENTRY_UNREADABLE") from None


def _job_from_pointer(pointer: str) -> str:
    match = re.search(r"([0-9a-f]{32})/chk-\d+/?$", pointer)
    return match.group(1) if match else "?"


def _leader(maps: list[dict[str, Any]], job_id: str, now: datetime) -> tuple[Leader | None, list[str]]:
    leader = None
    reasons = []
    for m in maps:
        name = str(m.get("metadata", {}).get("name", "?"))
        data = m.get("data") or {}
        value = data.get(f"{LEADER_KEY_PREFIX}job-{job_id}")
        if value:
            session, _, address = str(value).partition(",")
            leader = Leader(address or "?", session, f"{name}/{LEADER_KEY_PREFIX}job-{job_id}")
        annotation = (m.get("metadata", {}).get("annotations") or {}).get(LEADER_ANNOTATION)
        lease = _lease_reason(name, annotation, now)
        if lease:
            reasons.append(lease)
    return leader, reasons


def _lease_reason(name: str, annotation: Any, now: datetime) -> str | None:
    """Return why the lease in ``annotation`` is held at ``now``, or None when it is free or expired."""
    try:
        record = json.loads(annotation) if isinstance(annotation, str) else None
    except ValueError:
        return None
    if not isinstance(record, dict) or not record.get("holderIdentity"):
        return None
    try:
        renewed = datetime.fromisoformat(str(record["renewTime"]).replace("Z", "+00:00"))
        expires = renewed.timestamp() + float(record.get("leaseDuration", 15))
    except (KeyError, ValueError, TypeError):
        return f"{name}: leader annotation held by {record['holderIdentity']} (renewTime unreadable)"
    if expires <= now.timestamp():
        return None
    return (
        f"{name}: lease held by {record['holderIdentity']}, renewed {record['renewTime']}, "
        f"valid for {expires - now.timestamp():.0f} s more"
    )
