"""The inventory the engine places into: clusters, their nodes, latencies, current placements.

Built from the KB's inventory dict (docs/architecture.md, "Inventory"); every field is checked
so a malformed inventory gives one error listing each bad path instead of a traceback later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils import kube_versions
from ansible_collections.qonnect.core.plugins.module_utils.k8s.taints import EFFECTS, blocking_taints
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError

RESOURCES = ("cpu", "memory", "ephemeral_storage")
PRESSURES = ("memory", "disk", "pid")
# QONNECT's node heartbeat timeout: older nodes are not eligible.
NODE_HEARTBEAT_TIMEOUT = 15.0
# exact types a latency value may have on the fast path (bool, a subclass of int, is not one)
_PLAIN_NUMBERS = frozenset((int, float))


@dataclass(frozen=True)
class Node:
    """One worker node with the facts the filters and scorers read."""

    name: str
    ready: bool
    schedulable: bool
    pressure: dict
    allocatable: dict
    requested: dict
    bandwidth_gbps: float
    energy_kwh: float
    price_eur_h: float
    heartbeat_age: float | None
    labels: dict
    # NoSchedule/NoExecute/PreferNoSchedule taints as {key, value, effect} (k8s/taints.py)
    taints: tuple = ()

    @property
    def usable(self) -> bool:
        """Ready, schedulable, without pressure and recently reported: it could run a pod."""
        return (
            self.ready
            and self.schedulable
            and not any(self.pressure.values())
            and (self.heartbeat_age is None or self.heartbeat_age <= NODE_HEARTBEAT_TIMEOUT)
        )

    @property
    def runs_pods(self) -> bool:
        """Usable, and no NoSchedule/NoExecute taint keeps a pod without tolerations off it (a
        tainted control-plane node is no room for an application)."""
        return self.usable and not blocking_taints(list(self.taints), [])

    def free(self) -> dict[str, float]:
        """Allocatable minus requested, per resource (negative when the node is overcommitted)."""
        return {r: self.allocatable[r] - self.requested[r] for r in RESOURCES}

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "ready": self.ready,
            "schedulable": self.schedulable,
            "pressure": dict(self.pressure),
            "allocatable": dict(self.allocatable),
            "requested": dict(self.requested),
            "bandwidth_gbps": self.bandwidth_gbps,
            "energy_kwh": self.energy_kwh,
            "price_eur_h": self.price_eur_h,
            "heartbeat_age": self.heartbeat_age,
            "labels": dict(self.labels),
            "taints": [dict(t) for t in self.taints],
        }


@dataclass(frozen=True)
class Cluster:
    """A member cluster; ``location`` keys the latency matrix (defaults to the name)."""

    name: str
    tier: str
    location: str
    labels: dict
    healthy: bool
    heartbeat_age: float | None
    nodes: tuple[Node, ...]
    # what its agent reported of the API server (None / empty: not reported, e.g. an inventory
    # file without them): gitVersion and served API group-versions (kube_versions.py)
    kube_version: str | None = None
    api_versions: tuple[str, ...] = ()

    def free(self) -> dict[str, float]:
        """The cluster's free capacity: the one definition every surface shows (KB inventory,
        web UI, ``qonnect status``, the inventory plugin) and the number the engine's minFree
        filter compares for a service without tolerations.

        Counted over the nodes that may run application pods (:attr:`Node.runs_pods`): a
        NotReady, cordoned, pressured, silent or NoSchedule-tainted node is no room.
        """
        workers = [n for n in self.nodes if n.runs_pods]
        return {r: sum(n.free()[r] for n in workers) for r in RESOURCES}

    def facts(self) -> dict:
        """The document a spec's JMESPath filter is evaluated against.

        ``allocatable`` and ``free`` count only nodes that may run application pods (:meth:`free`).
        """
        alloc = {r: sum(n.allocatable[r] for n in self.nodes if n.runs_pods) for r in RESOURCES}
        return {
            "name": self.name,
            "tier": self.tier,
            "location": self.location,
            "labels": dict(self.labels),
            "healthy": self.healthy,
            "heartbeat_age": self.heartbeat_age,
            "kube_version": self.kube_version,
            "node_count": len(self.nodes),
            "allocatable": alloc,
            "free": self.free(),
            "nodes": [n.to_dict() for n in self.nodes],
        }


def current_placement(record: dict | None) -> dict:
    """Where an application runs, from its KB placement record: ``current`` (what the last
    deploy or migration applied) if known, else ``desired`` (what was planned).

    The one answer for every reader (the KB's inventory, the controller's detector and
    reconciler, the deploy module's hysteresis, ``qonnect status``, the web UI), so the
    hysteresis a re-plan applies does not depend on who asks.
    """
    record = record or {}
    return record.get("current") or record.get("desired") or {}


# How an agent words an API that answers but refuses its credentials (the agent collector's
# ForbiddenError: "forbidden: ..." for 403, "unauthorized: ..." for 401), with reachable true.
CREDENTIALS_ERRORS = ("forbidden:", "unauthorized:")


def credentials_broken(cluster: Mapping[str, Any]) -> bool:
    """The cluster answers its agent but refuses the agent's credentials: not a cluster failure.

    Read from what its agent last said (``reachable``: a bool, the KB's 0/1, or None before any
    report; ``error``), so the KB's inventory flag and the controller's judgement are one rule.
    """
    error = cluster.get("error")
    return cluster.get("reachable") != 0 and bool(error) and str(error).startswith(CREDENTIALS_ERRORS)


def aged_cluster(
    entry: Mapping[str, Any], heartbeat_age: float | None, node_age: float | None, timeout: float
) -> dict[str, Any]:
    """An inventory cluster entry judged at one clock: ``heartbeat_age``, ``healthy`` (heard
    within the heartbeat timeout and not reported unreachable) and every node's ``heartbeat_age``.

    The one rule for the KB's inventory and the controller's cached view of it. A cluster whose
    API refuses its agent's credentials keeps its last-known nodes as fresh as its heartbeat.
    """
    reachable = entry.get("reachable")
    out = dict(entry)
    out["heartbeat_age"] = heartbeat_age
    out["healthy"] = heartbeat_age is not None and heartbeat_age <= timeout and reachable is not False
    if credentials_broken(entry):
        node_age = heartbeat_age
    out["nodes"] = [dict(n, heartbeat_age=node_age) for n in entry.get("nodes") or []]
    return out


def latency_matrix(rows: Any, locations: dict) -> dict:
    """The inventory's ``latency_ms`` from measured rows ``(cluster, peer, ms)``: keyed by
    location, and a round trip is one path seen from both of its ends, so a pair's value is the
    largest that any agent at either end measured (issue 25: one agent's token can make its own
    paths look slower than its peers measure them, never faster). A path measured from one end
    only keeps that end's value. The KB's inventory and the controller's cached view both use it."""
    out: dict = {}
    for cluster, peer, ms in rows:
        row = out.setdefault(locations.get(cluster, cluster), {})
        dst = locations.get(peer, peer)
        row[dst] = max(ms, row.get(dst, ms))
    for src, row in out.items():
        for dst, ms in row.items():
            back = out.get(dst, {}).get(src)
            if back is not None and back > ms:
                row[dst] = back
    return out


def free_capacity(cluster: Any) -> dict[str, float]:
    """:meth:`Cluster.free` of one cluster of an inventory dict (the KB's inventory format).

    Raises InventoryError naming each bad field of a malformed cluster.
    """
    reader = _Reader()
    name = cluster.get("name") if isinstance(cluster, dict) else None
    parsed = reader.cluster(cluster, f"clusters[{name!r}]")
    if reader.errors or parsed is None:
        raise InventoryError(reader.errors)
    return parsed.free()


def _plain(value: Any, default: float = 0) -> float | None:
    """``value`` (``default`` for null/absent) when it is a plain number >= 0, else None."""
    if value is None:
        return default
    return value if type(value) in _PLAIN_NUMBERS and value >= 0 else None


def _clean_resources(value: Any) -> dict | None:
    if not isinstance(value, dict):
        return None
    out = {r: _plain(value.get(r)) for r in RESOURCES}
    return None if None in out.values() else out


def _clean_node(raw: Any) -> Node | None:
    """The node a well-formed report describes, in one pass (10,000 nodes at 1000 clusters),
    or None when any field needs :meth:`_Reader.node`'s checks (which then name the bad path).
    Gives the very Node the checked path would: same defaults, same values."""
    if not isinstance(raw, dict):
        return None
    get = raw.get
    name, ready, schedulable = get("name"), get("ready", True), get("schedulable", True)
    pressure, labels, taints = get("pressure"), get("labels"), get("taints")
    if (
        not isinstance(name, str)
        or not name
        or not isinstance(ready, bool)
        or not isinstance(schedulable, bool)
    ):
        return None
    if taints or (pressure is not None and not isinstance(pressure, dict)):
        return None
    if labels is not None and not isinstance(labels, dict):
        return None
    allocatable, requested = _clean_resources(get("allocatable")), _clean_resources(get("requested"))
    bandwidth, energy, price = (_plain(get(k)) for k in ("bandwidth_gbps", "energy_kwh", "price_eur_h"))
    heartbeat = get("heartbeat_age")
    if allocatable is None or requested is None or bandwidth is None or energy is None or price is None:
        return None
    if heartbeat is not None and _plain(heartbeat) is None:
        return None
    pressure = pressure or {}
    return Node(
        name=name,
        ready=ready,
        schedulable=schedulable,
        pressure={p: bool(pressure.get(p, False)) for p in PRESSURES},
        allocatable=allocatable,
        requested=requested,
        bandwidth_gbps=float(bandwidth),
        energy_kwh=float(energy),
        price_eur_h=float(price),
        heartbeat_age=heartbeat,
        labels={str(k): str(v) for k, v in labels.items()} if labels else {},
        taints=(),
    )


@dataclass
class Inventory:
    """Clusters sorted by name (so every tie breaks the same way), latencies, placements."""

    clusters: list[Cluster]
    latency_ms: dict = field(default_factory=dict)
    placements: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> Inventory:
        return _Reader().inventory(data)


class _Reader:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def err(self, path: str, msg: str) -> None:
        self.errors.append(f"{path}: {msg}")

    def number(
        self, obj: dict, key: str, path: str, default: float | None = None, minimum: float = 0.0
    ) -> float:
        value: Any = obj.get(key)
        if value is None:  # the KB's contract: null is "not reported", as good as absent
            value = default
        if type(value) in _PLAIN_NUMBERS and value >= minimum:  # the common case, checked first
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            self.err(f"{path}.{key}", f"{value!r} is not a number >= {minimum:g}")
            return 0.0
        return value

    def flag(self, obj: dict, key: str, path: str, default: bool) -> bool:
        value = obj.get(key, default)
        if not isinstance(value, bool):
            self.err(f"{path}.{key}", f"{value!r} is not true or false")
            return default
        return value

    def mapping(self, value: Any, path: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.err(path, "expected a mapping")
            return {}
        return value

    def labels(self, value: Any, path: str) -> dict:
        return {str(k): str(v) for k, v in self.mapping(value, path).items()}

    def taints(self, value: Any, path: str) -> tuple:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.err(path, "expected a list of taints")
            return ()
        out = []
        for i, taint in enumerate(value):
            if not isinstance(taint, dict) or not isinstance(taint.get("key"), str) or not taint["key"]:
                self.err(f"{path}[{i}]", "expected a taint with a non-empty key")
                continue
            if taint.get("effect") not in EFFECTS:
                self.err(f"{path}[{i}].effect", f"{taint.get('effect')!r} is not one of {', '.join(EFFECTS)}")
                continue
            out.append(
                {"key": taint["key"], "value": str(taint.get("value") or ""), "effect": taint["effect"]}
            )
        return tuple(out)

    def resources(self, value: Any, path: str) -> dict:
        if isinstance(value, dict):  # fast path: every resource a plain number >= 0
            fast: dict[str, Any] = {r: value.get(r) for r in RESOURCES}
            if set(map(type, fast.values())) <= _PLAIN_NUMBERS and min(fast.values()) >= 0:
                return fast
        value = self.mapping(value, path)
        out = {}
        for r in RESOURCES:
            out[r] = self.number(value, r, path, default=0)
        return out

    def node(self, raw: Any, path: str) -> Node | None:
        fast = _clean_node(raw)
        if fast is not None:
            return fast
        if not isinstance(raw, dict):
            self.err(path, "expected a mapping (a node)")
            return None
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            self.err(f"{path}.name", "is required (a non-empty string)")
        pressure = self.mapping(raw.get("pressure"), f"{path}.pressure")
        hb = raw.get("heartbeat_age")
        if hb is not None:
            hb = self.number(raw, "heartbeat_age", path)
        return Node(
            name=str(name),
            ready=self.flag(raw, "ready", path, True),
            schedulable=self.flag(raw, "schedulable", path, True),
            pressure={p: bool(pressure.get(p, False)) for p in PRESSURES},
            allocatable=self.resources(raw.get("allocatable"), f"{path}.allocatable"),
            requested=self.resources(raw.get("requested"), f"{path}.requested"),
            bandwidth_gbps=float(self.number(raw, "bandwidth_gbps", path, default=0)),
            energy_kwh=float(self.number(raw, "energy_kwh", path, default=0)),
            price_eur_h=float(self.number(raw, "price_eur_h", path, default=0)),
            heartbeat_age=hb,
            labels=self.labels(raw.get("labels"), f"{path}.labels"),
            taints=self.taints(raw.get("taints"), f"{path}.taints"),
        )

    def cluster(self, raw: Any, path: str) -> Cluster | None:
        if not isinstance(raw, dict):
            self.err(path, "expected a mapping (a cluster)")
            return None
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            self.err(f"{path}.name", "is required (a non-empty string)")
            name = ""
        tier = raw.get("tier")
        if tier not in ("cloud", "fog", "edge"):
            self.err(f"{path}.tier", f"{tier!r} is not one of cloud, fog, edge")
        nodes_raw = raw.get("nodes") or []
        if not isinstance(nodes_raw, list):
            self.err(f"{path}.nodes", "expected a list of nodes")
            nodes_raw = []
        nodes = [self.node(n, f"{path}.nodes[{i}]") for i, n in enumerate(nodes_raw)]
        hb = raw.get("heartbeat_age")
        if hb is not None:
            hb = self.number(raw, "heartbeat_age", path)
        location = raw.get("location") or name
        kube_version = raw.get("kube_version")
        if kube_version is not None and kube_versions.kube_version(kube_version) is None:
            self.err(f"{path}.kube_version", f"{kube_version!r} is not a Kubernetes version (e.g. v1.34.4)")
            kube_version = None
        api_versions = raw.get("api_versions")
        if api_versions is not None and (
            not isinstance(api_versions, list) or not all(isinstance(v, str) for v in api_versions)
        ):
            self.err(f"{path}.api_versions", "expected a list of API group-versions (e.g. apps/v1)")
            api_versions = None
        return Cluster(
            name=name,
            tier=str(tier),
            location=str(location),
            labels=self.labels(raw.get("labels"), f"{path}.labels"),
            healthy=self.flag(raw, "healthy", path, True),
            heartbeat_age=hb,
            nodes=tuple(sorted((n for n in nodes if n is not None), key=lambda n: n.name)),
            kube_version=kube_version,
            api_versions=tuple(kube_versions.api_versions(api_versions)),
        )

    def latency_row(self, src: str, row: Any) -> None:
        """Check one row of the latency matrix.

        A fleet of 1000 clusters has a million entries: a row of plain ints and floats, none
        negative, is accepted in C-level passes; only a row that fails that is walked entry by
        entry, so each bad entry is still named.
        """
        if isinstance(row, dict) and row:
            values = row.values()
            if set(map(type, values)) <= _PLAIN_NUMBERS and min(values) >= 0:
                return
        row = self.mapping(row, f"latency_ms.{src}")
        for dst, value in row.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                self.err(f"latency_ms.{src}.{dst}", f"{value!r} is not a number >= 0")

    def inventory(self, data: Any) -> Inventory:
        if not isinstance(data, dict):
            raise InventoryError(["inventory: expected a mapping with 'clusters'"])
        raw = data.get("clusters")
        if not isinstance(raw, list):
            self.err("clusters", "expected a list of clusters")
            raw = []
        clusters = [self.cluster(c, f"clusters[{i}]") for i, c in enumerate(raw)]
        seen: set[str] = set()
        for i, c in enumerate(clusters):
            if c is not None and c.name in seen:
                self.err(f"clusters[{i}].name", f"{c.name!r} appears twice")
            if c is not None:
                seen.add(c.name)
        latency = self.mapping(data.get("latency_ms"), "latency_ms")
        for src, row in latency.items():
            self.latency_row(src, row)
        placements = self.mapping(data.get("placements"), "placements")
        if self.errors:
            raise InventoryError(self.errors)
        return Inventory(
            clusters=sorted((c for c in clusters if c is not None), key=lambda c: c.name),
            latency_ms=latency,
            placements=placements,
        )
