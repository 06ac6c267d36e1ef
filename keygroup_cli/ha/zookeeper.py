"""Read a Flink job's HA state from ZooKeeper, strictly read-only.

Layout under ``high-availability.zookeeper.path.root`` + ``high-availability.cluster-id`` (Flink 1.15 to
2.3, ``ZooKeeperUtils``; checked against a live Flink 2.3 cluster):

- ``jobs/<job>/checkpoints/<%019d id>``: one ``RetrievableStreamStateHandle`` per retained completed
  checkpoint (``ZooKeeperCheckpointStoreUtil``); each has ``locks/<uuid>`` ephemeral children while a
  JobManager holds it (``ZooKeeperStateHandleStore``).
- ``leader/latch``: the Curator ``LeaderLatch`` of the JobManager processes (ephemeral children).
- ``leader/job-<job>/connection_info`` (2.x) or ``leader/<job>/connection_info`` (1.15 to 1.20): the job's
  leader address and session id, an ephemeral node.
- ``execution-plans/<job>`` (2.x) or ``jobgraphs/<job>`` (1.x): the submitted job.

Ephemeral nodes outlive a crashed JobManager until its ZooKeeper session expires
(``high-availability.zookeeper.client.session-timeout``, bounded by the server's min/max session timeout).

kg only ever calls ``get``, ``get_children`` and ``exists``: ``ReadOnlyZooKeeper`` exposes nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlparse

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, MissingDependencyError
from keygroup_cli.ha.javaser import HA_EXTRA_HINT, parse_leader_information, parse_store_handle
from keygroup_cli.ha.model import HaResolution, Leader
from keygroup_cli.ha.storage import read_storage_file, resolve_pointer

SCHEME = "zk"
DEFAULT_NAMESPACE = "/flink/default"
CONNECT_TIMEOUT = 10.0


class ZooKeeperReader(Protocol):
    """The read-only calls kg makes: no create, set or delete exists here."""

    def get(self, path: str) -> tuple[bytes, Any]:
        """Return a node's data and stat."""

    def get_children(self, path: str) -> list[str]:
        """Return a node's children names."""

    def exists(self, path: str) -> Any:
        """Return a node's stat, or None."""


class ReadOnlyZooKeeper:
    """A kazoo client behind the three read calls kg needs."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def get(self, path: str) -> tuple[bytes, Any]:
        """Return a node's data and stat."""
        data, stat = self._client.get(path)
        return bytes(data or b""), stat

    def get_children(self, path: str) -> list[str]:
        """Return a node's children, or [] when it does not exist."""
        from kazoo.exceptions import NoNodeError

        try:
            return list(self._client.get_children(path))
        except NoNodeError:
            return []

    def exists(self, path: str) -> Any:
        """Return a node's stat, or None."""
        return self._client.exists(path)


def parse_uri(uri: str) -> tuple[str, str]:
    """Split ``zk://HOST:PORT[,HOST:PORT…]/<root>/<cluster-id>`` into (hosts, namespace path).

    Without a path, Flink's defaults apply: root ``/flink``, cluster id ``/default``.

    Raises:
        InvalidArgumentError: Not a ``zk://`` URI, or no host.
    """
    parsed = urlparse(uri)
    if parsed.scheme != SCHEME or not parsed.netloc:
        raise InvalidArgumentError(
            f"{uri}: expected zk://HOST:PORT[,HOST:PORT...]/<root>/<cluster-id>", code="HA_URI_INVALID"
        )
    path = "/" + parsed.path.strip("/")
    return parsed.netloc, DEFAULT_NAMESPACE if path == "/" else path


