"""Hedged failover (issue 36): start the replacement on suspicion, move only on confirmation.

The cluster grace exists because a short outage cannot be told from a long one until it ends;
waiting to *move* does not require waiting to *start* the replacement. So, while a cluster is
suspect (its agent's evidence says it failed and the leader's own probe of its API fails too),
the leader decides a ``hedge`` for each application with a service whose only active instances
run there (a service spread over a healthy cluster too still serves): the batch planner, with
the application's stored policy, picks where those services would go, and the run makes those copies
as ``standby`` targets of its Binding (placement/binding.py) - make only: nothing is removed and
the suspect cluster is held, not touched (``plan.hold``). Callers' address stubs prefer the
standby as soon as it is Ready (k8s/deployer.py ranks a held cluster's instance last).

Then one of two things happens, each an ordinary fenced decision:
- the failure is confirmed (the grace ran out): the cluster-down decision's plan *promotes* the
  standby (it becomes the placement; the suspect's copies are orphans, removed when it returns);
- the cluster comes back within its grace: a ``hedge-discard`` decision removes the standby
  copies and points callers back; the placement is what it was.

A new leader finds the standby in the KB's Binding and does the same. Bounds: no hedge while the
controller's own view is doubtful (it has not heard the KB for a whole heartbeat timeout, or more
than ``hedge_max_suspect`` of the fleet is suspect at once: that is the controller's partition, not
the clusters' failure); a flapping cluster (suspect again within ``stable_seconds`` of its last
suspicion) is not hedged again; an application is hedged once per episode; the standby copies of
one batch take at most ``hedge_share`` of the fleet's free CPU, and only where they fit (the
planner's filters); ``spec.failover.hedge: false`` opts an application out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.placement.binding import ACTIVE, STANDBY

from qonnect.controller.detector import (
    Memory,
    Notice,
    Settings,
    Snapshot,
    Trigger,
    down_clusters,
    spec_version,
)
from qonnect.controller.settling import cooling_down
from qonnect.controller.statemachine import DecisionLog

HEDGE, DISCARD = "hedge", "hedge-discard"
Placement = Mapping[str, list[dict[str, Any]]]


def role_of(target: Mapping[str, Any]) -> str:
    return str(target.get("role") or ACTIVE)


def has_standby(placement: Placement | None) -> bool:
    return any(role_of(t) == STANDBY for targets in (placement or {}).values() for t in targets)


def active_clusters(placement: Placement | None) -> set[str]:
    return {t["cluster"] for targets in (placement or {}).values() for t in targets if role_of(t) == ACTIVE}


def cut_off(placement: Placement, suspect: set[str]) -> set[str]:
    """The suspect clusters that run the only active instances of some service: its callers
    have no live instance left (a service spread over another healthy cluster still has one,
    and its stubs already point there)."""
    out: set[str] = set()
    for targets in placement.values():
        active = {t["cluster"] for t in targets if role_of(t) == ACTIVE}
        if active and active <= suspect:
            out |= active
    return out


def hedgeable(record: Mapping[str, Any] | None) -> bool:
    """False when the application opted out (spec.failover.hedge: false)."""
    return ((record or {}).get("application") or {}).get("hedge") is not False


def doubtful(snapshot: Snapshot, settings: Settings, suspects: Mapping[str, Any]) -> str:
    """Why the controller's own view is too doubtful to hedge on ('' when it is not)."""
    if snapshot.heard_for is not None and snapshot.heard_for < settings.heartbeat_timeout:
        return (
            "the controller has not heard the KB for a whole heartbeat timeout "
            "(a KB outage or a stall of its own host)"
        )
    fleet = len(snapshot.inventory.get("clusters") or [])
    if fleet and len(suspects) > settings.hedge_max_suspect * fleet:
        return (
            f"{len(suspects)} of {fleet} clusters are suspect at once (more than "
            f"{settings.hedge_max_suspect:.0%}): more likely the controller's own partition than "
            "their failure"
        )
    return ""


def observe(memory: Memory, suspects: Iterable[str], now: float) -> None:
    """Remember when each cluster stopped being suspect (a flapping cluster is hedged once)."""
    now_suspect = set(suspects)
    for cluster in memory.hedge_suspects - now_suspect:
        memory.suspect_ended[cluster] = now
        memory.hedge_withheld.pop(cluster, None)  # the episode is over: the next one is told again
    memory.hedge_suspects = now_suspect


def triggers(
    snapshot: Snapshot, log: DecisionLog, memory: Memory, settings: Settings, taken: set[str]
) -> list[Trigger]:
    """This tick's hedge and hedge-discard triggers, for applications without another trigger
    (``taken``) and without a decision in flight."""
    if not settings.hedge:
        return []
    suspects = down_clusters(snapshot, settings)
    observe(memory, suspects, snapshot.now)
    probes = snapshot.probes or {}
    failing = {
        c
        for c in suspects
        if c in memory.suspect_since and probes.get(c) is not None and probes[c].reachable is False
    }
    doubt = doubtful(snapshot, settings, suspects) if failing else ""
    placements: Mapping[str, Any] = snapshot.inventory.get("placements") or {}
    records = {a.get("name"): a for a in snapshot.applications if isinstance(a, dict)}
    out: list[Trigger] = []
    for app in sorted(placements):
        placement = placements.get(app) or {}
        if app in taken or app in log.inflight or app not in records:
            continue
        if has_standby(placement):
            trigger = _discard(app, placement, suspects, snapshot.now, spec_version(records[app]))
        else:
            trigger = _hedge(app, records[app], placement, failing, doubt, memory, settings, snapshot)
        if trigger is not None and not cooling_down(trigger, log, snapshot.now, settings):
            out.append(trigger)
    return out


