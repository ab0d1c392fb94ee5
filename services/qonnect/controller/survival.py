"""The leader watches N-1 survivability (issue 37): would every application outlive the failures
it states it must survive, with the fleet as it is now?

The report itself is placement/whatif.py's (the controller's own heal planner, every single
cluster failure and every value of the labels named); this module decides when to compute it,
with what, and what to tell:

- When: only the leader, off the tick. At most every ``every`` seconds the tick hands its
  snapshot to one background thread (never two at once; the tick itself does nothing more),
  which compares a fingerprint of the fleet (per cluster: health, labels, nodes and their
  capacity, rounded; per application: spec version and placement) with the one the last report
  was computed from, and computes a report only if something changed. A deploy (a new spec
  version or a new application), a cluster loss and a capacity change all show in the
  fingerprint. Each recomputation's time is logged and shown in the status.
- Incrementally: the previous report is kept and only the clusters that changed (their own
  fingerprint, or hosting an application whose version, placement or policy changed, before or
  after) are passed to ``whatif.survivability``, which re-plans only the scenarios they touch.
- Policies: each application's stored policy (the ``deploy.intent`` events, read as
  ``planning.Plans.policy`` reads them) is cached, keyed by the application's spec version and its
  placement record's ``updated`` time (every deploy writes the placement or a new version); it is
  read again when that key changes, while a deploy's ``applying`` intent is open, and at the
  latest every ``POLICY_TTL`` seconds.
- What: one KB event per transition of an application, ``controller.survivability.lost`` (the
  scenarios it would not survive and each one's shortfall) and ``controller.survivability.regained``,
  plus one ``controller.survivability.fleet`` event whenever the fleet's verdict (survivable, and
  which applications are not) changes, with the fleet summary in ``data`` (first shortfall, the
  least spare capacity per tier over the scenarios) for the status page and ``qonnect status``.

Idempotent across leader changes: a new leader does not trust its memory (it resets at each new
term) but starts from the KB's last recorded state: per application the newest lost/regained
event written by a controller among its last ``intent.LOOKBACK`` events (no such event: it was
survivable - nothing is announced for an application that always was), and for the fleet the
newest fleet event among the KB's last ``SEED_EVENTS`` events. It emits only where its own
verdict differs from that record, so a leader change re-emits nothing that did not change.
Events are written under the leader's fencing token: a deposed leader's late event is refused.
(A record older than those windows is not found: the new leader then re-announces the current
state once.)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement import whatif
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError
from ansible_collections.qonnect.core.plugins.module_utils.placement.plan import clusters_of
from ansible_collections.qonnect.core.plugins.module_utils.placement.whatif import amount
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent

log = logging.getLogger("qonnect.controller.survival")

LOST = "controller.survivability.lost"  # an application stopped being survivable
REGAINED = "controller.survivability.regained"  # ... and is survivable again
FLEET = "controller.survivability.fleet"  # the fleet's verdict changed (summary in data)
TYPES = (LOST, REGAINED)
EVERY = 10.0  # seconds between fingerprints of the fleet (and so between recomputations)
POLICY_TTL = 300.0  # a cached policy is read again at the latest after this many seconds
SEED_EVENTS = 1000  # newest KB events a new leader searches for the last fleet verdict
LISTED = 50  # applications named in a fleet event at most
DATA_BUDGET = 7000  # characters of an event's data as JSON (the KB takes 8 KiB)
CPU_STEP, BYTES_STEP = 0.01, 2**20  # capacity changes smaller than this are not a change


# -- what changed --------------------------------------------------------------------------------


def cluster_signature(entry: dict[str, Any]) -> tuple:
    """What of a cluster's inventory entry the report depends on (not its heartbeat ages)."""
    nodes = []
    for n in entry.get("nodes") or []:
        alloc, req = n.get("allocatable") or {}, n.get("requested") or {}
        nodes.append(
            (
                n.get("name"),
                bool(n.get("ready")),
                bool(n.get("schedulable", True)),
                tuple(sorted(k for k, v in (n.get("pressure") or {}).items() if v)),
                len(n.get("taints") or ()),
                *(_step(alloc.get(r), r) for r in ("cpu", "memory", "ephemeral_storage")),
                *(_step(req.get(r), r) for r in ("cpu", "memory", "ephemeral_storage")),
            )
        )
    labels = tuple(sorted((entry.get("labels") or {}).items()))
    return (bool(entry.get("healthy")), entry.get("tier"), labels, tuple(sorted(nodes, key=str)))


