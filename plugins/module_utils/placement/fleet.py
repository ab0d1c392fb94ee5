"""Array view of an inventory: one row per node / cluster, so scoring is vectorised.

The engine places thousands of services over thousands of clusters; per-service work is a few
numpy operations over these arrays instead of Python loops over clusters.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from ansible_collections.qonnect.core.plugins.module_utils.k8s.taints import (
    blocks_service,
    manifest_tolerations,
    taint_text,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import (
    NODE_HEARTBEAT_TIMEOUT,
    RESOURCES,
    Inventory,
)

try:
    import numpy as np
except ImportError:  # pragma: no cover - exercised only without numpy
    np = None  # type: ignore[assignment]  # optional dependency

TIER_CODES = {"cloud": 0, "fog": 1, "edge": 2}


def require_numpy() -> None:
    if np is None:
        raise ImportError("the placement engine needs numpy: install it with 'pip install numpy'")


class Fleet:
    """Node and cluster arrays of one inventory plus per-inventory caches.

    ``free`` is the mutable capacity state (allocatable - requested - planned) the assignment
    consumes; ``free0`` is the state at the start, the basis of the static criteria.
    """

    def __init__(self, inventory: Inventory):
        require_numpy()
        self.inventory = inventory
        clusters = inventory.clusters
        self.cluster_names = [c.name for c in clusters]
        self.cluster_index = {n: i for i, n in enumerate(self.cluster_names)}
        self.num_clusters = len(clusters)
        self.tier = np.array([TIER_CODES.get(c.tier, -1) for c in clusters], dtype=np.int8)
        self.healthy = np.array([c.healthy for c in clusters], dtype=bool)
        self.locations = [c.location for c in clusters]
        nodes = [n for c in clusters for n in c.nodes]
        self.node_cluster = np.repeat(
            np.arange(len(clusters), dtype=np.int64), [len(c.nodes) for c in clusters]
        )
        self.node_cluster_list = self.node_cluster.tolist()  # fast scalar lookups
        self.node_names = [n.name for n in nodes]
        self.num_nodes = len(nodes)
        alloc = [n.allocatable for n in nodes]
        requested = [n.requested for n in nodes]
        self.alloc = np.array([[a[r] for r in RESOURCES] for a in alloc], dtype=float).reshape(-1, 3)
        # each node's free capacity as the model defines it (model.Node.free: allocatable minus
        # requested), subtracted as Python numbers, so the values are the model's to the bit
        self.free0 = np.array(
            [[a[r] - q[r] for r in RESOURCES] for a, q in zip(alloc, requested, strict=True)], dtype=float
        ).reshape(-1, 3)
        self.free = self.free0.copy()
        # the inventory's own capacity, which its clusters' facts describe (set_capacity moves
        # free0 away from it; facts() shows the difference)
        self.free_inventory = self.free0.copy()
        self.free_inventory.flags.writeable = False
        self.bandwidth = np.array([n.bandwidth_gbps for n in nodes], dtype=float)
        self.energy = np.array([n.energy_kwh for n in nodes], dtype=float)
        self.price = np.array([n.price_eur_h for n in nodes], dtype=float)
        # Ready, schedulable, no pressure, recent: the node could run a pod ...
        usable = [n.usable for n in nodes]
        self.node_usable = np.array(usable, dtype=bool)
        # ... and no NoSchedule/NoExecute taint keeps a pod without tolerations off it (a tainted
        # control-plane node is no room for the application). Services that tolerate a taint
        # get such nodes back through node_ok_for().
        self.node_taints = [n.taints for n in nodes]
        self.node_ok = np.array(
            [u and (not n.taints or n.runs_pods) for u, n in zip(usable, nodes, strict=True)], dtype=bool
        )
        self._nodes = nodes
        self._node_reason: list[str] | None = None
        ok_per_cluster = np.bincount(self.node_cluster, weights=self.node_ok, minlength=self.num_clusters)
        self.has_ok_node = ok_per_cluster > 0
        # first node of each cluster (nodes are grouped by cluster in cluster order)
        counts = np.bincount(self.node_cluster, minlength=self.num_clusters)
        self.node_start = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        self.node_count = counts
        self._latency: tuple | None = None
        self.cache: _Cache = _Cache()
        self._failed: tuple | None = None  # what fail_view() changed, to restore it
        self._local: dict[int, dict[str, int]] = {}
        self._starts: tuple | None = None

    @property
    def node_reason(self) -> list[str]:
        """Why each node is not eligible ("" when it is); only explanations read it."""
        if self._node_reason is None:
            self._node_reason = [_node_reason(n) for n in self._nodes]
        return self._node_reason

    def _latencies(self) -> tuple:
        """(matrix, largest value, transposed matrix), built on first use: a scorer that never
        reads latency (borda; a service without dependencies or maxLatency) skips the
        clusters x clusters matrix, a million cells at 1000 clusters."""
        if self._latency is None:
            mat, lmax = self._latency_matrix()
            self._latency = (mat, lmax, np.ascontiguousarray(mat.T))
        return self._latency

    @property
    def latency(self):
        """Cluster x cluster latency in ms (unmeasured pairs: the largest measured value)."""
        return self._latencies()[0]

    @property
    def lmax(self) -> float:
        return self._latencies()[1]

    @property
    def latency_to(self):
        """Row j: the latency from every cluster to cluster j."""
        return self._latencies()[2]

    def set_capacity(self, free) -> None:
        """Start the next application of a batch from ``free`` (the capacity earlier plans left).

        It becomes the basis of the static criteria and Borda's ranks as ``free0`` is for a
        single placement, so the next plan is the one :func:`place` would make on an inventory
        whose ``requested`` holds the earlier plans. Cached values that read capacity are dropped.
        """
        self.free0 = free.copy()
        self.free = free.copy()
        self.cache.drop_capacity()

    def fail_view(self, clusters) -> None:
        """See the fleet as the controller sees it once ``clusters`` (indices) have failed: the
        clusters unhealthy and their nodes unusable (their agent stopped reporting, so the
        nodes' heartbeats age past the timeout). What-if scenarios plan on this view; their
        failed nodes then no longer count in the static criteria's scales, as in a real heal.
        :meth:`restore_view` undoes it. Capacity-derived caches are dropped, as are those that
        read node eligibility."""
        self.restore_view()
        idx = np.asarray(sorted({int(c) for c in clusters}), dtype=np.int64)
        if not idx.size:
            return
        self._failed = (self.healthy, self.node_usable, self.node_ok, self.has_ok_node)
        gone = np.zeros(self.num_clusters, dtype=bool)
        gone[idx] = True
        gone_nodes = gone[self.node_cluster]
        self.healthy = self.healthy & ~gone
        self.node_usable = self.node_usable & ~gone_nodes
        self.node_ok = self.node_ok & ~gone_nodes
        self.has_ok_node = self.has_ok_node & ~gone
        self.cache.drop_eligibility()

    def restore_view(self) -> None:
        """The fleet as the inventory has it again, after :meth:`fail_view`."""
        if self._failed is None:
            return
        self.healthy, self.node_usable, self.node_ok, self.has_ok_node = self._failed
        self._failed = None
        self.cache.drop_eligibility()

    def facts(self) -> list[dict]:
        """Each cluster's facts (a spec filter's document) under the current ``free0``.

        Clusters whose capacity differs from the inventory's (a batch placed replicas there)
        show that capacity: ``requested`` = allocatable - free per node, ``free`` summed over the
        nodes that may run pods, as :meth:`model.Cluster.facts` counts it.
        """
        if "facts" not in self.cache:
            if "facts0" not in self.cache:
                self.cache["facts0"] = [c.facts() for c in self.inventory.clusters]
            facts = list(self.cache["facts0"])
            # against the inventory's capacity, which facts0 describes (not the capacity when
            # facts were first asked for: a batch may ask first for its second application)
            changed = np.any(self.free0 != self.free_inventory, axis=1)
            for c in np.unique(self.node_cluster[changed]):
                facts[c] = self._facts_now(int(c), facts[c])
            self.cache["facts"] = facts
        return self.cache["facts"]

    def _facts_now(self, c: int, facts: dict) -> dict:
        first, count = int(self.node_start[c]), int(self.node_count[c])
        out = dict(facts, nodes=[dict(n) for n in facts["nodes"]])
        free = {r: 0.0 for r in RESOURCES}
        for k, v in enumerate(range(first, first + count)):
            now = {r: float(self.free0[v, j]) for j, r in enumerate(RESOURCES)}
            out["nodes"][k]["requested"] = {
                r: float(self.alloc[v, j]) - now[r] for j, r in enumerate(RESOURCES)
            }
            if self.node_ok[v]:
                free = {r: free[r] + now[r] for r in RESOURCES}
        out["free"] = free
        return out

    def local_nodes(self, c: int) -> dict[str, int]:
        """Node name -> node index within cluster ``c`` (built once per cluster)."""
        local = self._local.get(c)
        if local is None:
            first, count = int(self.node_start[c]), int(self.node_count[c])
            local = self._local[c] = {self.node_names[i]: i for i in range(first, first + count)}
        return local

    def node_ok_for(self, service):
        """Eligible nodes for one service: usable, and every blocking taint tolerated by its pods."""
        tolerations = manifest_tolerations(getattr(service, "manifests", None) or [])
        if tolerations == [[]] or not any(self.node_taints):
            return self.node_ok
        key = ("tolerated", json.dumps(tolerations, sort_keys=True))
        if key not in self.cache:
            self.cache[key] = self.node_usable & np.array(
                [not blocks_service(list(t), tolerations) for t in self.node_taints], dtype=bool
            )
        return self.cache[key]

    def _latency_matrix(self):
        """Cluster x cluster latency; unmeasured pairs count as the largest measured value.

        A table whose every cluster's row lists every cluster's location in cluster order, none
        NaN (as the KB and the testbed write it), is read in one C-level pass; its largest
        value is the matrix's or that of a row of a location no cluster has. Any other table
        takes :meth:`_latency_matrix_general`; both give the same matrix to the bit."""
        table = self.inventory.latency_ms
        n = self.num_clusters
        empty: dict = {}
        rows = [table.get(a) or empty for a in self.locations]
        if n and all(len(row) == n and list(row) == self.locations for row in rows):
            values = itertools.chain.from_iterable(row.values() for row in rows)
            mat = np.fromiter(values, dtype=float, count=n * n).reshape(n, n)
            if not np.isnan(mat).any():
                used = set(self.locations)
                measured = [
                    max(row.values())
                    for loc, row in table.items()
                    if loc not in used and isinstance(row, dict) and row
                ]
                return mat, float(max([mat.max(), *measured]))
        return self._latency_matrix_general()

    def _latency_matrix_general(self):
        """:meth:`_latency_matrix` of any table: rows completed from the reverse direction, the
        same location 0 ms, the rest the largest measured value."""
        table = self.inventory.latency_ms
        nan = float("nan")
        empty: dict = {}
        rows = [table.get(a) or empty for a in self.locations]
        mat = np.array(
            [
                list(row.values())
                if list(row) == self.locations  # complete, in order
                else [row.get(b, nan) for b in self.locations]
                for row in rows
            ],
            dtype=float,
        ).reshape(self.num_clusters, self.num_clusters)
        mat = np.where(np.isnan(mat), mat.T, mat)  # use b->a where a->b was not measured
        same = np.array(self.locations)[:, None] == np.array(self.locations)[None, :]
        mat[same & np.isnan(mat)] = 0.0
        known = mat[~np.isnan(mat)]
        # the largest measured value, rows of locations no cluster has included
        measured = [max(row.values()) for row in table.values() if isinstance(row, dict) and row]
        lmax = float(max([known.max() if known.size else 0.0, *measured]))
        mat[np.isnan(mat)] = lmax
        return mat, lmax

    def latency_from(self, location: str):
        """Latency from a named location to each cluster (NaN where never measured)."""
        key = ("from", location)
        if key not in self.cache:
            vec = np.full(self.num_clusters, np.nan)
            row = self.inventory.latency_ms.get(location) or {}
            for j, loc in enumerate(self.locations):
                if loc in row:
                    vec[j] = row[loc]
                elif location in (self.inventory.latency_ms.get(loc) or {}):
                    vec[j] = self.inventory.latency_ms[loc][location]
                elif loc == location:
                    vec[j] = 0.0
            self.cache[key] = vec
        return self.cache[key]

    def cluster_max(self, values, mask):
        """Per-cluster maximum of node ``values`` over nodes in ``mask`` (-inf where none)."""
        vals = np.where(mask, values, -np.inf)
        out = np.full(self.num_clusters, -np.inf)
        nonempty = self.node_count > 0
        if self.num_nodes:
            out[nonempty] = np.maximum.reduceat(vals, self.node_start[nonempty])
        return out

    def cluster_any(self, mask):
        """Per cluster: whether any of its nodes is in ``mask``."""
        mask = np.asarray(mask)
        if mask.dtype != bool or not self.num_nodes:
            return np.bincount(self.node_cluster, weights=mask, minlength=self.num_clusters) > 0
        nonempty = self._nonempty_starts()
        out = np.zeros(self.num_clusters, dtype=bool)
        out[nonempty[0]] = np.logical_or.reduceat(mask, nonempty[1])  # nodes grouped by cluster
        return out

    def _nonempty_starts(self):
        """(clusters with nodes, their first node), for reductions over each cluster's nodes."""
        if self._starts is None:
            nonempty = self.node_count > 0
            self._starts = (nonempty, self.node_start[nonempty])
        return self._starts

    def static_criteria(self) -> dict:
        """Energy, cost and performance of each node, normalised to [0, 1] over eligible nodes.

        Fixed per inventory (not per candidate set) so every plan is judged on one scale and
        the MILP objective is linear. Lower energy/price is better; performance is the mean of
        free CPU, free memory and bandwidth relative to the fleet's best. The constants of
        that scale are kept (:meth:`scale`).
        """
        if "static" not in self.cache:
            ok = self.node_ok
            if "static_fixed" not in self.cache:  # the parts capacity does not change
                self.cache["static_fixed"] = (
                    _span(self.energy, ok),
                    _span(self.price, ok),
                    _top(self.bandwidth, ok),
                )
            energy, price, bandwidth = self.cache["static_fixed"]
            tops = (_top(self.free0[:, 0], ok), _top(self.free0[:, 1], ok), bandwidth)
            perf_raw = performance_raw(self.free0, self.bandwidth, tops)
            scale = Scale(energy, price, tops, _span(perf_raw, ok))
            self.cache["scale"] = scale
            self.cache["static"] = {
                "energy": _scaled(self.energy, energy, lower_better=True),
                "cost": _scaled(self.price, price, lower_better=True),
                "performance": _scaled(perf_raw, scale.performance, lower_better=False),
            }
        return self.cache["static"]

    def scale(self) -> Scale:
        """The constants the static criteria are normalised by now (under ``free0``)."""
        self.static_criteria()
        return self.cache["scale"]


