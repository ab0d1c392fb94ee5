"""The scheduler's filters and scoring, as pure functions over Pod and Node objects.

Covers what the kube-scheduler checks for the pods qonnect deploys: node readiness and taints,
spec.unschedulable, resource requests against allocatable, the pod count, nodeSelector and
required node affinity (matchExpressions with In/NotIn/Exists/DoesNotExist/Gt/Lt and matchFields
on metadata.name). Among the nodes that fit it prefers the least allocated, as the default
scheduler's NodeResourcesFit scoring does.
"""

from __future__ import annotations

from qonnect_testbed.sim.objects import RESOURCES, is_true, parse_quantity, pod_requests

Usage = dict[str, float]  # cpu, memory, ephemeral-storage, pods


def allocatable(node: dict) -> Usage:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {res: parse_quantity(alloc.get(res, 0)) for res in (*RESOURCES, "pods")}


def _expression_matches(expr: dict, labels: dict[str, str]) -> bool:
    key, op = expr.get("key"), expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(term: dict, node: dict) -> bool:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    fields = {"metadata.name": meta.get("name", "")}
    exprs = term.get("matchExpressions") or []
    field_exprs = term.get("matchFields") or []
    if not exprs and not field_exprs:
        return False  # an empty term matches no objects, as in the scheduler
    return all(_expression_matches(e, labels) for e in exprs) and all(
        _expression_matches(e, fields) for e in field_exprs
    )


def affinity_matches(pod: dict, node: dict) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution (terms are ORed)."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(_term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


def tolerates(pod: dict, taint: dict) -> bool:
    """Whether one of the pod's tolerations matches the taint."""
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if tol.get("effect") not in (None, "", taint.get("effect")):
            continue
        if tol.get("operator") == "Exists":
            if tol.get("key") in (None, "", taint.get("key")):
                return True
        elif tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def reject_reason(pod: dict, node: dict, used: Usage) -> str | None:
    """Why the pod cannot go to the node (a scheduler-style phrase), or None if it fits."""
    if not is_true(node, "Ready"):
        return "node(s) were not ready"
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "node(s) were unschedulable"
    for taint in spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
            return "node(s) had untolerated taint(s)"  # kube-scheduler 1.34 names no taint
    if not affinity_matches(pod, node):
        return "node(s) didn't match Pod's node affinity/selector"
    alloc = allocatable(node)
    if used.get("pods", 0) + 1 > alloc["pods"]:
        return "Too many pods"
    requests = pod_requests(pod)
    names = {
        "cpu": "Insufficient cpu",
        "memory": "Insufficient memory",
        "ephemeral-storage": "Insufficient ephemeral-storage",
    }
    for res in RESOURCES:
        if requests[res] and used.get(res, 0) + requests[res] > alloc[res]:
            return names[res]
    return None


def score(pod: dict, node: dict, used: Usage) -> float:
    """Least-allocated score in [0, 1]: the mean free fraction of cpu and memory after placing."""
    alloc = allocatable(node)
    requests = pod_requests(pod)
    free = [
        1 - (used.get(res, 0) + requests[res]) / alloc[res] for res in ("cpu", "memory") if alloc[res] > 0
    ]
    return sum(free) / len(free) if free else 0.0


def unschedulable_message(total: int, reasons: dict[str, int]) -> str:
    """The FailedScheduling message format: '0/3 nodes are available: 2 Insufficient cpu, ...'."""
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return f"0/{total} nodes are available: {parts}." if parts else f"0/{total} nodes are available."


def add_usage(used: Usage, pod: dict, sign: int = 1) -> None:
    """Account a pod's requests (and one pod slot) on a node's usage."""
    requests = pod_requests(pod)
    for res in RESOURCES:
        used[res] = used.get(res, 0) + sign * requests[res]
    used["pods"] = used.get("pods", 0) + sign
