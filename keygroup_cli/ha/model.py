"""What kg learns from a Flink HA store: the checkpoint a job resumes from, and who leads the job."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Leader:
    """The job's leader as the HA store records it.

    Attributes:
        address: The leader's RPC address (``pekko://flink@host:port/user/rpc/jobmanager_3``).
        session_id: The Flink leader session id (a UUID).
        entry: Where it was read (znode path or ConfigMap key).
        zk_session: The ZooKeeper session owning the ephemeral ``connection_info`` node (hex), if any.
    """

    address: str
    session_id: str
    entry: str
    zk_session: str | None = None


@dataclass(frozen=True, slots=True)
class HaResolution:
    """The checkpoint a job would resume from, read from its HA store, and whether a leader is live.

    Attributes:
        store: ``"zookeeper"`` or ``"kubernetes"``.
        source: What the user gave (``zk://…`` or the ConfigMap file).
        job_id: The job (32 hex digits).
        entry: The store entry used (znode path or ConfigMap key), the one with the highest id.
        checkpoint_id: Its checkpoint id.
        kind: ``"checkpoint"``, or ``"savepoint"`` (the savepoint the job was started from).
        type_name: Flink's name of the snapshot type (``Checkpoint``, ``Savepoint``…), if read.
        pointer: The ``chk-N`` / savepoint directory: a local path, or a URI for other file systems.
        handle_uri: The ``completedCheckpoint…`` file in ``high-availability.storageDir``.
        parsed: ``"javaobj"`` or ``"strings"`` (the fallback when the object did not parse).
        checkpoint_ids: Every checkpoint id in the store, ascending.
        layout: Which Flink layout the store has (``"2.x"``: ``execution-plans``, ``leader/job-<job>``;
            ``"1.x"``: ``jobgraphs``, ``leader/<job>``; ``"kubernetes"``).
        leader: The job's leader, if the store names one.
        live_leader: Whether a JobManager still holds the job (see ``live_reasons``).
        live_reasons: One line per sign of a live leader.
        warnings: What the user should know (fallback parsing, entries skipped).
    """

    store: str
    source: str
    job_id: str
    entry: str
    checkpoint_id: int
    kind: str
    type_name: str | None
    pointer: str
    handle_uri: str
    parsed: str
    checkpoint_ids: tuple[int, ...]
    layout: str
    leader: Leader | None = None
    live_leader: bool = False
    live_reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    def leader_text(self) -> str:
        """Return the leader as one phrase for messages (``address (session id …)`` or ``unknown``)."""
        if self.leader is None:
            return "unknown"
        return f"{self.leader.address} (leader session {self.leader.session_id})"
