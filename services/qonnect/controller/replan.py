"""The heal's planner and the QoS-drift judge built on it (the one home of placement logic).

The plan an attempt applies is computed here (``engine_planner``): one ``place_many`` pass for
every application of a batch, each with the user's stored policy; the leader commits it with
the attempt's ``start`` and the migration applies exactly that plan.

Drift is judged by the same planner (``drift_judge``): the engine applies the hysteresis
against the current placement (it keeps the current clusters unless an alternative beats them
by more than the hysteresis), so drift is "the planner, given the current placement and the
application's own scorer, hysteresis and exclusions, would now put some service elsewhere".
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qonnect.controller.detector import Replanner

log = logging.getLogger(__name__)


# policy_of(app_record) -> the user's stored policy ({}: none recorded), None when unreadable now
PolicyOf = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def record_policy(record: dict[str, Any]) -> dict[str, Any]:
    """The policy the KB keeps on the application's record ({} when it has none)."""
    from ansible_collections.qonnect.core.plugins.module_utils.runners.intent import clean_policy

    policy = record.get("policy")
    return clean_policy(policy) if isinstance(policy, dict) else {}


def drift_judge(planner: Planner, policy_of: PolicyOf = record_policy) -> DriftJudge:
    """The QoS-drift judge: the heal's own planner, asked with the application's stored policy
    (scorer, hysteresis, exclusions) where it would put the application now. A judged drift is
    therefore always the move the planner then makes (issue 38: one judge), never a verdict of
    a scorer or hysteresis the user did not choose."""
    return DriftJudge(planner, policy_of)


