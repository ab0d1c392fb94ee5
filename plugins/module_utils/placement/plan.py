"""The engine's output: where each service's replicas go, and why."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Plan:
    """A placement plan; ``assignment`` keeps node indices for scoring and checks."""

    application: str
    scorer: str
    objective: float
    services: dict
    explanation: dict = field(default_factory=dict)
    # {service: [{cluster, from, ms, bound, limit}]}: how close each chosen cluster is to each
    # maxLatency bound (with the explanation only); ``limit`` is the bound the cluster is held to
    bounds: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {
            "application": self.application,
            "scorer": self.scorer,
            "objective": round(self.objective, 6),
            "services": {
                s: [dict(e, nodes=list(e["nodes"])) for e in entries] for s, entries in self.services.items()
            },
            "explanation": self.explanation,
        }
        if self.bounds:
            out["bounds"] = self.bounds
        return out

    def clusters(self, service: str) -> list[str]:
        return [e["cluster"] for e in self.services.get(service, [])]


def entries_from_assignment(fleet, nodes: list[int]) -> list[dict]:
    """[{cluster, replicas, nodes}] per cluster (sorted by name); ``nodes`` has one name per
    replica, so a deployer can pin each replica and a checker can recount capacity."""
    by_cluster: dict[int, list[int]] = {}
    for v in nodes:
        by_cluster.setdefault(int(fleet.node_cluster[v]), []).append(int(v))
    return [
        {
            "cluster": fleet.cluster_names[c],
            "replicas": len(vs),
            "nodes": sorted(fleet.node_names[v] for v in vs),
        }
        for c, vs in sorted(by_cluster.items())
    ]


def clusters_of(placement: dict | None) -> set[str]:
    """The clusters a placement ({service: [{cluster, ...}]}) runs on."""
    return {
        e["cluster"]
        for entries in (placement or {}).values()
        if isinstance(entries, list)
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("cluster"), str)
    }
