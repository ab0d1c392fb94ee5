"""The Deployment controller: pods from the template, rolling updates, status.

There is no ReplicaSet resource in the testbed, so the controller owns pods directly (owner
reference kind Deployment) and tells template revisions apart by the pod-template-hash label,
as the real ReplicaSets do. Rolling updates honour maxSurge/maxUnavailable; Recreate removes
the old pods first. Status follows what ``kubectl rollout status`` and clients read.
"""

from __future__ import annotations

import json
import math
from typing import Iterable

from qonnect.testbed.sim.base import Cache, Controller
from qonnect.testbed.sim.objects import is_true, now, set_condition
from qonnect.testbed.store import Store

_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: dict) -> str:
    """FNV-32a of the template, encoded with the safe alphabet, like controller.ComputeHash."""
    value = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[int(ch) % len(_SAFE)] for ch in str(value))


def _resolve(value: object, replicas: int, round_up: bool) -> int:
    """An int-or-percent of replicas, as intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            scaled = float(value[:-1]) * replicas / 100
        except ValueError:
            return 0
        return math.ceil(scaled) if round_up else math.floor(scaled)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0


def _surge_unavailable(spec: dict, replicas: int) -> tuple[int, int]:
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, replicas
    rolling = strategy.get("rollingUpdate") or {}
    surge = _resolve(rolling.get("maxSurge", "25%"), replicas, True)
    unavailable = _resolve(rolling.get("maxUnavailable", "25%"), replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _removal_order(pods: list[dict]) -> list[dict]:
    """Unscheduled first, then not ready, then the newest (as the ReplicaSet controller)."""
    newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    return sorted(newest_first, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")),
                                               is_true(p, "Ready")))


class Deployments(Controller):
    """Keeps each Deployment's pods and status in line with its spec."""

    def __init__(self, store: Store, cache: Cache) -> None:
        super().__init__("deployment")
        self.store = store
        self.cache = cache

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            deployment = self.cache.deployments.get(key)
            if deployment is not None:
                self.guarded(key, lambda d=deployment: self._sync(d))

    def _pods(self, deployment: dict) -> list[dict]:
        keys = self.cache.pods_by_owner.get(deployment["metadata"]["uid"], ())
        return [self.cache.pods[k] for k in keys if k in self.cache.pods]

    def _sync(self, deployment: dict) -> None:
        spec = deployment.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        current = template_hash(spec.get("template") or {})
        surge, unavailable = _surge_unavailable(spec, replicas)
        pods = self._pods(deployment)
        new: list[dict] = []
        old: list[dict] = []
        for pod in pods:
            (new if pod["metadata"].get("labels", {}).get("pod-template-hash") == current else old).append(pod)
        ready = sum(1 for p in pods if is_true(p, "Ready"))
        namespace = deployment["metadata"]["namespace"]
        if old and (spec.get("strategy") or {}).get("type") == "Recreate":
            for pod in old:
                self.store.delete("pods", namespace, pod["metadata"]["name"])
            old = []
        room = replicas + surge - len(new) - len(old)
        for _pod in range(max(0, min(replicas - len(new), room))):
            self._create(deployment, current)
        if len(new) > replicas:
            for pod in _removal_order(new)[: len(new) - replicas]:
                self.store.delete("pods", namespace, pod["metadata"]["name"])
        if old:
            # Old pods that are not ready cost no availability; ready ones go only while enough
            # pods stay available.
            can_remove = ready - (replicas - unavailable)
            for pod in _removal_order(old):
                if is_true(pod, "Ready"):
                    if can_remove <= 0:
                        continue
                    can_remove -= 1
                self.store.delete("pods", namespace, pod["metadata"]["name"])
        self._status(deployment, current, replicas, unavailable)

    def _create(self, deployment: dict, current: str) -> None:
        meta = deployment["metadata"]
        template = deployment["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-{current}-",
                "labels": {**(tmeta.get("labels") or {}), "pod-template-hash": current},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": meta["name"], "uid": meta["uid"],
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": json.loads(json.dumps(template.get("spec") or {})),
        }
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmeta["annotations"])
        self.store.create("pods", meta["namespace"], pod)

    def _status(self, deployment: dict, current: str, replicas: int, unavailable: int) -> None:
        pods = self._pods(deployment)
        updated = [p for p in pods if p["metadata"].get("labels", {}).get("pod-template-hash") == current]
        ready = sum(1 for p in pods if is_true(p, "Ready"))
        updated_ready = sum(1 for p in updated if is_true(p, "Ready"))
        status = dict(deployment.get("status") or {})
        counts = {"replicas": len(pods), "updatedReplicas": len(updated), "readyReplicas": ready,
                  "availableReplicas": ready, "unavailableReplicas": max(0, replicas - ready)}
        for field, value in counts.items():  # zero counts are omitted, as real servers do
            if value:
                status[field] = value
            else:
                status.pop(field, None)
        status["observedGeneration"] = deployment["metadata"].get("generation", 1)
        stamp = now()
        conds = status.get("conditions") or []
        if ready >= replicas - unavailable:
            conds = set_condition(conds, "Available", "True", "MinimumReplicasAvailable",
                                  "Deployment has minimum availability.", stamp, update_time=True)
        else:
            conds = set_condition(conds, "Available", "False", "MinimumReplicasUnavailable",
                                  "Deployment does not have minimum availability.", stamp,
                                  update_time=True)
        name = f"{deployment['metadata']['name']}-{current}"
        if len(updated) == replicas == len(pods) and updated_ready == replicas:
            conds = set_condition(conds, "Progressing", "True", "NewReplicaSetAvailable",
                                  f'ReplicaSet "{name}" has successfully progressed.', stamp,
                                  update_time=True)
        else:
            conds = set_condition(conds, "Progressing", "True", "ReplicaSetUpdated",
                                  f'ReplicaSet "{name}" is progressing.', stamp, update_time=True)
        status["conditions"] = sorted(conds, key=lambda c: c["type"] != "Available")
        if status != (deployment.get("status") or {}):
            self.store.update("deployments", deployment["metadata"]["namespace"],
                              dict(deployment, status=status), subresource="status")
