"""A validator for the subset of JSON Schema a Kubernetes CRD's ``openAPIV3Schema`` uses (structural schemas).

The operator's CRDs (fixtures/k8s/crds, apache/flink-kubernetes-operator) use ``type``, ``properties``,
``items``, ``enum``, ``required``, ``additionalProperties``, ``anyOf`` with ``x-kubernetes-int-or-string``,
and ``x-kubernetes-preserve-unknown-fields``. It validates as ``kubectl apply --validate=strict`` does:
a field the schema does not declare, under an object that neither preserves unknown fields nor declares
``additionalProperties``, is an error (the API server would prune it; strict validation refuses it).
``metadata`` at the root is Kubernetes' ObjectMeta, checked for the fields kg reads and writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[2] / "fixtures" / "k8s" / "crds"
CRD_FILES = {
    "FlinkDeployment": "flinkdeployments.flink.apache.org-v1.yml",
    "FlinkStateSnapshot": "flinkstatesnapshots.flink.apache.org-v1.yml",
}
_OBJECT_META = {"name": str, "namespace": str, "creationTimestamp": str, "labels": dict, "annotations": dict}
_cache: dict[str, tuple[str, Mapping[str, Any]]] = {}


def crd_schema(kind: str) -> tuple[str, Mapping[str, Any]]:
    """Return (``group/version``, openAPIV3Schema) of the stored version of ``kind``'s CRD."""
    if kind not in _cache:
        crd = yaml.safe_load((CRDS / CRD_FILES[kind]).read_text(encoding="utf-8"))
        assert crd["spec"]["names"]["kind"] == kind
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        _cache[kind] = (f"{crd['spec']['group']}/{version['name']}", version["schema"]["openAPIV3Schema"])
    return _cache[kind]


def validate_resource(resource: Mapping[str, Any]) -> list[str]:
    """Return every violation of ``resource`` against its kind's CRD (empty: valid)."""
    kind = resource.get("kind")
    if kind not in CRD_FILES:
        return [f"kind {kind!r} has no CRD here"]
    api_version, schema = crd_schema(str(kind))
    errors = []
    if resource.get("apiVersion") != api_version:
        errors.append(f"apiVersion {resource.get('apiVersion')!r} is not {api_version!r}")
    validate(resource, schema, "", errors)
    return errors


def validate_patch(patch: Mapping[str, Any], kind: str) -> list[str]:
    """Return every violation of a merge patch's fields (a partial object: ``required`` is not checked)."""
    errors: list[str] = []
    validate(patch, crd_schema(kind)[1], "", errors, partial=True)
    return errors


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch (what ``kubectl patch --type merge`` does)."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _type_ok(value: Any, schema: Mapping[str, Any]) -> bool:
    if value is None:
        return bool(schema.get("nullable"))
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    expected = schema.get("type")
    checks = {
        "object": lambda v: isinstance(v, Mapping),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }
    if expected is None:
        return True
    assert expected in checks, f"schema type {expected!r} is outside the subset this validator knows"
    return checks[expected](value)


def validate(
    value: Any, schema: Mapping[str, Any], path: str, errors: list[str], partial: bool = False
) -> None:
    """Append to ``errors`` every violation of ``value`` against ``schema`` at ``path``."""
    known = {
        "type",
        "properties",
        "items",
        "enum",
        "required",
        "additionalProperties",
        "anyOf",
        "description",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "nullable",
    }
    assert set(schema) <= known, f"{path}: schema keywords outside the subset: {set(schema) - known}"
    where = path or "<root>"
    if not _type_ok(value, schema):
        errors.append(f"{where}: {value!r} is not of type {schema.get('type') or 'int-or-string'}")
        return
    if "anyOf" in schema and not any(_type_ok(value, s) for s in schema["anyOf"]):
        errors.append(f"{where}: {value!r} matches none of anyOf")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            validate(item, schema["items"], f"{path}[{i}]", errors, partial)
    if not isinstance(value, Mapping):
        return
    if path == "":
        # apiVersion, kind and metadata are every resource's; the CRD's schema leaves them implicit.
        for key in ("apiVersion", "kind"):
            if key in value and not isinstance(value[key], str):
                errors.append(f".{key}: {value[key]!r} is not a string")
        if "metadata" in value:
            validate(value["metadata"], {"type": "object"}, ".metadata", errors, partial)
        value = {k: v for k, v in value.items() if k not in ("apiVersion", "kind", "metadata")}
    if path == ".metadata":
        for key, item in value.items():
            expected = _OBJECT_META.get(key)
            if expected is None:
                errors.append(f"{where}.{key}: not an ObjectMeta field kg writes or reads")
            elif not isinstance(item, expected):
                errors.append(f"{where}.{key}: {item!r} is not a {expected.__name__}")
        return
    properties = schema.get("properties", {})
    if not partial:
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{where}: required field {name!r} is missing")
    additional = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    for key, item in value.items():
        child = f"{path}.{key}"
        if key in properties:
            validate(item, properties[key], child, errors, partial)
        elif isinstance(additional, Mapping):
            validate(item, additional, child, errors, partial)
        elif not (preserve or additional is True):
            errors.append(f"{child}: unknown field (the CRD declares {sorted(properties) or 'none'})")