class DriftJudge:
    """See :func:`drift_judge`. Called as a ``Replanner``; it also keeps the scale each
    application's last plan was scored on, and says whether a change on some clusters can move
    that plan (``unaffected``: the engine's own answer, placement/impact.py), so the gate
    re-judges only the applications such a change can move."""

    def __init__(self, planner: Planner, policy_of: PolicyOf = record_policy) -> None:
        self.planner = planner
        self.policy_of = policy_of
        self.scales: dict[str, Any] = {}  # app -> the scale of its last plan (None: no plan)
        # the last inventories judged on, each with its parse (or why not) and its fleet
        self._parsed: dict[int, tuple[dict[str, Any], Any, Any]] = {}

    def read(self, inventory: dict[str, Any]) -> Any:
        """The inventory parsed once for every application judged on it (each judgement parsed
        it twice: about half of its cost, paid 1,000 times after one cluster's change)."""
        return self._entry(inventory)[1]

    def fleet(self, inventory: dict[str, Any]) -> Any:
        """The inventory as the engine's arrays, built once (None when it cannot be parsed)."""
        from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError
        from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import Fleet

        entry = self._entry(inventory)
        if entry[2] is None and not isinstance(entry[1], InventoryError):
            entry = self._parsed[id(inventory)] = (entry[0], entry[1], Fleet(entry[1]))
        return entry[2]

    def _entry(self, inventory: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
        from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError
        from ansible_collections.qonnect.core.plugins.module_utils.placement.model import Inventory

        found = self._parsed.get(id(inventory))
        if found is not None and found[0] is inventory:
            return found
        try:
            parsed: Any = Inventory.from_dict(inventory)
        except InventoryError as exc:
            parsed = exc
        if len(self._parsed) >= 2:  # the one before and this one are all the gate compares
            self._parsed.pop(next(iter(self._parsed)))
        self._parsed[id(inventory)] = (inventory, parsed, None)
        return self._parsed[id(inventory)]

    def __call__(
        self,
        record: dict[str, Any],
        inventory: dict[str, Any],
        current: dict[str, Any],
        exclude: tuple[str, ...],
    ) -> tuple[dict[str, Any], str] | None:
        from ansible_collections.qonnect.core.plugins.module_utils.placement import engine
        from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError
        from ansible_collections.qonnect.core.plugins.module_utils.qos import Application

        name = str(record.get("name"))
        self.scales[name] = None
        policy = self.policy_of(record)
        if policy is None:  # the user's policy cannot be read now: judge nothing against it
            return None
        parsed = self.read(inventory)
        if isinstance(parsed, InventoryError):  # no usable fleet now: nothing is judged
            log.info("drift check of %s skipped: %s", name, parsed)
            return None
        fleet = self.fleet(inventory)
        request = PlanRequest(
            record, self._avoid(policy, exclude), policy.get("scorer"), policy.get("hysteresis")
        )
        try:
            found = self.planner([request], fleet)
            if name not in found.services:  # no feasible plan or no usable fleet now: no drift move
                log.info(
                    "drift check of %s skipped: %s", name, found.unplaceable.get(name, "no usable fleet")
                )
                return None
            app = Application.from_dict(record["application"])
            now = engine.objective_on(fleet, app, {"services": current})
        finally:  # the fleet's capacity is the inventory's again, for the next judgement and check
            fleet.set_capacity(fleet.free_inventory)
        self.scales[name] = found.scales.get(name)
        after = found.objectives[name]
        if after < now:  # worse than staying: the current placement lost room (a NotReady node,
            # refused credentials...): the failure rules judge that, with their graces
            log.info("drift check of %s: objective %.4f -> %.4f is no gain", name, now, after)
            return None
        return found.services[name], (
            f"objective {now:.4f} -> {after:.4f} with its {found.policies[name]} beyond its hysteresis"
        )

    def unaffected(
        self,
        record: dict[str, Any],
        current: dict[str, Any],
        exclude: tuple[str, ...],
        before: dict[str, Any],
        after: dict[str, Any],
        changed: frozenset[str],
    ) -> bool:
        """Whether the application, judged on ``before``, would be planned exactly so on
        ``after`` too, which differs from it only on the ``changed`` clusters (False when that
        cannot be shown): then the verdict on ``before`` is the verdict on ``after``."""
        from ansible_collections.qonnect.core.plugins.module_utils.placement.impact import (
            unaffected as engine_unaffected,
        )
        from ansible_collections.qonnect.core.plugins.module_utils.qos import Application

        scale = self.scales.get(str(record.get("name")))
        policy = self.policy_of(record)
        old, new = self.fleet(before), self.fleet(after)
        if scale is None or policy is None or old is None or new is None:
            return False
        try:
            app = Application.from_dict(record["application"])
        except (KeyError, TypeError, ValueError):
            return False
        return engine_unaffected(app, self._avoid(policy, exclude), current, scale, old, new, changed)

    def forget(self, keep: set[str]) -> None:
        """Drop the scales of applications no longer judged."""
        self.scales = {a: s for a, s in self.scales.items() if a in keep}

    @staticmethod
    def _avoid(policy: dict[str, Any], exclude: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted({*exclude, *(policy.get("exclude") or ())}))


AGES = ("heartbeat_age",)  # change every tick; what they decide is kept as a flag instead


# what an application's verdict is keyed on (``ChangeGate``), named for /status
KEY_PARTS = ("version", "updated", "policy", "placement", "exclusions", "fleet", "latency", "places outside")


class ChangeGate:
    """A drift judge that judges an application again only when something its verdict depends
    on changed (issue 38: the idle leader re-placed every steady application every tick): its
    spec version and policy, its placement, the clusters it must avoid now, or the fleet - any
    cluster's health, labels, economics, nodes (capacity, requests, readiness, whether their last
    report is recent enough to count) or the latencies among the clusters (``latency_seen``;
    those to places outside the fleet count for the applications that name them). Latencies
    count only for an application a latency score or filter reads (``reads_latency``): the
    engine scores a service with no dependency and no ``maxLatency`` the same whatever the
    table holds, and the agents' measured round trips move a little at every report. Heartbeat
    ages and an agent's round trip to the KB alone leave the last verdict standing.

    The fleet is read whole: the engine normalises every score over the fleet's usable nodes
    (the spans of energy and price, the best free capacity, the largest latency, each with the
    application's own replicas given back), so a change on a cluster an application could never
    use can still change its verdict (an edge node going stale changed an all-cloud
    application's objective in the property test). A change confined to some clusters keeps a
    verdict only where the judge shows that it cannot move the plan behind it
    (``DriftJudge.unaffected``: none of them is the application's or meets its constraints, and
    none held or passes an extreme of the scale its scores were normalised by); every other
    application is judged again."""

    FLEET = KEY_PARTS.index("fleet")

    PRUNE_EVERY = 100  # inventories between removals of applications no longer judged

    def __init__(self, judge: Replanner) -> None:
        self.judge = judge
        self.verdicts: dict[str, tuple[tuple, int, tuple[dict[str, Any], str] | None]] = {}
        self.judged = 0  # how many times ``judge`` ran (the benchmark's and the tests' count)
        self.carried = 0  # verdicts kept through a fleet change shown not to move their plans
        # why each judgement after an application's first ran: the part of its key that changed
        self.reasons: dict[str, int] = {}
        self.fleet_changes: dict[str, int] = {}  # cluster name or "latency" -> inventories it changed in
        self._last: tuple[dict[str, str], str] | None = None
        self._inventory: dict[str, Any] | None = None
        self._before: dict[str, Any] | None = None  # the inventory before it
        self._changed: frozenset[str] | None = None  # clusters changed between them (None: added or gone)
        self._generation = 0
        self._fleet = ""  # the print of the clusters as the engine reads them, this inventory
        self._latencies = ""  # the print of the latency table as a latency score reads it
        self._latency_shape = ""  # "" when the table is well formed (else the engine refuses it)
        self._latency: dict[str, Any] | None = None  # this inventory's latency table
        self._locations: list[str] = []  # its clusters' locations
        self._clusters: dict[str, tuple[dict[str, Any], str]] = {}  # name -> (entry, its print)
        # app -> (its record, its placement, the key's parts read from them): ``_parts``
        self._held: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, str, bool, frozenset]]] = {}

    def __call__(
        self,
        record: dict[str, Any],
        inventory: dict[str, Any],
        current: dict[str, Any],
        exclude: tuple[str, ...],
    ) -> tuple[dict[str, Any], str] | None:
        if inventory is not self._inventory:
            self._new_inventory(inventory)
        name = str(record.get("name"))
        policy, placement, reads, named = self._parts(name, record, current)
        key = (
            record.get("version"),
            record.get("updated"),
            policy,
            placement,
            tuple(exclude),
            self._fleet,
            self._latencies if reads else self._latency_shape,
            self._references(named),
        )
        found = self.verdicts.get(name)
        if found is not None and found[0] == key:
            self.verdicts[name] = (key, self._generation, found[2])
            return found[2]
        if found is not None and self._carries(record, current, exclude, found, key):
            self.verdicts[name] = (key, self._generation, found[2])
            self.carried += 1
            return found[2]
        self.judged += 1
        if found is not None:
            for part, old, new in zip(KEY_PARTS, found[0], key, strict=True):
                if old != new:
                    self.reasons[part] = self.reasons.get(part, 0) + 1
        verdict = self.judge(record, inventory, current, exclude)
        self.verdicts[name] = (key, self._generation, verdict)
        return verdict

    def _carries(
        self,
        record: dict[str, Any],
        current: dict[str, Any],
        exclude: tuple[str, ...],
        found: tuple[tuple, int, Any],
        key: tuple,
    ) -> bool:
        """Whether the verdict on the inventory before stands: only some clusters changed
        since, nothing else of the key, and the judge shows the change cannot move the plan the
        verdict rests on."""
        unaffected = getattr(self.judge, "unaffected", None)
        if unaffected is None or found[1] != self._generation - 1:
            return False
        if not self._changed or self._before is None or self._inventory is None:
            return False
        if any(old != new for i, (old, new) in enumerate(zip(found[0], key, strict=True)) if i != self.FLEET):
            return False
        return bool(unaffected(record, current, exclude, self._before, self._inventory, self._changed))

    def _new_inventory(self, inventory: dict[str, Any]) -> None:
        self._before, self._inventory = self._inventory, inventory
        self._generation += 1
        if self._generation % self.PRUNE_EVERY == 0:
            old = self._generation - self.PRUNE_EVERY
            self.verdicts = {a: v for a, v in self.verdicts.items() if v[1] > old}
            self._held = {a: v for a, v in self._held.items() if a in self.verdicts}
            self._clusters = {}
            forget = getattr(self.judge, "forget", None)
            if forget is not None:
                forget(set(self.verdicts))
        clusters = inventory.get("clusters") or []
        each = {str(c.get("name")): self._cluster_print(c) for c in clusters}
        table = inventory.get("latency_ms") or {}
        locations = [str(c.get("location") or c.get("name")) for c in clusters if isinstance(c, dict)]
        if table is not self._latency or locations != self._locations:  # the view hands out the
            # same table until a latency changes: a million entries at 1,000 clusters
            seen = latency_seen(table, locations)
            self._latencies = _digest(_print(table if seen is None else seen))  # a malformed table whole
            self._latency_shape = "" if seen is not None else self._latencies
        self._latency, self._locations = table, locations
        self._fleet = _digest("|".join(each.values()))
        self._count_changes(each, self._latencies)

    def _count_changes(self, each: dict[str, str], latency: str) -> None:
        """Count what changed in the fleet since the last inventory (cluster names, or
        ``latency``): what the fleet part of ``reasons`` was, when it was."""
        before, self._last = self._last, (each, latency)
        self._changed = None
        if before is None:
            return
        changed = [n for n in set(each) | set(before[0]) if each.get(n) != before[0].get(n)]
        self._changed = frozenset(changed) if set(each) == set(before[0]) else None
        if latency != before[1]:
            changed.append("latency")
        for name in changed:
            self.fleet_changes[name] = self.fleet_changes.get(name, 0) + 1

    def _parts(
        self, name: str, record: dict[str, Any], current: dict[str, Any]
    ) -> tuple[str, str, bool, frozenset]:
        """The parts of an application's key read from its record and placement (printed once
        while the view hands out the same objects: a tick over 1,000 applications printed them
        all again)."""
        held = self._held.get(name)
        if held is not None and held[0] is record and held[1] is current:
            return held[2]
        named = set()
        for svc in (record.get("application") or {}).get("services") or []:
            for limit in ((svc if isinstance(svc, dict) else {}).get("constraints") or {}).get(
                "max_latency"
            ) or []:
                named.add(str((limit or {}).get("from")))
        parts = (_print(record.get("policy")), _print(current), reads_latency(record), frozenset(named))
        self._held[name] = (record, current, parts)
        return parts

    def _references(self, named: frozenset) -> str:
        """The latencies to the places outside the fleet an application's services name
        (``maxLatency`` from a location that is no cluster's): they count for it alone."""
        if not named:
            return ""
        outside = sorted(named - set(self._locations))
        if not outside:
            return ""
        table = self._latency or {}
        return _print(
            {
                loc: [table.get(loc), [(table.get(c) or {}).get(loc) for c in self._locations]]
                for loc in outside
            }
        )

    def _cluster_print(self, cluster: dict[str, Any]) -> str:
        from ansible_collections.qonnect.core.plugins.module_utils.placement.model import (
            NODE_HEARTBEAT_TIMEOUT,
        )

        name = str(cluster.get("name"))
        cached = self._clusters.get(name)
        if cached is not None and cached[0] is cluster:  # the view hands out the same entry while unchanged
            return cached[1]
        nodes = [
            {
                **{k: v for k, v in n.items() if k not in AGES},
                "recent": n.get("heartbeat_age") is None or n["heartbeat_age"] <= NODE_HEARTBEAT_TIMEOUT,
            }
            for n in cluster.get("nodes") or []
        ]
        found = _digest(_print({**{k: v for k, v in cluster.items() if k not in AGES}, "nodes": nodes}))
        self._clusters[name] = (cluster, found)
        return found


