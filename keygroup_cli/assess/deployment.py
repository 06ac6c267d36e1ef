"""A ``FlinkDeployment`` and its state: which snapshot it starts from, and the job ``kg check`` models.

``resolve_start`` picks the state the deployment starts from, in the operator's order of preference as
kg reads it from the resources given (one file):

1. ``status.jobStatus.upgradeSavepointPath`` (operator 1.10+; before it
   ``status.jobStatus.savepointInfo.lastSavepoint.location``, which 1.10+ still falls back to): the
   savepoint (or, for a job that ended, the latest checkpoint) the operator recorded when it last stopped
   the job, and what it restores when the job is resumed or upgraded in ``savepoint`` mode
   (``AbstractJobReconciler.restoreJob``; the operator's docs, "Snapshots": "the savepoint path will also
   be recorded in the upgradeSavepointPath job status field, which the operator will use when restarting
   the job"). Not when ``spec.job.savepointRedeployNonce`` differs from the one last reconciled (the
   operator then redeploys from ``initialSavepointPath``, docs "Redeploy using the
   savepointRedeployNonce"), nor when it is the operator's last-state marker
   (``KUBERNETES_OPERATOR_LAST_STATE``) or the last reconciled ``upgradeMode`` is ``last-state``: the
   job then resumes from its HA metadata. Once the operator has deployed the spec (a
   ``lastReconciledSpec``) and recorded an upgrade path, ``initialSavepointPath`` is passed over: the
   operator reads it only before the first deployment and on a nonce change;
2. else ``spec.job.initialSavepointPath`` (what the operator restores on first deploy and on a
   ``savepointRedeployNonce`` change);
3. else the newest COMPLETED ``FlinkStateSnapshot`` whose ``spec.jobReference`` names the deployment
   (``status.path``, else ``spec.savepoint.path``; newest by ``status.resultTimestamp``,
   ``status.triggerTimestamp``, ``metadata.creationTimestamp``);
4. else the HA store named in ``spec.flinkConfiguration`` (``high-availability.type: kubernetes`` with the
   cluster's HA ConfigMaps exported into the same file; ``zookeeper`` with
   ``high-availability.zookeeper.quorum``): the checkpoint the job would resume from;
5. else the checkpoint directory (``execution.checkpointing.dir``, or the older ``state.checkpoints.dir``),
   with ``status.jobStatus.jobId`` when the export has it: its latest completed ``chk-N``.

A path a resource names (1-3) of a job whose ``status.jobStatus.state`` is ``RUNNING`` comes with a warning:
the job has moved on since, and an upgrade takes a new savepoint or resumes from the latest checkpoint.

``deployment_restore_plan`` turns the deployment's parallelism (``spec.job.parallelism``, else
``parallelism.default``), ``pipeline.max-parallelism`` and ``pipeline.jobvertex-parallelism-overrides``
into the ``RestorePlan`` of ``kg check``. A JobVertexID is the OperatorID of its chain's head, so an
override applies to the operator with that id; ``_metadata`` records no chains, so the operators chained
behind it are not seen to follow, and an id that names no operator of the state is reported, not guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from keygroup_cli.assess.restore import RestorePlan
from keygroup_cli.core.errors import InvalidArgumentError, KgError
from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.k8s import CHECKPOINT_DIR_KEYS, FlinkDeployment, Resources, StateSnapshot, load_resources
from keygroup_cli.k8s import resolve_path as _resolve_path
from keygroup_cli.k8s.resources import (
    HA_CLUSTER_ID_KEY,
    HA_TYPE_KEY,
    HA_TYPE_LEGACY_KEY,
    HA_ZK_QUORUM_KEY,
    HA_ZK_ROOT_KEY,
    OVERRIDES_KEY,
)

if TYPE_CHECKING:
    from keygroup_cli.assess.summary import OperatorSummary
    from keygroup_cli.ha import HaResolution

#: The kinds of start ``resolve_start`` can choose, in its order.
SOURCES = (
    "upgradeSavepointPath",
    "initialSavepointPath",
    "FlinkStateSnapshot",
    "high-availability",
    "checkpoint-directory",
)
#: What the operator writes to ``upgradeSavepointPath`` after a last-state deployment from HA metadata.
LAST_STATE_MARKER = "KUBERNETES_OPERATOR_LAST_STATE"


@dataclass(frozen=True, slots=True)
class DeploymentStart:
    """The state a deployment starts from, and why kg chose it.

    Attributes:
        resources: Everything read from the file.
        deployment: The FlinkDeployment (None for a file of FlinkStateSnapshots only).
        source: One of ``SOURCES``.
        field: The field (or resource) the path came from.
        written: The path as the resource writes it.
        pointer: What kg reads (relative paths resolved against the file's directory).
        reason: Why this one, in a sentence.
        considered: What was looked at before it and why it was passed over.
        ha: The HA store's resolution, for ``high-availability``.
        snapshot: The FlinkStateSnapshot, for ``FlinkStateSnapshot``.
        warnings: What the user should know.
    """

    resources: Resources
    deployment: FlinkDeployment | None
    source: str
    field: str
    written: str
    pointer: str
    reason: str
    considered: tuple[str, ...] = ()
    ha: HaResolution | None = None
    snapshot: StateSnapshot | None = None
    warnings: tuple[str, ...] = field(default=())

    def document(self) -> dict[str, Any]:
        """Return the JSON form (``deployment`` in ``kg inspect/check --json``)."""
        d = self.deployment
        return {
            "file": self.resources.source,
            "deployment": None if d is None else d.name,
            "namespace": None if d is None else d.namespace,
            "source": self.source,
            "field": self.field,
            "path": self.written,
            "resolved": self.pointer,
            "reason": self.reason,
            "considered": list(self.considered),
            "state_snapshot": None if self.snapshot is None else self.snapshot.name,
            "parallelism": None if d is None else d.parallelism,
            "max_parallelism": None if d is None else d.max_parallelism,
            "vertex_overrides": {} if d is None else d.vertex_overrides,
            "warnings": list(self.warnings),
        }


def resolve_start(path: str, *, name: str | None = None, job: str | None = None) -> DeploymentStart:
    """Return the state the FlinkDeployment in ``path`` starts from (module docstring: the order).

    Args:
        path: A YAML/JSON file of operator resources (``kubectl get … -o yaml``).
        name: The FlinkDeployment's name, when the file holds several.
        job: The job id, for an HA store or a checkpoint directory holding several jobs.

    Raises:
        InvalidArgumentError: No FlinkDeployment and no completed FlinkStateSnapshot, or nothing to start
            from (``K8S_NO_STATE``).
        InvalidInputError: The HA store named cannot be read (``ha``'s errors).
        MissingDependencyError: YAML without PyYAML; an HA store without the ``[ha]`` extra.
    """
    resources = load_resources(path)
    if not resources.deployments:
        return _from_snapshots_only(resources)
    deployment = resources.deployment(name)
    considered: list[str] = []
    warnings = _running_warning(deployment)
    upgrade = _from_upgrade_savepoint(resources, deployment, considered, warnings)
    if upgrade is not None:
        return upgrade
    if deployment.initial_savepoint_path and not _initial_passed_over(deployment, considered):
        written = deployment.initial_savepoint_path
        return DeploymentStart(
            resources,
            deployment,
            "initialSavepointPath",
            "spec.job.initialSavepointPath",
            written,
            _resolve_path(written, path),
            (
                f"spec.job.savepointRedeployNonce changed ({deployment.reconciled_redeploy_nonce} -> "
                f"{deployment.savepoint_redeploy_nonce}): the operator redeploys from "
                "spec.job.initialSavepointPath"
                if deployment.redeploy_pending
                else "spec.job.initialSavepointPath is set: the operator restores it on first deploy and on "
                "every savepointRedeployNonce change"
            ),
            tuple(considered),
            warnings=warnings,
        )
    if not deployment.initial_savepoint_path:
        considered.append("spec.job.initialSavepointPath: not set")
    snapshots = resources.snapshots_of(deployment)
    done = [s for s in snapshots if s.completed and s.path]
    if done:
        newest = max(done, key=lambda s: s.time or "")
        others = len(done) - 1
        return DeploymentStart(
            resources,
            deployment,
            "FlinkStateSnapshot",
            f"FlinkStateSnapshot {newest.name} {newest.path_field}",
            str(newest.path),
            _resolve_path(str(newest.path), path),
            f"the newest COMPLETED FlinkStateSnapshot of {deployment.name} ({newest.kind}, "
            f"{newest.time or 'no timestamp'}"
            + (f"; {others} older one{'s' if others != 1 else ''} passed over" if others else "")
            + ")",
            tuple(considered),
            snapshot=newest,
            warnings=warnings,
        )
    pending = [f"{s.name} ({s.state or 'no status'})" for s in snapshots if s not in done]
    considered.append(
        f"FlinkStateSnapshot of {deployment.name}: "
        + (f"none COMPLETED ({', '.join(pending)})" if pending else "none in the file")
    )
    ha = _from_ha(resources, deployment, job, considered)
    if ha is not None:
        resolution, where = ha
        return DeploymentStart(
            resources,
            deployment,
            "high-availability",
            where,
            resolution.pointer,
            resolution.pointer,
            f"the HA store's latest checkpoint (id {resolution.checkpoint_id}): what the job resumes from",
            tuple(considered),
            ha=resolution,  # a live leader is judged from the store itself
        )
    return _from_checkpoint_dir(resources, deployment, job, considered, ())


def _from_snapshots_only(resources: Resources) -> DeploymentStart:
    done = [s for s in resources.snapshots if s.completed and s.path]
    if not done:
        raise InvalidArgumentError(
            f"{resources.source}: no FlinkDeployment and no COMPLETED FlinkStateSnapshot with a path",
            code="K8S_NO_STATE",
        )
    newest = max(done, key=lambda s: s.time or "")
    return DeploymentStart(
        resources,
        None,
        "FlinkStateSnapshot",
        f"FlinkStateSnapshot {newest.name} {newest.path_field}",
        str(newest.path),
        _resolve_path(str(newest.path), resources.source),
        f"the newest COMPLETED FlinkStateSnapshot in the file ({newest.kind}, "
        f"{newest.time or 'no timestamp'})",
        snapshot=newest,
    )


def _upgrade_path(deployment: FlinkDeployment) -> tuple[str, str] | None:
    """Return (field, path) of the operator's recorded upgrade savepoint, the 1.10+ field first."""
    if deployment.upgrade_savepoint_path:
        return "status.jobStatus.upgradeSavepointPath", deployment.upgrade_savepoint_path
    if deployment.last_savepoint_path:
        return "status.jobStatus.savepointInfo.lastSavepoint.location", deployment.last_savepoint_path
    return None


def _from_upgrade_savepoint(
    resources: Resources, deployment: FlinkDeployment, considered: list[str], warnings: tuple[str, ...]
) -> DeploymentStart | None:
    """Return the start from the recorded upgrade savepoint, or None (saying why in ``considered``)."""
    recorded = _upgrade_path(deployment)
    if recorded is None:
        return None
    where, written = recorded
    if deployment.redeploy_pending and deployment.initial_savepoint_path:
        considered.append(
            f"{where} {written}: passed over, spec.job.savepointRedeployNonce changed "
            f"({deployment.reconciled_redeploy_nonce} -> {deployment.savepoint_redeploy_nonce})"
        )
        return None
    if written == LAST_STATE_MARKER or deployment.reconciled_upgrade_mode == "last-state":
        what = (
            "the operator's last-state marker"
            if written == LAST_STATE_MARKER
            else "the last reconciled upgradeMode is last-state"
        )
        considered.append(f"{where} {written}: {what}: the job resumes from its HA metadata")
        return None
    if written == deployment.initial_savepoint_path:
        return None  # recorded from initialSavepointPath (first deployment, redeploy): that one says why
    if deployment.initial_savepoint_path:
        considered.append(_INITIAL_PASSED_OVER.format(deployment.initial_savepoint_path))
    return DeploymentStart(
        resources,
        deployment,
        "upgradeSavepointPath",
        where,
        written,
        _resolve_path(written, resources.source),
        f"{where} is set: the operator recorded it when it last stopped the job and restores it when the "
        "job is resumed or upgraded (spec.job.initialSavepointPath is read only before the first "
        "deployment and on a savepointRedeployNonce change)",
        tuple(considered),
        warnings=warnings,
    )


def _initial_passed_over(deployment: FlinkDeployment, considered: list[str]) -> bool:
    """Whether the operator, having deployed the spec, restores no more from initialSavepointPath."""
    recorded = _upgrade_path(deployment)
    if deployment.redeploy_pending or not deployment.reconciled or recorded is None:
        return False
    if recorded[1] == deployment.initial_savepoint_path:
        return False
    considered.append(_INITIAL_PASSED_OVER.format(deployment.initial_savepoint_path))
    return True


_INITIAL_PASSED_OVER = (
    "spec.job.initialSavepointPath {}: passed over, the operator reads it only before the first deployment "
    "and on a savepointRedeployNonce change"
)


def _running_warning(deployment: FlinkDeployment) -> tuple[str, ...]:
    if (deployment.job_state or "").upper() != "RUNNING":
        return ()
    return (
        f"{deployment.label}: status.jobStatus.state is RUNNING: the job's state has moved on since the "
        "savepoint a resource names; an upgrade takes a new savepoint (or, last-state, resumes from the "
        "latest checkpoint). Suspend it (spec.job.state: suspended) and export it again to check that one",
    )


def _ha_type(configuration: Mapping[str, str]) -> str | None:
    value = configuration.get(HA_TYPE_KEY) or configuration.get(HA_TYPE_LEGACY_KEY)
    if not value or value.lower() == "none":
        return None
    lowered = value.lower()
    if "kubernetes" in lowered:
        return "kubernetes"
    if "zookeeper" in lowered:
        return "zookeeper"
    return value


def _from_ha(
    resources: Resources, deployment: FlinkDeployment, job: str | None, considered: list[str]
) -> tuple[HaResolution, str] | None:
    config = deployment.configuration
    kind = _ha_type(config)
    if kind is None:
        considered.append(f"{HA_TYPE_KEY}: not set")
        return None
    job = job or deployment.job_id
    cluster_id = config.get(HA_CLUSTER_ID_KEY) or config.get("kubernetes.cluster-id") or deployment.name
    if kind == "kubernetes":
        prefix = f"{cluster_id}-"
        maps = [
            r
            for r in resources.others
            if r.get("kind") == "ConfigMap"
            and str((r.get("metadata") or {}).get("name", "")).startswith(prefix)
        ]
        if not maps:
            considered.append(
                f"{HA_TYPE_KEY} kubernetes: the HA ConfigMaps of cluster {cluster_id} "
                f"({cluster_id}-<job id>-config-map, {cluster_id}-cluster-config-map) are not in the file; "
                f"export them with it (kubectl get flinkdeployment/{deployment.name} configmap -l "
                f"app={cluster_id},configmap-type=high-availability -o yaml) to resume from the HA store"
            )
            return None
        where = f"{HA_TYPE_KEY} kubernetes (ConfigMaps of {cluster_id})"
        return _resolve_ha(deployment, where, resources.source, job), where
    if kind == "zookeeper":
        quorum = config.get(HA_ZK_QUORUM_KEY)
        if not quorum:
            considered.append(f"{HA_TYPE_KEY} zookeeper: {HA_ZK_QUORUM_KEY} is not set")
            return None
        root = config.get(HA_ZK_ROOT_KEY, "/flink").strip("/") or "flink"
        # Flink joins path.root and the cluster id as ZooKeeper paths: "/kg-ha" and "kg-ha" name one node.
        uri = f"zk://{quorum}/{root}/{cluster_id.strip('/')}"
        where = f"{HA_TYPE_KEY} zookeeper ({uri})"
        return _resolve_ha(deployment, where, uri, job), where
    considered.append(f"{HA_TYPE_KEY} {kind}: a store kg does not read")
    return None


def _resolve_ha(deployment: FlinkDeployment, where: str, source: str, job: str | None) -> HaResolution:
    """Return ``ha.resolve(source, job)``; its errors name the deployment and the store they came from."""
    from keygroup_cli import ha

    try:
        return ha.resolve(source, job)
    except KgError as exc:
        raise type(exc)(f"{deployment.label}: {where}: {exc.message}", code=exc.code) from None


def _from_checkpoint_dir(
    resources: Resources,
    deployment: FlinkDeployment,
    job: str | None,
    considered: list[str],
    warnings: tuple[str, ...],
) -> DeploymentStart:
    key = next((k for k in CHECKPOINT_DIR_KEYS if deployment.configuration.get(k)), None)
    if key is None:
        considered.append(f"{' / '.join(CHECKPOINT_DIR_KEYS)}: not set")
        raise InvalidArgumentError(
            f"{resources.source}: {deployment.label} names no state to start from ("
            + "; ".join(considered)
            + "): it would start without state",
            code="K8S_NO_STATE",
        )
    written = deployment.configuration[key]
    base = _resolve_path(written, resources.source).rstrip("/")
    job = job or deployment.job_id
    pointer = f"{base}/{job}" if job else base
    return DeploymentStart(
        resources,
        deployment,
        "checkpoint-directory",
        f"spec.flinkConfiguration {key}",
        written,
        pointer,
        f"the latest completed checkpoint under {key}"
        + (f" of job {job}" if job else " (no status.jobStatus.jobId in the export: the one job under it)"),
        tuple(considered),
        warnings=warnings,
    )


def deployment_restore_plan(
    deployment: FlinkDeployment,
    operators: Sequence[OperatorSummary],
    base: RestorePlan,
) -> tuple[RestorePlan, list[Finding]]:
    """Return ``base`` completed by the deployment's parallelism, maxParallelism and vertex overrides.

    What ``base`` (the command line's ``-p``/``-m``) sets wins over the deployment. Each vertex override
    becomes the parallelism of the operator whose id is the JobVertexID (its chain's head); the findings
    say which operator each one reached, and which reached none.
    """
    findings: list[Finding] = []
    parallelism = base.parallelism if base.parallelism is not None else deployment.parallelism
    max_parallelism = base.max_parallelism if base.max_parallelism is not None else deployment.max_parallelism
    parallelism_for = dict(base.parallelism_for)
    ids = {op.operator_id: op for op in operators}
    for vertex, p in deployment.vertex_overrides.items():
        head = ids.get(vertex)
        if head is None:
            findings.append(
                Finding(
                    "VERTEX_OVERRIDE_UNMAPPED",
                    Severity.WARNING,
                    vertex,
                    f"{OVERRIDES_KEY} sets job vertex {vertex} to parallelism {p}, but no operator of the "
                    "state has that id (a JobVertexID is its chain head's OperatorID): the vertex is not in "
                    "the job "
                    "that wrote this state, or its head changed; kg cannot tell which operators it runs and "
                    f"checks them at parallelism {parallelism if parallelism is not None else 'their own'}",
                )
            )
            continue
        if any(k == vertex or k == head.uid for k in base.parallelism_for):
            continue
        parallelism_for[vertex] = p
        findings.append(
            Finding(
                "VERTEX_OVERRIDE",
                Severity.INFO,
                head.label,
                f"{OVERRIDES_KEY} sets job vertex {vertex} to parallelism {p}: the chain headed by "
                f"{head.label}; _metadata records no chains, so kg applies it to that operator only (the "
                "operators chained behind it run at the same parallelism in Flink)",
            )
        )
    plan = RestorePlan(
        parallelism,
        parallelism_for,
        max_parallelism,
        base.max_parallelism_for,
        base.job_uids,
        base.allow_non_restored_state,
    )
    return plan, findings
