"""The scheduler: binds pending pods to nodes, or marks them Unschedulable.

Each pass recomputes node usage from the cache once and then places the queued pods in
creation order, so a burst of a thousand pods costs one pass, not a thousand.
"""

from __future__ import annotations

from typing import Iterable

from qonnect_testbed.sim import placement
from qonnect_testbed.sim.base import Cache, Controller
from qonnect_testbed.sim.events import record
from qonnect_testbed.sim.objects import now, set_condition
from qonnect_testbed.store import Store

TERMINAL = ("Succeeded", "Failed")


class Scheduler(Controller):
    """Places pods whose spec.nodeName is empty."""

    def __init__(self, store: Store, cache: Cache) -> None:
        super().__init__("scheduler")
        self.store = store
        self.cache = cache

    def pod_changed(self, key: tuple[str, str], pod: dict | None) -> None:
        if pod is not None and not (pod.get("spec") or {}).get("nodeName"):
            self.enqueue(key)

    def retry_pending(self) -> None:
        """Capacity or nodes changed: look at every unbound pod again."""
        for key, pod in self.cache.pods.items():
            if not (pod.get("spec") or {}).get("nodeName"):
                self.enqueue(key)

    def _usage(self) -> dict[str, placement.Usage]:
        usage: dict[str, placement.Usage] = {}
        for node, keys in self.cache.pods_by_node.items():
            used: placement.Usage = {}
            for key in keys:
                pod = self.cache.pods.get(key)
                if pod is not None and (pod.get("status") or {}).get("phase") not in TERMINAL:
                    placement.add_usage(used, pod)
            usage[node] = used
        return usage

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        pods = [(k, self.cache.pods[k]) for k in keys if k in self.cache.pods]
        pods = [
            (k, p)
            for k, p in pods
            if not (p.get("spec") or {}).get("nodeName")
            and (p.get("spec") or {}).get("schedulerName", "default-scheduler") == "default-scheduler"
        ]
        if not pods:
            return
        pods.sort(key=lambda kp: (kp[1]["metadata"].get("creationTimestamp", ""), kp[0]))
        usage = self._usage()
        nodes = sorted(self.cache.nodes.values(), key=lambda n: n["metadata"]["name"])
        for key, pod in pods:
            best, best_score, reasons = None, -1.0, {}
            for node in nodes:
                name = node["metadata"]["name"]
                used = usage.setdefault(name, {})
                reason = placement.reject_reason(pod, node, used)
                if reason:
                    reasons[reason] = reasons.get(reason, 0) + 1
                    continue
                value = placement.score(pod, node, used)
                if value > best_score:
                    best, best_score = name, value
            if best is None:
                message = placement.unschedulable_message(len(nodes), reasons)
                self.guarded(key, lambda p=pod, m=message: self._unschedulable(p, m))
            else:
                placement.add_usage(usage[best], pod)
                self.guarded(key, lambda p=pod, n=best: self._bind(p, n))

    def _bind(self, pod: dict, node: str) -> None:
        bound = dict(pod, spec=dict(pod["spec"], nodeName=node))
        bound = self.store.update("pods", pod["metadata"]["namespace"], bound)
        status = dict(bound.get("status") or {})
        others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        status["conditions"] = [
            *others,
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now()},
        ]
        status["phase"] = "Pending"
        self.store.update(
            "pods", pod["metadata"]["namespace"], dict(bound, status=status), subresource="status"
        )
        record(
            self.store,
            bound,
            "Scheduled",
            f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {node}",
            component="default-scheduler",
        )

    def _unschedulable(self, pod: dict, message: str) -> None:
        status = dict(pod.get("status") or {})
        status["phase"] = "Pending"
        status["conditions"] = set_condition(
            status.get("conditions") or [], "PodScheduled", "False", "Unschedulable", message, now()
        )
        for cond in status["conditions"]:
            if cond["type"] == "PodScheduled":
                cond["lastProbeTime"] = None
        stored = self.store.update(
            "pods", pod["metadata"]["namespace"], dict(pod, status=status), subresource="status"
        )
        if stored["metadata"]["resourceVersion"] != pod["metadata"]["resourceVersion"]:
            record(
                self.store,
                stored,
                "FailedScheduling",
                message,
                component="default-scheduler",
                kind_type="Warning",
            )