def reads_latency(record: dict[str, Any]) -> bool:
    """Whether the engine's verdict on the application reads the latency table: a service
    with a dependency (its latency score, and its callers') or a ``maxLatency`` bound (the
    filter and the score). Without either, every latency score is 1 (criteria.latency_scores,
    optimal.assign) whatever the table holds."""
    for svc in (record.get("application") or {}).get("services") or []:
        svc = svc if isinstance(svc, dict) else {}
        if svc.get("depends_on") or (svc.get("constraints") or {}).get("max_latency"):
            return True
    return False


def latency_seen(table: Any, locations: list[str]) -> list[Any] | None:
    """The latency table as the placement engine reads it (placement/fleet.py): the entries
    among the clusters' locations and the largest value of all (which normalises every latency
    score); None when an entry is not a number >= 0 or a row no mapping (the engine refuses such
    an inventory). Entries of other places count only so - an agent's round trip to the KB
    changes at every report and would otherwise re-judge every application - and through the
    applications that name them (``ChangeGate._references``)."""
    if not isinstance(table, dict):
        return None
    fleet = set(locations)
    block: dict[str, Any] = {}
    largest: float | None = None
    for src, row in table.items():
        if not isinstance(row, dict):
            return None
        values = list(row.values())
        if not all(type(v) in (int, float) and v >= 0 for v in values):  # NaN too
            return None
        if values:
            largest = max(values) if largest is None else max(largest, *values)
        if src in fleet:
            block[str(src)] = {dst: v for dst, v in row.items() if dst in fleet}
    return [block, largest]


