"""Array view of an inventory: one row per node / cluster, so scoring is vectorised.

The engine places thousands of services over thousands of clusters; per-service work is a few
numpy operations over these arrays instead of Python loops over clusters.
"""

from __future__ import annotations

import json

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
        self.alloc = np.array([[n.allocatable[r] for r in RESOURCES] for n in nodes], dtype=float).reshape(
            -1, 3
        )
        # each node's free capacity as the model defines it (model.Node.free)
        free = (n.free() for n in nodes)
        self.free0 = np.array([[f[r] for r in RESOURCES] for f in free], dtype=float).reshape(-1, 3)
        self.free = self.free0.copy()
        self.bandwidth = np.array([n.bandwidth_gbps for n in nodes], dtype=float)
        self.energy = np.array([n.energy_kwh for n in nodes], dtype=float)
        self.price = np.array([n.price_eur_h for n in nodes], dtype=float)
        # Ready, schedulable, no pressure, recent: the node could run a pod ...
        self.node_usable = np.array([n.usable for n in nodes], dtype=bool)
        # ... and no NoSchedule/NoExecute taint keeps a pod without tolerations off it (a tainted
        # control-plane node is no room for the application). Services that tolerate a taint
        # get such nodes back through node_ok_for().
        self.node_taints = [n.taints for n in nodes]
        self.node_ok = np.array([n.runs_pods for n in nodes], dtype=bool)
        self.node_reason = [_node_reason(n) for n in nodes]
        ok_per_cluster = np.bincount(self.node_cluster, weights=self.node_ok, minlength=self.num_clusters)
        self.has_ok_node = ok_per_cluster > 0
        # first node of each cluster (nodes are grouped by cluster in cluster order)
        counts = np.bincount(self.node_cluster, minlength=self.num_clusters)
        self.node_start = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        self.node_count = counts
        self.latency, self.lmax = self._latency_matrix()
        self.latency_to = np.ascontiguousarray(self.latency.T)  # row j: latency from all to j
        self.cache: dict = {}

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
        """Cluster x cluster latency; unmeasured pairs count as the largest measured value."""
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
        measured = [v for row in table.values() if isinstance(row, dict) for v in row.values()]
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
        return np.bincount(self.node_cluster, weights=mask, minlength=self.num_clusters) > 0

    def static_criteria(self) -> dict:
        """Energy, cost and performance of each node, normalised to [0, 1] over eligible nodes.

        Fixed per inventory (not per candidate set) so every plan is judged on one scale and
        the MILP objective is linear. Lower energy/price is better; performance is the mean of
        free CPU, free memory and bandwidth relative to the fleet's best.
        """
        if "static" not in self.cache:
            ok = self.node_ok
            perf_raw = (
                _ratio(self.free0[:, 0], ok) + _ratio(self.free0[:, 1], ok) + _ratio(self.bandwidth, ok)
            ) / 3.0
            self.cache["static"] = {
                "energy": _minmax(self.energy, ok, lower_better=True),
                "cost": _minmax(self.price, ok, lower_better=True),
                "performance": _minmax(perf_raw, ok, lower_better=False),
            }
        return self.cache["static"]


def _ratio(values, ok):
    top = values[ok].max() if ok.any() else 0.0
    return values / top if top > 0 else np.zeros_like(values)


def _minmax(values, ok, lower_better: bool):
    if not ok.any():
        return np.zeros_like(values)
    lo, hi = values[ok].min(), values[ok].max()
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
