"""The kubelets of one cluster: start bound pods after their delay, with the faults images ask for.

No container runs. A bound pod gets its start delay (per image, from the profile's
``start_delays`` with jitter, else ``--start-delay``); if that is long or the image asks for a
fault, the pod first shows ContainerCreating, as a kubelet pulling images does. Faults come
from the image reference (qonnect_testbed/faults.py): pull failures (ErrImagePull, then
ImagePullBackOff, retried with the kubelet's back-off), a transient pull failure that clears,
a crash loop (CrashLoopBackOff with growing back-off), a slow pull. Pods of a node that is not
Ready are evicted (deleted), as taint-based eviction does, after their tolerationSeconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import time
from dataclasses import dataclass
from typing import Any, Iterable

from qonnect_testbed.faults import (
    COMPLETE_AFTER_SECONDS,
    CRASH_RUN_SECONDS,
    Fault,
    StartDelays,
    backoff,
    fault_of,
    runs_to_completion,
)
from qonnect_testbed.sim.base import Cache, Controller
from qonnect_testbed.sim.events import record
from qonnect_testbed.sim.nodes import condition_taint_key
from qonnect_testbed.sim.objects import is_true, now
from qonnect_testbed.store import Store

CREATING_SHOWN_AFTER = 1.0  # starts up to this long go straight to Running (one status write per pod)
PULL_ERROR_SECONDS = 1.0  # ErrImagePull is shown this long before ImagePullBackOff


@dataclass
class _Run:
    """What the kubelet is doing with one pod."""

    uid: str
    bound_at: float
    delay: float
    fault: Fault | None
    faulty: int  # index of the container the fault is about
    state: str = "new"
    failures: int = 0
    restarts: int = 0
    last_terminated: dict | None = None


class Kubelets(Controller):
    """Starts pods on their nodes; plays their image faults."""

    def __init__(
        self, store: Store, cache: Cache, start_delay: float, start_delays: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__("kubelet")
        self.store = store
        self.cache = cache
        self.start_delay = start_delay
        self.delays = StartDelays(start_delays or [], start_delay)
        self._runs: dict[tuple[str, str], _Run] = {}
        self._next_ip: dict[str, int] = {}

    def pod_changed(self, key: tuple[str, str], pod: dict | None) -> None:
        if pod is None:
            self._runs.pop(key, None)
            return
        uid = pod["metadata"]["uid"]
        if not (pod.get("spec") or {}).get("nodeName"):
            return
        run = self._runs.get(key)
        if run is not None and run.uid == uid:
            return
        if run is None and (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
            return  # started before (e.g. by an earlier kubelet of this cluster)
        containers = [c for c in pod["spec"].get("containers") or [] if isinstance(c, dict)]
        faults = [(i, fault_of(c.get("image", ""))) for i, c in enumerate(containers)]
        faulty = next(((i, f) for i, f in faults if f is not None and f.kind != "slow"), (0, None))
        delay = self.delays.pod_delay(c.get("image", "") for c in containers)
        self._runs[key] = _Run(uid, time.monotonic(), delay, faulty[1], faulty[0])
        self.enqueue(key)

    def _later(self, key: tuple[str, str], seconds: float) -> None:
        asyncio.get_running_loop().call_later(max(0.0, seconds), self.enqueue, key)

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            run = self._runs.get(key)
            pod = self.cache.pods.get(key)
            if run is None or pod is None or pod["metadata"]["uid"] != run.uid:
                continue
            node = self.cache.nodes.get(pod["spec"].get("nodeName", ""))
            if node is None or not is_true(node, "Ready"):
                self._runs.pop(key, None)  # the node is gone or down: eviction will follow
                continue
            self.guarded(key, lambda p=pod, n=node, r=run, k=key: self._step(k, p, n, r))

    # ------------------------------------------------------------------ the state machine

    def _step(self, key: tuple[str, str], pod: dict, node: dict, run: _Run) -> None:
        clock = time.monotonic()
        if run.state == "new":
            if run.fault is None and run.delay <= CREATING_SHOWN_AFTER:
                run.state = "creating"
                self._later(key, run.bound_at + run.delay - clock)
                return
            self._write(pod, node, run, waiting=("ContainerCreating", ""))
            run.state = "creating"
            self._later(key, run.bound_at + run.delay - clock)
            return
        if clock < run.bound_at + run.delay - 0.01 and run.state == "creating":
            self._later(key, run.bound_at + run.delay - clock)
            return
        kind = run.fault.kind if run.fault else None
        image = pod["spec"]["containers"][run.faulty].get("image", "")
        name = pod["spec"]["containers"][run.faulty].get("name", "")
        if run.state in ("creating", "pull-backoff"):
            if kind == "pull-fail" or (kind == "pull-flaky" and clock < run.bound_at + run.fault.seconds):
                run.failures += 1
                run.state = "pull-error"
                message = f'Failed to pull image "{image}": failed to resolve reference "{image}": not found'
                self._write(pod, node, run, waiting=("ErrImagePull", message))
                record(
                    self.store,
                    pod,
                    "Failed",
                    message,
                    component="kubelet",
                    kind_type="Warning",
                    host=node["metadata"]["name"],
                )
                record(
                    self.store,
                    pod,
                    "Failed",
                    "Error: ErrImagePull",
                    component="kubelet",
                    kind_type="Warning",
                    host=node["metadata"]["name"],
                )
                self._later(key, PULL_ERROR_SECONDS)
                return
            if kind == "crash":
                run.state = "crash-running"
                self._write(pod, node, run, running=True)
                self._later(key, CRASH_RUN_SECONDS)
                return
            self._write(pod, node, run, running=True)
            if runs_to_completion(pod):
                run.state = "completing"
                self._later(key, COMPLETE_AFTER_SECONDS)
                return
            self._runs.pop(key, None)
            return
        if run.state == "completing":
            self._runs.pop(key, None)
            self._complete(pod)
            return
        if run.state == "pull-error":
            run.state = "pull-backoff"
            message = f'Back-off pulling image "{image}"'
            self._write(pod, node, run, waiting=("ImagePullBackOff", message))
            record(self.store, pod, "BackOff", message, component="kubelet", host=node["metadata"]["name"])
            record(
                self.store,
                pod,
                "Failed",
                "Error: ImagePullBackOff",
                component="kubelet",
                kind_type="Warning",
                host=node["metadata"]["name"],
            )
            self._later(key, backoff(run.failures) - PULL_ERROR_SECONDS)
            return
        if run.state == "crash-running":
            stamp = now()
            run.last_terminated = {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": stamp,
                    "finishedAt": stamp,
                    "containerID": _container_id(pod, name),
                }
            }
            if run.restarts == 0:  # the first exit is restarted at once
                run.restarts = 1
                self._write(pod, node, run, running=True)
                self._later(key, CRASH_RUN_SECONDS)
                return
            run.state = "crash-backoff"
            message = (
                f"back-off {int(backoff(run.restarts))}s restarting failed container={name} "
                f"pod={pod['metadata']['name']}_{pod['metadata']['namespace']}({pod['metadata']['uid']})"
            )
            self._write(pod, node, run, waiting=("CrashLoopBackOff", message))
            record(
                self.store,
                pod,
                "BackOff",
                "Back-off restarting failed container "
                f"{name} in pod {pod['metadata']['name']}_{pod['metadata']['namespace']}",
                component="kubelet",
                kind_type="Warning",
                host=node["metadata"]["name"],
            )
            self._later(key, backoff(run.restarts))
            return
        if run.state == "crash-backoff":
            run.restarts += 1
            run.state = "crash-running"
            self._write(pod, node, run, running=True)
            self._later(key, CRASH_RUN_SECONDS)

    # ------------------------------------------------------------------ status

    def _pod_ip(self, node: dict) -> str:
        name = node["metadata"]["name"]
        cidr = ipaddress.IPv4Network((node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24")
        index = self._next_ip.get(name, 0)
        self._next_ip[name] = index + 1
        return str(cidr.network_address + 2 + index % (cidr.num_addresses - 3))

    def _write(
        self,
        pod: dict,
        node: dict,
        run: _Run,
        *,
        running: bool = False,
        waiting: tuple[str, str] | None = None,
    ) -> None:
        """Post the pod's status: every container running, or the faulty one waiting/crashing."""
        stamp = now()
        status = dict(pod.get("status") or {})
        if not status.get("podIP"):
            host_ip = next(
                (
                    a["address"]
                    for a in node["status"].get("addresses") or []
                    if a.get("type") == "InternalIP"
                ),
                "",
            )
            pod_ip = self._pod_ip(node)
            status.update(
                hostIP=host_ip,
                hostIPs=[{"ip": host_ip}],
                podIP=pod_ip,
                podIPs=[{"ip": pod_ip}],
                startTime=status.get("startTime") or stamp,
            )
        previous = {c.get("name"): c for c in status.get("containerStatuses") or []}
        containers = []
        for i, container in enumerate(pod["spec"].get("containers") or []):
            name, image = container.get("name"), container.get("image", "")
            faulty = i == run.faulty and run.fault is not None
            base = {
                "name": name,
                "image": image,
                "imageID": "",
                "containerID": "",
                "restartCount": run.restarts if faulty else 0,
                "started": False,
                "ready": False,
                "lastState": {},
            }
            if faulty and run.last_terminated:
                base["lastState"] = run.last_terminated
            if running or (not faulty and waiting and run.state not in ("creating", "new")):
                old = previous.get(name) or {}
                started = (old.get("state") or {}).get("running", {}).get("startedAt") if not faulty else None
                base.update(
                    imageID=f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}",
                    containerID=_container_id(pod, name),
                    started=True,
                    ready=True,
                    state={"running": {"startedAt": started or stamp}},
                )
            else:
                reason, message = waiting or ("ContainerCreating", "")
                if not faulty:
                    reason, message = "ContainerCreating", ""
                base["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
            containers.append(base)
        ready = all(c["ready"] for c in containers)
        started = all(c["started"] or c["lastState"] for c in containers)
        unready = [c["name"] for c in containers if not c["ready"]]
        old_conds = {c.get("type"): c for c in status.get("conditions") or []}

        def cond(kind: str, value: bool, reason: str = "", message: str = "") -> dict:
            text = "True" if value else "False"
            before = old_conds.get(kind) or {}
            out = {
                "type": kind,
                "status": text,
                "lastProbeTime": None,
                "lastTransitionTime": before.get("lastTransitionTime")
                if before.get("status") == text
                else stamp,
            }
            if not value and reason:
                out.update(reason=reason, message=message)
            return out

        why = f"containers with unready status: [{' '.join(unready)}]"
        conditions = [
            cond("PodReadyToStartContainers", True),
            cond("Initialized", True),
            cond("Ready", ready, "ContainersNotReady", why),
            cond("ContainersReady", ready, "ContainersNotReady", why),
        ]
        conditions += [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
        status.update(
            phase="Running" if started else "Pending", containerStatuses=containers, conditions=conditions
        )
        self.store.update(
            "pods", pod["metadata"]["namespace"], dict(pod, status=status), subresource="status"
        )

    def _complete(self, pod: dict) -> None:
        """Every container exited 0: the pod Succeeded (a Job's pod, run to completion)."""
        stamp = now()
        status = dict(pod.get("status") or {})
        containers = []
        for c in status.get("containerStatuses") or []:
            started = ((c.get("state") or {}).get("running") or {}).get("startedAt") or stamp
            terminated = {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": stamp}
            if c.get("containerID"):
                terminated["containerID"] = c["containerID"]
            containers.append(dict(c, ready=False, started=False, state={"terminated": terminated}))
        conditions = []
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Ready", "ContainersReady", "PodReadyToStartContainers"):
                cond = dict(cond, status="False", lastTransitionTime=stamp)
                if cond["type"] != "PodReadyToStartContainers":
                    cond.update(reason="PodCompleted")
            conditions.append(cond)
        status.update(phase="Succeeded", containerStatuses=containers, conditions=conditions)
        self.store.update(
            "pods", pod["metadata"]["namespace"], dict(pod, status=status), subresource="status"
        )

    # ------------------------------------------------------------------ eviction

    def evict(self, node_name: str) -> int:
        """Delete every pod bound to a node that is not Ready, after the pod's tolerationSeconds
        of the node's NoExecute taints (none: at once; no limit: never). Returns how many are due now."""
        count = 0
        node = self.cache.nodes.get(node_name) or {}
        key = condition_taint_key(node)
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"]
        if key and not any(t.get("key") == key for t in taints):  # the lifecycle taint is on its way
            taints.append({"key": key, "effect": "NoExecute"})
        for key in sorted(self.cache.pods_by_node.get(node_name, ())):
            pod = self.cache.pods.get(key)
            if pod is None:
                continue
            seconds = _toleration_seconds(pod, taints)
            if seconds is None:
                continue
            uid = pod["metadata"]["uid"]
            if seconds <= 0:
                self._evict(key, uid, node_name)
                count += 1
            else:
                asyncio.get_running_loop().call_later(seconds, self._evict, key, uid, node_name)
        return count

    def _evict(self, key: tuple[str, str], uid: str, node_name: str) -> None:
        pod = self.cache.pods.get(key)
        node = self.cache.nodes.get(node_name)
        if pod is None or pod["metadata"]["uid"] != uid or (node is not None and is_true(node, "Ready")):
            return
        record(
            self.store,
            pod,
            "TaintManagerEviction",
            f"Marking for deletion Pod {key[0]}/{key[1]}",
            component="taint-eviction-controller",
        )
        self.guarded(key, lambda k=key: self.store.delete("pods", k[0], k[1]))


def _container_id(pod: dict, name: str) -> str:
    return "emulated://" + hashlib.sha256(f"{pod['metadata']['uid']}/{name}".encode()).hexdigest()


def _toleration_seconds(pod: dict, taints: list[dict]) -> float | None:
    """Seconds until the taint manager evicts pod from a node with these NoExecute taints
    (0: now; None: never, every taint is tolerated without a limit)."""
    if not taints:
        return 0.0
    tolerations = [t for t in (pod.get("spec") or {}).get("tolerations") or [] if isinstance(t, dict)]
    limits: list[float] = []
    for taint in taints:
        matching = [
            t
            for t in tolerations
            if t.get("effect") in (None, "", "NoExecute")
            and (
                (t.get("operator") == "Exists" and t.get("key") in (None, "", taint.get("key")))
                or (t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""))
            )
        ]
        if not matching:
            return 0.0
        seconds = [t.get("tolerationSeconds") for t in matching]
        if all(s is not None for s in seconds):
            limits.append(float(min(seconds)))
    return min(limits) if limits else None
