"""Read the Flink Kubernetes Operator's resources: ``FlinkDeployment`` and ``FlinkStateSnapshot``.

The input is what ``kubectl get … -o yaml`` (or ``-o json``) prints: one resource, a ``List`` with
``items``, or several YAML documents separated by ``---``. JSON is read with the standard library; YAML needs
PyYAML (the ``[k8s]`` extra; missing: exit 6, or export with ``-o json``).

Fields kg reads (operator 1.10+, CRD ``flink.apache.org/v1beta1``):

- ``FlinkDeployment``: ``metadata.name``, ``metadata.namespace``, ``spec.job.initialSavepointPath``,
  ``spec.job.savepointRedeployNonce``, ``spec.job.parallelism``, ``spec.job.upgradeMode``,
  ``spec.flinkConfiguration`` (flat keys, or nested maps as the operator accepts them: ``pipeline:
  {max-parallelism: 720}`` is ``pipeline.max-parallelism``), ``status.jobStatus.jobId``,
  ``status.jobStatus.upgradeSavepointPath`` (operator 1.10+), else
  ``status.jobStatus.savepointInfo.lastSavepoint.location`` (earlier operators; 1.10+ still falls back to
  it), ``status.jobStatus.state``, and from
  ``status.reconciliationStatus.lastReconciledSpec`` (the JSON string the operator writes) the reconciled
  ``job.upgradeMode`` and ``job.savepointRedeployNonce``.
- ``FlinkStateSnapshot``: ``metadata.name``, ``metadata.namespace``, ``metadata.creationTimestamp``,
  ``spec.jobReference{kind,name}``, ``spec.savepoint{path,alreadyExists,formatType}``, ``spec.checkpoint``,
  ``status.state``, ``status.path``, ``status.resultTimestamp``, ``status.triggerTimestamp``.

Relative paths: a path in a resource with no URI scheme that is not absolute (``savepoints/sp-1``) is
resolved against the directory of the file that names it. Flink itself would resolve it against the
JobManager's working directory, which no file shows; kg's rule makes a resource and the savepoint it names
portable together (the bundled fixtures use it). Absolute paths and URIs (``s3://``, ``file:///``) are kept.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from keygroup_cli.core.errors import InvalidArgumentError, MissingDependencyError

API_GROUP = "flink.apache.org"
DEPLOYMENT_KIND = "FlinkDeployment"
SNAPSHOT_KIND = "FlinkStateSnapshot"
SUFFIXES = (".yaml", ".yml", ".json")
K8S_EXTRA_HINT = (
    "pip install -e '.[k8s]' in kg's checkout, or the kg wheel with [k8s] "
    "(PyYAML; docs/how-to/install.md#extras)"
)

#: Flink's configuration keys kg reads from ``spec.flinkConfiguration``.
MAX_PARALLELISM_KEY = "pipeline.max-parallelism"
DEFAULT_PARALLELISM_KEY = "parallelism.default"
OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
HA_TYPE_KEY = "high-availability.type"
HA_TYPE_LEGACY_KEY = "high-availability"
HA_STORAGE_KEY = "high-availability.storageDir"
HA_ZK_QUORUM_KEY = "high-availability.zookeeper.quorum"
HA_ZK_ROOT_KEY = "high-availability.zookeeper.path.root"
HA_CLUSTER_ID_KEY = "high-availability.cluster-id"
CHECKPOINT_DIR_KEYS = ("execution.checkpointing.dir", "state.checkpoints.dir")

_KIND = re.compile(r"""["']?kind["']?\s*:\s*["']?(FlinkDeployment|FlinkStateSnapshot)\b""")
_JOB_VERTEX_ID = re.compile(r"[0-9a-fA-F]{32}")


@dataclass(frozen=True, slots=True)
class FlinkDeployment:
    """A ``FlinkDeployment`` as kg reads it.

    Attributes:
        name: ``metadata.name`` (the operator's ``kubernetes.cluster-id``).
        namespace: ``metadata.namespace``, if the export has one.
        source: The file it was read from.
        api_version: ``apiVersion`` as written.
        job_parallelism: ``spec.job.parallelism``.
        initial_savepoint_path: ``spec.job.initialSavepointPath`` as written.
        savepoint_redeploy_nonce: ``spec.job.savepointRedeployNonce``.
        upgrade_mode: ``spec.job.upgradeMode``.
        configuration: ``spec.flinkConfiguration`` flattened to Flink's dotted keys, values as strings.
        config_paths: For each dotted key, the path of keys it has in the resource (nested maps keep
            their shape in a patch).
        job_id: ``status.jobStatus.jobId``, if the export has a status.
        upgrade_savepoint_path: ``status.jobStatus.upgradeSavepointPath``, if any.
        last_savepoint_path: ``status.jobStatus.savepointInfo.lastSavepoint.location`` (operators before
            1.10), if any.
        job_state: ``status.jobStatus.state`` (``RUNNING``, ``FINISHED``, ...), if any.
        reconciled: Whether the status has a ``lastReconciledSpec``: the operator has deployed the spec.
        reconciled_upgrade_mode: ``job.upgradeMode`` of ``lastReconciledSpec``: how the operator restores
            the job next (``savepoint``: from the upgrade savepoint; ``last-state``: from HA metadata).
        reconciled_redeploy_nonce: ``job.savepointRedeployNonce`` of ``lastReconciledSpec``.
    """

    name: str
    namespace: str | None
    source: str
    api_version: str
    job_parallelism: int | None
    initial_savepoint_path: str | None
    savepoint_redeploy_nonce: int | None
    upgrade_mode: str | None
    configuration: Mapping[str, str]
    config_paths: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    job_id: str | None = None
    upgrade_savepoint_path: str | None = None
    last_savepoint_path: str | None = None
    job_state: str | None = None
    reconciled: bool = False
    reconciled_upgrade_mode: str | None = None
    reconciled_redeploy_nonce: int | None = None

    @property
    def redeploy_pending(self) -> bool:
        """Whether ``savepointRedeployNonce`` differs from the reconciled one (the operator redeploys then).

        The operator ignores a nonce set to null (``@SpecDiff(onNullIgnore = true)``).
        """
        return (
            self.reconciled
            and self.savepoint_redeploy_nonce is not None
            and self.savepoint_redeploy_nonce != self.reconciled_redeploy_nonce
        )

    @property
    def max_parallelism(self) -> int | None:
        """Return ``pipeline.max-parallelism``, or None when the deployment sets none."""
        return _positive_int(self, MAX_PARALLELISM_KEY, self.configuration.get(MAX_PARALLELISM_KEY))

    @property
    def parallelism(self) -> int | None:
        """Return the job's parallelism: ``spec.job.parallelism``, else ``parallelism.default``."""
        if self.job_parallelism is not None:
            return self.job_parallelism
        return _positive_int(self, DEFAULT_PARALLELISM_KEY, self.configuration.get(DEFAULT_PARALLELISM_KEY))

    @property
    def parallelism_source(self) -> str | None:
        """Return which field the parallelism came from, or None."""
        if self.job_parallelism is not None:
            return "spec.job.parallelism"
        return DEFAULT_PARALLELISM_KEY if DEFAULT_PARALLELISM_KEY in self.configuration else None

    @property
    def vertex_overrides(self) -> dict[str, int]:
        """Return ``pipeline.jobvertex-parallelism-overrides``: JobVertexID (lower-case hex) to parallelism.

        Raises:
            InvalidArgumentError: A value that is not Flink's ``id:p,id:p`` map.
        """
        return parse_vertex_overrides(self.configuration.get(OVERRIDES_KEY, ""), self.label)

    @property
    def label(self) -> str:
        """Return how messages name the deployment (``FlinkDeployment ns/name``)."""
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{DEPLOYMENT_KIND} {where}{self.name}"


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """A ``FlinkStateSnapshot`` as kg reads it.

    Attributes:
        name: ``metadata.name``.
        namespace: ``metadata.namespace``, if any.
        source: The file it was read from.
        kind: ``"savepoint"`` (``spec.savepoint``) or ``"checkpoint"`` (``spec.checkpoint``).
        job_kind: ``spec.jobReference.kind`` (``FlinkDeployment`` / ``FlinkSessionJob``), if any.
        job_name: ``spec.jobReference.name``, if any.
        path: ``status.path``, else ``spec.savepoint.path``, as written.
        path_field: Which of the two ``path`` came from.
        state: ``status.state`` (``COMPLETED``, ``FAILED``, …); None without a status.
        already_exists: ``spec.savepoint.alreadyExists``.
        format_type: ``spec.savepoint.formatType``.
        time: The newest of ``status.resultTimestamp``, ``status.triggerTimestamp`` and
            ``metadata.creationTimestamp`` that is set (ISO 8601 text; compared as such).
    """

    name: str
    namespace: str | None
    source: str
    kind: str
    job_kind: str | None
    job_name: str | None
    path: str | None
    path_field: str | None
    state: str | None
    already_exists: bool
    format_type: str | None
    time: str | None

    @property
    def completed(self) -> bool:
        """Return whether the snapshot is usable: ``status.state`` COMPLETED, or an existing savepoint.

        A ``FlinkStateSnapshot`` with ``spec.savepoint.alreadyExists: true`` registers a savepoint that is
        already there; the operator marks it COMPLETED at once, and an export taken before it did so has
        no status yet.
        """
        if self.state is not None:
            return self.state == "COMPLETED"
        return self.kind == "savepoint" and self.already_exists and self.path is not None


@dataclass(frozen=True, slots=True)
class Resources:
    """Everything read from one file: the operator's resources, and the other resources kept as dicts."""

    source: str
    deployments: tuple[FlinkDeployment, ...]
    snapshots: tuple[StateSnapshot, ...]
    others: tuple[Mapping[str, Any], ...] = ()

    def deployment(self, name: str | None = None) -> FlinkDeployment:
        """Return the one ``FlinkDeployment`` (or the one called ``name``).

        Raises:
            InvalidArgumentError: None, or several and no ``name`` (``K8S_DEPLOYMENT_AMBIGUOUS``).
        """
        found = [d for d in self.deployments if name is None or d.name == name]
        if len(found) == 1:
            return found[0]
        if not found:
            names = ", ".join(d.name for d in self.deployments) or "none"
            raise InvalidArgumentError(
                f"{self.source}: no {DEPLOYMENT_KIND}"
                + (f" named {name!r} (deployments: {names})" if name else ""),
                code="K8S_DEPLOYMENT_NOT_FOUND",
            )
        raise InvalidArgumentError(
            f"{self.source}: {len(found)} FlinkDeployments ({', '.join(d.name for d in found)}); "
            "give one per file",
            code="K8S_DEPLOYMENT_AMBIGUOUS",
        )

    def snapshots_of(self, deployment: FlinkDeployment) -> list[StateSnapshot]:
        """Return the snapshots whose ``spec.jobReference`` names ``deployment`` (same namespace, if set)."""
        return [
            s
            for s in self.snapshots
            if s.job_kind in (None, DEPLOYMENT_KIND)
            and s.job_name == deployment.name
            and (s.namespace is None or deployment.namespace is None or s.namespace == deployment.namespace)
        ]


def is_operator_file(path: str) -> bool:
    """Return whether ``path`` is a local YAML/JSON file holding a FlinkDeployment or FlinkStateSnapshot."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES or not p.is_file():
        return False
    try:
        with p.open(encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 20)
    except OSError:
        return False
    return _KIND.search(head) is not None


def load_documents(path: str) -> list[dict[str, Any]]:
    """Return every resource in ``path``: one, a ``List``'s ``items``, or each YAML document.

    Raises:
        InvalidArgumentError: Not UTF-8, not JSON/YAML, or something that is not a resource.
        MissingDependencyError: A YAML file and PyYAML is not installed.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(f"{path}: not UTF-8 text: {exc}", code="K8S_RESOURCE_INVALID") from None
    except OSError as exc:
        raise InvalidArgumentError(
            f"{path}: cannot read: {exc.strerror}", code="K8S_RESOURCE_INVALID"
        ) from None
    try:
        documents: list[Any] = [json.loads(text)]
    except RecursionError:
        raise InvalidArgumentError(f"{path}: JSON nested too deeply", code="K8S_RESOURCE_INVALID") from None
    except ValueError:
        documents = _load_yaml(path, text)
    resources: list[dict[str, Any]] = []
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, dict):
            raise InvalidArgumentError(
                f"{path}: a document is a {type(document).__name__}, not a Kubernetes resource",
                code="K8S_RESOURCE_INVALID",
            )
        if document.get("kind") == "List" or (
            "items" in document and str(document.get("kind", "")).endswith("List")
        ):
            items = document.get("items") or []
            if not isinstance(items, list):
                raise InvalidArgumentError(f"{path}: List items is not a list", code="K8S_RESOURCE_INVALID")
            resources.extend(i for i in items if isinstance(i, dict))
        else:
            resources.append(document)
    return resources


