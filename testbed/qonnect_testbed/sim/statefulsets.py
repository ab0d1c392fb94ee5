"""The StatefulSet controller: ordinal pods, ordered start, partitioned rolling updates, status.

Pods are ``<name>-<ordinal>`` with hostname/subdomain, the controller-revision-hash, pod-name
and pod-index labels. With OrderedReady, ordinal i is created only when 0..i-1 are Running and
Ready, and scale-down removes the highest first, one at a time; Parallel does all at once.
RollingUpdate replaces pods at or above the partition from the highest ordinal down, one at a
time, each only when all pods are Ready; OnDelete waits for the user. The status carries
currentRevision/updateRevision and the counts a readiness check must compare (updatedReplicas).
No PersistentVolumeClaims and no ControllerRevision objects are made.
"""

from __future__ import annotations

import json
from typing import Iterable

from qonnect_testbed.sim.base import Cache, Controller
from qonnect_testbed.sim.deployments import template_hash
from qonnect_testbed.sim.objects import is_true
from qonnect_testbed.store import Store

REVISION_LABEL = "controller-revision-hash"


def _ordinal(pod: dict, name: str) -> int | None:
    suffix = pod["metadata"]["name"][len(name) + 1 :]
    return int(suffix) if pod["metadata"]["name"].startswith(name + "-") and suffix.isdigit() else None


class StatefulSets(Controller):
    """Keeps each StatefulSet's ordinal pods and status in line with its spec."""

    def __init__(self, store: Store, cache: Cache) -> None:
        super().__init__("statefulset")
        self.store = store
        self.cache = cache
        # the templates of revisions seen (what ControllerRevisions keep on real clusters)
        self._templates: dict[tuple[str, str], dict] = {}

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            sts = self.cache.objects["statefulsets"].get(key)
            if sts is not None:
                self.guarded(key, lambda s=sts: self._sync(s))

    def _sync(self, sts: dict) -> None:
        meta, spec = sts["metadata"], sts.get("spec") or {}
        name, namespace = meta["name"], meta["namespace"]
        replicas = int(spec.get("replicas", 1))
        update_rev = f"{name}-{template_hash(spec.get('template') or {})}"
        self._templates.setdefault((meta["uid"], update_rev), spec.get("template") or {})
        status = sts.get("status") or {}
        current_rev = status.get("currentRevision") or update_rev
        pods = {o: p for p in self.cache.owned(meta["uid"]) if (o := _ordinal(p, name)) is not None}
        ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        all_ready = all(is_true(p, "Ready") for p in pods.values())
        # create missing ordinals
        for i in range(replicas):
            if i in pods:
                continue
            if ordered and not all(i2 in pods and is_true(pods[i2], "Ready") for i2 in range(i)):
                break
            rev = update_rev if self._wants_update(spec, i) else current_rev
            self._create(sts, i, rev)
            if ordered:
                break
        # scale down from the highest ordinal
        extra = sorted((i for i in pods if i >= replicas), reverse=True)
        for i in extra[:1] if ordered else extra:
            if not ordered or all_ready:
                self.store.delete("pods", namespace, pods[i]["metadata"]["name"])
        # rolling update: highest outdated ordinal at or above the partition, one at a time
        strategy = spec.get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") == "RollingUpdate" and all_ready and len(pods) >= replicas:
            outdated = sorted(
                (
                    i
                    for i, p in pods.items()
                    if i < replicas
                    and self._wants_update(spec, i)
                    and p["metadata"].get("labels", {}).get(REVISION_LABEL) != update_rev
                ),
                reverse=True,
            )
            if outdated:
                self.store.delete("pods", namespace, pods[outdated[0]]["metadata"]["name"])
        self._status(sts, update_rev, current_rev, replicas)

    @staticmethod
    def _wants_update(spec: dict, ordinal: int) -> bool:
        strategy = spec.get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return False
        return ordinal >= int((strategy.get("rollingUpdate") or {}).get("partition", 0) or 0)

    def _create(self, sts: dict, ordinal: int, revision: str) -> None:
        meta, spec = sts["metadata"], sts["spec"]
        template = self._templates.get((meta["uid"], revision)) or spec.get("template") or {}
        tmeta = template.get("metadata") or {}
        pod_name = f"{meta['name']}-{ordinal}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "labels": {
                    **(tmeta.get("labels") or {}),
                    REVISION_LABEL: revision,
                    "statefulset.kubernetes.io/pod-name": pod_name,
                    "apps.kubernetes.io/pod-index": str(ordinal),
                },
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "StatefulSet",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                **json.loads(json.dumps(template.get("spec") or {})),
                "hostname": pod_name,
                **({"subdomain": spec["serviceName"]} if spec.get("serviceName") else {}),
            },
        }
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmeta["annotations"])
        self.store.create("pods", meta["namespace"], pod)

    def _status(self, sts: dict, update_rev: str, current_rev: str, replicas: int) -> None:
        pods = self.cache.owned(sts["metadata"]["uid"])
        ready = sum(1 for p in pods if is_true(p, "Ready"))
        updated = sum(1 for p in pods if p["metadata"].get("labels", {}).get(REVISION_LABEL) == update_rev)
        current = sum(1 for p in pods if p["metadata"].get("labels", {}).get(REVISION_LABEL) == current_rev)
        if updated == len(pods) == replicas and ready == replicas:
            current_rev, current = update_rev, updated  # the rolling update is complete
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(pods),
            "readyReplicas": ready,
            "currentReplicas": current,
            "updatedReplicas": updated,
            "currentRevision": current_rev,
            "updateRevision": update_rev,
            "collisionCount": 0,
            "availableReplicas": ready,
        }
        status = {
            k: v for k, v in status.items() if v or k in ("replicas", "availableReplicas", "collisionCount")
        }
        if status != (sts.get("status") or {}):
            self.store.update(
                "statefulsets", sts["metadata"]["namespace"], dict(sts, status=status), subresource="status"
            )