def _step(value: Any, resource: str) -> int:
    try:
        return round(float(value or 0) / (CPU_STEP if resource == "cpu" else BYTES_STEP))
    except (TypeError, ValueError):
        return 0


class Fingerprint:
    """The fleet as a report depends on it: clusters by signature, applications by (version,
    where they run) and the clusters each one is on."""

    def __init__(self, snapshot: Any) -> None:
        inventory = snapshot.inventory
        self.clusters = {c["name"]: cluster_signature(c) for c in inventory.get("clusters") or []}
        placements = inventory.get("placements") or {}
        self.apps: dict[str, tuple] = {}
        self.hosts: dict[str, set[str]] = {}
        for record in snapshot.applications:
            name = record.get("name")
            where = placements.get(name) or {}
            self.hosts[name] = clusters_of(where)
            self.apps[name] = (record.get("version"), repr(sorted((s, repr(e)) for s, e in where.items())))

    def changed(
        self, old: Fingerprint | None, policies: set[str] | frozenset[str] = frozenset()
    ) -> set[str] | None:
        """The clusters that changed since ``old`` (None: everything, no previous report)."""
        if old is None:
            return None
        out = {c for c, sig in self.clusters.items() if old.clusters.get(c) != sig}
        out |= set(old.clusters) - set(self.clusters)
        for app in set(self.apps) | set(old.apps):
            if app in policies or self.apps.get(app) != old.apps.get(app):
                out |= self.hosts.get(app, set()) | old.hosts.get(app, set())
        return out

    def same(self, old: Fingerprint | None) -> bool:
        return old is not None and self.clusters == old.clusters and self.apps == old.apps


# -- policies ------------------------------------------------------------------------------------


class PolicyCache:
    """Each application's stored policy and its last recorded survivability (from the same read of
    its events), read again only when its key (spec version, placement update) changes, while its
    deploy is applying, or after ``ttl`` seconds."""

    def __init__(self, kb: Any, ttl: float = POLICY_TTL, clock: Callable[[], float] = time.monotonic):
        self.kb, self.ttl, self.clock = kb, ttl, clock
        self.entries: dict[str, tuple[Any, float, dict[str, Any], bool | None]] = {}
        self.reads = 0

    def get(self, app: str, key: Any) -> tuple[dict[str, Any], bool | None, bool]:
        """(policy, recorded survivability (None: never recorded), whether it was read now).
        KBError propagates."""
        found = self.entries.get(app)
        if found is not None and found[0] == key and self.clock() - found[1] < self.ttl:
            return found[2], found[3], False
        events = self.kb.list_events(application=app, limit=intent.LOOKBACK)
        self.reads += 1
        policy = intent.stored_policy(events)
        recorded = last_recorded(events)
        newest = intent.newest(events)
        if newest is not None and newest["state"] == intent.APPLYING:
            self.entries.pop(app, None)  # a deploy is storing a new policy: read again next time
        else:
            self.entries[app] = (key, self.clock(), policy, recorded)
        return policy, recorded, True

    def forget(self, keep: set[str]) -> None:
        for app in set(self.entries) - keep:
            del self.entries[app]


def last_recorded(events: list[dict[str, Any]]) -> bool | None:
    """The survivability a controller last recorded among an application's events (None: none)."""
    ours = [e for e in events if e.get("type") in TYPES and e.get("role") == "controller"]
    if not ours:
        return None
    return max(ours, key=lambda e: e.get("id", 0))["type"] == REGAINED


# -- the report as people and programs read it -------------------------------------------------------


def outcome_text(report: whatif.Report, scenario: str, app: str, reason: str) -> str:
    """Why ``app`` does not survive ``scenario``: the shortfall (service, resource, how much) if
    the report knows it, else the planner's reason."""
    for s in report.scenarios:
        if s.name == scenario:
            outcome = s.outcomes.get(app)
            if outcome is not None and outcome.shortfall is not None:
                return outcome.shortfall.text()
    return reason


def violations(report: whatif.Report, app: str) -> list[dict[str, str]]:
    return [
        {"scenario": v["scenario"], "shortfall": outcome_text(report, v["scenario"], app, v["reason"])}
        for v in report.applications.get(app, {}).get("violations", [])
    ]


def lost_message(app: str, found: list[dict[str, str]]) -> str:
    shown = "; ".join(f"{v['scenario']}: {v['shortfall']}" for v in found[:5])
    more = f"; and {len(found) - 5} more scenario(s)" if len(found) > 5 else ""
    return f"{app} is no longer survivable: it would not be re-placed if {shown}{more}"


