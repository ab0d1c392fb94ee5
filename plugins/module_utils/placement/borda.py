"""QONNECT's scorer, reimplemented faithfully as the baseline (see DESIGN.md).

Among eligible nodes (Ready, schedulable, no pressure, recent heartbeat) of the clusters that
meet the service's constraints, each attribute gives a Borda count (best = N, worst = 1, ties
share the better count): lower is better for energy and price; higher for free CPU, free
memory, bandwidth and free ephemeral storage, whose four counts sum to 'capacity'. A node
scores energy*w_energy + pricing*w_pricing + capacity*w_performance (all weights 1.0 when each
is below 0.1). Nodes at or above the mean are kept; clusters rank by the sum of their kept
nodes' scores, ties by the sum of all their nodes' scores, then by name. Like QONNECT it does
not check capacity (its violations are what the benchmark reports) and has no hysteresis.
QONNECT computes latency
but never uses it, so it is left out here. ``spread`` > 1 (not in QONNECT) takes the next
clusters in rank, then clusters without kept nodes (using all their eligible nodes).
"""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import PlacementError
from ansible_collections.qonnect.core.plugins.module_utils.placement.explain import row
from ansible_collections.qonnect.core.plugins.module_utils.placement.filters import (
    CONSTRAINT_FILTERS,
    ServiceContext,
    run_filters,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import np


def borda_weights(objective: dict) -> dict:
    weights = {
        "energy": objective.get("energy", 0.0),
        "pricing": objective.get("cost", 0.0),
        "capacity": objective.get("performance", 0.0),
    }
    if all(w < 0.1 for w in weights.values()):
        weights = dict.fromkeys(weights, 1.0)
    return weights


def borda_counts(values, lower_better: bool):
    """Borda count per value: N minus the number of strictly better values."""
    ordered = np.sort(values)
    n = len(values)
    if lower_better:
        better = np.searchsorted(ordered, values, side="left")
    else:
        better = n - np.searchsorted(ordered, values, side="right")
    return (n - better).astype(float)


def _rank(fleet, cand, weights: dict) -> dict:
    idx = np.nonzero(cand)[0]
    free = fleet.free0[idx]
    counts = {
        "energy": borda_counts(fleet.energy[idx], True),
        "pricing": borda_counts(fleet.price[idx], True),
        "capacity": (
            borda_counts(free[:, 0], False)
            + borda_counts(free[:, 1], False)
            + borda_counts(fleet.bandwidth[idx], False)
            + borda_counts(free[:, 2], False)
        ),
    }
    score = sum(weights[k] * counts[k] for k in counts)
    kept = score >= score.mean() - 1e-9
    clusters = fleet.node_cluster[idx]
    c = fleet.num_clusters
    kept_sum = np.bincount(clusters, weights=np.where(kept, score, 0.0), minlength=c)
    total = np.bincount(clusters, weights=score, minlength=c)
    has_kept = np.bincount(clusters, weights=kept, minlength=c) > 0
    has_cand = np.bincount(clusters, minlength=c) > 0
    order = [int(i) for i in np.lexsort((np.arange(c), -total, -kept_sum))]
    # clusters with kept nodes first (QONNECT picks the first); the rest serve spread > 1
    ranked = [i for i in order if has_kept[i]] + [i for i in order if has_cand[i] and not has_kept[i]]
    return {
        "idx": idx,
        "counts": counts,
        "score": score,
        "kept": kept,
        "kept_sum": kept_sum,
        "ranked": ranked,
        "mean": float(score.mean()),
        "has_kept": has_kept,
    }


def assign(problem) -> tuple[dict, dict]:
    fleet = problem.fleet
    weights = borda_weights(problem.app.objective)
    cache: dict[bytes, dict] = {}
    placed: dict[str, list[int]] = {}
    explanation: dict[str, list[dict]] = {}
    for svc in problem.order:
        ctx = ServiceContext(fleet, svc, problem.exclude, problem.current_clusters(svc.name))
        ok, culprit, reasons = run_filters(ctx, CONSTRAINT_FILTERS, problem.explain)
        if culprit:
            raise PlacementError(svc.name, culprit)
        cand = fleet.node_ok & ok[fleet.node_cluster]
        key = cand.tobytes()
        if key not in cache:
            cache[key] = _rank(fleet, cand, weights)
        ranking = cache[key]
        chosen = ranking["ranked"][: svc.spread]
        if len(chosen) < svc.spread:
            raise PlacementError(
                svc.name, f"spread {svc.spread}", f"only {len(chosen)} cluster(s) meet every constraint"
            )
        kept_nodes = {c: _cluster_nodes(fleet, ranking, c) for c in chosen}
        nodes = []
        for i in range(svc.replicas):
            c = chosen[i % len(chosen)]
            local = kept_nodes[c]
            nodes.append(local[(i // len(chosen)) % len(local)])
        placed[svc.name] = nodes
        if problem.explain:
            explanation[svc.name] = _explain(fleet, ranking, weights, ok, reasons)
    return placed, explanation


def _cluster_nodes(fleet, ranking, c: int) -> list[int]:
    """The cluster's kept nodes, or all its eligible ones when none was kept (spread > 1)."""
    idx = ranking["idx"]
    here = fleet.node_cluster[idx] == c
    kept = idx[here & ranking["kept"]]
    return [int(v) for v in (kept if len(kept) else idx[here])]


def _explain(fleet, ranking, weights, ok, reasons) -> list[dict]:
    """Rows in QONNECT's order: the sum of kept nodes' scores, ties by the total score of all
    the cluster's nodes (QONNECT's second key, given as ``total_all_nodes``), then name; the
    clusters the constraints rejected follow by name."""
    clusters = fleet.node_cluster[ranking["idx"]]
    kept = ranking["kept"]
    all_nodes = np.bincount(clusters, weights=ranking["score"], minlength=fleet.num_clusters)
    by_cluster = {}
    for c, name in enumerate(fleet.cluster_names):
        if not ok[c]:
            by_cluster[c] = row(name, False, reasons.get(c, ""), {}, None)
            continue
        sel = (clusters == c) & kept
        criteria = {
            k: {"score": float(ranking["counts"][k][sel].sum()), "weight": weights[k]}
            for k in ("energy", "pricing", "capacity")
        }
        if ranking["has_kept"][c]:
            entry = row(name, True, "", criteria, ranking["kept_sum"][c])
        else:
            entry = row(
                name, False, f"no node scored at or above the mean ({ranking['mean']:.2f})", criteria, 0.0
            )
        entry["total_all_nodes"] = round(float(all_nodes[c]), 6)
        by_cluster[c] = entry
    ranked = [by_cluster[c] for c in ranking["ranked"]]
    rest = sorted(
        (r for c, r in by_cluster.items() if c not in set(ranking["ranked"])), key=lambda r: r["cluster"]
    )
    return ranked + rest
