"""The Flink Kubernetes Operator's resources: read ``FlinkDeployment``/``FlinkStateSnapshot``, write a patch.

A format like ``flink/`` and ``ha/``: it reads and writes files and never imports another format. What the
resources mean for a savepoint (which state a deployment starts from, which parallelisms it allows) is
decided above, in ``assess.deployment`` and ``planning.autoscaler``.
"""

from __future__ import annotations

from keygroup_cli.k8s.patch import DeploymentPatch, deployment_patch, dump
from keygroup_cli.k8s.resources import (
    CHECKPOINT_DIR_KEYS,
    FlinkDeployment,
    Resources,
    StateSnapshot,
    is_operator_file,
    load_resources,
    resolve_path,
)

__all__ = [
    "CHECKPOINT_DIR_KEYS",
    "DeploymentPatch",
    "FlinkDeployment",
    "Resources",
    "StateSnapshot",
    "deployment_patch",
    "dump",
    "is_operator_file",
    "load_resources",
    "resolve_path",
]
