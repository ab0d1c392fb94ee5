"""The DaemonSet controller: one pod per eligible node, rolling updates, status.

A node is eligible when the template's nodeSelector and required node affinity match it and
its NoSchedule/NoExecute taints are tolerated - counting the tolerations the controller adds to
every daemon pod (not-ready, unreachable, pressure, unschedulable), as on real clusters. Pods
are pinned with a matchFields affinity on metadata.name and placed by the scheduler.
RollingUpdate replaces outdated pods up to maxUnavailable at a time (maxSurge is not modelled).
"""

from __future__ import annotations

import json
from typing import Iterable

from qonnect_testbed.sim.base import Cache, Controller
from qonnect_testbed.sim.deployments import _resolve, template_hash
from qonnect_testbed.sim.objects import is_true
from qonnect_testbed.sim.placement import affinity_matches, tolerates
from qonnect_testbed.store import Store

DAEMON_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)


def daemon_pod_spec(template_spec: dict, node: str) -> dict:
    """The template's pod spec with the controller's tolerations and node pinning."""
    spec = json.loads(json.dumps(template_spec))
    tolerations = spec.setdefault("tolerations", [])
    for key, effect in DAEMON_TOLERATIONS:
        if not any(t.get("key") == key and t.get("effect") == effect for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [term]}
    return spec


class DaemonSets(Controller):
    """Keeps a pod of each DaemonSet on every eligible node."""

    def __init__(self, store: Store, cache: Cache) -> None:
        super().__init__("daemonset")
        self.store = store
        self.cache = cache

    def enqueue_all(self) -> None:
        for key in self.cache.objects["daemonsets"]:
            self.enqueue(key)

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            ds = self.cache.objects["daemonsets"].get(key)
            if ds is not None:
                self.guarded(key, lambda d=ds: self._sync(d))

    def _eligible(self, ds: dict) -> list[str]:
        template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        out = []
        for name, node in sorted(self.cache.nodes.items()):
            probe = {"spec": daemon_pod_spec(template_spec, name)}
            probe["spec"]["affinity"]["nodeAffinity"] = (template_spec.get("affinity") or {}).get(
                "nodeAffinity"
            ) or {}
            taints = [
                t
                for t in (node.get("spec") or {}).get("taints") or []
                if t.get("effect") in ("NoSchedule", "NoExecute")
            ]
            if affinity_matches(probe, node) and all(tolerates(probe, t) for t in taints):
                out.append(name)
        return out

    def _sync(self, ds: dict) -> None:
        meta, spec = ds["metadata"], ds.get("spec") or {}
        revision = template_hash(spec.get("template") or {})
        eligible = set(self._eligible(ds))
        pods = self.cache.owned(meta["uid"])
        by_node: dict[str, list[dict]] = {}
        for pod in pods:
            node = _pinned_node(pod)
            by_node.setdefault(node, []).append(pod)
        for node in sorted(eligible - set(by_node)):
            self._create(ds, node, revision)
        for node, node_pods in by_node.items():
            if node not in eligible:
                for pod in node_pods:
                    self.store.delete("pods", meta["namespace"], pod["metadata"]["name"])
        strategy = spec.get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            budget = max(
                1,
                _resolve((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1), len(eligible), True),
            )
            unavailable = sum(1 for n in eligible if not any(is_true(p, "Ready") for p in by_node.get(n, [])))
            for node in sorted(eligible & set(by_node)):
                outdated = [
                    p
                    for p in by_node[node]
                    if p["metadata"].get("labels", {}).get("controller-revision-hash") != revision
                ]
                for pod in outdated:
                    if unavailable >= budget and is_true(pod, "Ready"):
                        break
                    self.store.delete("pods", meta["namespace"], pod["metadata"]["name"])
                    unavailable += 1 if is_true(pod, "Ready") else 0
        self._status(ds, revision, eligible)

    def _create(self, ds: dict, node: str, revision: str) -> None:
        meta = ds["metadata"]
        template = (ds.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "labels": {
                    **(tmeta.get("labels") or {}),
                    "controller-revision-hash": revision,
                    "pod-template-generation": str(meta.get("generation", 1)),
                },
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": daemon_pod_spec(template.get("spec") or {}, node),
        }
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmeta["annotations"])
        self.store.create("pods", meta["namespace"], pod)

    def _status(self, ds: dict, revision: str, eligible: set[str]) -> None:
        pods = self.cache.owned(ds["metadata"]["uid"])
        scheduled = {_pinned_node(p) for p in pods}
        ready_nodes = {_pinned_node(p) for p in pods if is_true(p, "Ready")}
        updated = {
            _pinned_node(p)
            for p in pods
            if p["metadata"].get("labels", {}).get("controller-revision-hash") == revision
        }
        status = {
            "currentNumberScheduled": len(scheduled & eligible),
            "numberMisscheduled": len(scheduled - eligible),
            "desiredNumberScheduled": len(eligible),
            "numberReady": len(ready_nodes & eligible),
            "observedGeneration": ds["metadata"].get("generation", 1),
            "updatedNumberScheduled": len(updated & eligible),
            "numberAvailable": len(ready_nodes & eligible),
            "numberUnavailable": len(eligible - ready_nodes),
        }
        status = {
            k: v
            for k, v in status.items()
            if v
            or k in ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady")
        }
        if status != (ds.get("status") or {}):
            self.store.update(
                "daemonsets", ds["metadata"]["namespace"], dict(ds, status=status), subresource="status"
            )


def _pinned_node(pod: dict) -> str:
    """The node a daemon pod is for (its matchFields pin, or where it is bound)."""
    spec = pod.get("spec") or {}
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return str(spec.get("nodeName") or "")
