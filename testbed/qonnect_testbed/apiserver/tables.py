"""Server-side printing: meta.k8s.io/v1 Table responses with the columns real servers send.

kubectl asks for `as=Table` on `get`; the wide columns (priority 1) are what `-o wide` shows,
e.g. the NODE of a pod.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

Column = tuple[str, str, int, Callable[[dict], Any]]  # name, type, priority, cell


def _age(obj: dict) -> str:
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    created = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return human_duration((datetime.now(timezone.utc) - created).total_seconds())


def human_duration(seconds: float) -> str:
    """Durations as kubectl prints them (45s, 3m12s, 5h, 2d3h)."""
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    if s < 600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 3 * 3600:
        return f"{s // 60}m"
    if s < 8 * 3600:
        return f"{s // 3600}h{(s % 3600) // 60}m" if (s % 3600) // 60 else f"{s // 3600}h"
    if s < 2 * 86400:
        return f"{s // 3600}h"
    if s < 8 * 86400:
        return f"{s // 86400}d{(s % 86400) // 3600}h" if (s % 86400) // 3600 else f"{s // 86400}d"
    return f"{s // 86400}d"


def _get(obj: dict, *path: str, default: Any = None) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, dict):
            return default
        cur = cur.get(key)
    return default if cur is None else cur


def _pod_ready(pod: dict) -> str:
    statuses = _get(pod, "status", "containerStatuses", default=[])
    total = len(_get(pod, "spec", "containers", default=[]))
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(pod: dict) -> str:
    if _get(pod, "metadata", "deletionTimestamp"):
        return "Terminating"
    for status in _get(pod, "status", "containerStatuses", default=[]):
        waiting = _get(status, "state", "waiting", "reason") or _get(status, "state", "terminated", "reason")
        if waiting:
            return waiting
    return _get(pod, "status", "reason") or _get(pod, "status", "phase", default="Unknown")


def _node_status(node: dict) -> str:
    ready = next(
        (c for c in _get(node, "status", "conditions", default=[]) if c.get("type") == "Ready"), None
    )
    text = "Ready" if ready and ready.get("status") == "True" else ("NotReady" if ready else "Unknown")
    return text + (",SchedulingDisabled" if _get(node, "spec", "unschedulable") else "")


def _node_roles(node: dict) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(
        k[len(prefix) :] for k in _get(node, "metadata", "labels", default={}) if k.startswith(prefix)
    )
    return ",".join(roles) or "<none>"


def _node_address(kind: str) -> Callable[[dict], str]:
    def cell(node: dict) -> str:
        found = [a["address"] for a in _get(node, "status", "addresses", default=[]) if a.get("type") == kind]
        return found[0] if found else "<none>"

    return cell


def _ports(svc: dict) -> str:
    parts = []
    for port in _get(svc, "spec", "ports", default=[]):
        text = f"{port.get('port')}"
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        parts.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(parts) or "<none>"


def _selector(selector: dict | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (selector or {}).items()) or "<none>"


def _containers(deploy: dict, field: str) -> str:
    return ",".join(
        str(c.get(field, "")) for c in _get(deploy, "spec", "template", "spec", "containers", default=[])
    )


NAME: Column = ("Name", "string", 0, lambda o: _get(o, "metadata", "name", default=""))


def _job_status(job: dict) -> str:
    for kind, text in (("Complete", "Complete"), ("Failed", "Failed")):
        if any(
            c.get("type") == kind and c.get("status") == "True"
            for c in _get(job, "status", "conditions", default=[])
        ):
            return text
    return "Running"


def _hpa_reference(hpa: dict) -> str:
    return f"{_get(hpa, 'spec', 'scaleTargetRef', 'kind', default='')}/{_get(hpa, 'spec', 'scaleTargetRef', 'name', default='')}"


# kubectl's columns of the kinds whose status the emulator keeps (Jobs, claims, HPAs, PDBs)
_STATUS_KIND_COLUMNS: dict[str, list[Column]] = {
    "jobs": [
        ("Status", "string", 0, _job_status),
        (
            "Completions",
            "string",
            0,
            lambda o: (
                f"{_get(o, 'status', 'succeeded', default=0)}/{_get(o, 'spec', 'completions', default=1)}"
            ),
        ),
    ],
    "persistentvolumeclaims": [
        ("Status", "string", 0, lambda o: _get(o, "status", "phase", default="")),
        ("Volume", "string", 0, lambda o: _get(o, "spec", "volumeName", default="")),
        ("Capacity", "string", 0, lambda o: _get(o, "status", "capacity", "storage", default="")),
        ("Access Modes", "string", 0, lambda o: ",".join(_get(o, "status", "accessModes", default=[]))),
        ("StorageClass", "string", 0, lambda o: _get(o, "spec", "storageClassName", default="<unset>")),
    ],
    "horizontalpodautoscalers": [
        ("Reference", "string", 0, _hpa_reference),
        ("MinPods", "string", 0, lambda o: str(_get(o, "spec", "minReplicas", default=1))),
        ("MaxPods", "string", 0, lambda o: str(_get(o, "spec", "maxReplicas", default=""))),
        ("Replicas", "string", 0, lambda o: str(_get(o, "status", "currentReplicas", default=0))),
    ],
    "poddisruptionbudgets": [
        ("Min Available", "string", 0, lambda o: str(_get(o, "spec", "minAvailable", default="N/A"))),
        ("Max Unavailable", "string", 0, lambda o: str(_get(o, "spec", "maxUnavailable", default="N/A"))),
        (
            "Allowed Disruptions",
            "string",
            0,
            lambda o: str(_get(o, "status", "disruptionsAllowed", default=0)),
        ),
    ],
}
AGE: Column = ("Age", "string", 0, _age)
COLUMNS: dict[str, list[Column]] = {
    **{k: [NAME, *v, AGE] for k, v in _STATUS_KIND_COLUMNS.items()},
    "pods": [
        NAME,
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        (
            "Restarts",
            "string",
            0,
            lambda o: str(
                sum(s.get("restartCount", 0) for s in _get(o, "status", "containerStatuses", default=[]))
            ),
        ),
        AGE,
        ("IP", "string", 1, lambda o: _get(o, "status", "podIP", default="<none>")),
        ("Node", "string", 1, lambda o: _get(o, "spec", "nodeName", default="<none>")),
        ("Nominated Node", "string", 1, lambda o: _get(o, "status", "nominatedNodeName", default="<none>")),
        ("Readiness Gates", "string", 1, lambda o: "<none>"),
    ],
    "nodes": [
        NAME,
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        AGE,
        ("Version", "string", 0, lambda o: _get(o, "status", "nodeInfo", "kubeletVersion", default="")),
        ("Internal-IP", "string", 1, _node_address("InternalIP")),
        ("External-IP", "string", 1, _node_address("ExternalIP")),
        ("OS-Image", "string", 1, lambda o: _get(o, "status", "nodeInfo", "osImage", default="<unknown>")),
        (
            "Kernel-Version",
            "string",
            1,
            lambda o: _get(o, "status", "nodeInfo", "kernelVersion", default="<unknown>"),
        ),
        (
            "Container-Runtime",
            "string",
            1,
            lambda o: _get(o, "status", "nodeInfo", "containerRuntimeVersion", default="<unknown>"),
        ),
    ],
    "namespaces": [NAME, ("Status", "string", 0, lambda o: _get(o, "status", "phase", default="")), AGE],
    "services": [
        NAME,
        ("Type", "string", 0, lambda o: _get(o, "spec", "type", default="ClusterIP")),
        ("Cluster-IP", "string", 0, lambda o: _get(o, "spec", "clusterIP", default="<none>")),
        (
            "External-IP",
            "string",
            0,
            lambda o: ",".join(_get(o, "spec", "externalIPs", default=[])) or "<none>",
        ),
        ("Port(s)", "string", 0, _ports),
        AGE,
        ("Selector", "string", 1, lambda o: _selector(_get(o, "spec", "selector"))),
    ],
    "deployments": [
        NAME,
        (
            "Ready",
            "string",
            0,
            lambda o: (
                f"{_get(o, 'status', 'readyReplicas', default=0)}/{_get(o, 'spec', 'replicas', default=0)}"
            ),
        ),
        ("Up-to-date", "integer", 0, lambda o: _get(o, "status", "updatedReplicas", default=0)),
        ("Available", "integer", 0, lambda o: _get(o, "status", "availableReplicas", default=0)),
        AGE,
        ("Containers", "string", 1, lambda o: _containers(o, "name")),
        ("Images", "string", 1, lambda o: _containers(o, "image")),
        ("Selector", "string", 1, lambda o: _selector(_get(o, "spec", "selector", "matchLabels"))),
    ],
    "configmaps": [
        NAME,
        ("Data", "integer", 0, lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})),
        AGE,
    ],
    "secrets": [
        NAME,
        ("Type", "string", 0, lambda o: o.get("type", "")),
        ("Data", "integer", 0, lambda o: len(o.get("data") or {})),
        AGE,
    ],
    "serviceaccounts": [NAME, ("Secrets", "integer", 0, lambda o: len(o.get("secrets") or [])), AGE],
    "events": [
        ("Last Seen", "string", 0, _age),
        ("Type", "string", 0, lambda o: o.get("type", "")),
        ("Reason", "string", 0, lambda o: o.get("reason", "")),
        (
            "Object",
            "string",
            0,
            lambda o: (
                f"{_get(o, 'involvedObject', 'kind', default='').lower()}/{_get(o, 'involvedObject', 'name', default='')}"
            ),
        ),
        ("Message", "string", 0, lambda o: o.get("message", "")),
    ],
    "leases": [NAME, ("Holder", "string", 0, lambda o: _get(o, "spec", "holderIdentity", default="")), AGE],
}


def _row_object(obj: dict, include: str) -> dict | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    resource: str,
    objects: list[dict],
    resource_version: str,
    include: str = "Metadata",
    continue_token: str | None = None,
    remaining: int | None = None,
) -> dict:
    """A Table of objects with the resource's columns; include is None, Metadata or Object."""
    columns = COLUMNS.get(resource, [NAME, AGE])
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [cell(obj) for _title, _type, _priority, cell in columns]}
        embedded = _row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
        if remaining is not None:
            meta["remainingItemCount"] = remaining
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [
            {
                "name": name,
                "type": typ,
                "format": "name" if name == "Name" else "",
                "description": name,
                "priority": prio,
            }
            for name, typ, prio, _cell in columns
        ],
        "rows": rows,
    }


def wants_table(accept: str) -> bool:
    """Whether the Accept header asks for a meta.k8s.io Table before plain JSON."""
    for part in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in part.split(";")[1:] if "=" in p)
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") in ("v1", "v1beta1")
        ):
            return True
        if part.split(";")[0].strip() in ("application/json", "*/*"):
            return False
    return False
