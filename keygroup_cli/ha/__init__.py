"""Find the checkpoint a Flink job resumes from, straight from its HA store (ZooKeeper or a ConfigMap).

``resolve(source, job)`` reads the store read-only and returns an ``HaResolution``: the ``chk-N`` (or
savepoint) directory the job would restore, the store entry it came from, and whether a JobManager is
still live. ``is_ha_source`` says whether a command-line argument names an HA store at all.

kazoo, javaobj-py3 and PyYAML are optional (the ``[ha]`` extra: ``pip install -e '.[ha]'`` in kg's checkout)
and imported only here.
"""

from __future__ import annotations

from datetime import datetime

from keygroup_cli.ha.configmap import is_configmap_file, resolve_configmap
from keygroup_cli.ha.model import HaResolution, Leader
from keygroup_cli.ha.zookeeper import SCHEME, resolve_zookeeper


def is_ha_source(source: str) -> bool:
    """Return whether ``source`` is a ``zk://`` URI or an exported HA ConfigMap file."""
    return source.startswith(f"{SCHEME}://") or is_configmap_file(source)


def resolve(source: str, job: str | None = None, *, now: datetime | None = None) -> HaResolution:
    """Return the checkpoint ``job`` would resume from, as its HA store records it.

    Args:
        source: ``zk://HOST:PORT[,…]/<root>/<cluster-id>`` or an exported ConfigMap (YAML/JSON file).
        job: The job id (32 hex digits); may be omitted when the store holds one job.
        now: For a ConfigMap: the time its leader lease is judged against.

    Raises:
        InvalidArgumentError: Bad URI, unknown job, or several jobs and no ``job`` (exit 2).
        InvalidInputError: Unreachable store, no checkpoint, unreadable entry (exit 3).
        MissingDependencyError: The ``[ha]`` extra is not installed (exit 6).
    """
    if source.startswith(f"{SCHEME}://"):
        return resolve_zookeeper(source, job)
    return resolve_configmap(source, job, now=now)


def resolution_document(resolution: HaResolution) -> dict[str, object]:
    """Return the JSON form of a resolution (``ha`` in ``kg inspect --json``; public API)."""
    leader = resolution.leader
    return {
        "store": resolution.store,
        "source": resolution.source,
        "job_id": resolution.job_id,
        "entry": resolution.entry,
        "checkpoint_id": resolution.checkpoint_id,
        "kind": resolution.kind,
        "type": resolution.type_name,
        "pointer": resolution.pointer,
        "handle": resolution.handle_uri,
        "parsed": resolution.parsed,
        "checkpoint_ids": list(resolution.checkpoint_ids),
        "layout": resolution.layout,
        "leader": None
        if leader is None
        else {
            "address": leader.address,
            "session_id": leader.session_id,
            "entry": leader.entry,
            "zk_session": leader.zk_session,
        },
        "live_leader": resolution.live_leader,
        "live_reasons": list(resolution.live_reasons),
        "warnings": list(resolution.warnings),
    }


__all__ = ["HaResolution", "Leader", "is_ha_source", "resolution_document", "resolve"]
