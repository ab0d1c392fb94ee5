"""The waits before the detector acts: it acts on settled evidence only.

A workload report may predate the application's newest placement (``placement_settling``); a
cluster that came back less than ``stable_seconds`` ago, or whose capacity claim the leader has
not confirmed, is no target for a move (``recently_recovered``, ``unconfirmed_targets``,
``exclusions_now``, which a retry or a takeover re-reads); drift waits for ``min_dwell`` and a
steady fleet (``may_drift``, ``steady``); a trigger that failed for good waits ``retry_cooldown``
(``cooling_down``). The rules (triggers.py), the scheduler and the hedge all wait the same way,
so each wait is written once, here. Pure functions over the decision log, the leader's memory
and one snapshot (detector.py's types).
"""

from __future__ import annotations

from qonnect.controller.detector import Memory, Settings, Snapshot, Trigger, down_clusters, placed_clusters
from qonnect.controller.statemachine import FAILED, DecisionLog


def placed_at(log: DecisionLog, app: str) -> float | None:
    """When the newest attempt that wrote the application's objects ended (replicated: the
    time the leader committed with its ``finish``, ``cancel`` or give-up), else None."""
    for decision_id in reversed(log.order):
        decision = log.decisions[decision_id]
        ended = decision.get("ended_at")
        if decision["app"] == app and decision.get("attempts") and ended is not None:
            return float(ended)
    return None


def placement_settling(log: DecisionLog, app: str, now: float, settings: Settings) -> bool:
    """True while the application's workload reports may still be from before its newest
    placement: a Failed report of a replaced version's pod must not move the version that
    replaced it (issue 22.4). Every live agent reports within the heartbeat timeout, so a
    report still Failed after it was made under the objects now in place."""
    ended = placed_at(log, app)
    return ended is not None and now - ended < settings.heartbeat_timeout


def recently_recovered(
    services: dict[str, set[str]], memory: Memory, settings: Settings, now: float
) -> set[str]:
    """Clusters back for less than ``stable_seconds`` that run none of the app's services: a
    migration must not move other services onto them (a flapping cluster)."""
    hosting = {c for cs in services.values() for c in cs}
    return {
        c
        for c, since in memory.recovered_at.items()
        if now - since < settings.stable_seconds and c not in hosting
    }


def unconfirmed_targets(snapshot: Snapshot, services: dict[str, set[str]]) -> set[str]:
    """Clusters whose capacity claim the leader has not confirmed and that run none of the
    app's services: no move goes there (what already runs there stays)."""
    hosting = {c for cs in services.values() for c in cs}
    return {c for c in (snapshot.unconfirmed or {}) if c not in hosting}


def exclusions_now(
    snapshot: Snapshot, memory: Memory, settings: Settings, app: str, pinned: tuple[str, ...] | list[str]
) -> tuple[set[str], set[str], set[str]]:
    """(clusters that must be avoided as health is now, clusters better avoided because they came
    back less than ``stable_seconds`` ago, the down ones on which the app runs), for a retry or a
    takeover: a decision's exclusions are re-read, never frozen."""
    down = down_clusters(snapshot, settings)
    placement = (snapshot.inventory.get("placements") or {}).get(app) or {}
    services = placed_clusters(placement)
    on_down = {c for cs in services.values() for c in cs if c in down}
    unstable = recently_recovered(services, memory, settings, snapshot.now) | unconfirmed_targets(
        snapshot, services
    )
    return set(down) | set(pinned), unstable, on_down


def may_drift(app: str, log: DecisionLog, now: float, settings: Settings) -> bool:
    """True once the application's last decision ended (or was decided) ``min_dwell`` ago: a
    flapping cluster does not bounce it."""
    last = log.last_for(app)
    if last is None:
        return True
    ended = last.get("ended_at") or last.get("decided_at") or 0.0
    return now - ended >= settings.min_dwell


def steady(
    services: dict[str, set[str]],
    snapshot: Snapshot,
    memory: Memory,
    settings: Settings,
    suspects: dict[str, tuple[str, float]],
) -> bool:
    """Drift is judged on full, fresh observations only: no cluster of the application is
    suspect, has refused credentials (its capacity is last-known), or lost a node recently
    (the node-not-ready rule and its grace own that; the lost capacity is not drift)."""
    hosting = {c for cs in services.values() for c in cs}
    broken = snapshot.broken()
    settle = settings.node_grace + settings.stable_seconds
    recent = {c for c, since in memory.degraded_since.items() if snapshot.now - since < settle}
    return not hosting & (set(suspects) | broken | recent)


def cooling_down(trigger: Trigger, log: DecisionLog, now: float, settings: Settings) -> bool:
    """Do not re-decide the same trigger right after it failed for good."""
    last = log.last_for(trigger.app)
    return bool(
        last
        and last["status"] == FAILED
        and last.get("key") == trigger.key
        and now - (last.get("ended_at") or 0.0) < settings.retry_cooldown
    )
