"""The default objective: a weighted sum of normalised criteria, shared by every scorer.

A replica on node v of cluster c scores
``w_energy*E[v] + w_cost*C[v] + w_performance*P[v] + w_latency*L(c)``, where E, C, P come from
:meth:`Fleet.static_criteria` and L(c) = 1 - (mean latency from c to the service's references) /
(largest latency in the fleet). References are the replicas of each dependency and each
``maxLatency`` location. A plan's objective is the mean over services of the mean over replicas,
so it lies in [0, 1] and scorers compare on one scale.
"""

from __future__ import annotations

from collections import Counter

from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import np
from ansible_collections.qonnect.core.plugins.module_utils.qos import CRITERIA


def normalised_weights(objective: dict) -> dict:
    """Weights scaled to sum to 1; all zero means 'no preference' (equal weights)."""
    total = sum(max(0.0, float(objective.get(k, 0.0))) for k in CRITERIA)
    if total <= 0:
        return dict.fromkeys(CRITERIA, 1.0 / len(CRITERIA))
    return {k: max(0.0, float(objective.get(k, 0.0))) / total for k in CRITERIA}


def static_scores(fleet, weights: dict):
    """Per-node score without latency (fixed for one inventory and one set of weights)."""
    key = ("static_total", tuple(sorted(weights.items())))
    if key not in fleet.cache:
        crit = fleet.static_criteria()
        fleet.cache[key] = sum(weights[k] * crit[k] for k in ("energy", "cost", "performance"))
    return fleet.cache[key]


def latency_references(fleet, service, placed: dict, callers=()) -> list:
    """Latency vectors over clusters to each reference the service should stay close to.

    ``placed`` maps a service name to its replicas' node indices; dependencies not placed yet
    are skipped (the greedy order places dependencies first). ``callers`` (services depending
    on this one) are extra references when re-placing it.
    """
    refs = []
    for dep in [*service.depends_on, *(c.name for c in callers)]:
        nodes = placed.get(dep)
        if nodes:
            share = Counter(fleet.node_cluster_list[v] for v in nodes)
            cols = sorted(share)
            weights = np.array([share[c] for c in cols], dtype=float) / len(nodes)
            refs.append(weights @ fleet.latency_to[cols])
    for limit in service.max_latency:
        vec = fleet.latency_from(limit["from"])
        refs.append(np.where(np.isnan(vec), fleet.lmax, vec))
    return refs


def latency_scores(fleet, service, placed: dict, callers=()):
    """L(c) for every cluster: 1 near the references, 0 at the fleet's largest latency.

    The all-ones vector of a service without references is shared: callers must not modify
    the result in place.
    """
    refs = latency_references(fleet, service, placed, callers)
    if not refs or fleet.lmax <= 0:
        if "ones" not in fleet.cache:
            fleet.cache["ones"] = np.ones(fleet.num_clusters)
        return fleet.cache["ones"]
    return np.clip(1.0 - (sum(refs) / len(refs)) / fleet.lmax, 0.0, 1.0)


def service_scores(fleet, weights: dict, service, placed: dict, callers=()):
    """(L per cluster, score of one replica per node) for ``service``; read-only arrays."""
    lat = latency_scores(fleet, service, placed, callers)
    if lat is fleet.cache.get("ones"):
        key = ("no_refs", tuple(sorted(weights.items())))
        if key not in fleet.cache:
            fleet.cache[key] = static_scores(fleet, weights) + weights["latency"]
        return lat, fleet.cache[key]
    return lat, static_scores(fleet, weights) + weights["latency"] * lat[fleet.node_cluster]


def criteria_of(fleet, weights: dict, lat, node: int) -> dict:
    """The explanation's per-criterion view of one node."""
    crit = fleet.static_criteria()
    values = {k: float(crit[k][node]) for k in ("energy", "cost", "performance")}
    values["latency"] = float(lat[fleet.node_cluster[node]])
    return {k: {"score": round(values[k], 6), "weight": round(weights[k], 6)} for k in CRITERIA}


def evaluate(fleet, app, assignment: dict) -> float:
    """Objective of an assignment {service: [node index per replica]} (see module doc)."""
    weights = normalised_weights(app.objective)
    if not app.services:
        return 0.0
    total = 0.0
    for svc in app.services:
        nodes = assignment.get(svc.name) or []
        if not nodes:
            continue
        nodes = np.asarray(nodes)
        lat = latency_scores(fleet, svc, assignment)
        scores = static_scores(fleet, weights)[nodes] + weights["latency"] * lat[fleet.node_cluster[nodes]]
        total += float(scores.sum()) / len(nodes)
    return total / len(app.services)