def _hedge(
    app: str,
    record: Mapping[str, Any],
    placement: Placement,
    failing: set[str],
    doubt: str,
    memory: Memory,
    settings: Settings,
    snapshot: Snapshot,
) -> Trigger | None:
    on = sorted(cut_off(placement, failing))
    if not on or not hedgeable(record):
        return None
    episode = min(memory.suspect_since[c] for c in on)
    if memory.hedged.get(app) == episode:
        return None  # hedged (or tried) once in this episode
    now = snapshot.now
    flapping = [c for c in on if now - memory.suspect_ended.get(c, -1e18) < settings.stable_seconds]
    why_not = doubt or (
        f"cluster {', '.join(flapping)} was suspect less than {settings.stable_seconds:g}s ago (flapping)"
        if flapping
        else ""
    )
    if why_not:
        for cluster in on:
            if memory.hedge_withheld.get(cluster) != why_not:
                memory.hedge_withheld[cluster] = why_not
                memory.notices.append(
                    Notice(
                        "hedge-withheld", cluster, f"no standby copies for cluster {cluster}: {why_not}", now
                    )
                )
        return None
    memory.hedged[app] = episode
    return Trigger(
        app,
        HEDGE,
        f"cluster {', '.join(on)} suspect (its agent and the controller's own probe fail): "
        "standby copies started elsewhere, nothing moves until the failure is confirmed",
        tuple(sorted(memory.hedge_suspects)),
        None,
        spec_version(record),
        episode,
    )


def _discard(
    app: str, placement: Placement, suspects: Mapping[str, Any], now: float, version: int | None
) -> Trigger | None:
    """The hedged cluster is back (no active cluster of the application is suspect): remove the
    standby copies, the placement is as it was."""
    if active_clusters(placement) & set(suspects):
        return None
    copies = sorted(f"{svc} on {t['cluster']}" for svc, t in standby_targets(placement))
    back = sorted(
        t["cluster"]
        for targets in placement.values()
        if any(role_of(t) == STANDBY for t in targets)
        for t in targets
        if role_of(t) == ACTIVE
    )
    return Trigger(
        app,
        DISCARD,
        f"hedge discarded: {', '.join(sorted(set(back)))} came back within its grace; the standby copies "
        f"started while it was suspect ({', '.join(copies)}) are removed, placement unchanged",
        (),
        None,
        version,
        now,
    )


# -- the plans of the three steps ------------------------------------------------------------
def standby_plan(
    current: Placement, planned: Placement, suspect: set[str]
) -> dict[str, list[dict[str, Any]]]:
    """The hedge's plan: the current placement, plus - for each service whose every active target
    is on a suspect cluster - the planner's targets for it that it does not run on yet, as
    standby."""
    out: dict[str, list[dict[str, Any]]] = {}
    for service, targets in current.items():
        kept = [dict(t) for t in targets]
        active = {t["cluster"] for t in targets if role_of(t) == ACTIVE}
        if active and active <= suspect:  # no live instance left: a standby for it
            have = {t["cluster"] for t in targets}
            kept += [
                {**{k: v for k, v in t.items() if k != "role"}, "role": STANDBY}
                for t in planned.get(service) or []
                if t["cluster"] not in have and t["cluster"] not in suspect
            ]
        out[service] = kept
    return out


def standby_targets(plan: Placement) -> list[tuple[str, dict[str, Any]]]:
    return [(svc, t) for svc, targets in plan.items() for t in targets if role_of(t) == STANDBY]


def promoted(current: Placement, planned: Placement, down: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The confirmed move of a hedged application: every service that has a standby keeps it,
    now active, and drops its targets on the down clusters; the others take the planner's."""
    out: dict[str, list[dict[str, Any]]] = {}
    for service, targets in planned.items():
        mine = current.get(service) or []
        if any(role_of(t) == STANDBY for t in mine):
            out[service] = [
                {k: v for k, v in t.items() if k != "role"} for t in mine if t["cluster"] not in down
            ]
        else:
            out[service] = [dict(t) for t in targets]
    return out


def discarded(current: Placement) -> dict[str, list[dict[str, Any]]]:
    """The placement without its standby targets: what it was before the hedge."""
    return {svc: [dict(t) for t in targets if role_of(t) != STANDBY] for svc, targets in current.items()}


def standby_cpu(record: Mapping[str, Any], plan: Placement) -> float:
    """CPU cores the standby targets of ``plan`` request (per-replica requests x replicas)."""
    requests = {
        s.get("name"): float((s.get("requests") or {}).get("cpu") or 0.0)
        for s in ((record.get("application") or {}).get("services") or [])
        if isinstance(s, dict)
    }
    return sum(requests.get(svc, 0.0) * int(t.get("replicas", 1)) for svc, t in standby_targets(plan))


def fleet_free_cpu(inventory: Mapping[str, Any], avoid: set[str]) -> float:
    """Free CPU of the clusters a standby may use (the KB inventory's ``free``)."""
    return sum(
        float(((c.get("free") or {}).get("cpu")) or 0.0)
        for c in inventory.get("clusters") or []
        if c.get("name") not in avoid
    )
