"""Explanation rows shared by the scorers: one per cluster, best first."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.placement.criteria import criteria_of
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import np


def sort_rows(rows: list[dict]) -> list[dict]:
    """Eligible clusters by total (best first, ties by name), then rejected ones by name."""
    eligible = sorted((r for r in rows if r["eligible"]), key=lambda r: (-r["total"], r["cluster"]))
    return eligible + sorted((r for r in rows if not r["eligible"]), key=lambda r: r["cluster"])


def row(cluster: str, eligible: bool, reason: str, criteria: dict, total) -> dict:
    return {
        "cluster": cluster,
        "eligible": bool(eligible),
        "reason": reason,
        "criteria": criteria,
        "total": None if total is None else round(float(total), 6),
    }


def weighted_rows(fleet, weights, lat, score, ok, reasons) -> list[dict]:
    """Rows for the default objective: each cluster judged by its best eligible node."""
    best = fleet.cluster_max(score, fleet.node_ok)
    rows = []
    for c, name in enumerate(fleet.cluster_names):
        if np.isfinite(best[c]):
            first, count = int(fleet.node_start[c]), int(fleet.node_count[c])
            local = np.where(fleet.node_ok[first : first + count], score[first : first + count], -np.inf)
            node = first + int(np.argmax(local))
            rows.append(row(name, ok[c], reasons.get(c, ""), criteria_of(fleet, weights, lat, node), best[c]))
        else:
            rows.append(row(name, False, reasons.get(c, ""), {}, None))
    return sort_rows(rows)