def summary(report: whatif.Report) -> dict[str, Any]:
    """The fleet's verdict: per application survivable or not (and why), the first shortfall of
    the report, and per tier the least spare capacity any scenario leaves (with that scenario)."""
    apps = {}
    for name in sorted(report.applications):
        found = violations(report, name)
        apps[name] = {"survivable": not found, "violations": found}
    first = None
    for s in report.scenarios:
        for app, outcome in s.outcomes.items():
            if not outcome.placed:
                text = outcome.shortfall.text() if outcome.shortfall else outcome.reason
                first = {"scenario": s.name, "application": app, "text": text}
                break
        if first:
            break
    spare: dict[str, dict[str, Any]] = {}
    for s in report.scenarios:
        for tier, free in s.spare.items():
            least = spare.setdefault(tier, {})
            for resource, value in free.items():
                if resource not in least or value < least[resource]:
                    least[resource] = value
                    least[f"{resource}_text"] = amount(resource, value)
                    least[f"{resource}_scenario"] = s.name
    return {
        "survivable": report.survivable,
        "applications": apps,
        "not_survivable": sorted(n for n, a in apps.items() if not a["survivable"]),
        "first_shortfall": first,
        "spare": spare,
        "scenarios": len(report.scenarios),
    }


def fleet_data(doc: dict[str, Any]) -> dict[str, Any]:
    """The fleet event's data (the KB takes at most 8 KiB): the verdict, up to LISTED of the
    applications that are not survivable (each with its first scenario) as far as they fit, how
    many there are, the first shortfall and the spare per tier."""
    data: dict[str, Any] = {
        "survivable": doc["survivable"],
        "not_survivable": {},
        "not_survivable_count": len(doc["not_survivable"]),
        "applications": len(doc["applications"]),
        "first_shortfall": _clip(doc["first_shortfall"]),
        "spare": {
            t: {k: v for k, v in free.items() if not k.endswith("_scenario")}
            for t, free in doc["spare"].items()
        },
    }
    listed = data["not_survivable"]
    for name in doc["not_survivable"][:LISTED]:
        found = doc["applications"][name]["violations"]
        listed[name] = found[0]["scenario"][:200] if found else ""
        if len(json.dumps(data)) > DATA_BUDGET:
            del listed[name]
            break
    return data


def fitted(violations: list[dict[str, str]]) -> list[dict[str, str]]:
    """As many of an application's violations as fit an event's data."""
    out: list[dict[str, str]] = []
    for v in violations[:20]:
        out.append({"scenario": v["scenario"][:300], "shortfall": v["shortfall"][:500]})
        if len(json.dumps(out)) > DATA_BUDGET:
            out.pop()
            break
    return out