def _load_yaml(path: str, text: str) -> list[Any]:
    try:
        import yaml
    except ImportError:
        raise MissingDependencyError(
            f"{path}: reading YAML needs PyYAML: {K8S_EXTRA_HINT}, or export with -o json",
            code="K8S_EXTRA_MISSING",
        ) from None
    try:
        return list(yaml.safe_load_all(text))
    except (yaml.YAMLError, RecursionError) as exc:
        where = " ".join(str(exc).split())
        raise InvalidArgumentError(
            f"{path}: not valid YAML or JSON: {where}", code="K8S_RESOURCE_INVALID"
        ) from None


def load_resources(path: str) -> Resources:
    """Read the operator's resources in ``path`` (see the module's docstring for the fields).

    Raises:
        InvalidArgumentError: The file does not parse, holds no FlinkDeployment or FlinkStateSnapshot, or a
            field kg reads has the wrong type (``K8S_RESOURCE_INVALID``).
        MissingDependencyError: A YAML file and PyYAML is not installed.
    """
    deployments, snapshots, others = [], [], []
    for resource in load_documents(path):
        kind = resource.get("kind")
        group = str(resource.get("apiVersion", "")).split("/")[0]
        if kind == DEPLOYMENT_KIND and group == API_GROUP:
            deployments.append(_deployment(path, resource))
        elif kind == SNAPSHOT_KIND and group == API_GROUP:
            snapshots.append(_snapshot(path, resource))
        else:
            others.append(resource)
    if not deployments and not snapshots:
        raise InvalidArgumentError(
            f"{path}: no {DEPLOYMENT_KIND} or {SNAPSHOT_KIND} ({API_GROUP}) in the file",
            code="K8S_RESOURCE_INVALID",
        )
    return Resources(path, tuple(deployments), tuple(snapshots), tuple(others))


