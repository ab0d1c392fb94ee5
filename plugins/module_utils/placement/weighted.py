"""The default scorer: greedy over services in dependency order, vectorised over nodes.

For each service: apply every hard constraint (capacity included), score each node with the
default objective (latency to already placed dependencies included), then put replicas one at
a time on the best node that still has room, the first ``spread`` of them on distinct clusters.
A second pass re-places services linked by dependencies, now judging their latency also
towards their callers' replicas.
Nodes of clusters the service runs on now get a (1 + hysteresis) bonus, so it moves only when
an alternative is better by more than that fraction.
"""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.placement.criteria import (
    normalised_weights,
    service_scores,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import PlacementError
from ansible_collections.qonnect.core.plugins.module_utils.placement.explain import weighted_rows
from ansible_collections.qonnect.core.plugins.module_utils.placement.filters import (
    ALL_FILTERS,
    ServiceContext,
    run_filters,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import np


def assign(problem) -> tuple[dict, dict]:
    fleet = problem.fleet
    weights = normalised_weights(problem.app.objective)
    placed: dict[str, list[int]] = {}
    explanation: dict[str, list[dict]] = {}
    for svc in problem.order:
        ctx = ServiceContext(fleet, svc, problem.exclude, problem.current_clusters(svc.name))
        ok, culprit, reasons = run_filters(ctx, ALL_FILTERS, problem.explain)
        if culprit:
            raise PlacementError(svc.name, culprit)
        if int(ok.sum()) < svc.spread:
            raise PlacementError(
                svc.name,
                f"spread {svc.spread}",
                f"only {int(ok.sum())} cluster(s) meet every other constraint",
            )
        lat, score = service_scores(fleet, weights, svc, placed)
        effective = _with_hysteresis(problem, svc, score)
        if problem.explain:
            explanation[svc.name] = weighted_rows(fleet, weights, lat, score, ok, reasons)
        placed[svc.name] = _replicas(ctx, svc, ok, effective)
    _refine(problem, weights, placed, explanation)
    return placed, explanation


def _refine(problem, weights, placed, explanation) -> None:
    """One more pass, in the same order, over services linked by dependencies: each is
    re-placed knowing where both the services it calls and its callers run (the first pass
    placed it before its callers) and with the capacity others freed when they moved. A
    service stays put when that is best or when the new placement does not fit."""
    if weights["latency"] <= 0:
        return
    fleet = problem.fleet
    callers: dict[str, list] = {}
    for svc in problem.order:
        for dep in svc.depends_on:
            callers.setdefault(dep, []).append(svc)
    for svc in problem.order:
        if svc.name not in callers and not svc.depends_on:
            continue
        ctx = ServiceContext(fleet, svc, problem.exclude, problem.current_clusters(svc.name))
        old = placed[svc.name]
        for v in old:
            fleet.free[v] += ctx.req
        ok, _culprit, reasons = run_filters(ctx, ALL_FILTERS, problem.explain)
        lat, score = service_scores(fleet, weights, svc, placed, callers.get(svc.name, ()))
        try:
            placed[svc.name] = _replicas(ctx, svc, ok, _with_hysteresis(problem, svc, score))
        except PlacementError:
            for v in old:
                fleet.free[v] -= ctx.req
            continue
        if problem.explain:
            explanation[svc.name] = weighted_rows(fleet, weights, lat, score, ok, reasons)


def _with_hysteresis(problem, svc, score):
    """Scores with the (1 + hysteresis) bonus on the clusters the service runs on now."""
    current = problem.current_clusters(svc.name)
    if not current.any():
        return score
    return score * np.where(current, 1.0 + problem.hysteresis, 1.0)[problem.fleet.node_cluster]


def _replicas(ctx, svc, ok, effective) -> list[int]:
    fleet = ctx.fleet
    allowed = ok[fleet.node_cluster]
    used = np.zeros(fleet.num_clusters, dtype=bool)
    fits = ctx.fits() & allowed
    nodes: list[int] = []
    for i in range(svc.replicas):
        room = fits & ~used[fleet.node_cluster] if i < svc.spread else fits
        v = int(np.argmax(np.where(room, effective, -np.inf)))
        if not room[v]:
            raise PlacementError(
                svc.name,
                f"capacity for {svc.replicas} replicas over {svc.spread} cluster(s)",
                f"room found for {i}",
            )
        fleet.free[v] -= ctx.req
        fits[v] = ctx.node_fits(v)
        used[fleet.node_cluster[v]] = True
        nodes.append(v)
    return nodes
