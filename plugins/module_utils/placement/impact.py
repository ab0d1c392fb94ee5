# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a change on some clusters can move an application's plan (issue 38: one cluster's
change re-judges only the applications placed on or eligible for it).

Every scorer chooses among the clusters that meet a service's constraints (the filters), by
node scores normalised over the whole fleet (:class:`fleet.Scale`), with the application's own
replicas given back first. A change confined to clusters the application does not run on, that
meet none of its services' constraints before or after it, and whose nodes hold none of the
scale's extremes before and stay within them after, leaves every input of its plan as it was:
the same plan, the same objectives, the same verdict.
"""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import Problem
from ansible_collections.qonnect.core.plugins.module_utils.placement.filters import (
    CONSTRAINT_FILTERS,
    ServiceContext,
    run_filters,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import (
    Fleet,
    Scale,
    np,
    performance_raw,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.plan import clusters_of


def unaffected(
    app, exclude, current: dict, scale: Scale | None, before: Fleet, after: Fleet, changed: frozenset[str]
) -> bool:
    """Whether ``app`` (placed at ``current``, judged on ``before`` with ``scale``) would be
    planned exactly so on ``after``, which differs from ``before`` only on the ``changed``
    clusters. Conservative: False whenever that cannot be shown cheaply."""
    if scale is None or before.cluster_names != after.cluster_names:
        return False
    own = before.inventory.placements.get(app.name) or {}
    if own != (after.inventory.placements.get(app.name) or {}):
        return False
    placed = clusters_of(current) | clusters_of(own)
    if placed & changed:
        return False
    if usable(before, app, exclude, current, changed) or usable(after, app, exclude, current, changed):
        return False
    return scale_holds(scale, before, after, changed, placed)


def usable(fleet: Fleet, app, exclude, current: dict, clusters: frozenset[str]) -> bool:
    """Whether any of ``clusters`` meets every constraint of some service of ``app`` (the
    filters every scorer applies; capacity is left out, so this errs towards True)."""
    idx = [fleet.cluster_index[c] for c in clusters if c in fleet.cluster_index]
    if not idx:
        return False
    problem = Problem(app, fleet, exclude, current, 0.0, False)
    for svc in app.services:
        ctx = ServiceContext(fleet, svc, problem.exclude, problem.current_clusters(svc.name))
        ok, _culprit, _reasons = run_filters(ctx, CONSTRAINT_FILTERS, False)
        if ok[idx].any():
            return True
    return False


def scale_holds(scale: Scale, before: Fleet, after: Fleet, changed: frozenset[str], placed: set[str]) -> bool:
    """Whether ``scale`` (an application's, judged on ``before``) is still its scale on ``after``.

    Each extreme must be held before the change by a node outside the changed clusters and
    outside the application's own (whose capacity it is given back, so their values are the
    application's only there), and the changed clusters' nodes must stay within the scale after
    it. Then the extremes are the same nodes' with the same values."""
    if min(scale.tops) <= 0 or None in (scale.energy, scale.price, scale.performance):
        return False
    cpu, memory, bandwidth = scale.tops
    # per criterion: (the lowest value it is scaled from, or None: only its best counts; the best)
    bounds = {
        "cpu": (None, cpu),
        "memory": (None, memory),
        "bandwidth": (None, bandwidth),
        "energy": scale.energy,
        "price": scale.price,
        "performance": scale.performance,
    }
    rest = before.node_ok & ~_nodes_in(before, changed | placed)
    old = _criteria(before, before.node_ok & _nodes_in(before, changed), scale)
    new = _criteria(after, after.node_ok & _nodes_in(after, changed), scale)
    kept = _criteria(before, rest, scale)
    for name, (lo, hi) in bounds.items():  # type: ignore[misc]  # None spans returned above
        was, now, other = old[name], new[name], kept[name]
        if was.size and (not other.size or was.max() > other.max()):
            return False  # a changed node may have held the best value
        if was.size and lo is not None and was.min() < other.min():
            return False  # ... or the lowest
        if now.size and (now.max() > hi or (lo is not None and now.min() < lo)):
            return False  # a changed node is now beyond the scale
    return True


def _criteria(fleet: Fleet, mask, scale: Scale) -> dict:
    """The raw criteria of the nodes in ``mask``, as the scale reads them."""
    free = fleet.free0[mask]
    bandwidth = fleet.bandwidth[mask]
    return {
        "cpu": free[:, 0],
        "memory": free[:, 1],
        "bandwidth": bandwidth,
        "energy": fleet.energy[mask],
        "price": fleet.price[mask],
        "performance": performance_raw(free, bandwidth, scale.tops),
    }


def _nodes_in(fleet: Fleet, clusters) -> np.ndarray:
    """Mask of the nodes of the named clusters."""
    chosen = np.zeros(fleet.num_clusters, dtype=bool)
    for name in clusters:
        c = fleet.cluster_index.get(name)
        if c is not None:
            chosen[c] = True
    return chosen[fleet.node_cluster]
