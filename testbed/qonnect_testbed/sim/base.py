"""The shared machinery of the simulation controllers: an informer cache and work queues."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Callable, Hashable, Iterable

from qonnect_testbed.sim.objects import controller_uid, key_of
from qonnect_testbed.store import ApiError

log = logging.getLogger(__name__)
RETRY_SECONDS = 0.05


OTHER_KINDS = ("replicasets", "statefulsets", "daemonsets", "services")


class Cache:
    """The objects the controllers read, kept current from the Store's change events.

    Holds the Store's own (never mutated) objects, plus indexes by node and by owner, so a
    controller pass costs what it touches rather than a full list.
    """

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict] = {}
        self.nodes: dict[str, dict] = {}
        self.deployments: dict[tuple[str, str], dict] = {}
        self.deployment_by_uid: dict[str, tuple[str, str]] = {}
        self.pods_by_node: dict[str, set[tuple[str, str]]] = defaultdict(set)
        self.pods_by_owner: dict[str, set[tuple[str, str]]] = defaultdict(set)  # controller uid -> pods
        # other workload kinds and services: resource -> key -> object, uid -> key
        self.objects: dict[str, dict[tuple[str, str], dict]] = {r: {} for r in OTHER_KINDS}
        self.by_uid: dict[str, tuple[str, tuple[str, str]]] = {}

    def apply(self, event: str, resource: str, obj: dict) -> dict | None:
        """Record one change; returns the previous version of the object."""
        if resource in self.objects:
            key = key_of(obj)
            old = self.objects[resource].pop(key, None)
            if old is not None:
                self.by_uid.pop(old["metadata"]["uid"], None)
            if event != "DELETED":
                self.objects[resource][key] = obj
                self.by_uid[obj["metadata"]["uid"]] = (resource, key)
            return old
        if resource == "nodes":
            name = obj["metadata"]["name"]
            old = self.nodes.pop(name, None)
            if event != "DELETED":
                self.nodes[name] = obj
            return old
        if resource == "deployments":
            key = key_of(obj)
            old = self.deployments.pop(key, None)
            if old is not None:
                self.deployment_by_uid.pop(old["metadata"]["uid"], None)
            if event != "DELETED":
                self.deployments[key] = obj
                self.deployment_by_uid[obj["metadata"]["uid"]] = key
            return old
        if resource == "pods":
            key = key_of(obj)
            old = self.pods.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            if event != "DELETED":
                self.pods[key] = obj
                node = (obj.get("spec") or {}).get("nodeName")
                if node:
                    self.pods_by_node[node].add(key)
                owner = controller_uid(obj)
                if owner:
                    self.pods_by_owner[owner].add(key)
            return old
        return None

    def _unindex(self, key: tuple[str, str], old: dict) -> None:
        node = (old.get("spec") or {}).get("nodeName")
        if node:
            self.pods_by_node[node].discard(key)
        owner = controller_uid(old)
        if owner:
            keys = self.pods_by_owner[owner]
            keys.discard(key)
            if not keys:
                del self.pods_by_owner[owner]

    def owned(self, uid: str) -> list[dict]:
        """The pods whose controller has this uid."""
        return [self.pods[k] for k in self.pods_by_owner.get(uid, ()) if k in self.pods]

    def children(self, resource: str, uid: str) -> list[dict]:
        """Objects of resource whose controller has this uid (e.g. a Deployment's ReplicaSets)."""
        return [o for o in self.objects[resource].values() if controller_uid(o) == uid]


class Controller:
    """A work queue of keys, drained in batches by one asyncio task.

    Batching matters at scale: a Deployment of 1000 replicas produces thousands of events, but
    each controller pass sees every queued key once.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._keys: set[Hashable] = set()
        self._wake = asyncio.Event()

    def enqueue(self, key: Hashable) -> None:
        self._keys.add(key)
        self._wake.set()

    def enqueue_later(self, key: Hashable, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.enqueue, key)

    def process(self, keys: Iterable[Hashable]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            keys, self._keys = self._keys, set()
            try:
                self.process(sorted(keys, key=repr))
            except Exception:  # a controller bug must not stop the cluster; log and go on
                log.exception("%s: pass failed", self.name)
            await asyncio.sleep(0)

    def guarded(self, key: Hashable, action: Callable[[], None]) -> None:
        """Run one write; on a conflict or a vanished object, look at the key again soon."""
        try:
            action()
        except ApiError as exc:
            if exc.code == 403:  # e.g. its namespace is terminating: nothing to do
                log.debug("%s: %s: %s", self.name, key, exc.message)
            elif exc.code in (404, 409):  # changed under us: the next pass sees the new state
                self.enqueue_later(key, RETRY_SECONDS)
            else:
                log.warning("%s: %s: %s", self.name, key, exc.message)
