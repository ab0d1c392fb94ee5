"""The Endpoints controller: each Service with a selector gets Endpoints of its pods.

Ready pods with an IP are ``addresses``, others ``notReadyAddresses`` (with targetRef and
nodeName); ports are the Service's, with named targetPorts resolved against the first pod's
container ports. A Service without selected pods has Endpoints without subsets. EndpointSlices
(discovery.k8s.io) are not served by the emulator.
"""

from __future__ import annotations

from typing import Iterable

from qonnect_testbed.sim.base import Cache, Controller
from qonnect_testbed.sim.objects import is_true
from qonnect_testbed.store import ApiError, Store


def _target_port(port: dict, pod: dict | None) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        for cport in container.get("ports") or []:
            if cport.get("name") == target:
                return cport.get("containerPort")
    return None


class EndpointsController(Controller):
    """Keeps Endpoints objects in line with Services and their pods."""

    def __init__(self, store: Store, cache: Cache) -> None:
        super().__init__("endpoints")
        self.store = store
        self.cache = cache

    def namespace_changed(self, namespace: str) -> None:
        """A pod changed in namespace: every Service there looks again."""
        for key in self.cache.objects["services"]:
            if key[0] == namespace:
                self.enqueue(key)

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            svc = self.cache.objects["services"].get(key)
            self.guarded(key, lambda k=key, s=svc: self._sync(k, s))

    def _sync(self, key: tuple[str, str], svc: dict | None) -> None:
        namespace, name = key
        selector = ((svc or {}).get("spec") or {}).get("selector")
        try:
            existing = self.store.get_ref("endpoints", namespace, name)
        except ApiError:
            existing = None
        if svc is None or not selector:
            if svc is None and existing is not None:
                self.store.delete("endpoints", namespace, name)
            return
        pods = [
            p
            for (ns, _n), p in sorted(self.cache.pods.items())
            if ns == namespace
            and (p.get("status") or {}).get("podIP")
            and not p["metadata"].get("deletionTimestamp")
            and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
        ]
        ready, not_ready = [], []
        for pod in pods:
            address = {
                "ip": pod["status"]["podIP"],
                "nodeName": pod["spec"].get("nodeName"),
                "targetRef": {
                    "kind": "Pod",
                    "namespace": namespace,
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
            }
            (ready if is_true(pod, "Ready") else not_ready).append(address)
        ports = []
        for port in svc["spec"].get("ports") or []:
            number = _target_port(port, pods[0] if pods else None)
            if number is not None:
                entry = {"port": number, "protocol": port.get("protocol", "TCP")}
                if port.get("name"):
                    entry = {"name": port["name"], **entry}
                ports.append(entry)
        body: dict = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": name, "labels": dict(svc["metadata"].get("labels") or {})},
        }
        if pods:
            subset: dict = {"ports": ports}
            if ready:
                subset["addresses"] = ready
            if not_ready:
                subset["notReadyAddresses"] = not_ready
            body["subsets"] = [subset]
        if existing is None:
            self.store.create("endpoints", namespace, body)
        elif (
            existing.get("subsets") != body.get("subsets")
            or (existing["metadata"].get("labels") or {}) != body["metadata"]["labels"]
        ):
            new = dict(existing, metadata=dict(existing["metadata"], labels=body["metadata"]["labels"]))
            if "subsets" in body:
                new["subsets"] = body["subsets"]
            else:
                new.pop("subsets", None)
            self.store.update("endpoints", namespace, new)
