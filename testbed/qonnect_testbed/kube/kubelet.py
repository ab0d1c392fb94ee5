"""The simulated kubelets of one real cluster: only the kubelet is simulated, nothing else.

Against the real API server, each node registers as a kubelet does (labels, taints, capacity,
conditions), renews its Lease in kube-node-lease every 10 s and posts its status every 60 s, and
at once when the server no longer holds the node Ready (as a kubelet's status sync does). Pods
the real scheduler binds to it get the container statuses a kubelet would report over time
(timeline.py: start delay, slow pulls, pull failures with back-off, transient failures that
clear, crash loops), and pods marked for deletion are confirmed deleted. ``down`` stops all of
that for one node, so the real node-lifecycle controller marks it NotReady after its grace
period and the taint-eviction controller evicts its pods after their tolerationSeconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import logging
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Protocol

from qonnect_testbed.faults import runs_to_completion
from qonnect_testbed.fleet import ClusterSpec, NodeSpec
from qonnect_testbed.kube import timeline
from qonnect_testbed.kube.api import STRATEGIC, KubeApi, KubeApiError
from qonnect_testbed.sim.nodes import node_object

log = logging.getLogger(__name__)
LEASE_SECONDS = 40
LEASE_RENEW = 10.0  # the kubelet's default: a quarter of the 40 s lease
STATUS_EVERY = 60.0
DELETE_AFTER = 0.3  # seconds a "killed" container takes before the kubelet confirms deletion
DELETE_RETRY = 1.0  # seconds between tries to confirm a deletion the API server did not take


class FaultPolicy(Protocol):
    """Per image: which fault (kind, N seconds) and which start delay (jitter applied)."""

    def fault(self, image: str) -> tuple[str | None, float]: ...

    def delay(self, image: str) -> float: ...


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kubelets:
    """All simulated nodes of one cluster, driven from the testbed's asyncio loop."""

    def __init__(
        self,
        api: KubeApi,
        cluster: ClusterSpec,
        policy: FaultPolicy,
        version: str,
        renew_seconds: float = LEASE_RENEW,
    ) -> None:
        self.api = api
        self.renew_seconds = renew_seconds
        self.cluster = cluster
        self.policy = policy
        self.version = version
        self.nodes: dict[str, NodeSpec] = {n.name: n for n in cluster.nodes}
        self.down: set[str] = set()
        self._bound: dict[str, float] = {}  # pod uid -> when this kubelet first saw it bound
        self._tasks: dict[str, asyncio.Task[None]] = {}  # pod uid -> its lifecycle
        self._pods: dict[str, dict[str, Any]] = {}  # pod uid -> latest object
        self._ips: dict[str, int] = {}  # node -> pod IPs handed out
        self._pod_ips: dict[str, str] = {}  # pod uid -> its IP
        self._plans: dict[str, list[tuple[dict[str, Any], str | None, float, float]]] = {}
        self._reported: dict[str, dict[str, str]] = {}  # pod uid -> container -> last event key
        self._loops: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ nodes

    def _node_object(self, index: int, spec: NodeSpec) -> dict[str, Any]:
        node = node_object(self.cluster, spec, index)
        info = node["status"]["nodeInfo"]
        info.update(
            kubeletVersion=self.version,
            kubeProxyVersion=self.version,
            containerRuntimeVersion="qonnect-sim://1.0",
            kernelVersion="simulated",
            osImage="qonnect testbed (simulated kubelet)",
        )
        taints = [dict(t) for t in getattr(spec, "taints", None) or []]
        if taints:
            node["spec"]["taints"] = taints
        return node

    async def register(self) -> None:
        """Create each Node (with status) and its Lease, as a kubelet does on first start."""
        for index, spec in enumerate(self.cluster.nodes):
            body = self._node_object(index, spec)
            try:
                created = await self.api.create("/api/v1/nodes", body)
            except KubeApiError as exc:
                if exc.code != 409:
                    raise
                created = await self.api.get(f"/api/v1/nodes/{spec.name}")
            await self._post_status(spec.name, ready=True)
            await self.api.ensure(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": spec.name,
                        "namespace": "kube-node-lease",
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": spec.name,
                                "uid": created["metadata"]["uid"],
                            }
                        ],
                    },
                    "spec": {
                        "holderIdentity": spec.name,
                        "leaseDurationSeconds": LEASE_SECONDS,
                        "renewTime": _micro(),
                    },
                },
            )

    async def _post_status(self, name: str, ready: bool) -> None:
        stamp = _stamp(time.time())
        conditions = [
            {
                "type": t,
                "status": "False",
                "reason": r,
                "message": m,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
            for t, r, m in (
                ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        )
        current = await self.api.get(f"/api/v1/nodes/{name}")
        old = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
        for cond in conditions:  # keep the transition time of a condition that did not change
            prev = old.get(cond["type"])
            if prev and prev.get("status") == cond["status"]:
                cond["lastTransitionTime"] = prev.get("lastTransitionTime", cond["lastTransitionTime"])
        await self.api.patch(
            f"/api/v1/nodes/{name}/status", {"status": {"conditions": conditions}}, STRATEGIC
        )

    async def _heartbeats(self) -> None:
        last_status = time.monotonic()
        while True:
            await asyncio.sleep(self.renew_seconds)
            post_status = time.monotonic() - last_status >= STATUS_EVERY
            for name in self.nodes:
                if name in self.down:
                    continue
                try:
                    await self.api.patch(
                        f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}",
                        {"spec": {"renewTime": _micro(), "holderIdentity": name}},
                    )
                    if post_status or not await self._ready_on_server(name):
                        await self._post_status(name, ready=True)
                except KubeApiError as exc:  # API server down: try again at the next beat
                    log.debug("%s/%s heartbeat: %s", self.cluster.name, name, exc)
            if post_status:
                last_status = time.monotonic()

    async def _ready_on_server(self, name: str) -> bool:
        """Whether the API server holds this node Ready. A kubelet compares the status it would
        post with the server's at every beat and posts at once when they differ, so a node the
        node-lifecycle controller marked Unknown (after an API-server outage) is Ready again
        within one beat, not at the next periodic report."""
        node = await self.api.get(f"/api/v1/nodes/{name}")
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        )

    async def set_down(self, name: str) -> None:
        """The kubelet stops: no lease renewals, no status, no pod work on this node."""
        self._check(name)
        self.down.add(name)
        for uid, pod in list(self._pods.items()):
            if pod["spec"].get("nodeName") == name:
                self._cancel(uid)

    async def set_up(self, name: str) -> None:
        """The kubelet is back: renews its lease, posts Ready, resumes its pods."""
        self._check(name)
        self.down.discard(name)
        await self.api.patch(
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}",
            {"spec": {"renewTime": _micro(), "holderIdentity": name}},
        )
        await self._post_status(name, ready=True)
        for pod in list(self._pods.values()):
            if pod["spec"].get("nodeName") == name:
                self._handle(pod)

    def _check(self, name: str) -> None:
        if name not in self.nodes:
            raise KeyError(
                f"cluster {self.cluster.name} has no node {name!r} (nodes: {', '.join(self.nodes)})"
            )

    # ------------------------------------------------------------------ pods

    async def _watch_pods(self) -> None:
        """List, then watch every pod; (re)list after errors and expired resource versions."""
        while True:
            try:
                listed = await self.api.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName!="})
                seen = set()
                for pod in listed.get("items") or []:
                    seen.add(pod["metadata"]["uid"])
                    self._observe(pod)
                for uid in set(self._pods) - seen:
                    self._forget(uid)
                version = listed["metadata"]["resourceVersion"]
                async for event in self.api.watch(
                    "/api/v1/pods", version, params={"fieldSelector": "spec.nodeName!="}
                ):
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        break  # e.g. 410 Gone: list again
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        self._forget(obj["metadata"]["uid"])
                    else:
                        self._observe(obj)
            except KubeApiError as exc:
                log.debug("%s: pod watch: %s", self.cluster.name, exc)
                await asyncio.sleep(1.0)
            except asyncio.CancelledError:
                raise
            except Exception:  # a simulator bug must not stop the node forever
                log.exception("%s: pod watch failed", self.cluster.name)
                await asyncio.sleep(1.0)

    def _observe(self, pod: dict[str, Any]) -> None:
        if pod["spec"].get("nodeName") not in self.nodes:
            return
        uid = pod["metadata"]["uid"]
        self._pods[uid] = pod
        self._bound.setdefault(uid, time.time())
        self._handle(pod)

    def _forget(self, uid: str) -> None:
        self._cancel(uid)
        self._pods.pop(uid, None)
        self._bound.pop(uid, None)
        self._pod_ips.pop(uid, None)
        self._plans.pop(uid, None)
        self._reported.pop(uid, None)

    def _cancel(self, uid: str) -> None:
        task = self._tasks.pop(uid, None)
        if task is not None:
            task.cancel()

    def _handle(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if pod["spec"]["nodeName"] in self.down:
            return
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        task = self._tasks.get(uid)
        if task is not None:  # running, or finished with nothing more to report
            if not deleting or task.get_name() == "delete":
                return
            task.cancel()
        if deleting:
            self._tasks[uid] = asyncio.create_task(self._confirm_delete(pod), name="delete")
        elif (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            self._tasks[uid] = asyncio.create_task(self._lifecycle(uid), name="run")

    async def _confirm_delete(self, pod: dict[str, Any]) -> None:
        """Confirm a deletion as a kubelet does once the containers are gone, and keep trying
        while the API server is away (a deletion it missed would leave the pod Terminating for
        ever: its ReplicaSet makes a replacement beside it, its namespace never goes)."""
        meta = pod["metadata"]
        await asyncio.sleep(DELETE_AFTER)
        while True:
            try:
                await self.api.delete(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {
                        "apiVersion": "v1",
                        "kind": "DeleteOptions",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": meta["uid"]},
                    },
                )
                return
            except KubeApiError as exc:
                if exc.code in (404, 409):
                    return  # already gone, or the name now belongs to a new pod
                log.debug("%s: confirming the deletion of %s: %s", self.cluster.name, meta["name"], exc)
                await asyncio.sleep(DELETE_RETRY)

    def _plan(self, pod: dict[str, Any]) -> list[tuple[dict[str, Any], str | None, float, float]]:
        """Per container: (container, fault kind, fault seconds, start delay)."""
        plans = []
        for container in pod["spec"].get("containers") or []:
            image = container.get("image", "")
            kind, seconds = self.policy.fault(image)
            if kind is None and runs_to_completion(pod):
                kind = "complete"
            plans.append((container, kind, seconds, self.policy.delay(image)))
        return plans

    async def _lifecycle(self, uid: str) -> None:
        """Post the pod's status at every change of any container until it is deleted."""
        pod = self._pods.get(uid)
        if pod is None:
            return
        plans = self._plans.setdefault(uid, self._plan(pod))  # jitter drawn once per pod
        bound = self._bound[uid]
        if uid not in self._pod_ips:
            self._pod_ips[uid] = self._pod_ip(pod["spec"]["nodeName"])
        pod_ip = self._pod_ips[uid]
        last_reasons = self._reported.setdefault(uid, {})
        posted: Any = None
        while True:
            now = time.time()
            elapsed = now - bound
            views = [
                (c, timeline.view(k, s, d, elapsed, c.get("image", ""), lambda t: _stamp(bound + t)))
                for c, k, s, d in plans
            ]
            status = self._status(self._pods.get(uid, pod), views, bound, pod_ip)
            if status != posted:
                try:
                    await self._patch_status(self._pods.get(uid, pod), status)
                    posted = status
                except KubeApiError as exc:
                    if exc.code in (404, 409, 422):
                        return  # gone or replaced (same name, new uid)
                    await asyncio.sleep(1.0)
                    continue
                for container, v in views:
                    name = container.get("name", "")
                    if v.reason and last_reasons.get(name) != f"{v.reason}/{v.restart_count}/{v.next_change}":
                        last_reasons[name] = f"{v.reason}/{v.restart_count}/{v.next_change}"
                        await self._event(
                            self._pods.get(uid, pod),
                            v.reason,
                            v.message,
                            "Normal" if v.reason == "Started" else "Warning",
                        )
            wake = min((v.next_change for _c, v in views), default=float("inf"))
            if wake == float("inf"):
                return
            await asyncio.sleep(max(0.05, bound + wake - time.time()))

    def _pod_ip(self, node_name: str) -> str:
        index = list(self.nodes).index(node_name)
        n = self._ips.get(node_name, 0)
        self._ips[node_name] = n + 1
        return str(ipaddress.IPv4Address(f"10.244.{index % 256}.0") + 2 + n % 250)

    def _status(
        self,
        pod: dict[str, Any],
        views: list[tuple[dict[str, Any], timeline.ContainerView]],
        bound: float,
        pod_ip: str,
    ) -> dict[str, Any]:
        node = self.nodes[pod["spec"]["nodeName"]]
        host_ip = str(ipaddress.IPv4Address("10.0.0.10") + list(self.nodes).index(node.name))
        statuses = []
        for container, v in views:
            image = container.get("image", "")
            entry: dict[str, Any] = {
                "name": container.get("name"),
                "image": image,
                "imageID": "",
                "ready": v.ready,
                "started": v.started,
                "restartCount": v.restart_count,
                "state": v.state,
                "lastState": v.last_state,
            }
            if v.started or v.last_state:
                entry["imageID"] = f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"
                entry["containerID"] = (
                    "containerd://"
                    + hashlib.sha256(
                        f"{pod['metadata']['uid']}/{container.get('name')}/{v.restart_count}".encode()
                    ).hexdigest()
                )
            statuses.append(entry)
        all_ready = bool(statuses) and all(s["ready"] for s in statuses)
        any_started = any(v.started or v.last_state for _c, v in views)
        not_ready = [s["name"] for s in statuses if not s["ready"]]
        reason = "" if all_ready else "ContainersNotReady"
        message = "" if all_ready else f"containers with unready status: [{' '.join(not_ready)}]"
        start = _stamp(bound)
        # Ready and ContainersReady changed when the last container (re)started, or when one
        # last exited (a crash loop), as a kubelet records them: the Deployment controller's
        # minReadySeconds and deploy's minimum-ready window count from this moment
        if all_ready:
            moments = [(v.state.get("running") or {}).get("startedAt") for _c, v in views]
        else:
            moments = [
                ((v.last_state.get("terminated") or {}).get("finishedAt")) for _c, v in views if not v.ready
            ]
        changed = max([m for m in moments if m] + [start])

        def cond(kind: str, ok: bool) -> dict[str, Any]:
            c = {
                "type": kind,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": changed if kind in ("Ready", "ContainersReady") else start,
            }
            if not ok:
                c.update(reason=reason, message=message)
            return c

        conditions = [
            {
                "type": "PodReadyToStartContainers",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": start,
            },
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": start},
            cond("Ready", all_ready),
            cond("ContainersReady", all_ready),
        ]
        init = [
            {
                "name": c.get("name"),
                "image": c.get("image", ""),
                "ready": True,
                "restartCount": 0,
                "started": False,
                "imageID": "",
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": start,
                        "finishedAt": start,
                    }
                },
            }
            for c in pod["spec"].get("initContainers") or []
        ]
        completed = bool(views) and all(
            (v.state.get("terminated") or {}).get("exitCode") == 0 for _c, v in views
        )
        status: dict[str, Any] = {
            "phase": "Succeeded" if completed else "Running" if any_started else "Pending",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": start,
            "conditions": conditions,
            "containerStatuses": statuses,
            "qosClass": _qos(pod),
        }
        if init:
            status["initContainerStatuses"] = init
        return status

    async def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        await self.api.patch(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            {"metadata": {"uid": meta["uid"]}, "status": status},
            STRATEGIC,
        )

    async def _event(self, pod: dict[str, Any], reason: str, message: str, kind: str) -> None:
        meta = pod["metadata"]
        stamp = _stamp(time.time())
        with contextlib.suppress(KubeApiError):
            await self.api.create(
                f"/api/v1/namespaces/{meta['namespace']}/events",
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {
                        "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                        "namespace": meta["namespace"],
                    },
                    "involvedObject": {
                        "kind": "Pod",
                        "apiVersion": "v1",
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "uid": meta["uid"],
                    },
                    "reason": reason,
                    "message": message,
                    "type": kind,
                    "count": 1,
                    "firstTimestamp": stamp,
                    "lastTimestamp": stamp,
                    "source": {"component": "kubelet", "host": pod["spec"]["nodeName"]},
                    "reportingComponent": "kubelet",
                    "reportingInstance": pod["spec"]["nodeName"],
                },
            )

    # ------------------------------------------------------------------ run

    async def start(self) -> None:
        await self.register()
        self._loops = [asyncio.create_task(self._heartbeats()), asyncio.create_task(self._watch_pods())]

    async def stop(self) -> None:
        for task in [*self._loops, *self._tasks.values()]:
            task.cancel()
        for task in [*self._loops, *self._tasks.values()]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._loops, self._tasks = [], {}

    def summary(self) -> dict[str, Any]:
        pods = list(self._pods.values())
        return {"nodes_down": sorted(self.down), "pods_bound": len(pods)}


def _qos(pod: dict[str, Any]) -> str:
    """The pod's QoS class as the API server computes it (already set on create; kept)."""
    return str((pod.get("status") or {}).get("qosClass") or "BestEffort")
