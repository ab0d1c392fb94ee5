"""Entry point of the placement engine: ``place(app, inventory, scorer=...) -> Plan``."""

from __future__ import annotations

import heapq

from ansible_collections.qonnect.core.plugins.module_utils.placement.criteria import evaluate
from ansible_collections.qonnect.core.plugins.module_utils.placement.filters import LATENCY_HOLD
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import (
    Fleet,
    np,
    request_vector,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import Inventory
from ansible_collections.qonnect.core.plugins.module_utils.placement.plan import (
    Plan,
    entries_from_assignment,
)
from ansible_collections.qonnect.core.plugins.module_utils.scorers import SCORERS


def _cluster_of(fleet: Fleet, entry: object) -> int | None:
    """Index of the cluster a placement entry names (None: no such cluster, or no entry)."""
    name = entry.get("cluster") if isinstance(entry, dict) else None
    return fleet.cluster_index.get(name) if isinstance(name, str) else None


class Problem:
    """One placement request as the scorers see it."""

    def __init__(self, app, fleet: Fleet, exclude, current: dict, hysteresis: float, explain: bool):
        self.app = app
        self.fleet = fleet
        self.exclude = frozenset(exclude or ())
        self.current = current
        self.hysteresis = hysteresis
        self.explain = explain
        self.order = dependency_order(app)
        self._current: dict[str, object] = {}

    def current_clusters(self, service: str):
        """Boolean mask of the clusters the service runs on now (for hysteresis); read-only,
        computed once per service (the scorers ask for it several times)."""
        if service not in self._current:
            mask = np.zeros(self.fleet.num_clusters, dtype=bool)
            entries = self.current.get(service)
            for entry in entries if isinstance(entries, list) else []:
                c = _cluster_of(self.fleet, entry)
                if c is not None:
                    mask[c] = True
            mask.flags.writeable = False
            self._current[service] = mask
        return self._current[service]


def dependency_order(app) -> list:
    """Services with their dependencies first (ties and cycles broken by name)."""
    by_name = {s.name: s for s in app.services}
    waiting = {s.name: {d for d in s.depends_on if d in by_name} for s in app.services}
    users: dict[str, list[str]] = {}
    for name, deps in waiting.items():
        for d in deps:
            users.setdefault(d, []).append(name)
    ready = [n for n, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(by_name):
        if not ready:  # a cycle: take the smallest remaining name
            heapq.heappush(ready, min(n for n in by_name if n not in done))
        name = heapq.heappop(ready)
        if name in done:
            continue
        done.add(name)
        order.append(name)
        for user in users.get(name, []):
            waiting[user].discard(name)
            if not waiting[user] and user not in done:
                heapq.heappush(ready, user)
    return [by_name[n] for n in order]


def release_current(fleet: Fleet, app, current: dict, free=None) -> bool:
    """Give back the capacity the current replicas hold, so keeping them is not double-counted.

    The inventory's ``requested`` already includes running replicas. Entries that list
    ``nodes`` (one per replica, as plans do) release on those nodes; otherwise on the cluster's
    nodes in name order, round-robin. ``free`` is the array released into (the fleet's own
    capacity state by default; a batch passes the state it carries to the next application).
    Returns whether any capacity was given back.
    """
    free = fleet.free if free is None else free
    released = False
    by_name = {s.name: s for s in app.services}
    for svc_name, entries in sorted(current.items()):
        svc = by_name.get(svc_name)
        if svc is None or not isinstance(entries, list):
            continue
        req = request_vector(svc)
        for entry in entries:
            c = _cluster_of(fleet, entry)
            if c is None or not fleet.node_count[c]:
                continue
            first, count = int(fleet.node_start[c]), int(fleet.node_count[c])
            local = fleet.local_nodes(c)
            named = [local[n] for n in entry.get("nodes") or [] if n in local]
            replicas = int(entry.get("replicas", len(named) or 1))
            targets = named or [first + (i % count) for i in range(replicas)]
            for v in targets:
                free[v] = np.minimum(free[v] + req, fleet.alloc[v])
                released = True
    return released


def judge_without_own(fleet: Fleet, app, current: dict) -> None:
    """Judge the fleet as if ``app`` did not run: its replicas' capacity is room for it, in the
    capacity the plan consumes and in the static criteria (free capacity is the performance
    criterion). Otherwise an application's own pods make its clusters look fuller than an
    empty twin, every re-plan finds a "better" placement elsewhere, and it moves away from
    itself - and back once the twin holds its pods (issue 22: never ping-pong)."""
    if release_current(fleet, app, current):
        fleet.set_capacity(fleet.free)


def scorer_registry() -> dict:
    """Scorer name -> its assign(problem). Static imports: Ansible packs a module's imports."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement import (
        borda,
        optimal,
        weighted,
    )

    return {"weighted": weighted.assign, "borda": borda.assign, "optimal": optimal.assign}


def _scorer(name: str):
    registry = scorer_registry()
    if name not in SCORERS:
        raise ValueError(f"scorer: {name!r} is not one of {', '.join(sorted(SCORERS))}")
    return registry[name]


def place(
    app,
    inventory,
    scorer: str = "weighted",
    exclude=(),
    current=None,
    hysteresis: float = 0.1,
    explain: bool = True,
) -> Plan:
    """Place every service of ``app`` on the inventory's clusters.

    ``current`` is the application's current placement ({service: [{cluster, replicas}]},
    the inventory's ``placements`` format); when omitted the inventory's own entry for the
    application is used. Raises PlacementError naming the service and the unmet constraint.
    """
    check_request(scorer, current, hysteresis)
    inv = inventory if isinstance(inventory, Inventory) else Inventory.from_dict(inventory)
    if current is None:
        current = inv.placements.get(app.name) or {}
    return place_on(Fleet(inv), app, scorer, exclude, current, hysteresis, explain)[0]


def check_request(scorer: str, current, hysteresis) -> None:
    """ValueError for a request no scorer can take (before any work is done)."""
    _scorer(scorer)
    if not isinstance(hysteresis, (int, float)) or isinstance(hysteresis, bool) or hysteresis < 0:
        raise ValueError(f"hysteresis: {hysteresis!r} is not a number >= 0")
    if current is not None and not isinstance(current, dict):
        raise ValueError("current: expected the current placement as {service: [{cluster, replicas}]}")


def place_on(fleet: Fleet, app, scorer: str, exclude, current: dict, hysteresis, explain: bool):
    """(Plan, assignment) of one application on a fleet whose ``free`` is the capacity left.

    The one body of :func:`place` and of a batch (placement/batch.py), so both give the same
    plan for the same capacity state. Consumes ``fleet.free``; the caller resets it.
    """
    judge_without_own(fleet, app, current)
    problem = Problem(app, fleet, exclude, current, float(hysteresis), explain)
    assignment, explanation = _scorer(scorer)(problem)
    plan_services = {s.name: entries_from_assignment(fleet, assignment[s.name]) for s in app.services}
    plan = Plan(
        application=app.name,
        scorer=scorer,
        objective=evaluate(fleet, app, assignment),
        services=plan_services,
        explanation={s.name: explanation[s.name] for s in app.services} if explain else {},
        bounds=latency_bounds(problem, plan_services) if explain else {},
    )
    return plan, assignment


def latency_bounds(problem: Problem, services: dict) -> dict:
    """How close each chosen cluster is to each maxLatency bound of its service (the measured
    latency, the bound, and the bound it is held to where the service already ran)."""
    out: dict[str, list[dict]] = {}
    for svc in problem.app.services:
        if not svc.max_latency:
            continue
        held = problem.current_clusters(svc.name)
        rows = []
        for entry in services.get(svc.name, []):
            c = problem.fleet.cluster_names.index(entry["cluster"])
            for m in svc.max_latency:
                ms = float(problem.fleet.latency_from(m["from"])[c])
                limit = m["ms"] * (1.0 + LATENCY_HOLD) if held[c] else float(m["ms"])
                rows.append(
                    {
                        "cluster": entry["cluster"],
                        "from": m["from"],
                        "ms": ms,
                        "bound": m["ms"],
                        "limit": limit,
                    }
                )
        out[svc.name] = rows
    return out


def objective(app, inventory, plan) -> float:
    """The default objective of any plan (a Plan or its dict) on this inventory, judged as
    :func:`place` judges its plans: without the application's own running replicas."""
    inv = inventory if isinstance(inventory, Inventory) else Inventory.from_dict(inventory)
    return objective_on(Fleet(inv), app, plan)


def objective_on(fleet: Fleet, app, plan) -> float:
    """:func:`objective` on an already built fleet of the inventory (one build serves every
    application judged on it: at 1,000 clusters a build costs more than the judgement). Its
    capacity is the inventory's again first, and is left without the application's replicas."""
    fleet.set_capacity(fleet.free_inventory)
    judge_without_own(fleet, app, fleet.inventory.placements.get(app.name) or {})
    services = plan.services if isinstance(plan, Plan) else plan["services"]
    return evaluate(fleet, app, plan_assignment(fleet, services))


def plan_assignment(fleet: Fleet, services: dict) -> dict:
    """{service: [node index per replica]} from a plan's services section."""
    out: dict[str, list[int]] = {}
    for svc, entries in services.items():
        nodes: list[int] = []
        for entry in entries:
            c = fleet.cluster_index.get(entry["cluster"])
            if c is None:
                raise ValueError(
                    f"plan: cluster {entry['cluster']!r} of service {svc!r} is not in the inventory"
                )
            first, count = int(fleet.node_start[c]), int(fleet.node_count[c])
            local = fleet.local_nodes(c)
            named = entry.get("nodes") or []
            for name in named:
                if name not in local:
                    raise ValueError(f"plan: node {name!r} is not in cluster {entry['cluster']!r}")
                nodes.append(local[name])
            if not named and count:
                # a placement without node names (e.g. the KB's current one): its replicas
                # count on the cluster's eligible nodes in name order, round-robin
                ok = [i for i in range(first, first + count) if fleet.node_ok[i]]
                pool = ok or list(range(first, first + count))
                nodes.extend(pool[i % len(pool)] for i in range(int(entry.get("replicas", 1))))
        out[svc] = nodes
    return out


def capacity_violations(app, inventory, plan) -> int:
    """Nodes whose requested + planned resources exceed allocatable under ``plan``.

    Replicas the plan keeps where they run now are counted once (their requests are released
    first, as :func:`place` does).
    """
    inv = inventory if isinstance(inventory, Inventory) else Inventory.from_dict(inventory)
    fleet = Fleet(inv)
    release_current(fleet, app, inv.placements.get(app.name) or {})
    services = plan.services if isinstance(plan, Plan) else plan["services"]
    assignment = plan_assignment(fleet, services)
    used = np.zeros_like(fleet.free)
    for svc in app.services:
        req = request_vector(svc)
        for v in assignment.get(svc.name, []):
            used[v] += req
    # a node that was already overcommitted and gets nothing is not the plan's doing
    over = np.any(used > fleet.free + 1e-6, axis=1) & np.any(used > 0, axis=1)
    return int(over.sum())