def _clip(first: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if first is None else {k: str(v)[:500] for k, v in first.items()}


def fleet_message(doc: dict[str, Any]) -> str:
    if doc["survivable"]:
        return f"the fleet is survivable: all {len(doc['applications'])} application(s) outlive the failures they state"
    first = doc["first_shortfall"]
    head = f"the fleet is not survivable: {len(doc['not_survivable'])} application(s) would not be re-placed"
    names = ", ".join(doc["not_survivable"][:10]) + (" ..." if len(doc["not_survivable"]) > 10 else "")
    return f"{head} ({names})" + (f"; first shortfall: {first['scenario']}: {first['text']}" if first else "")


# -- the watch -------------------------------------------------------------------------------------


class Watch:
    """The leader's survivability watch. ``tick`` is called by every leader tick and returns at
    once; ``check`` (and the report, ``compute``) runs in a background thread (or inline, for
    tests)."""

    def __init__(
        self,
        kb: Any,
        defaults: tuple[str, float] = ("weighted", 0.1),
        every: float = EVERY,
        labels: tuple[str, ...] = (),
        background: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kb = kb
        self.defaults = defaults
        self.every = every
        self.labels = tuple(labels)
        self.background = background
        self.clock = clock
        self.term: int | None = None
        self.due = 0.0
        self.thread: threading.Thread | None = None
        self._reset()
        self.doc: dict[str, Any] = {"state": "not computed yet"}
        self.runs = 0  # reports computed
        self.checks = 0  # fingerprints compared

    def _reset(self) -> None:
        """A new term: nothing of the last one is trusted (the KB's record is read again)."""
        self.previous: whatif.Report | None = None
        self.seen: Fingerprint | None = None  # what the previous report was computed from
        self.recorded: dict[str, bool] = {}  # application -> survivability as the KB records it
        self.fleet_recorded: tuple | None = None
        self.fleet_seeded = False
        self.policy_seen: dict[str, tuple] = {}  # application -> the policy the report used
        self.policies = PolicyCache(self.kb, clock=self.clock)

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def tick(
        self,
        snapshot: Any,
        placements: list[dict[str, Any]],
        term: int,
        fence: dict[str, int] | None,
        leading: Callable[[], bool],
    ) -> bool:
        """On a leader's tick: start a check if it is due and none runs (returns whether one
        was started). The check - the fleet's fingerprint, and the report if the fleet changed
        since the last one - runs on its own thread: the tick only hands it the snapshot."""
        if not self.enabled:
            return False
        if self.thread is not None and self.thread.is_alive():
            return False
        if term != self.term:
            self.term = term
            self._reset()
            self.due = 0.0
        now = self.clock()
        if now < self.due:
            return False
        self.due = now + self.every
        args = (snapshot, placements, term, fence, leading)
        if not self.background:
            self.check(*args)
            return True
        self.thread = threading.Thread(target=self.check, args=args, name="survivability", daemon=True)
        self.thread.start()
        return True

    def check(
        self,
        snapshot: Any,
        placements: list[dict[str, Any]],
        term: int,
        fence: dict[str, int] | None,
        leading: Callable[[], bool],
    ) -> bool:
        """Recompute if the fleet changed since the last report (or a cached policy must be read
        again); returns whether it did."""
        self.checks += 1
        try:
            print_ = Fingerprint(snapshot)
            updated = {p.get("application"): p.get("updated") for p in placements}
            if print_.same(self.seen) and not self._policies_stale(snapshot, updated):
                return False
        except Exception as exc:  # a malformed snapshot must not kill the watch
            log.exception("survivability: cannot fingerprint the fleet")
            self.doc = dict(self.doc, state=f"failed: {exc}")
            return False
        self.compute(snapshot, updated, print_, term, fence, leading)
        return True

    def _policies_stale(self, snapshot: Any, updated: dict[Any, Any]) -> bool:
        """A cached policy that must be read again: never cached (or a deploy was applying), its
        key (spec version, placement update) changed, or its TTL ran out."""
        now = self.clock()
        for record in snapshot.applications:
            name = record.get("name")
            found = self.policies.entries.get(name)
            if (
                found is None
                or found[0] != (record.get("version"), updated.get(name))
                or now - found[1] >= self.policies.ttl
            ):
                return True
        return False

    def compute(
        self,
        snapshot: Any,
        updated: dict[Any, Any],
        print_: Fingerprint,
        term: int,
        fence: dict[str, int] | None,
        leading: Callable[[], bool],
    ) -> None:
        """Recompute the report (incrementally when there is a previous one) and announce what
        changed; never raises (a failure is logged and the next due tick tries again)."""
        try:
            self._compute(snapshot, updated, print_, term, fence, leading)
        except Exception as exc:  # a bad report must not kill the watch
            log.exception("survivability: recomputation failed")
            self.doc = dict(self.doc, state=f"failed: {exc}")

    def _compute(
        self,
        snapshot: Any,
        updated: dict[Any, Any],
        print_: Fingerprint,
        term: int,
        fence: dict[str, int] | None,
        leading: Callable[[], bool],
    ) -> None:
        began = time.monotonic()
        tenants, problems, fresh = [], {}, set()
        names = set()
        for record in snapshot.applications:
            name = str(record.get("name"))
            names.add(name)
            try:
                policy, recorded, read = self.policies.get(name, (record.get("version"), updated.get(name)))
                if isinstance(record.get("policy"), dict):  # the record holds it (intent.recorded_policy)
                    policy = intent.recorded_policy(record, list)
            except KBError as exc:
                log.info("survivability: cannot read the policy of %s (%s); next time", name, exc)
                self.due = 0.0  # try again at the next tick's due time
                return
            if read:
                fresh.add(name)
                if name not in self.recorded:  # the KB's record, once per term
                    self.recorded[name] = recorded is not False
            try:
                tenants.append(whatif.tenant_of(record, policy))
            except (KeyError, TypeError, ValueError) as exc:
                problems[name] = f"cannot be planned: {exc}"
        self.policies.forget(names)
        read_s = time.monotonic() - began
        # applications whose policy was read again count as changed only if it is a different one
        changed_policy = {t.name for t in tenants if t.name in fresh and self._policy_changed(t)}
        try:
            fleet = whatif.WhatIf(snapshot.inventory, tenants, self.defaults)
        except (InventoryError, ValueError, KeyError) as exc:
            log.warning("survivability: the inventory cannot be planned on: %s", exc)
            return
        changed = print_.changed(self.seen, changed_policy)
        previous = self.previous if changed is not None else None
        report = whatif.survivability(fleet, self.labels, previous=previous, changed=changed or ())
        took = time.monotonic() - began
        self.previous, self.seen = report, print_
        self.policy_seen = {t.name: (t.scorer, t.hysteresis, t.exclude) for t in tenants}
        self.runs += 1
        log.info(
            "survivability: %s; %d scenario(s), %d re-planned (%s, %d changed cluster(s)) in %.0f ms "
            "(policies %.0f ms, %d read; report %.0f ms)",
            "survivable" if report.survivable else "NOT survivable",
            len(report.scenarios),
            report.evaluated,
            "full" if previous is None else "incremental",
            len(changed or ()),
            took * 1000,
            read_s * 1000,
            len(fresh),
            report.seconds * 1000,
        )
        doc = summary(report)
        doc.update(
            state="computed",
            computed_at=time.time(),
            seconds=round(took, 4),
            report_seconds=round(report.seconds, 4),
            evaluated=report.evaluated,
            incremental=previous is not None,
            problems=problems,
            term=term,
        )
        self.doc = doc
        if leading():
            self._announce(report, doc, fence)

    def _policy_changed(self, tenant: whatif.Tenant) -> bool:
        return self.policy_seen.get(tenant.name) != (tenant.scorer, tenant.hysteresis, tenant.exclude)

    # -- events ------------------------------------------------------------------------------

    def _announce(self, report: whatif.Report, doc: dict[str, Any], fence: dict[str, int] | None) -> None:
        """One event per application whose verdict differs from the KB's record, and one fleet
        event when the fleet's verdict differs from the last one recorded."""
        for name, verdict in doc["applications"].items():
            now_ok = verdict["survivable"]
            if self.recorded.get(name, True) == now_ok:
                continue
            if now_ok:
                message = f"{name} is survivable again: it would be re-placed in every failure it states"
            else:
                message = lost_message(name, verdict["violations"])
            body = {
                "type": REGAINED if now_ok else LOST,
                "reason": "survivable" if now_ok else "not-survivable",
                "message": message[:8000],
                "application": name,
                "data": {"survivable": now_ok, "violations": fitted(verdict["violations"])},
            }
            if self._post(body, fence):
                self.recorded[name] = now_ok
                log.warning("survivability: %s", message)
        verdict = (doc["survivable"], tuple(doc["not_survivable"]))
        if not self.fleet_seeded:
            self.fleet_recorded = self._seed_fleet()
            self.fleet_seeded = True
        if verdict != self.fleet_recorded:
            body = {
                "type": FLEET,
                "reason": "survivable" if doc["survivable"] else "not-survivable",
                "message": fleet_message(doc)[:8000],
                "data": fleet_data(doc),
            }
            if self._post(body, fence):
                self.fleet_recorded = verdict

    def _seed_fleet(self) -> tuple | None:
        """The fleet verdict a controller last recorded among the KB's newest events."""
        try:
            events = self.kb.list_events(limit=SEED_EVENTS)
        except KBError as exc:
            log.info("survivability: cannot read the last fleet verdict (%s)", exc)
            return None
        ours = [e for e in events if e.get("type") == FLEET and e.get("role") == "controller"]
        if not ours:
            return None
        data = max(ours, key=lambda e: e.get("id", 0)).get("data") or {}
        if int(data.get("not_survivable_count") or 0) > len(data.get("not_survivable") or {}):
            return None  # a truncated list: cannot tell, announce again
        return (bool(data.get("survivable")), tuple(sorted(data.get("not_survivable") or {})))

    def _post(self, body: dict[str, Any], fence: dict[str, int] | None) -> bool:
        if fence:
            body["fencing"] = {"term": int(fence["term"]), "seq": int(fence["seq"])}
        try:
            self.kb.post_event(body)
        except KBError as exc:
            log.info("survivability: cannot record %s (%s)", body["type"], exc)
            return False
        return True

    # -- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The last report's summary for /status (``state`` says if there is none yet)."""
        if not self.enabled:
            return {"state": "off (--survivability-every 0)"}
        return dict(
            self.doc, every=self.every, runs=self.runs, checks=self.checks, policy_reads=self.policies.reads
        )
