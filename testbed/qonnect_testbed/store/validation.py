"""Validation of the fields clients get wrong: names, labels, workload selectors and pod
templates, Service ports, ConfigMap/Secret data; failures are 422 Invalid with field causes."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from qonnect_testbed.store.errors import invalid
from qonnect_testbed.store.resources import ResourceType
from qonnect_testbed.store.selectors import LABEL_KEY, LABEL_VALUE

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_WORKLOADS = ("deployments", "statefulsets", "daemonsets", "replicasets")

Causes = list[tuple[str, str]]  # field path, message


def validate(rt: ResourceType, obj: dict) -> None:
    """Raise 422 Invalid listing every problem found in obj (a resource of type rt)."""
    meta = obj["metadata"]
    name = meta.get("name", "")
    causes: Causes = []
    _validate_metadata(rt, meta, causes)
    spec = obj.get("spec")
    if rt.plural == "pods":
        _validate_pod_spec(spec, "spec", causes)
    elif rt.plural in _WORKLOADS:
        _validate_workload(spec, causes)
    elif rt.plural == "services" and isinstance(spec, dict):
        _validate_service(spec, causes)
    elif rt.plural in ("configmaps", "secrets"):
        _validate_data(rt, obj, causes)
    elif rt.key == "jobs":
        _validate_job(spec, causes)
    if causes:
        raise invalid(rt.kind, name if isinstance(name, str) else "", causes)


def _validate_metadata(rt: ResourceType, meta: dict, causes: Causes) -> None:
    name = meta.get("name", "")
    pattern = _DNS1123_LABEL if rt.plural in ("namespaces", "services") else _DNS1123_SUBDOMAIN
    if not isinstance(name, str) or len(name) > 253 or not pattern.match(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": must be a lowercase RFC 1123 name'))
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is not None and (
            not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())
        ):
            causes.append(
                (f"metadata.{field}", "Invalid value: must be a map of string keys to string values")
            )
    for key, value in (meta.get("labels") or {}).items():
        if isinstance(value, str) and (
            not LABEL_KEY.match(key) or not LABEL_VALUE.match(value) or len(value) > 63
        ):
            causes.append(("metadata.labels", f'Invalid value: "{key}={value}": not a valid label'))


def _validate_workload(spec: Any, causes: Causes) -> None:
    if not isinstance(spec, dict):
        causes.append(("spec", "Required value"))
        return
    selector = (spec.get("selector") or {}).get("matchLabels")
    template = spec.get("template") or {}
    tlabels = (template.get("metadata") or {}).get("labels") or {}
    if not spec.get("selector"):
        causes.append(("spec.selector", "Required value"))
    elif selector and any(tlabels.get(k) != v for k, v in selector.items()):
        causes.append(
            ("spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`")
        )
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        causes.append(("spec.replicas", "Invalid value: must be greater than or equal to 0"))
    _validate_pod_spec(template.get("spec"), "spec.template.spec", causes)


def _validate_job(spec: Any, causes: Causes) -> None:
    template = (spec or {}).get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict):
        causes.append(("spec.template", "Required value"))
        return
    pod_spec = template.get("spec")
    _validate_pod_spec(pod_spec, "spec.template.spec", causes)
    if isinstance(pod_spec, dict) and pod_spec.get("restartPolicy") not in ("OnFailure", "Never"):
        causes.append(
            ("spec.template.spec.restartPolicy", 'Required value: valid values: "OnFailure", "Never"')
        )


def _validate_service(spec: dict, causes: Causes) -> None:
    for i, port in enumerate(spec.get("ports") or []):
        p = port.get("port") if isinstance(port, dict) else None
        if not isinstance(p, int) or not 0 < p < 65536:
            causes.append((f"spec.ports[{i}].port", "Invalid value: must be between 1 and 65535, inclusive"))


def _validate_data(rt: ResourceType, obj: dict, causes: Causes) -> None:
    for field in ("data", "stringData", "binaryData"):
        value = obj.get(field)
        if value is not None and (
            not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())
        ):
            causes.append((field, "Invalid value: must be a map of string keys to string values"))
    data = obj.get("data")
    if rt.plural == "secrets" and isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(value, str):
                continue  # reported above
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                causes.append((f"data[{key}]", "Invalid value: must be base64-encoded"))


def _validate_pod_spec(spec: Any, path: str, causes: Causes) -> None:
    if not isinstance(spec, dict):
        causes.append((path, "Required value"))
        return
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append((f"{path}.containers", "Required value"))
        return
    for i, container in enumerate(containers):
        if not isinstance(container, dict) or not container.get("name"):
            causes.append((f"{path}.containers[{i}].name", "Required value"))
        elif not container.get("image"):
            causes.append((f"{path}.containers[{i}].image", "Required value"))
