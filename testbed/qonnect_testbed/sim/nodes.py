"""Nodes: created from the fleet profile, kept alive by heartbeats, taken down and up on demand.

A node that is up renews its Lease in kube-node-lease and the lastHeartbeatTime of its
conditions, as a kubelet does. ``down`` does what the node lifecycle controller does when a
kubelet stops posting: all conditions Unknown (so Ready is not True), unreachable taints.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random

from ansible_collections.qonnect.core.plugins.module_utils import keys

from qonnect_testbed.fleet import ClusterSpec, NodeSpec, label_number
from qonnect_testbed.sim.events import record
from qonnect_testbed.sim.objects import format_cpu, now, now_micro, set_condition
from qonnect_testbed.store import ApiError, Store

log = logging.getLogger(__name__)
KUBELET_VERSION = "v1.30.0"
LEASE_SECONDS = 40
PRESSURE = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)
NOT_READY_KEY = "node.kubernetes.io/not-ready"
UNREACHABLE_KEY = "node.kubernetes.io/unreachable"
UNREACHABLE = [
    {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
]


def condition_taint_key(node: dict) -> str | None:
    """The taint the node lifecycle controller keeps on a node for its Ready condition:
    not-ready for False, unreachable for Unknown (or no condition), none for True."""
    ready = next(
        (
            c.get("status")
            for c in (node.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready"
        ),
        "Unknown",
    )
    return None if ready == "True" else NOT_READY_KEY if ready == "False" else UNREACHABLE_KEY


def lifecycle_taints(node: dict) -> list[dict] | None:
    """The node's taints with the Ready-condition taints brought in line, or None if they are."""
    want = condition_taint_key(node)
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
    ours = {
        (t.get("key"), t.get("effect")) for t in taints if t.get("key") in (NOT_READY_KEY, UNREACHABLE_KEY)
    }
    if ours == ({(want, "NoSchedule"), (want, "NoExecute")} if want else set()):
        return None
    kept = [t for t in taints if t.get("key") not in (NOT_READY_KEY, UNREACHABLE_KEY)]
    if want:
        stamp = now()
        kept += [
            {"key": want, "effect": "NoSchedule", "timeAdded": stamp},
            {"key": want, "effect": "NoExecute", "timeAdded": stamp},
        ]
    return kept


def node_labels(cluster: ClusterSpec, node: NodeSpec) -> dict[str, str]:
    """Well-known labels plus the qonnect.io labels the Resource Agent reads."""
    return {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": node.profile,
        "topology.kubernetes.io/zone": cluster.location,
        keys.TIER_LABEL: cluster.tier,
        keys.LOCATION_LABEL: cluster.location,
        keys.PROFILE_LABEL: node.profile,
        keys.ENERGY_LABEL: label_number(node.energy_kwh),
        keys.PRICE_LABEL: label_number(node.price_eur_h),
        keys.BANDWIDTH_LABEL: label_number(node.bandwidth_gbps),
        **node.labels,
    }


def _ready_conditions(stamp: str) -> list[dict]:
    conds: list[dict] = []
    for kind, reason, message in PRESSURE:
        conds = set_condition(conds, kind, "False", reason, message, stamp, heartbeat=True)
    return set_condition(
        conds, "Ready", "True", "KubeletReady", "kubelet is posting ready status", stamp, heartbeat=True
    )


def node_object(cluster: ClusterSpec, node: NodeSpec, index: int) -> dict:
    """The Node as a kubelet registers it."""
    resources = {
        "cpu": format_cpu(node.cpu),
        "memory": str(node.memory),
        "ephemeral-storage": str(node.ephemeral_storage),
        "pods": str(node.pods),
    }
    stamp = now()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": node_labels(cluster, node),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "podCIDR": f"10.244.{index % 256}.0/24",
            "podCIDRs": [f"10.244.{index % 256}.0/24"],
            **({"taints": [dict(t) for t in node.taints]} if node.taints else {}),
        },
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": _ready_conditions(stamp),
            "addresses": [
                {"type": "InternalIP", "address": str(ipaddress.IPv4Address("10.0.0.10") + index)},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "containerRuntimeVersion": "emulated://1.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "qonnect testbed (emulated node)",
                "kernelVersion": "emulated",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
            "phase": "Running",
        },
    }