@dataclass(frozen=True)
class Scale:
    """What :meth:`Fleet.static_criteria` normalised every node's criteria by: the (lowest,
    highest) energy, price and raw performance of the eligible nodes (None: no eligible node)
    and the best free CPU, free memory and bandwidth (0.0: none). A node's scores depend on
    the rest of the fleet only through these (placement/impact.py)."""

    energy: tuple[float, float] | None
    price: tuple[float, float] | None
    tops: tuple[float, float, float]
    performance: tuple[float, float] | None


def performance_raw(free, bandwidth, tops: tuple[float, float, float]):
    """Nodes' performance before normalisation: the mean of free CPU, free memory and
    bandwidth, each relative to its best in the fleet (``tops``; 0 where that is none)."""
    cpu, memory, bw = tops
    return (_relative(free[:, 0], cpu) + _relative(free[:, 1], memory) + _relative(bandwidth, bw)) / 3.0


# cache entries computed from capacity (Fleet.set_capacity drops them); the rest depend only
# on the inventory's static facts (labels, tiers, health, taints, latency)
CAPACITY_CACHE = frozenset(
    ("static", "scale", "static_total", "no_refs", "facts", "jmespath", "jmespath-errors")
)
# ... and entries that read node eligibility (Fleet.fail_view drops them with those)
ELIGIBILITY_CACHE = frozenset(("tolerated", "static_fixed"))


