"""The kubelets of one cluster: start bound pods after a delay, evict pods from lost nodes.

No container runs: a pod becomes Running and Ready ``start_delay`` seconds after it is bound,
with container statuses shaped like a real kubelet's. Pods of a node that is not Ready are
evicted (deleted), as taint-based eviction does, so their controllers recreate them elsewhere.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
from typing import Iterable

from qonnect.testbed.sim.base import Cache, Controller
from qonnect.testbed.sim.events import record
from qonnect.testbed.sim.objects import is_true, now
from qonnect.testbed.store import Store


class Kubelets(Controller):
    """Starts pods on their nodes after the start delay."""

    def __init__(self, store: Store, cache: Cache, start_delay: float) -> None:
        super().__init__("kubelet")
        self.store = store
        self.cache = cache
        self.start_delay = start_delay
        self._timers: dict[tuple[str, str], str] = {}  # pod key -> uid with a start timer
        self._next_ip: dict[str, int] = {}

    def pod_changed(self, key: tuple[str, str], pod: dict | None) -> None:
        if pod is None:
            self._timers.pop(key, None)
            return
        uid = pod["metadata"]["uid"]
        if not (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("startTime"):
            return
        if self._timers.get(key) == uid:
            return
        self._timers[key] = uid
        asyncio.get_running_loop().call_later(self.start_delay, self.enqueue, key)

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            pod = self.cache.pods.get(key)
            if pod is None or (pod.get("status") or {}).get("startTime"):
                continue
            node = self.cache.nodes.get(pod["spec"].get("nodeName", ""))
            if node is None or not is_true(node, "Ready"):
                self._timers.pop(key, None)  # the node is gone or down: eviction will follow
                continue
            self.guarded(key, lambda p=pod, n=node: self._start(p, n))

    def _pod_ip(self, node: dict) -> str:
        name = node["metadata"]["name"]
        cidr = ipaddress.IPv4Network((node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24")
        index = self._next_ip.get(name, 0)
        self._next_ip[name] = index + 1
        return str(cidr.network_address + 2 + index % (cidr.num_addresses - 3))

    def _start(self, pod: dict, node: dict) -> None:
        stamp = now()
        host_ip = next((a["address"] for a in node["status"].get("addresses") or []
                        if a.get("type") == "InternalIP"), "")
        pod_ip = self._pod_ip(node)
        containers = []
        for container in pod["spec"].get("containers") or []:
            image = container.get("image", "")
            digest = hashlib.sha256(image.encode()).hexdigest()
            containers.append({
                "name": container.get("name"), "image": image, "imageID": f"{image}@sha256:{digest}",
                "containerID": "emulated://" + hashlib.sha256(
                    f"{pod['metadata']['uid']}/{container.get('name')}".encode()).hexdigest(),
                "ready": True, "started": True, "restartCount": 0,
                "state": {"running": {"startedAt": stamp}}, "lastState": {}})
        status = dict(pod.get("status") or {})
        conditions = [{"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                      for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")]
        scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
        status.update(phase="Running", hostIP=host_ip, hostIPs=[{"ip": host_ip}], podIP=pod_ip,
                      podIPs=[{"ip": pod_ip}], startTime=stamp, containerStatuses=containers,
                      conditions=conditions + scheduled)
        self.store.update("pods", pod["metadata"]["namespace"], dict(pod, status=status),
                          subresource="status")

    def evict(self, node_name: str) -> int:
        """Delete every pod bound to a node that is not Ready; returns how many went."""
        count = 0
        for key in sorted(self.cache.pods_by_node.get(node_name, ())):
            pod = self.cache.pods.get(key)
            if pod is None:
                continue
            record(self.store, pod, "TaintManagerEviction", f"Marking for deletion Pod {key[0]}/{key[1]}",
                   component="taint-eviction-controller")
            self.guarded(key, lambda k=key: self.store.delete("pods", k[0], k[1]))
            count += 1
        return count
