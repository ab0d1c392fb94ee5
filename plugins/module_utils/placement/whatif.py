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

import time
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.placement.batch import (
    place_batch,
    policy_item,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.criteria import evaluate
from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import (
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
    reads it (the ``deploy.intent`` events of admins). An application whose record or policy
    cannot be read is a problem, not a tenant (KBError propagates)."""
    from ansible_collections.qonnect.core.plugins.module_utils.runners import intent

    inventory = kb.inventory()
    tenants, problems = [], {}
    for record in kb.list_applications():
        name = str(record.get("name"))
        policy = intent.stored_policy(kb.list_events(application=name, limit=intent.LOOKBACK))
        try:
            tenants.append(tenant_of(record, policy))
        except (KeyError, TypeError, ValueError) as exc:
            problems[name] = f"cannot be planned: {exc}"
    return inventory, tenants, problems


@dataclass
class Shortfall:
    """What keeps one service from being re-placed: the constraint no cluster meets and, when it
    is room, the resource that runs out first and how much of it is missing."""

    service: str
    constraint: str
    resource: str | None = None
    missing: float = 0.0
    room_for: int = 0  # replicas that would still fit
    replicas: int = 0

    def text(self) -> str:
        if self.resource is None:
            return f"{self.service}: no cluster meets {self.constraint}"
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

    @property
    def survivable(self) -> bool:
        return all(o.placed for o in self.outcomes.values())

    def first_shortfall(self) -> Shortfall | None:
        return next((o.shortfall for o in self.outcomes.values() if o.shortfall), None)

    def to_dict(self) -> dict:
        first = self.first_shortfall()
        return {
            "scenario": self.name,
            "failed": self.failed,
            "survivable": self.survivable,
            "applications": {n: o.to_dict() for n, o in self.outcomes.items()},
            "first_shortfall": first.to_dict() if first else None,
            "spare": {
                tier: {r: v for r, v in free.items()} | {f"{r}_text": amount(r, v) for r, v in free.items()}
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
            for cluster in _clusters_of(placement):
                self.hosting.setdefault(cluster, set()).add(name)
        self._before: dict[str, float | None] = {}

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

    def fail(self, failed, name: str | None = None, label: tuple[str, str] | None = None) -> Scenario:
        """The heal the controller would plan if ``failed`` went down now (ValueError naming
        every unknown cluster)."""
        failed = sorted(set(failed))
        problems = self.check(failed)
        if problems:
            raise ValueError("; ".join(problems))
        scenario = Scenario(name or f"cluster {', '.join(failed)}", failed, label=label)
        names = self.affected(failed)
        items, reasons = [], {}
        for app in names:
            t = self.tenants[app]
            try:
                items.append(
                    policy_item(t.app, t.scorer, t.hysteresis, self.avoid(app, failed), self.defaults)
                )
            except ValueError as exc:
                reasons[app] = f"cannot be planned: {exc}"
        self.fleet.set_capacity(self.start)
        result = place_batch(items, self.inventory, fleet=self.fleet) if items else None
        for app in names:
            scenario.outcomes[app] = self._outcome(app, result, reasons.get(app), failed)
        left = result.free_left if result is not None and result.free_left is not None else self.start
        scenario.spare = self._spare(left, failed)
        scenario.delta = _minus(scenario.spare, self._spare(self.start, failed))
        return scenario

    def avoid(self, app: str, failed) -> list[str]:
        """The clusters a heal of ``app`` avoids: the user's stored exclusions and the failed ones."""
        return sorted({*self.tenants[app].exclude, *failed})

    def _outcome(self, app: str, result, reason: str | None, failed: list[str]) -> Outcome:
        current = self.current[app]
        out = Outcome(app, objective_before=self._objective_before(app))
        plan = result.plans.get(app) if result is not None else None
        for svc in self.tenants[app].app.services:
            was = sorted(_clusters_of({svc.name: current.get(svc.name)}))
            out.moves[svc.name] = {"from": was, "to": plan.clusters(svc.name) if plan else []}
        if plan is not None:
            out.objective_after = plan.objective
            out.services = plan.to_dict()["services"]
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
        on the clusters every other constraint allows (with the capacity it met)."""
        t = self.tenants[app]
        try:
            svc = t.app.service(error.service)
        except KeyError:
            return Shortfall(error.service, error.constraint)
        if not error.constraint.startswith("capacity"):
            return Shortfall(svc.name, error.constraint)
        f = self.fleet
        f.set_capacity(self.start if free is None else free)
        release_current(f, t.app, self.current[app])
        ctx = ServiceContext(f, svc, frozenset(self.avoid(app, failed)))
        ok, _culprit, _why_not = run_filters(ctx, CONSTRAINT_FILTERS, False)
        nodes = ok[f.node_cluster] & ctx.ok_nodes()
        req = request_vector(svc)
        free_ok = f.free[nodes]
        best: tuple[int, str] | None = None
        for j, resource in enumerate(RESOURCES):
            if req[j] <= 0:
                continue
            fit = int(np.floor((free_ok[:, j] + 1e-9) / req[j]).clip(min=0).sum())
            if best is None or fit < best[0]:
                best = (fit, resource)
        if best is None:
            return Shortfall(svc.name, error.constraint)
        fit, resource = best
        fit = min(fit, svc.replicas)
        j = RESOURCES.index(resource)
        missing = float((svc.replicas - fit) * req[j]) if fit < svc.replicas else float(req[j])
        return Shortfall(svc.name, error.constraint, resource, missing, fit, svc.replicas)

    def _spare(self, left, failed: list[str]) -> dict[str, dict[str, float]]:
        """Free capacity per tier once the scenario's heal has run, on the clusters still up."""
        f = self.fleet
        up = f.healthy.copy()
        for c in failed:
            up[f.cluster_index[c]] = False
        nodes = f.node_ok & up[f.node_cluster]
        out: dict[str, dict[str, float]] = {}
        for code in sorted(set(f.tier.tolist())):
            mask = nodes & (f.tier[f.node_cluster] == code)
            sums = left[mask].sum(axis=0) if mask.any() else np.zeros(len(RESOURCES))
            out[TIER_NAMES.get(code, "other")] = {r: float(sums[RESOURCES.index(r)]) for r in SHOWN}
        return out


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


def survivability(whatif: WhatIf, labels=(), previous: Report | None = None, changed=()) -> Report:
    """Every single-cluster failure and every failure of one value of ``labels``, each
    application judged against its own ``survive`` statement.

    With ``previous`` (a report of the fleet before a change) and ``changed`` (the clusters
    whose capacity, health or hosted applications changed), a scenario is planned again only if
    it involves a changed cluster (failed, hosting, or targeted by its plan) or was not
    survivable; the others are carried over with their spare capacity brought up to date.
    """
    began = time.monotonic()
    changed = set(changed)
    old = {s.name: s for s in previous.scenarios} if previous is not None else {}
    scenarios: list[Scenario] = []
    evaluated = 0
    for name, failed, label in scenario_list(whatif, labels):
        prior = old.get(name)
        if prior is not None and _still_valid(prior, whatif, failed, changed):
            prior.spare = _plus(whatif._spare(whatif.start, failed), prior.delta)
            scenarios.append(prior)
            continue
        if not whatif.affected(failed):
            scenarios.append(Scenario(name, failed, spare=whatif._spare(whatif.start, failed), label=label))
            continue
        scenarios.append(whatif.fail(failed, name=name, label=label))
        evaluated += 1
    return Report(scenarios, _verdicts(whatif, scenarios), time.monotonic() - began, evaluated)


def _still_valid(prior: Scenario, whatif: WhatIf, failed: list[str], changed: set[str]) -> bool:
    if prior.failed != failed or not prior.survivable or changed & set(failed):
        return False
    if set(prior.outcomes) != set(whatif.affected(failed)):
        return False
    return not any(changed & o.targets() for o in prior.outcomes.values())


def _verdicts(whatif: WhatIf, scenarios: list[Scenario]) -> dict[str, dict]:
    """Per application: what it must survive, and each scenario of that kind it does not."""
    out: dict[str, dict] = {}
    for name, t in whatif.tenants.items():
        stated = t.must_survive
        any_cluster = {"cluster": "any"} in stated
        keys = {s["label"] for s in stated if "label" in s}
        violations = []
        for s in scenarios:
            outcome = s.outcomes.get(name)
            if outcome is None or outcome.placed:
                continue
            if (s.label is None and any_cluster) or (s.label is not None and s.label[0] in keys):
                violations.append({"scenario": s.name, "reason": outcome.reason})
        out[name] = {"must_survive": [dict(s) for s in stated], "violations": violations}
    return out


def _why(error, avoid: list[str]) -> str:
    """Why an application cannot be re-placed, as the controller's deferral says it."""
    if error is None:
        return "not planned"
    service = getattr(error, "service", None)
    if service is None:
        return str(error)
    return f"{service}: no eligible cluster ({error.constraint}) without {', '.join(avoid)}"


def _minus(a: dict, b: dict) -> dict:
    return {t: {r: v - b.get(t, {}).get(r, 0.0) for r, v in rs.items()} for t, rs in a.items()}


def _plus(a: dict, b: dict) -> dict:
    return {t: {r: v + b.get(t, {}).get(r, 0.0) for r, v in rs.items()} for t, rs in a.items()}


def _clusters_of(placement: dict) -> set[str]:
    return {
        e["cluster"]
        for entries in (placement or {}).values()
        if isinstance(entries, list)
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("cluster"), str)
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