def connect(hosts: str, timeout: float) -> Any:
    """Start a kazoo client (lazily imported; ``[ha]`` extra) and return it.

    Raises:
        MissingDependencyError: kazoo is not installed.
        InvalidInputError: No ZooKeeper server answered within ``timeout`` seconds.
    """
    try:
        from kazoo.client import KazooClient
    except ImportError:
        raise MissingDependencyError(
            f"reading a ZooKeeper HA store needs kazoo: {HA_EXTRA_HINT}", code="HA_EXTRA_MISSING"
        ) from None
    # kazoo logs every failed connection attempt; kg reports one error line instead.
    quiet = logging.getLogger("keygroup_cli.ha.kazoo")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    client = KazooClient(
        hosts=hosts,
        timeout=timeout,
        read_only=True,
        connection_retry={"max_tries": 1, "delay": 0.2},
        command_retry={"max_tries": 2, "delay": 0.2},
        logger=quiet,
    )
    try:
        client.start(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - kazoo raises its timeout or socket errors
        client.close()
        raise InvalidInputError(
            f"zk://{hosts}: no ZooKeeper server answered within {timeout:g} s ({type(exc).__name__})",
            code="HA_STORE_UNREACHABLE",
        ) from None
    return client


def resolve_zookeeper(
    uri: str,
    job: str | None = None,
    *,
    timeout: float | None = None,
    reader_factory: Callable[[str], tuple[ZooKeeperReader, Callable[[], None]]] | None = None,
) -> HaResolution:
    """Find the checkpoint ``job`` would resume from, and whether a JobManager still leads it.

    Args:
        uri: ``zk://HOST:PORT[,…]/<root>/<cluster-id>``.
        job: The job id; may be omitted when the store holds one job.
        timeout: Seconds to wait for a ZooKeeper server (default ``CONNECT_TIMEOUT``).
        reader_factory: For tests: hosts → (reader, close).

    Raises:
        InvalidArgumentError: Bad URI, unknown job, or several jobs and no ``job``.
        InvalidInputError: Unreachable store, no such cluster, no checkpoint, unreadable entry.
        MissingDependencyError: The ``[ha]`` extra is missing.
    """
    hosts, namespace = parse_uri(uri)
    if reader_factory is None:
        client = connect(hosts, CONNECT_TIMEOUT if timeout is None else timeout)
        reader: ZooKeeperReader = ReadOnlyZooKeeper(client)

        def close() -> None:
            client.stop()
            client.close()

    else:
        reader, close = reader_factory(hosts)
    try:
        return _resolve(reader, uri, namespace, job)
    finally:
        close()


def _resolve(zk: ZooKeeperReader, uri: str, root: str, job: str | None) -> HaResolution:
    if zk.exists(root) is None:
        raise InvalidInputError(
            f"{uri}: no znode {root} (check high-availability.zookeeper.path.root and cluster-id)",
            code="HA_CLUSTER_NOT_FOUND",
        )
    job_id = _pick_job(zk, uri, root, job)
    checkpoints_path = f"{root}/jobs/{job_id}/checkpoints"
    ids = sorted(int(name) for name in zk.get_children(checkpoints_path) if name.isdigit())
    if not ids:
        raise InvalidInputError(
            f"{uri}: job {job_id} has no completed checkpoint in the HA store ({checkpoints_path} is "
            "empty); it would start from its configured savepoint, or without state",
            code="HA_NO_CHECKPOINT",
        )
    # As DefaultCompletedCheckpointStoreUtils: the highest id is the one a job recovers from.
    checkpoint_id = ids[-1]
    entry = f"{checkpoints_path}/{checkpoint_id:019d}"
    data, _stat = zk.get(entry)
    handle = parse_store_handle(data, entry)
    found = resolve_pointer(read_storage_file(handle.uri, entry), checkpoint_id, entry)
    layout = "2.x" if zk.exists(f"{root}/execution-plans") is not None else "1.x"
    leader = _leader(zk, root, job_id)
    reasons = _live_reasons(zk, root, checkpoints_path, ids, leader)
    return HaResolution(
        store="zookeeper",
        source=uri,
        job_id=job_id,
        entry=entry,
        checkpoint_id=checkpoint_id,
        kind=found.checkpoint.kind,
        type_name=found.checkpoint.type_name,
        pointer=found.pointer,
        handle_uri=handle.uri,
        parsed=found.checkpoint.parsed,
        checkpoint_ids=tuple(ids),
        layout=layout,
        leader=leader,
        live_leader=bool(reasons),
        live_reasons=tuple(reasons),
        warnings=found.warnings,
    )


def _pick_job(zk: ZooKeeperReader, uri: str, root: str, job: str | None) -> str:
    jobs = sorted(zk.get_children(f"{root}/jobs"))
    if job is not None:
        if job not in jobs:
            known = ", ".join(jobs) or "none"
            raise InvalidArgumentError(
                f"{uri}: no job {job} in the HA store (jobs: {known})", code="HA_JOB_NOT_FOUND"
            )
        return job
    with_checkpoints = [j for j in jobs if zk.get_children(f"{root}/jobs/{j}/checkpoints")]
    candidates = with_checkpoints or jobs
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise InvalidInputError(f"{uri}: the HA store holds no job ({root}/jobs)", code="HA_NO_JOB")
    raise InvalidArgumentError(
        f"{uri}: the HA store holds {len(candidates)} jobs; choose one with --job ({', '.join(candidates)})",
        code="HA_JOB_AMBIGUOUS",
    )


def _leader(zk: ZooKeeperReader, root: str, job_id: str) -> Leader | None:
    for name in (f"job-{job_id}", job_id):
        path = f"{root}/leader/{name}/connection_info"
        if zk.exists(path) is None:
            continue
        data, stat = zk.get(path)
        info = parse_leader_information(data)
        if info is not None:
            owner = getattr(stat, "ephemeralOwner", 0) or 0
            return Leader(info.address, info.session_id, path, f"0x{owner:x}" if owner else None)
    return None


def _live_reasons(
    zk: ZooKeeperReader, root: str, checkpoints_path: str, ids: list[int], leader: Leader | None
) -> list[str]:
    reasons = []
    latch = zk.get_children(f"{root}/leader/latch")
    if latch:
        reasons.append(f"{root}/leader/latch has {len(latch)} contender(s): a JobManager process is alive")
    if leader is not None:
        reasons.append(f"{leader.entry} names leader {leader.address} (session {leader.session_id})")
    locked = [i for i in ids if zk.get_children(f"{checkpoints_path}/{i:019d}/locks")]
    if locked:
        reasons.append(
            f"{len(locked)} checkpoint(s) locked by a JobManager "
            f"(e.g. {checkpoints_path}/{locked[-1]:019d}/locks)"
        )
    return reasons