def _print(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def engine_replanner(
    default_scorer: str = "weighted", default_hysteresis: float = 0.1, policy_of: PolicyOf = record_policy
) -> DriftJudge | None:
    """A drift judge on a planner of its own (see :func:`drift_judge`), or None if the placement
    engine is not installed."""
    planner = engine_planner(default_scorer, default_hysteresis)
    return None if planner is None else drift_judge(planner, policy_of)


@dataclass(frozen=True)
class PlanRequest:
    """One application of a batch to place: its KB record, the clusters to avoid (the decision's
    and the user's stored exclusions) and the user's stored scorer and hysteresis (None: the
    controller's defaults)."""

    record: dict[str, Any]
    exclude: tuple[str, ...]
    scorer: str | None = None
    hysteresis: float | None = None


@dataclass
class BatchPlan:
    """What the planner found: a services mapping per placed application, and why each other
    one cannot be placed now (an application in neither had no usable fleet to be judged on)."""

    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    unplaceable: dict[str, str] = field(default_factory=dict)
    objectives: dict[str, float] = field(default_factory=dict)  # each plan's default objective
    policies: dict[str, str] = field(default_factory=dict)  # the scorer and hysteresis it was planned with
    scales: dict[str, Any] = field(default_factory=dict)  # the scale each plan was scored on


# plan(requests, inventory) -> one plan for all of them, in one pass over the inventory
# planner(requests, inventory) -> their plans; the inventory as the KB gives it, already parsed, or
# built into the engine's arrays (fleet.Fleet: the drift judge's one build per inventory)
Planner = Callable[[list[PlanRequest], Any], BatchPlan]


def engine_planner(default_scorer: str = "weighted", default_hysteresis: float = 0.1) -> Planner | None:
    """A planner backed by the engine's ``place_many``: the inventory is built once and every
    application of the batch is placed on it in order, each with its own policy, against the
    capacity the earlier ones took. None if the engine is not installed."""
    try:
        from ansible_collections.qonnect.core.plugins.module_utils.placement.batch import (
            place_batch,
            policy_item,
        )
        from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError
        from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import Fleet
        from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
    except ImportError as exc:
        log.warning("placement engine unavailable (%s): migrations place for themselves", exc)
        return None
    defaults = (default_scorer, default_hysteresis)

    def plan(requests: list[PlanRequest], inventory: Any) -> BatchPlan:
        out = BatchPlan()
        batch: list[tuple[PlanRequest, dict[str, Any]]] = []
        for req in requests:
            name = str(req.record.get("name"))
            try:
                app = Application.from_dict(req.record["application"])
                item = policy_item(app, req.scorer, req.hysteresis, req.exclude, defaults)
            except (KeyError, TypeError, ValueError) as exc:
                out.unplaceable[name] = f"cannot be planned: {exc}"
                continue
            batch.append((req, item))
        if not batch:
            return out
        fleet = inventory if isinstance(inventory, Fleet) else None
        if fleet is not None:  # an already built fleet (the drift judge's): from its inventory's capacity
            fleet.set_capacity(fleet.free_inventory)
        try:
            result = place_batch(
                [item for _req, item in batch], inventory if fleet is None else fleet.inventory, fleet=fleet
            )
        except InventoryError as exc:  # no usable fleet: nothing is judged; the run reports it
            log.info("batch plan skipped: %s", exc)
            return out
        if result.fallback:
            log.warning(
                "batch plan failed (%s); planned its %d applications one by one", result.fallback, len(batch)
            )
        for req, item in batch:
            _collect(result, req, item, out, why_not)
        return out

    return plan


def why_not(req: PlanRequest, exc: Exception) -> str:
    """Why an application of a batch cannot be placed, as the decision's deferral says it."""
    service = getattr(exc, "service", None)
    if service is None:
        return str(exc)
    without = f" without {', '.join(req.exclude)}" if req.exclude else ""
    return f"{service}: no eligible cluster ({getattr(exc, 'constraint', exc)}){without}"


def _collect(
    result: Any, req: PlanRequest, item: dict[str, Any], out: BatchPlan, why_not: Callable[..., str]
) -> None:
    name = item["app"].name
    if name in result.plans:
        out.services[name] = result.plans[name].services
        out.objectives[name] = float(result.plans[name].objective)
        out.policies[name] = f"{item['scorer']} scorer, hysteresis {item['hysteresis']:g}"
        out.scales[name] = result.scales.get(name)
    elif name in result.errors:
        out.unplaceable[name] = why_not(req, result.errors[name])
