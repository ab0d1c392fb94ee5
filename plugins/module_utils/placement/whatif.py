# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What-if failures: the plan the controller's heal would commit if some clusters failed now.

Not a second planner. ``WhatIf(inventory, tenants)`` builds the fleet once; ``fail(clusters)``
re-places the applications running on those clusters with :func:`batch.place_batch` - what the
controller's heal runs - each with its stored policy (scorer, hysteresis, exclusions) plus the
failed clusters to avoid, in the controller's order (by name), against the capacity the fleet has
now. :func:`survivability` runs every single-cluster failure and every value of the labels named
on that one build, and judges each application against the failures it states it must survive.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.placement.batch import (
    place_batch,
    policy_item,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.criteria import evaluate
from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import (
    Problem,
    judge_without_own,
    plan_assignment,
    release_current,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import PlacementError
from ansible_collections.qonnect.core.plugins.module_utils.placement.filters import (
    CONSTRAINT_FILTERS,
    ServiceContext,
    run_filters,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import (
    TIER_CODES,
    Fleet,
    np,
    request_vector,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import RESOURCES, Inventory
from ansible_collections.qonnect.core.plugins.module_utils.placement.plan import clusters_of
from ansible_collections.qonnect.core.plugins.module_utils.quantity import format_bytes

# an application that states nothing is held to N-1: it must outlive any one cluster's failure
DEFAULT_SURVIVE = ({"cluster": "any"},)
TIER_NAMES = {code: name for name, code in TIER_CODES.items()}
SHOWN = ("cpu", "memory")  # the resources a report shows (ephemeral storage is rarely binding)


def amount(resource: str, value: float) -> str:
    """A resource amount as a person reads it: '1.5 CPU', '2Gi'."""
    if resource == "cpu":
        return f"{round(value, 3):g} CPU"
    return format_bytes(value)


@dataclass(frozen=True)
class Tenant:
    """An application as the controller heals it: its spec and the policy it was deployed with
    (None: the controller's default)."""

    app: Any  # qos.Application
    scorer: str | None = None
    hysteresis: float | None = None
    exclude: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.app.name

    @property
    def must_survive(self) -> tuple[dict, ...]:
        stated = getattr(self.app, "survive", None)
        return DEFAULT_SURVIVE if stated is None else tuple(stated)


def tenant_of(record: dict, policy: dict | None) -> Tenant:
    """A tenant from a KB application record (``{"name", "application": {...}}``) and the
    policy its deploy stored (runners/intent.stored_policy; {} or None: the defaults).
    KeyError/TypeError/ValueError for a record that holds no valid application."""
    from ansible_collections.qonnect.core.plugins.module_utils.qos import Application

    policy = policy or {}
    return Tenant(
        Application.from_dict(record["application"]),
        policy.get("scorer"),
        policy.get("hysteresis"),
        tuple(policy.get("exclude") or ()),
    )


def tenants_from_kb(kb) -> tuple[dict, list[Tenant], dict[str, str]]:
    """(inventory, tenants, problems by application) as the controller sees the fleet: every
    stored application with the policy of its newest applied deploy, read as the controller
    reads it (intent.recorded_policy: the record's, else the ``deploy.intent`` events of
    admins). An application whose record or policy
    cannot be read is a problem, not a tenant (KBError propagates)."""
    from ansible_collections.qonnect.core.plugins.module_utils.runners import intent

    inventory = kb.inventory()
    tenants, problems = [], {}
    for record in kb.list_applications():
        name = str(record.get("name"))
        policy = intent.recorded_policy(
            record, lambda name=name: kb.list_events(application=name, limit=intent.LOOKBACK)
        )
        try:
            tenants.append(tenant_of(record, policy))
        except (KeyError, TypeError, ValueError) as exc:
            problems[name] = f"cannot be planned: {exc}"
    return inventory, tenants, problems


@dataclass
class Shortfall:
    """What keeps one service from being re-placed: the constraint no cluster meets and, when it
    is room, the resource that runs out first and how much of it is missing (at least: one
    replica's request per replica without room). When the service's spread is what room cannot
    meet (fewer distinct clusters with room than it must spread over), ``missing`` is one
    replica's request on each of the clusters still needed."""

    service: str
    constraint: str
    resource: str | None = None
    missing: float = 0.0
    room_for: int = 0  # replicas that would still fit
    replicas: int = 0
    spread: int = 1
    clusters_with_room: int | None = None  # set when the spread is what room cannot meet
    detail: str = ""  # why, when no resource is named (e.g. too few clusters for the spread)

    @property
    def spread_bound(self) -> bool:
        return self.clusters_with_room is not None

    def text(self) -> str:
        if self.resource is None:
            return f"{self.service}: no cluster meets {self.constraint}" + (
                f" ({self.detail})" if self.detail else ""
            )
        if self.spread_bound:
            more = self.spread - (self.clusters_with_room or 0)
            return (
                f"{self.service}: room on {self.clusters_with_room} of the {self.spread} distinct clusters"
                f" its spread needs; {amount(self.resource, self.missing)} of {self.resource} missing"
                f" ({more} more cluster(s) with room for one replica)"
            )
        return (
            f"{self.service}: {amount(self.resource, self.missing)} of {self.resource} missing"
            f" (room for {self.room_for} of {self.replicas} replicas)"
        )

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"service": self.service, "constraint": self.constraint, "text": self.text()}
        if self.resource is not None:
            out.update(
                resource=self.resource,
                missing=self.missing,
                missing_text=amount(self.resource, self.missing),
                room_for=self.room_for,
                replicas=self.replicas,
            )
            if self.spread_bound:
                out.update(spread=self.spread, clusters_with_room=self.clusters_with_room)
        return out


@dataclass
class Outcome:
    """One application in one scenario: per service where it runs and where it would go."""

    application: str
    moves: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # service -> from, to
    objective_before: float | None = None
    objective_after: float | None = None
    services: dict = field(default_factory=dict)  # the plan's services section (placed only)
    reason: str = ""  # why it cannot be placed ("" when it can)
    shortfall: Shortfall | None = None
    # per service, every cluster considered and why (Plan.explanation), and how close the chosen
    # ones are to maxLatency bounds (Plan.bounds): with fail(explain=True) only
    explanation: dict = field(default_factory=dict)
    bounds: dict = field(default_factory=dict)
    # where it ran when the scenario was planned ((service, cluster, replicas) sorted): an
    # incremental report plans the scenario again once the application runs elsewhere
    current: tuple = field(default=(), repr=False)

    @property
    def placed(self) -> bool:
        return not self.reason

    def targets(self) -> set[str]:
        return {c for m in self.moves.values() for c in (*m["from"], *m["to"])}

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "application": self.application,
            "placed": self.placed,
            "moves": self.moves,
            "objective_before": _round(self.objective_before),
            "objective_after": _round(self.objective_after),
        }
        if not self.placed:
            out["reason"] = self.reason
            out["shortfall"] = self.shortfall.to_dict() if self.shortfall else None
        if self.explanation:
            out["explanation"] = self.explanation
        if self.bounds:
            out["bounds"] = self.bounds
        return out


@dataclass
class Scenario:
    """The heal the controller would plan if ``failed`` went down now."""

    name: str
    failed: list[str]
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    spare: dict[str, dict[str, float]] = field(default_factory=dict)  # tier -> resource -> free
    label: tuple[str, str] | None = None  # (key, value) of a label scenario
    # spare minus what the fleet would have spare with nothing re-placed: what the heal takes
    delta: dict[str, dict[str, float]] = field(default_factory=dict)
    fallback: str = ""  # why the heal was planned one application at a time ("" if it was not)

    @property
    def survivable(self) -> bool:
        return all(o.placed for o in self.outcomes.values())

    def first_shortfall(self) -> Shortfall | None:
        return next((o.shortfall for o in self.outcomes.values() if o.shortfall), None)

    def to_dict(self) -> dict:
        first = self.first_shortfall()
        return {
            **({"fallback": self.fallback} if self.fallback else {}),
            "scenario": self.name,
            "failed": self.failed,
            "survivable": self.survivable,
            "applications": {n: o.to_dict() for n, o in self.outcomes.items()},
            "first_shortfall": first.to_dict() if first else None,
            "spare": {
                tier: dict(free) | {f"{r}_text": amount(r, v) for r, v in free.items()}
                for tier, free in self.spare.items()
            },
        }


class WhatIf:
    """One build of the fleet to ask "what if these clusters failed now?" many times.

    ``defaults`` are the controller's (scorer, hysteresis) for applications deployed without.
    """

    def __init__(self, inventory, tenants, defaults: tuple[str, float] = ("weighted", 0.1)):
        self.inventory = inventory if isinstance(inventory, Inventory) else Inventory.from_dict(inventory)
        self.fleet = Fleet(self.inventory)
        self.start = self.fleet.free0.copy()
        self.defaults = defaults
        self.tenants = {t.name: t for t in sorted(tenants, key=lambda t: t.name)}
        self.current = {name: self.inventory.placements.get(name) or {} for name in self.tenants}
        self.hosting: dict[str, set[str]] = {}  # cluster -> tenants with a replica on it
        for name, placement in self.current.items():
            for cluster in clusters_of(placement):
                self.hosting.setdefault(cluster, set()).add(name)
        self._before: dict[str, float | None] = {}
        # spare capacity as the report counts it: free capacity (never below zero) of the
        # eligible nodes of healthy clusters, summed per cluster once; a scenario takes its
        # failed clusters off and adds what its heal changed on the nodes it touched
        f = self.fleet
        self._shown = [RESOURCES.index(r) for r in SHOWN]
        self._counted = f.node_ok & f.healthy[f.node_cluster]
        spare0 = np.where(self._counted[:, None], np.clip(self.start[:, self._shown], 0.0, None), 0.0)
        self._cluster_spare = np.zeros((f.num_clusters, len(SHOWN)))
        np.add.at(self._cluster_spare, f.node_cluster, spare0)
        self._tiers = sorted(set(f.tier.tolist()))
        self._tier_spare = {code: self._cluster_spare[f.tier == code].sum(axis=0) for code in self._tiers}

    @property
    def cluster_names(self) -> list[str]:
        return list(self.fleet.cluster_names)

    def matching(self, key: str, value: str) -> list[str]:
        """Clusters whose label ``key`` is ``value`` (key ``tier``: the cluster's tier)."""
        out = []
        for c in self.inventory.clusters:
            have = c.labels.get(key, c.tier if key == "tier" else None)
            if have == value:
                out.append(c.name)
        return out

    def label_values(self, key: str) -> list[str]:
        """Every value of label ``key`` in the fleet, sorted (``tier``: the tiers in use)."""
        values = {c.labels.get(key, c.tier if key == "tier" else None) for c in self.inventory.clusters}
        return sorted(v for v in values if isinstance(v, str))

    def check(self, clusters) -> list[str]:
        """Problems with a list of cluster names (all of them), [] when every name is known."""
        known = set(self.fleet.cluster_index)
        return [f"{c!r} is not a cluster of the inventory" for c in clusters if c not in known]

    def affected(self, failed) -> list[str]:
        """Applications with a replica on a failed cluster, in the controller's order."""
        hit = set().union(*(self.hosting.get(c, set()) for c in failed)) if failed else set()
        return sorted(hit)

    def fail(
        self, failed, name: str | None = None, label: tuple[str, str] | None = None, explain: bool = False
    ) -> Scenario:
        """The heal the controller would plan if ``failed`` went down now (ValueError naming
        every unknown cluster).

        The fleet is seen as the controller sees it then: the failed clusters unhealthy and
        their nodes unusable (Fleet.fail_view), and each affected application excludes them on
        top of its stored exclusions, as the failure's decision does. ``explain``: each plan
        carries the per-cluster explanation `qonnect plan` prints (a survivability report does
        without)."""
        failed = sorted(set(failed))
        problems = self.check(failed)
        if problems:
            raise ValueError("; ".join(problems))
        scenario = Scenario(name or f"cluster {', '.join(failed)}", failed, label=label)
        names = self.affected(failed)
        before = {app: self._objective_before(app) for app in names}  # on the fleet as it is
        items, reasons = [], {}
        for app in names:
            t = self.tenants[app]
            try:
                items.append(
                    policy_item(t.app, t.scorer, t.hysteresis, self.avoid(app, failed), self.defaults)
                )
            except ValueError as exc:
                reasons[app] = f"cannot be planned: {exc}"
        f = self.fleet
        left = self.start
        try:
            f.fail_view([f.cluster_index[c] for c in failed])
            f.set_capacity(self.start)
            result = place_batch(items, self.inventory, fleet=f, explain=explain) if items else None
            for app in names:
                scenario.outcomes[app] = self._outcome(app, result, reasons.get(app), failed)
                scenario.outcomes[app].objective_before = before[app]
            if result is not None:
                scenario.fallback = result.fallback
                if result.free_left is not None:
                    left = result.free_left
        finally:
            f.restore_view()
        scenario.spare, scenario.delta = self._spare_and_delta(left, failed)
        return scenario

    def avoid(self, app: str, failed) -> list[str]:
        """The clusters a heal of ``app`` avoids: the user's stored exclusions and the failed ones."""
        return sorted({*self.tenants[app].exclude, *failed})

    def _outcome(self, app: str, result, reason: str | None, failed: list[str]) -> Outcome:
        current = self.current[app]
        out = Outcome(app, current=_current_key(current))
        plan = result.plans.get(app) if result is not None else None
        for svc in self.tenants[app].app.services:
            was = sorted(clusters_of({svc.name: current.get(svc.name)}))
            out.moves[svc.name] = {"from": was, "to": plan.clusters(svc.name) if plan else []}
        if plan is not None:
            out.objective_after = plan.objective
            out.services = plan.to_dict()["services"]
            out.explanation, out.bounds = plan.explanation, plan.bounds
            return out
        error = result.errors.get(app) if result is not None else None
        out.reason = reason or _why(error, self.avoid(app, failed))
        if isinstance(error, PlacementError):
            out.shortfall = self._shortfall(app, error, result.free_at_error.get(app), failed)
        return out

    def _objective_before(self, app: str) -> float | None:
        """The objective of where the application runs now, judged on the fleet as it is."""
        if app not in self._before:
            t = self.tenants[app]
            self.fleet.restore_view()
            self.fleet.set_capacity(self.start)
            try:
                judge_without_own(self.fleet, t.app, self.current[app])
                self._before[app] = evaluate(
                    self.fleet, t.app, plan_assignment(self.fleet, self.current[app])
                )
            except (ValueError, KeyError):
                self._before[app] = None  # runs on a cluster the inventory no longer has
        return self._before[app]

    def _shortfall(self, app: str, error: PlacementError, free, failed: list[str]) -> Shortfall:
        """Which resource runs out first for the service that failed, and how much is missing,
        on the clusters every other constraint allows (with the capacity it met, on the
        scenario's view of the fleet). A service whose spread is what fails: room on too few
        distinct clusters (a resource is named), or too few clusters at all (none is)."""
        t = self.tenants[app]
        try:
            svc = t.app.service(error.service)
        except KeyError:
            return Shortfall(error.service, error.constraint)
        constraint = str(error.constraint)
        if not constraint.startswith(("capacity", "spread")):
            return Shortfall(svc.name, constraint, replicas=svc.replicas, spread=svc.spread)
        f = self.fleet
        f.set_capacity(self.start if free is None else free)
        current = self.current[app]
        release_current(f, t.app, current)  # its own replicas are room for it, as in the plan
        avoid = self.avoid(app, failed)
        held = Problem(t.app, f, avoid, current, 0.0, False).current_clusters(svc.name)
        ctx = ServiceContext(f, svc, frozenset(avoid), held)
        ok, _culprit, _why_not = run_filters(ctx, CONSTRAINT_FILTERS, False)
        allowed = int(ok.sum())
        plain = Shortfall(svc.name, constraint, replicas=svc.replicas, spread=svc.spread)
        if allowed < svc.spread:  # not room: too few clusters meet the other constraints
            plain.detail = f"{allowed} cluster(s) meet every other constraint, the spread needs {svc.spread}"
            return plain
        req = request_vector(svc)
        used = [j for j in range(len(RESOURCES)) if req[j] > 0]
        if not used:
            return plain
        nodes = ok[f.node_cluster] & ctx.ok_nodes()
        free_ok = np.where(nodes[:, None], f.free, 0.0)
        per_resource = np.floor((free_ok[:, used] + 1e-9) / req[used]).clip(min=0)
        per_node = per_resource.min(axis=1)  # replicas each node has room for
        per_cluster = np.bincount(f.node_cluster, weights=per_node, minlength=f.num_clusters)
        with_room = int((per_cluster >= 1).sum())
        total = int(per_cluster.sum())
        if 0 < with_room < svc.spread:  # room on too few distinct clusters
            lacking = ok & (per_cluster < 1)
            # the resource most of the other allowed clusters lack for one replica
            short = [
                int((lacking & ~f.cluster_any(nodes & (f.free[:, j] >= req[j] - 1e-9))).sum()) for j in used
            ]
            j = used[int(np.argmax(short))]
            more = svc.spread - with_room
            return Shortfall(
                svc.name,
                constraint,
                RESOURCES[j],
                float(more * req[j]),
                with_room,
                svc.replicas,
                svc.spread,
                with_room,
            )
        room_for = min(total, svc.replicas)
        if room_for >= svc.replicas:  # room enough by these counts: the scorer's own limits
            plain.room_for = room_for
            return plain
        fits = per_resource.sum(axis=0)  # replicas each resource alone has room for
        k = int(np.argmin(fits))
        j = used[k]
        missing = float((svc.replicas - room_for) * req[j])
        return Shortfall(svc.name, constraint, RESOURCES[j], missing, room_for, svc.replicas, svc.spread)

    def _spare_and_delta(self, left, failed: list[str]) -> tuple[dict, dict]:
        """(free capacity per tier once the scenario's heal has run, on the clusters still up;
        what the heal changed of it). Per-cluster sums are computed once; a scenario only
        subtracts its failed clusters and adds the nodes its heal touched."""
        f = self.fleet
        gone = np.zeros(f.num_clusters, dtype=bool)
        for c in failed:
            gone[f.cluster_index[c]] = True
        base = {
            code: total - self._cluster_spare[gone & (f.tier == code)].sum(axis=0)
            for code, total in self._tier_spare.items()
        }
        delta = {code: np.zeros(len(SHOWN)) for code in self._tiers}
        if left is not self.start:
            touched = np.nonzero(np.any(left != self.start, axis=1))[0]
            touched = touched[self._counted[touched] & ~gone[f.node_cluster[touched]]]
            if touched.size:
                cols = self._shown
                diff = np.clip(left[touched][:, cols], 0.0, None) - np.clip(
                    self.start[touched][:, cols], 0.0, None
                )
                codes = f.tier[f.node_cluster[touched]]
                for code in self._tiers:
                    delta[code] = diff[codes == code].sum(axis=0)
        spare, change = {}, {}
        for code in self._tiers:
            tier = TIER_NAMES.get(code, "other")
            spare[tier] = {r: float(base[code][i] + delta[code][i]) for i, r in enumerate(SHOWN)}
            change[tier] = {r: float(delta[code][i]) for i, r in enumerate(SHOWN)}
        return spare, change

    def _spare(self, left, failed: list[str]) -> dict[str, dict[str, float]]:
        """Free capacity per tier once the scenario's heal has run, on the clusters still up."""
        return self._spare_and_delta(left, failed)[0]


@dataclass
class Report:
    """Every scenario evaluated, and each application against the failures it must survive."""

    scenarios: list[Scenario]
    applications: dict[str, dict]
    seconds: float = 0.0
    evaluated: int = 0  # scenarios planned (not carried over from a previous report)

    @property
    def survivable(self) -> bool:
        return not any(a["violations"] for a in self.applications.values())

    def to_dict(self) -> dict:
        return {
            "survivable": self.survivable,
            "applications": self.applications,
            "scenarios": [s.to_dict() for s in self.scenarios],
            "seconds": round(self.seconds, 3),
            "evaluated": self.evaluated,
        }


def scenario_list(whatif: WhatIf, labels=()) -> list[tuple[str, list[str], tuple[str, str] | None]]:
    """(name, failed clusters, label) of every single-cluster failure and of every value of each
    label key named here or in an application's ``survive`` statement."""
    keys = set(labels)
    for t in whatif.tenants.values():
        keys |= {s["label"] for s in t.must_survive if "label" in s}
    out: list[tuple[str, list[str], tuple[str, str] | None]] = [
        (f"cluster {c}", [c], None) for c in whatif.cluster_names
    ]
    for key in sorted(keys):
        for value in whatif.label_values(key):
            out.append((f"{key}={value}", whatif.matching(key, value), (key, value)))
    return out


def survivability(
    whatif: WhatIf, labels=(), previous: Report | None = None, changed=(), workers: int = 1
) -> Report:
    """Every single-cluster failure and every failure of one value of ``labels``, each
    application judged against its own ``survive`` statement.

    With ``previous`` (a report of the fleet before a change) and ``changed`` (the clusters
    whose capacity, health or hosted applications changed), a scenario is planned again only if
    it was not survivable, fails a changed cluster, hosts other applications or an application
    that runs elsewhere now, or its plans put replicas on a changed cluster (see
    :func:`_still_valid`); the others are carried over (copies) with their spare capacity
    brought up to date. Their verdicts stand because their plans still fit; their plans are
    those of the previous fleet (a full report plans every scenario on the fleet as it is).

    ``workers`` > 1 plans the scenarios in that many forked processes (each scenario is planned
    from the same start, so the report is the same; where fork is not available, or in a
    process whose threads could hold locks a child needs, keep 1).
    """
    began = time.monotonic()
    changed = set(changed)
    old = {s.name: s for s in previous.scenarios} if previous is not None else {}
    scenarios: list[Scenario | None] = []
    todo: list[tuple[int, str, list[str], tuple[str, str] | None]] = []
    for name, failed, label in scenario_list(whatif, labels):
        prior = old.get(name)
        if prior is not None and _still_valid(prior, whatif, failed, changed):
            spare = _plus(whatif._spare(whatif.start, failed), prior.delta)
            scenarios.append(dataclasses.replace(prior, spare=spare, outcomes=dict(prior.outcomes)))
        elif not whatif.affected(failed):
            scenarios.append(Scenario(name, failed, spare=whatif._spare(whatif.start, failed), label=label))
        else:
            todo.append((len(scenarios), name, failed, label))
            scenarios.append(None)
    for i, scenario in _plan_scenarios(whatif, todo, workers):
        scenarios[i] = scenario
    done = [s for s in scenarios if s is not None]
    return Report(done, _verdicts(whatif, done), time.monotonic() - began, len(todo))


_FORKED: WhatIf | None = None  # the WhatIf a forked worker plans on (inherited, not pickled)


def _plan_scenarios(whatif: WhatIf, todo, workers: int):
    """(position, Scenario) of each scenario to plan, in this process or in ``workers`` forks."""
    import multiprocessing

    if workers <= 1 or len(todo) < 2 * workers or "fork" not in multiprocessing.get_all_start_methods():
        return [(i, whatif.fail(failed, name=name, label=label)) for i, name, failed, label in todo]
    global _FORKED
    _FORKED = whatif
    try:
        chunks = [todo[k::workers] for k in range(workers)]  # interleaved: alike in cost
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_plan_chunk, chunks)
    finally:
        _FORKED = None
    return [pair for part in parts for pair in part]


def _plan_chunk(chunk) -> list[tuple[int, Scenario]]:
    whatif = _FORKED
    if whatif is None:
        raise RuntimeError("a survivability worker started without the fleet it plans on")
    return [(i, whatif.fail(failed, name=name, label=label)) for i, name, failed, label in chunk]


def _still_valid(prior: Scenario, whatif: WhatIf, failed: list[str], changed: set[str]) -> bool:
    """Whether a survivable scenario of the previous report still holds on the fleet now,
    without planning it again: same failed clusters, none of them changed; the same
    applications on them, each still running where it ran; no plan of it on a cluster that is
    down now; and the replicas its plans put on changed clusters still fit there, node by node
    (the room its applications' own replicas there give back counted), with no service that
    reads capacity in its constraints (minFree, a filter) planned on a changed cluster. Capacity
    elsewhere is as it was, so every plan of the scenario still fits."""
    if prior.failed != failed or not prior.survivable or changed & set(failed):
        return False
    if set(prior.outcomes) != set(whatif.affected(failed)):
        return False
    f = whatif.fleet
    down = {c for c in changed if c in f.cluster_index and not f.healthy[f.cluster_index[c]]}
    touched = []
    for name, outcome in prior.outcomes.items():
        if outcome.current != _current_key(whatif.current[name]):
            return False  # it runs elsewhere now (e.g. healed off a lost cluster)
        for svc_name, move in outcome.moves.items():
            if down & set(move["to"]):
                return False
            if changed & set(move["to"]):
                touched.append((name, svc_name))
    return not touched or _still_fits(prior, whatif, touched, changed)


def _still_fits(prior: Scenario, whatif: WhatIf, touched, changed: set[str]) -> bool:
    """The scenario's replicas on changed clusters fit the capacity those clusters have now:
    on the nodes its plans name, or else, cluster by cluster, packed on the cluster's nodes
    that may run them (first fit, largest first). Its applications' own replicas there give
    their room back first."""
    f = whatif.fleet
    free: dict[int, Any] = {}  # node -> capacity now, with the released replicas given back
    wanted: dict[int, list] = {}  # cluster -> [(request, eligible nodes mask, named node)]
    for name, svc_name in touched:
        app = whatif.tenants[name].app
        try:
            svc = app.service(svc_name)
        except KeyError:
            return False
        if svc.min_free or svc.filter:
            return False  # its constraints read capacity: judged again
        req = request_vector(svc)
        for sign, entries in (
            (-1, whatif.current[name].get(svc_name)),
            (1, prior.outcomes[name].services.get(svc_name)),
        ):
            for e in entries if isinstance(entries, list) else []:
                if not isinstance(e, dict) or e.get("cluster") not in changed:
                    continue
                c = f.cluster_index.get(e["cluster"])
                nodes = e.get("nodes") or []
                if c is None or not nodes or len(nodes) != int(e.get("replicas", len(nodes))):
                    return False  # not known node by node: judged again
                local = f.local_nodes(c)
                for node in nodes:
                    if node not in local:
                        return False
                    v = local[node]
                    room = free.setdefault(v, whatif.start[v].copy())
                    if sign < 0:
                        room += req
                    else:
                        wanted.setdefault(c, []).append((req, f.node_ok_for(svc), v))
    for c, replicas in wanted.items():
        first, count = int(f.node_start[c]), int(f.node_count[c])
        room = {v: free.get(v, whatif.start[v]).copy() for v in range(first, first + count)}
        if _fit_named(replicas, dict(room)) or _fit_packed(replicas, room):
            continue
        return False
    return True


def _fit_named(replicas, room: dict) -> bool:
    """Every replica on the node its plan names (that node eligible, with room)."""
    for req, eligible, v in replicas:
        if not eligible[v]:
            return False
        room[v] = room[v] - req
        if np.any(room[v] < -1e-9):
            return False
    return True


def _fit_packed(replicas, room: dict) -> bool:
    """Every replica on some eligible node of its cluster: first fit, largest request first."""
    for req, eligible, _named in sorted(replicas, key=lambda r: tuple(-r[0]), reverse=False):
        for v in sorted(room):
            if eligible[v] and np.all(room[v] >= req - 1e-9):
                room[v] = room[v] - req
                break
        else:
            return False
    return True


def _current_key(placement: dict) -> tuple:
    return tuple(
        sorted(
            (svc, e["cluster"], str(e.get("replicas", 1)))
            for svc, entries in (placement or {}).items()
            if isinstance(entries, list)
            for e in entries
            if isinstance(e, dict) and isinstance(e.get("cluster"), str)
        )
    )


def _verdicts(whatif: WhatIf, scenarios: list[Scenario]) -> dict[str, dict]:
    """Per application: what it must survive, and each scenario of that kind it does not
    (in scenario order; one pass over the outcomes that failed, not applications x scenarios)."""
    stated = {name: t.must_survive for name, t in whatif.tenants.items()}
    any_cluster = {name: {"cluster": "any"} in st for name, st in stated.items()}
    keys = {name: {s["label"] for s in st if "label" in s} for name, st in stated.items()}
    violations: dict[str, list[dict]] = {name: [] for name in stated}
    for s in scenarios:
        if s.survivable:
            continue
        for name, outcome in s.outcomes.items():
            if outcome.placed or name not in stated:
                continue
            if (s.label is None and any_cluster[name]) or (s.label is not None and s.label[0] in keys[name]):
                violations[name].append({"scenario": s.name, "reason": outcome.reason})
    return {
        name: {"must_survive": [dict(x) for x in st], "violations": violations[name]}
        for name, st in stated.items()
    }


def _why(error, avoid: list[str]) -> str:
    """Why an application cannot be re-placed, as the controller's deferral says it."""
    if error is None:
        return "not planned"
    service = getattr(error, "service", None)
    if service is None:
        return str(error)
    return f"{service}: no eligible cluster ({error.constraint}) without {', '.join(avoid)}"


def _plus(a: dict, b: dict) -> dict:
    return {t: {r: v + b.get(t, {}).get(r, 0.0) for r, v in rs.items()} for t, rs in a.items()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
