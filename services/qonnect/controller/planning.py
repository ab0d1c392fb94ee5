"""Planning: the one plan each attempt of a batch applies, with the user's stored policy.

The leader places every application of a batch once, in one pass over its snapshot's inventory
with each application's stored policy (scorer, hysteresis, exclusions); the run applies exactly
that plan. A plan gone stale fails its run, and the next attempt plans afresh. The QoS-drift
judge reads the same stored policy (``judged_policy``), so a judged drift is the move the plan
then makes.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent

from qonnect.controller import hedging
from qonnect.controller.commits import Commits
from qonnect.controller.detector import Settings, Snapshot
from qonnect.controller.replan import BatchPlan, Planner, PlanRequest
from qonnect.controller.settling import exclusions_now
from qonnect.controller.state import Lead
from qonnect.controller.statemachine import Decision

log = logging.getLogger("qonnect.controller")

# what the batch plan says of one decision (Plans.plan); SKIP: ends without a run (a hedge
# that is not needed or does not fit, with why)
PLANNED, DEFER, HOLD, FREE, SKIP = "planned", "defer", "hold", "free", "skip"

Item = tuple[Decision, dict[str, Any]]  # (decision, the application's stored policy)


class Plans:
    """The batch plan, and the stored policies it (and the drift judge) plans with."""

    def __init__(
        self, kb: KBClient, planner: Planner | None, commits: Commits, lead: Lead, settings: Settings
    ) -> None:
        self.kb = kb
        self.planner = planner  # the plan each attempt applies: one place_many pass per batch
        self.commits = commits
        self.lead = lead
        self.settings = settings
        self.judged_policies: dict[str, tuple[Any, dict[str, Any]]] = {}  # app -> (record key, policy)

    def plan(self, items: list[Item], snapshot: Snapshot) -> dict[str, tuple[str, Any]]:
        """decision id -> (PLANNED, services) | (DEFER, why) | (HOLD, None) | (FREE, None): one
        placement for every application of the batch, in one pass over the snapshot's inventory,
        each with the user's stored scorer, hysteresis and exclusions plus the decision's.
        Healing beats stability: an application that fits only on a just-recovered cluster is
        planned again with only the clusters it must avoid (and its decision retargeted)."""
        if self.planner is None or not items:
            return {}
        placements = snapshot.inventory.get("placements") or {}
        fixed = {  # a discarded hedge: the placement as it was, nothing to plan
            d["id"]: (PLANNED, hedging.discarded(placements.get(d["app"]) or {}))
            for d, _policy in items
            if d["kind"] == hedging.DISCARD
        }
        items = [(d, p) for d, p in items if d["id"] not in fixed]
        if not items:
            return fixed
        relaxed: dict[str, list[str]] = {}  # decision id -> the exclusions it is planned with
        began = time.monotonic()
        reqs, by_app = _requests(items, snapshot, relaxed)
        found: BatchPlan = self.planner(reqs, snapshot.inventory)
        strict = dict(found.unplaceable)
        for app in strict:
            decision = by_app[app]
            must, unstable, _on_down = exclusions_now(
                snapshot, self.lead.memory, self.settings, app, decision.get("pinned") or []
            )
            if unstable & set(decision["exclude"]):
                relaxed[decision["id"]] = sorted(must)
        if relaxed:
            found = self.planner(_requests(items, snapshot, relaxed)[0], snapshot.inventory)
        log.info(
            "batch plan: %d of %d application(s) placed in one pass (%.0f ms)",
            len(found.services),
            len(reqs),
            (time.monotonic() - began) * 1000,
        )
        verdicts: dict[str, tuple[str, Any]] = dict(fixed)
        for app, decision in by_app.items():
            verdict = self._verdict(app, decision, found, strict, relaxed)
            if verdict is not None:
                verdicts[decision["id"]] = _hedged(verdict, decision, placements.get(app) or {})
        return _within_share(verdicts, by_app, snapshot, self.settings)

    def _verdict(
        self,
        app: str,
        decision: Decision,
        found: BatchPlan,
        strict: dict[str, str],
        relaxed: dict[str, list[str]],
    ) -> tuple[str, Any] | None:
        """What the batch plan says of one decision (None: nothing, the run places it)."""
        did = decision["id"]
        if app in found.unplaceable:
            return (DEFER, strict.get(app) or found.unplaceable[app])
        if app not in found.services:
            return None  # no usable fleet to judge on: the run places (and reports) it
        if did in relaxed and relaxed[did] != list(decision["exclude"]):
            res = self.commits.propose({"op": "retarget", "id": did, "exclude": relaxed[did]})
            if not res or not res.get("ok"):
                return (HOLD, None)
            log.warning(
                "decision %s: only a just-recovered cluster fits %s: exclusions %s -> %s",
                did,
                app,
                ", ".join(decision["exclude"]) or "none",
                ", ".join(relaxed[did]) or "none",
            )
        self.lead.deferred_why.pop(did, None)
        return (PLANNED, found.services[app])

    def policy(self, app: str, record: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The placement policy the user deployed the application with (scorer, hysteresis,
        exclusions): the KB's record of the application holds it (intent.recorded_policy; its
        events only for a record written before); {} if none is recorded, None if the KB cannot
        be read (the attempt waits rather than heal against the user's policy)."""
        try:
            return intent.recorded_policy(
                record, lambda: self.kb.list_events(application=app, limit=intent.LOOKBACK)
            )
        except KBError as exc:
            log.warning("cannot read the stored policy of %s (%s); not starting its migration yet", app, exc)
            return None

    def judged_policy(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """The stored policy the drift judge uses: the one the heal's plan will use
        (:meth:`policy`), read from the KB's events only for a record that does not carry it,
        and then once per change of the record, not every tick."""
        if isinstance(record.get("policy"), dict):
            return intent.clean_policy(record["policy"])
        app = str(record.get("name"))
        key = (record.get("version"), record.get("updated"))
        cached = self.judged_policies.get(app)
        if cached is not None and cached[0] == key:
            return cached[1]
        policy = self.policy(app, record)
        if policy is not None:
            self.judged_policies[app] = (key, policy)
        return policy


def _requests(
    items: list[Item], snapshot: Snapshot, relaxed: dict[str, list[str]]
) -> tuple[list[PlanRequest], dict[str, Decision]]:
    """The planner's requests for a batch, in decision order (each decision's exclusions, or
    the ``relaxed`` ones it is planned with, plus the user's), and app -> its decision."""
    records = {a.get("name"): a for a in snapshot.applications}
    out, by_app = [], {}
    for decision, policy in items:
        record = records.get(decision["app"])
        if record is None:
            continue  # not in this snapshot: the run places it itself
        did = decision["id"]
        avoid = set(relaxed[did] if did in relaxed else decision["exclude"]) | set(
            policy.get("exclude") or ()
        )
        out.append(PlanRequest(record, tuple(sorted(avoid)), policy.get("scorer"), policy.get("hysteresis")))
        by_app[decision["app"]] = decision
    return out, by_app


def _hedged(verdict: tuple[str, Any], decision: Decision, current: dict[str, Any]) -> tuple[str, Any]:
    """A hedge's verdict: the current placement plus standby copies where the planner would put
    what runs on the suspect cluster (SKIP when none fits); a confirmed move of a hedged
    application: its standby copies promoted (hedging.py)."""
    kind, detail = verdict
    if decision["kind"] == hedging.HEDGE:
        if kind != PLANNED:
            return (SKIP, f"hedge not started: {detail or 'nothing fits'}")
        plan = hedging.standby_plan(current, detail, set(decision["exclude"]))
        if not hedging.standby_targets(plan):
            return (SKIP, "hedge not started: no standby fits anywhere but where the services run")
        return (PLANNED, plan)
    if kind == PLANNED and hedging.has_standby(current):
        return (PLANNED, hedging.promoted(current, detail, set(decision["exclude"])))
    return verdict


def _within_share(
    verdicts: dict[str, tuple[str, Any]], by_app: dict[str, Decision], snapshot: Snapshot, settings: Settings
) -> dict[str, tuple[str, Any]]:
    """The batch's standby copies take at most ``hedge_share`` of the fleet's free CPU: the
    hedges past it, in decision order, are not started (and say so)."""
    hedges = [
        d
        for d in by_app.values()
        if d["kind"] == hedging.HEDGE and verdicts.get(d["id"], ("",))[0] == PLANNED
    ]
    if not hedges:
        return verdicts
    avoid = {c for d in hedges for c in d["exclude"]}
    budget = settings.hedge_share * hedging.fleet_free_cpu(snapshot.inventory, avoid)
    records = {a.get("name"): a for a in snapshot.applications}
    used = 0.0
    for decision in hedges:  # in decision order
        cpu = hedging.standby_cpu(records.get(decision["app"]) or {}, verdicts[decision["id"]][1])
        if used + cpu > budget:
            verdicts[decision["id"]] = (
                SKIP,
                f"hedge not started: its standby copies ({cpu:g} CPU) do not fit the hedges' share: "
                f"{settings.hedge_share:.0%} of the fleet's free CPU is {budget:g}, {used:g} of it "
                "taken by this batch's other hedges",
            )
        else:
            used += cpu
    return verdicts