class NodeController:
    """Registers the nodes of one cluster and keeps their heartbeats going while they are up."""

    def __init__(
        self, store: Store, cluster: ClusterSpec, heartbeat_seconds: float, grace_period: float = 0.0
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.heartbeat_seconds = heartbeat_seconds
        self.grace_period = grace_period  # kube-controller-manager --node-monitor-grace-period
        self.down: set[str] = set()

    def register(self) -> None:
        for index, spec in enumerate(self.cluster.nodes):
            node = self.store.create("nodes", None, node_object(self.cluster, spec, index))
            self.store.create(
                "leases",
                "kube-node-lease",
                {
                    "metadata": {
                        "name": spec.name,
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": spec.name,
                                "uid": node["metadata"]["uid"],
                            }
                        ],
                    },
                    "spec": {
                        "holderIdentity": spec.name,
                        "leaseDurationSeconds": LEASE_SECONDS,
                        "renewTime": now_micro(),
                    },
                },
            )

    async def heartbeat(self) -> None:
        """Renew leases and condition heartbeats; the first beat is spread over the interval."""
        await asyncio.sleep(random.uniform(0, self.heartbeat_seconds))
        while True:
            for spec in self.cluster.nodes:
                if spec.name not in self.down:
                    try:
                        self._beat(spec.name)
                    except ApiError as exc:  # e.g. someone deleted the node: leave it gone
                        log.debug("heartbeat of %s: %s", spec.name, exc.message)
            await asyncio.sleep(self.heartbeat_seconds)

    def _beat(self, name: str) -> None:
        lease = self.store.get("leases", "kube-node-lease", name)
        lease["spec"]["renewTime"] = now_micro()
        self.store.update("leases", "kube-node-lease", lease)
        node = self.store.get("nodes", None, name)
        stamp = now()
        for cond in node["status"].get("conditions") or []:
            cond["lastHeartbeatTime"] = stamp
        self.store.update("nodes", None, node, subresource="status")

    def node(self, name: str) -> dict:
        if name not in {n.name for n in self.cluster.nodes}:
            known = ", ".join(n.name for n in self.cluster.nodes)
            raise ApiError(
                404, "NotFound", f"cluster {self.cluster.name} has no node {name!r} (nodes: {known})"
            )
        return self.store.get("nodes", None, name)

    def set_down(self, name: str) -> None:
        """The kubelet stops posting; after the grace period the node lifecycle controller sets
        the conditions Unknown and the unreachable taints."""
        self.node(name)
        self.down.add(name)
        if self.grace_period > 0:
            asyncio.get_running_loop().call_later(self.grace_period, self._lost, name)
        else:
            self._lost(name)

    def _lost(self, name: str) -> None:
        if name not in self.down:
            return  # it came back within the grace period
        node = self.node(name)
        stamp = now()
        conds = node["status"].get("conditions") or []
        for kind in ("Ready", *(p[0] for p in PRESSURE)):
            conds = set_condition(
                conds, kind, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.", stamp
            )
        node["status"]["conditions"] = conds
        self.store.update("nodes", None, node, subresource="status")
        node = self.store.get("nodes", None, name)
        taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != UNREACHABLE[0]["key"]]
        node["spec"]["taints"] = taints + [dict(t, timeAdded=stamp) for t in UNREACHABLE]
        node = self.store.update("nodes", None, node)
        record(
            self.store,
            node,
            "NodeNotReady",
            f"Node {name} status is now: NodeNotReady",
            component="node-controller",
        )

    def set_up(self, name: str) -> None:
        """The kubelet posts again: Ready, no pressure, taints gone, heartbeats resume."""
        node = self.node(name)
        self.down.discard(name)
        node["status"]["conditions"] = _ready_conditions(now())
        self.store.update("nodes", None, node, subresource="status")
        node = self.store.get("nodes", None, name)
        taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != UNREACHABLE[0]["key"]]
        if taints:
            node["spec"]["taints"] = taints
        else:
            node["spec"].pop("taints", None)
        node = self.store.update("nodes", None, node)
        record(
            self.store,
            node,
            "NodeReady",
            f"Node {name} status is now: NodeReady",
            component="kubelet",
            host=name,
        )

    def sync_taints(self, name: str) -> None:
        """The node lifecycle controller: taints follow the Ready condition (not-ready for False,
        unreachable for Unknown), whoever set the condition."""
        try:
            node = self.store.get("nodes", None, name)
        except ApiError:
            return
        taints = lifecycle_taints(node)
        if taints is None:
            return
        node["spec"]["taints"] = taints
        if not taints:
            node["spec"].pop("taints")
        try:
            self.store.update("nodes", None, node)
        except ApiError as exc:  # changed under us: the change event brings us back
            log.debug("taints of %s: %s", name, exc.message)

    def set_labels(self, labels: dict[str, str | None], node_name: str | None = None) -> list[str]:
        """Change labels on one or all nodes (None removes a label); returns the nodes changed."""
        names = [node_name] if node_name else [n.name for n in self.cluster.nodes]
        for name in names:
            node = self.node(name)
            current = node["metadata"].setdefault("labels", {})
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            self.store.update("nodes", None, node)
        return names