def _cache_tag(key) -> object:
    return key[0] if isinstance(key, tuple) else key


class _Cache(dict):
    """The fleet's cache, knowing which of its keys read capacity, so a batch or a what-if
    scenario drops those in time proportional to their number, not to every mask cached (a
    survivability report caches one exclusion mask per scenario)."""

    def __init__(self):
        super().__init__()
        self._tagged: dict = {}  # tag -> keys present with that tag (capacity/eligibility ones)

    def __setitem__(self, key, value) -> None:
        tag = _cache_tag(key)
        if tag in CAPACITY_CACHE or tag in ELIGIBILITY_CACHE:
            self._tagged.setdefault(tag, set()).add(key)
        super().__setitem__(key, value)

    def _drop(self, tags) -> None:
        for tag in tags:
            for key in self._tagged.pop(tag, ()):
                self.pop(key, None)

    def drop_capacity(self) -> None:
        self._drop(CAPACITY_CACHE)

    def drop_eligibility(self) -> None:
        self._drop(CAPACITY_CACHE | ELIGIBILITY_CACHE)


def _top(values, ok) -> float:
    return float(values[ok].max()) if ok.any() else 0.0


def _relative(values, top: float):
    return values / top if top > 0 else np.zeros_like(values)


def _span(values, ok) -> tuple[float, float] | None:
    return (float(values[ok].min()), float(values[ok].max())) if ok.any() else None


def _scaled(values, span: tuple[float, float] | None, lower_better: bool):
    if span is None:
        return np.zeros_like(values)
    lo, hi = span
    if hi - lo <= 1e-12:
        return np.ones_like(values)
    scaled = (values - lo) / (hi - lo)
    return np.clip(1.0 - scaled if lower_better else scaled, 0.0, 1.0)


def _node_reason(node) -> str:
    if not node.ready:
        return "not Ready"
    if not node.schedulable:
        return "unschedulable (cordoned)"
    pressed = [p for p, on in node.pressure.items() if on]
    if pressed:
        return "under " + "/".join(pressed) + " pressure"
    if node.heartbeat_age is not None and node.heartbeat_age > NODE_HEARTBEAT_TIMEOUT:
        return f"last reported {node.heartbeat_age:.0f} s ago (> {NODE_HEARTBEAT_TIMEOUT:.0f} s)"
    blocking = blocks_service(list(node.taints), [[]])
    if blocking:
        return "tainted " + ", ".join(taint_text(t) for t in blocking)
    return ""


def request_vector(service):
    """A service's per-replica requests in the fleet's resource order."""
    req = service.requests
    return np.array([req.get(r, 0) for r in RESOURCES], dtype=float)
