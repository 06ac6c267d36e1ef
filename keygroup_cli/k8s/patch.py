"""What to change in a ``FlinkDeployment`` so it restores a savepoint kg wrote: a JSON merge patch.

``kubectl patch flinkdeployment NAME --type merge -p "$(kg rescale … --output patch)"`` applies it; a GitOps
repository takes the same fields. It sets (and nothing else):

- ``spec.job.initialSavepointPath``: the new savepoint;
- ``spec.job.savepointRedeployNonce``: one above the current value (1 when unset). Changing it makes the
  operator redeploy the job from ``initialSavepointPath`` whatever its ``upgradeMode`` (operator 1.8+,
  "Redeploy using the savepointRedeployNonce");
- ``spec.flinkConfiguration`` ``pipeline.max-parallelism``: the savepoint's maxParallelism, in the shape the
  deployment writes it (a flat key, or nested maps);
- ``spec.job.parallelism``: the new parallelism.

Optionally a ``FlinkStateSnapshot`` registers the savepoint with the operator (``spec.savepoint.alreadyExists:
true``, ``disposeOnDelete: false``: deleting the resource never deletes kg's output).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keygroup_cli.core.errors import MissingDependencyError
from keygroup_cli.k8s.resources import (
    API_GROUP,
    DEPLOYMENT_KIND,
    K8S_EXTRA_HINT,
    MAX_PARALLELISM_KEY,
    SNAPSHOT_KIND,
    FlinkDeployment,
)

API_VERSION = f"{API_GROUP}/v1beta1"
#: Kubernetes object names: DNS-1123 subdomain, at most 253 characters.
_NAME_CHARS = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True, slots=True)
class DeploymentPatch:
    """The change that redeploys ``deployment`` from ``savepoint_path`` at the new (max)parallelism."""

    deployment: FlinkDeployment
    savepoint_path: str
    max_parallelism: int
    parallelism: int
    nonce: int
    snapshot_name: str
    format_type: str = "CANONICAL"

    def merge_patch(self) -> dict[str, Any]:
        """Return the JSON merge patch (RFC 7386) for the FlinkDeployment."""
        config: dict[str, Any] = {}
        path = self.deployment.config_paths.get(MAX_PARALLELISM_KEY, (MAX_PARALLELISM_KEY,))
        node = config
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = str(self.max_parallelism)
        return {
            "spec": {
                "job": {
                    "initialSavepointPath": self.savepoint_path,
                    "savepointRedeployNonce": self.nonce,
                    "parallelism": self.parallelism,
                },
                "flinkConfiguration": config,
            }
        }

    def snapshot_resource(self) -> dict[str, Any]:
        """Return a ``FlinkStateSnapshot`` that registers the savepoint (``alreadyExists: true``)."""
        metadata: dict[str, Any] = {"name": self.snapshot_name}
        if self.deployment.namespace:
            metadata["namespace"] = self.deployment.namespace
        return {
            "apiVersion": API_VERSION,
            "kind": SNAPSHOT_KIND,
            "metadata": metadata,
            "spec": {
                "jobReference": {"kind": DEPLOYMENT_KIND, "name": self.deployment.name},
                "savepoint": {
                    "path": self.savepoint_path,
                    "alreadyExists": True,
                    "disposeOnDelete": False,
                    "formatType": self.format_type,
                },
            },
        }

    def fields(self) -> list[tuple[str, object, object]]:
        """Return each field the patch sets: (field, value now, value after)."""
        d = self.deployment
        return [
            ("spec.job.initialSavepointPath", d.initial_savepoint_path, self.savepoint_path),
            ("spec.job.savepointRedeployNonce", d.savepoint_redeploy_nonce, self.nonce),
            (f"spec.flinkConfiguration.{MAX_PARALLELISM_KEY}", d.max_parallelism, self.max_parallelism),
            ("spec.job.parallelism", d.job_parallelism, self.parallelism),
        ]

    def document(self) -> dict[str, Any]:
        """Return the JSON form (``patch`` in ``kg rescale --json``)."""
        return {
            "deployment": self.deployment.name,
            "namespace": self.deployment.namespace,
            "fields": [{"field": f, "from": old, "to": new} for f, old, new in self.fields()],
            "merge_patch": self.merge_patch(),
            "state_snapshot": self.snapshot_resource(),
            "kubectl": self.kubectl_command(),
        }

    def kubectl_command(self) -> str:
        """Return the ``kubectl patch`` command line that applies the merge patch."""
        namespace = f" -n {self.deployment.namespace}" if self.deployment.namespace else ""
        return (
            f"kubectl patch flinkdeployment {self.deployment.name}{namespace} --type merge "
            f"-p '{json.dumps(self.merge_patch(), separators=(',', ':'))}'"
        )


def deployment_patch(
    deployment: FlinkDeployment,
    *,
    savepoint_path: str,
    max_parallelism: int,
    parallelism: int,
    checkpoint_id: int | None = None,
    format_type: str = "CANONICAL",
) -> DeploymentPatch:
    """Return the patch that redeploys ``deployment`` from the savepoint kg wrote at ``savepoint_path``."""
    nonce = (deployment.savepoint_redeploy_nonce or 0) + 1
    suffix = f"-kg-m{max_parallelism}-p{parallelism}" + (
        f"-{checkpoint_id}" if checkpoint_id is not None else ""
    )
    base = _NAME_CHARS.sub("-", deployment.name.lower()).strip("-.") or "flink"
    name = base[: 253 - len(suffix)] + suffix
    return DeploymentPatch(deployment, savepoint_path, max_parallelism, parallelism, nonce, name, format_type)


def dump(document: Mapping[str, Any] | list[Any], style: str) -> str:
    """Return ``document`` as ``json`` (one line) or ``yaml`` (block style, key order kept).

    Raises:
        MissingDependencyError: ``yaml`` and PyYAML is not installed.
    """
    if style == "json":
        return json.dumps(document, ensure_ascii=False)
    try:
        import yaml
    except ImportError:
        raise MissingDependencyError(
            f"printing YAML needs PyYAML: {K8S_EXTRA_HINT} (or --patch-format json)", code="K8S_EXTRA_MISSING"
        ) from None
    text: str = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return text.rstrip("\n")
