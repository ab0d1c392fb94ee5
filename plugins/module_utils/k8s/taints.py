# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node taints and pod tolerations, with the scheduler's matching rules.

A node with a NoSchedule or NoExecute taint that a pod does not tolerate will never run that pod
(a tainted control-plane node, a node.kubernetes.io/unreachable node...), so its free capacity is
no room for the pod and pinning the pod to it leaves it Pending for ever. PreferNoSchedule is a
preference only and never blocks. Used by node facts, the agent's report and the placement engine.
"""

from __future__ import annotations

from typing import Any

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Kinds whose pod template carries the pods' tolerations (spec.template.spec).
POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController")


def node_taints(node: dict) -> list[dict]:
    """A Node object's taints as ``{key, value, effect}`` (timeAdded dropped: it only churns)."""
    out = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if isinstance(taint, dict) and taint.get("key") and taint.get("effect") in EFFECTS:
            out.append(
                {"key": str(taint["key"]), "value": str(taint.get("value") or ""), "effect": taint["effect"]}
            )
    return out


def tolerates(toleration: dict, taint: dict) -> bool:
    """One toleration against one taint (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"  # an empty key with Exists matches every taint
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and str(toleration.get("value") or "") == str(taint.get("value") or "")


def blocking_taints(taints: list[dict], tolerations: list[dict]) -> list[dict]:
    """The NoSchedule/NoExecute taints none of ``tolerations`` tolerates."""
    tols = [t for t in tolerations or [] if isinstance(t, dict)]
    return [
        t
        for t in taints or []
        if t.get("effect") in BLOCKING_EFFECTS and not any(tolerates(tol, t) for tol in tols)
    ]


def taint_text(taint: dict) -> str:
    """``key=value:Effect`` as kubectl prints a taint."""
    value = taint.get("value") or ""
    return f"{taint.get('key')}{'=' + value if value else ''}:{taint.get('effect')}"


def _pod_spec(manifest: Any) -> dict | None:
    if not isinstance(manifest, dict):
        return None
    spec = manifest.get("spec") or {}
    kind = manifest.get("kind")
    if kind == "Pod":
        return spec
    if kind in POD_TEMPLATE_KINDS:
        return (spec.get("template") or {}).get("spec") or {}
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return (job.get("template") or {}).get("spec") or {}
    return None


def manifest_tolerations(manifests: list[dict]) -> list[list[dict]]:
    """The tolerations of each pod-making manifest of a service (one list per workload).

    A service runs all its workloads on the cluster it is placed on; a node is usable for it only
    when every workload tolerates the node's taints. A service without workloads has one empty
    list (its pods, if any, tolerate nothing).
    """
    found = []
    for manifest in manifests or []:
        pod = _pod_spec(manifest)
        if pod is not None:
            found.append([t for t in pod.get("tolerations") or [] if isinstance(t, dict)])
    return found or [[]]


def blocks_service(taints: list[dict], tolerations: list[list[dict]]) -> list[dict]:
    """The taints that keep at least one of a service's workloads off the node."""
    out: list[dict] = []
    for tols in tolerations or [[]]:
        for taint in blocking_taints(taints, tols):
            if taint not in out:
                out.append(taint)
    return out