def resolve_path(path: str, source: str) -> str:
    """Return ``path`` as kg reads it: a relative path without a scheme joins the directory of ``source``."""
    parsed = urlparse(path)
    if parsed.scheme and len(parsed.scheme) > 1:  # a URI (a Windows drive letter is not a scheme)
        return path
    if Path(path).is_absolute():
        return path
    return os.path.normpath(Path(source).resolve().parent / path)


def flatten_configuration(value: Any, where: str) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Return ``spec.flinkConfiguration`` as Flink's dotted keys (values as text) and each key's path.

    The operator takes both ``pipeline.max-parallelism: 720`` and ``pipeline: {max-parallelism: 720}``.

    Raises:
        InvalidArgumentError: It is not a map, or a key is set twice (flat and nested).
    """
    if value is None:
        return {}, {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"{where}: spec.flinkConfiguration is a {type(value).__name__}, not a map",
            code="K8S_RESOURCE_INVALID",
        )
    flat: dict[str, str] = {}
    paths: dict[str, tuple[str, ...]] = {}

    def walk(node: Mapping[Any, Any], prefix: tuple[str, ...]) -> None:
        for key, item in node.items():
            path = (*prefix, str(key))
            if isinstance(item, Mapping):
                walk(item, path)
                continue
            dotted = ".".join(path)
            if dotted in flat:
                raise InvalidArgumentError(
                    f"{where}: spec.flinkConfiguration sets {dotted} twice (flat and nested)",
                    code="K8S_RESOURCE_INVALID",
                )
            flat[dotted] = _config_text(item)
            paths[dotted] = path

    walk(value, ())
    return flat, paths


def _config_text(value: Any) -> str:
    """Return a configuration value as Flink reads it (YAML booleans and numbers as their text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ";".join(_config_text(v) for v in value)
    return "" if value is None else str(value)


def parse_vertex_overrides(value: str, where: str) -> dict[str, int]:
    """Parse ``pipeline.jobvertex-parallelism-overrides`` (``<JobVertexID>:<p>,…``; Flink's map format).

    Raises:
        InvalidArgumentError: An entry that is not ``32-hex-id:positive-int`` (``K8S_OVERRIDES_INVALID``).
    """
    overrides: dict[str, int] = {}
    for entry in filter(None, (e.strip() for e in value.split(","))):
        vertex, sep, parallelism = entry.partition(":")
        vertex, parallelism = vertex.strip().strip("'\""), parallelism.strip().strip("'\"")
        if (
            not sep
            or not _JOB_VERTEX_ID.fullmatch(vertex)
            or not parallelism.isdigit()
            or int(parallelism) < 1
        ):
            raise InvalidArgumentError(
                f"{where}: {OVERRIDES_KEY} entry {entry!r} is not <32-hex JobVertexID>:<parallelism>",
                code="K8S_OVERRIDES_INVALID",
            )
        overrides[vertex.lower()] = int(parallelism)
    return overrides


def _deployment(path: str, resource: Mapping[str, Any]) -> FlinkDeployment:
    metadata = _map(resource.get("metadata"), path, "metadata")
    name = _text(metadata.get("name"), path, "metadata.name")
    where = f"{path}: {DEPLOYMENT_KIND} {name or '?'}"
    if not name:
        raise InvalidArgumentError(f"{where}: metadata.name is missing", code="K8S_RESOURCE_INVALID")
    spec = _map(resource.get("spec"), where, "spec")
    job = _map(spec.get("job"), where, "spec.job")
    configuration, paths = flatten_configuration(spec.get("flinkConfiguration"), where)
    status = _map(resource.get("status"), where, "status")
    job_status = _map(status.get("jobStatus"), where, "status.jobStatus")
    last_savepoint = _map(
        _map(job_status.get("savepointInfo"), where, "status.jobStatus.savepointInfo").get("lastSavepoint"),
        where,
        "status.jobStatus.savepointInfo.lastSavepoint",
    )
    reconciled = _reconciled_job(status, where)
    return FlinkDeployment(
        name=name,
        namespace=_text(metadata.get("namespace"), where, "metadata.namespace"),
        source=path,
        api_version=str(resource.get("apiVersion")),
        job_parallelism=_int(job.get("parallelism"), where, "spec.job.parallelism", minimum=1),
        initial_savepoint_path=_text(job.get("initialSavepointPath"), where, "spec.job.initialSavepointPath"),
        savepoint_redeploy_nonce=_int(
            job.get("savepointRedeployNonce"), where, "spec.job.savepointRedeployNonce", minimum=None
        ),
        upgrade_mode=_text(job.get("upgradeMode"), where, "spec.job.upgradeMode"),
        configuration=configuration,
        config_paths=paths,
        job_id=_text(job_status.get("jobId"), where, "status.jobStatus.jobId"),
        upgrade_savepoint_path=_text(
            job_status.get("upgradeSavepointPath"), where, "status.jobStatus.upgradeSavepointPath"
        ),
        last_savepoint_path=_text(
            last_savepoint.get("location"), where, "status.jobStatus.savepointInfo.lastSavepoint.location"
        ),
        job_state=_text(job_status.get("state"), where, "status.jobStatus.state"),
        reconciled=reconciled is not None,
        reconciled_upgrade_mode=_text(
            (reconciled or {}).get("upgradeMode"), where, RECONCILED + " upgradeMode"
        ),
        reconciled_redeploy_nonce=_int(
            (reconciled or {}).get("savepointRedeployNonce"),
            where,
            RECONCILED + " savepointRedeployNonce",
            minimum=None,
        ),
    )


RECONCILED = "status.reconciliationStatus.lastReconciledSpec"


def _reconciled_job(status: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
    """Return ``job`` of the spec the operator last deployed (None when it has deployed none).

    ``lastReconciledSpec`` is a JSON string: ``{"spec": {...}, "resource_metadata": {...}}`` (operator 1.3+),
    or the spec itself (earlier ones).
    """
    reconciliation = _map(status.get("reconciliationStatus"), where, "status.reconciliationStatus")
    text = reconciliation.get("lastReconciledSpec")
    if text is None or text == "":
        return None
    try:
        wrapper = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        wrapper = None
    if not isinstance(wrapper, Mapping):
        raise InvalidArgumentError(
            f"{where}: {RECONCILED} is not the JSON object the operator writes", code="K8S_RESOURCE_INVALID"
        )
    spec = wrapper.get("spec") if "resource_metadata" in wrapper else wrapper
    return _map(_map(spec, where, RECONCILED).get("job"), where, RECONCILED + " job")


def _snapshot(path: str, resource: Mapping[str, Any]) -> StateSnapshot:
    metadata = _map(resource.get("metadata"), path, "metadata")
    name = _text(metadata.get("name"), path, "metadata.name") or "?"
    where = f"{path}: {SNAPSHOT_KIND} {name}"
    spec = _map(resource.get("spec"), where, "spec")
    status = _map(resource.get("status"), where, "status")
    savepoint = spec.get("savepoint")
    kind = "savepoint" if savepoint is not None else "checkpoint"
    savepoint = _map(savepoint, where, "spec.savepoint")
    reference = _map(spec.get("jobReference"), where, "spec.jobReference")
    status_path = _text(status.get("path"), where, "status.path")
    spec_path = _text(savepoint.get("path"), where, "spec.savepoint.path")
    times = [
        _text(t, where, n)
        for t, n in (
            (status.get("resultTimestamp"), "status.resultTimestamp"),
            (status.get("triggerTimestamp"), "status.triggerTimestamp"),
            (metadata.get("creationTimestamp"), "metadata.creationTimestamp"),
        )
    ]
    return StateSnapshot(
        name=name,
        namespace=_text(metadata.get("namespace"), where, "metadata.namespace"),
        source=path,
        kind=kind,
        job_kind=_text(reference.get("kind"), where, "spec.jobReference.kind"),
        job_name=_text(reference.get("name"), where, "spec.jobReference.name"),
        path=status_path or spec_path,
        path_field="status.path" if status_path else "spec.savepoint.path" if spec_path else None,
        state=_text(status.get("state"), where, "status.state"),
        already_exists=bool(savepoint.get("alreadyExists", False)),
        format_type=_text(savepoint.get("formatType"), where, "spec.savepoint.formatType"),
        time=next((t for t in times if t), None),
    )


def _map(value: Any, where: str, name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"{where}: {name} is a {type(value).__name__}, not a map", code="K8S_RESOURCE_INVALID"
        )
    return value


def _text(value: Any, where: str, name: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (dict, list)):
        raise InvalidArgumentError(f"{where}: {name} is not a string", code="K8S_RESOURCE_INVALID")
    return str(value)


def _int(value: Any, where: str, name: str, *, minimum: int | None) -> int | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, str))
        or not str(value).strip().lstrip("-").isdigit()
    ):
        raise InvalidArgumentError(
            f"{where}: {name} {value!r} is not an integer", code="K8S_RESOURCE_INVALID"
        )
    number = int(value)
    if minimum is not None and number < minimum:
        raise InvalidArgumentError(
            f"{where}: {name} {number} is below {minimum}", code="K8S_RESOURCE_INVALID"
        )
    return number


def _positive_int(deployment: FlinkDeployment, key: str, value: str | None) -> int | None:
    if value is None or value.strip() == "":
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise InvalidArgumentError(
            f"{deployment.source}: {deployment.label}: spec.flinkConfiguration {key} {value!r} is not a "
            "positive integer",
            code="K8S_RESOURCE_INVALID",
        )
    return int(value)
