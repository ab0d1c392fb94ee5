"""One emulated cluster's control loop: the cache, the controllers and their tasks."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from qonnect_testbed.fleet import ClusterSpec
from qonnect_testbed.sim.autoscaling import StatusOnly
from qonnect_testbed.sim.base import Cache
from qonnect_testbed.sim.cronjobs import CronJobs
from qonnect_testbed.sim.daemonsets import DaemonSets
from qonnect_testbed.sim.deployments import Deployments
from qonnect_testbed.sim.endpoints import EndpointsController
from qonnect_testbed.sim.jobs import Jobs
from qonnect_testbed.sim.kubelet import Kubelets
from qonnect_testbed.sim.namespaces import NamespaceController
from qonnect_testbed.sim.nodes import NodeController, lifecycle_taints
from qonnect_testbed.sim.objects import controller_uid, is_true, key_of
from qonnect_testbed.sim.scheduler import Scheduler
from qonnect_testbed.sim.statefulsets import StatefulSets
from qonnect_testbed.sim.volumes import Volumes, claims_of
from qonnect_testbed.store import Store

DEFAULT_HEARTBEAT_SECONDS = 10.0


class ClusterSim:
    """Runs the simulated kubelets and controllers of one cluster against its Store."""

    def __init__(
        self,
        store: Store,
        spec: ClusterSpec,
        *,
        start_delay: float = 1.0,
        heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS,
        start_delays: list[dict[str, Any]] | None = None,
        node_monitor_grace_period: float = 0.0,
        default_unreachable_toleration_seconds: int = 0,
        default_not_ready_toleration_seconds: int = 0,
    ) -> None:
        self.store = store
        self.spec = spec
        self.cache = Cache()
        # kube-apiserver's DefaultTolerationSeconds (the emulator's default: evict at once)
        store.toleration_seconds = {
            "node.kubernetes.io/unreachable": default_unreachable_toleration_seconds,
            "node.kubernetes.io/not-ready": default_not_ready_toleration_seconds,
        }
        self.nodes = NodeController(store, spec, heartbeat_seconds, node_monitor_grace_period)
        self.scheduler = Scheduler(store, self.cache)
        self.kubelets = Kubelets(store, self.cache, start_delay, start_delays)
        self.deployments = Deployments(store, self.cache)
        self.namespaces = NamespaceController(store)
        self.statefulsets = StatefulSets(store, self.cache)
        self.daemonsets = DaemonSets(store, self.cache)
        self.endpoints = EndpointsController(store, self.cache)
        self.jobs = Jobs(store, self.cache)
        self.cronjobs = CronJobs(store)
        self.volumes = Volumes(store)
        self.status_only = StatusOnly(store)
        self._tasks: list[asyncio.Task] = []
        self._unsubscribe = None

    async def start(self) -> None:
        """Subscribe to the Store, register the nodes and start the controller tasks."""
        self._unsubscribe = self.store.subscribe(self._on_event, copy=False)
        self.store.namespace_terminating = self.namespaces.terminating
        for resource in (
            "nodes",
            "deployments",
            "replicasets",
            "statefulsets",
            "daemonsets",
            "services",
            "pods",
            "jobs",
            "cronjobs",
            "persistentvolumes",
            "persistentvolumeclaims",
            "horizontalpodautoscalers",
            "poddisruptionbudgets",
        ):
            for obj in self.store.list_refs(resource)[0]:
                self._on_event("ADDED", resource, obj)
        self.nodes.register()
        for controller in (
            self.scheduler,
            self.kubelets,
            self.deployments,
            self.statefulsets,
            self.daemonsets,
            self.endpoints,
            self.jobs,
            self.cronjobs,
            self.volumes,
            self.status_only,
        ):
            self._tasks.append(
                asyncio.create_task(controller.run(), name=f"{self.spec.name}-{controller.name}")
            )
        self._tasks.append(asyncio.create_task(self.nodes.heartbeat(), name=f"{self.spec.name}-heartbeat"))

    async def stop(self) -> None:
        self.store.namespace_terminating = None
        if self._unsubscribe:
            self._unsubscribe()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def _on_event(self, event: str, resource: str, obj: dict) -> None:
        """Route one Store change to the controllers that care (runs inside the write)."""
        old = self.cache.apply(event, resource, obj)
        current = None if event == "DELETED" else obj
        self._status_kinds(resource, obj, current)
        if resource == "pods":
            key = key_of(obj)
            self.scheduler.pod_changed(key, current)
            self.kubelets.pod_changed(key, current)
            self._owner_changed(obj)
            self.endpoints.namespace_changed(key[0])
            if event == "DELETED" and (obj.get("spec") or {}).get("nodeName"):
                self.scheduler.retry_pending()  # capacity was freed
        elif resource == "deployments":
            if current is not None:
                self.deployments.enqueue(key_of(obj))
        elif resource == "replicasets":
            self._owner_changed(obj)  # e.g. someone deleted it: its Deployment makes it again
        elif resource == "statefulsets":
            if current is not None:
                self.statefulsets.enqueue(key_of(obj))
        elif resource == "daemonsets":
            if current is not None:
                self.daemonsets.enqueue(key_of(obj))
        elif resource == "services":
            self.endpoints.enqueue(key_of(obj))
        elif resource == "nodes":
            name = obj["metadata"]["name"]
            was_ready = old is not None and is_true(old, "Ready")
            if current is not None and not is_true(current, "Ready") and (was_ready or old is None):
                asyncio.get_running_loop().call_soon(self.kubelets.evict, name)
            if current is not None and lifecycle_taints(current) is not None:
                asyncio.get_running_loop().call_soon(self.nodes.sync_taints, name)
            if old is None or _scheduling_view(old) != _scheduling_view(current):
                self.scheduler.retry_pending()
                self.daemonsets.enqueue_all()

    def _status_kinds(self, resource: str, obj: dict, current: dict | None) -> None:
        """Jobs, volumes, HPAs and PDBs: a change of theirs, or of the pods and workloads they
        count, makes their controller look again."""
        key = key_of(obj)
        if resource in ("pods", "deployments", "replicasets", "statefulsets"):
            self.status_only.namespace_changed(key[0])
        if resource == "pods":
            for ref in obj["metadata"].get("ownerReferences") or ():
                if isinstance(ref, dict) and ref.get("kind") == "Job" and ref.get("controller"):
                    self.jobs.enqueue((key[0], ref.get("name", "")))
        if resource == "pods" and (
            current is None or (current.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        ):
            for claim in claims_of(obj):  # a claim marked for deletion may now be unused
                self.volumes.enqueue((key[0], claim))
        if resource == "jobs":
            for ref in obj["metadata"].get("ownerReferences") or ():
                if isinstance(ref, dict) and ref.get("kind") == "CronJob" and ref.get("controller"):
                    self.cronjobs.enqueue((key[0], ref.get("name", "")))
        if current is None:
            return
        if resource == "cronjobs":
            self.cronjobs.enqueue(key)
        elif resource == "jobs":
            self.jobs.enqueue(key)
        elif resource in ("persistentvolumeclaims", "persistentvolumes"):
            self.volumes.enqueue(key)
        elif resource in ("horizontalpodautoscalers", "poddisruptionbudgets"):
            self.status_only.enqueue((resource, *key))

    def _owner_changed(self, pod: dict) -> None:
        """A pod changed: its controller (through its ReplicaSet for Deployments) looks again."""
        owner = controller_uid(pod)
        if owner in self.cache.by_uid:
            resource, key = self.cache.by_uid[owner]
            if resource == "replicasets":
                owner = controller_uid(self.cache.objects["replicasets"].get(key) or {})
            elif resource == "statefulsets":
                self.statefulsets.enqueue(key)
            elif resource == "daemonsets":
                self.daemonsets.enqueue(key)
        if owner in self.cache.deployment_by_uid:
            self.deployments.enqueue(self.cache.deployment_by_uid[owner])

    def summary(self) -> dict:
        """Counts for ``qonnect testbed status``."""
        pods = self.cache.pods.values()
        return {
            "nodes": len(self.cache.nodes),
            "nodes_ready": sum(1 for n in self.cache.nodes.values() if is_true(n, "Ready")),
            "nodes_down": sorted(self.nodes.down),
            "pods": len(self.cache.pods),
            "pods_running": sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"),
            "pods_pending": sum(
                1 for p in pods if (p.get("status") or {}).get("phase", "Pending") == "Pending"
            ),
            "deployments": len(self.cache.deployments),
        }


def _scheduling_view(node: dict | None) -> tuple:
    """What of a node the scheduler looks at (heartbeat-only changes do not matter)."""
    if node is None:
        return ()
    return (
        is_true(node, "Ready"),
        repr((node.get("spec") or {}).get("taints")),
        (node.get("spec") or {}).get("unschedulable"),
        repr(node["metadata"].get("labels")),
        repr((node.get("status") or {}).get("allocatable")),
    )
