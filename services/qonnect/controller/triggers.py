"""What needs doing: derives migration triggers from one snapshot of the KB.

``detect`` runs the rules below for every application, each tick; the controller loop turns the
triggers into committed decisions (detection.py). The rules are written here, once, in the
order they are judged; what they judge clusters by (suspect, down, the graces) is detector.py's,
the waits they respect are settling.py's. Pure functions over plain data (the KB's inventory,
workloads and applications, the decision log, and the leader's own memory of how long things
have been so), so every rule is unit-testable.

Rules (one trigger per application at most; the first rule that fires wins):
1. cluster down, confirmed (detector.py: a cluster is *suspect* on its agent's evidence, and
   down only once the leader's own probe fails too and the cluster grace is over) -> re-place
   every application with a service on a down cluster, without the suspect ones.
2. no ready node: every node of a cluster NotReady/unschedulable for longer than ``node_grace``
   (the cluster could not reschedule) -> move the services placed there.
3. workload Failed (the agent reports Failed once the workload's own grace is over: the
   Deployment's progressDeadlineSeconds or qonnect.io/failure-grace-seconds, so a transient
   ErrImagePull or a surge pod waiting for room is no reason to move), or Progressing for
   longer than the backstop ``progressing_timeout`` -> re-place that service elsewhere.
   Only reports made under the objects now in place count: for a heartbeat timeout after an
   attempt on the application ended, its workload reports may still describe what the attempt
   replaced (a rolled-back version's crashing pod), and are not acted on.
4. application spec changed (new version in the KB) -> re-place.
5. QoS drift: the heal's planner, with the application's stored scorer, hysteresis and
   exclusions, finds a placement better than the current one by more than that hysteresis,
   using only clusters healthy for ``stable_seconds``, and the application has
   not moved for ``min_dwell`` seconds -> re-place (so a flapping cluster does not bounce apps).
   Never on partial evidence: not while a cluster of the application is suspect, has refused
   credentials, or lost a node less than ``node_grace + stable_seconds`` ago (a NotReady node is
   the node-not-ready rule's, with its grace, not drift).
"""

from __future__ import annotations

from typing import Any

from qonnect.controller.detector import (
    Memory,
    Replanner,
    Settings,
    Snapshot,
    Trigger,
    app_grace,
    capacity_notices,
    confirmed_down,
    down_clusters,
    down_for,
    placed_clusters,
    shortest_graces,
    spec_version,
    update_memory,
)
from qonnect.controller.settling import (
    cooling_down,
    may_drift,
    placement_settling,
    recently_recovered,
    steady,
    unconfirmed_targets,
)
from qonnect.controller.statemachine import DecisionLog

VERSION_FAILING = "version-failing"  # a trigger the leader reports and does not act on
FAILURE_KINDS = ("workload-failed", "workload-stuck")


def detect(
    snapshot: Snapshot, log: DecisionLog, memory: Memory, settings: Settings, replan: Replanner | None = None
) -> tuple[list[Trigger], list[tuple[str, int | None]]]:
    """Triggers for this tick, and (app, version) pairs to record as observed without moving.

    Applications with a migration in flight are skipped (at most one per application).
    """
    suspects = down_clusters(snapshot, settings)
    update_memory(memory, snapshot, suspects)
    snapshot.fleet_memo.pop("unsettled", None)  # read from this memory and these settings
    capacity_notices(snapshot, memory)
    now = snapshot.now
    placements: dict[str, Any] = snapshot.inventory.get("placements") or {}
    apps = {a["name"]: a for a in snapshot.applications if isinstance(a, dict) and a.get("name")}
    down = confirmed_down(snapshot, memory, settings, suspects, shortest_graces(placements, apps))
    triggers: list[Trigger] = []
    observe: list[tuple[str, int | None]] = []
    no_node = _no_ready_node_past_grace(memory, settings, suspects, now)
    for app in sorted(set(placements) | set(apps)):
        if app in log.inflight:
            continue
        record = apps.get(app)
        version = spec_version(record)
        if record is None:
            if app in log.versions:
                observe.append((app, None))  # deleted: forget its version
            continue
        services = placed_clusters(placements.get(app) or {})
        if not services:
            continue  # never deployed: deploying is the user's job, not the controller's
        trigger = _first_trigger(
            app,
            services,
            snapshot,
            memory,
            settings,
            (down_for(down, app_grace(record), snapshot, memory, settings), suspects),
            no_node,
            version,
            log,
        )
        if trigger is None and app not in log.versions and version is not None:
            observe.append((app, version))
            continue
        if trigger is None and replan is not None:
            trigger = _drift(
                app, record, snapshot, memory, settings, services, version, replan, log, suspects
            )
        if trigger is not None and not cooling_down(trigger, log, now, settings):
            triggers.append(trigger)
    return triggers, observe


def _no_ready_node_past_grace(
    memory: Memory, settings: Settings, suspects: dict[str, tuple[str, float]], now: float
) -> dict[str, float]:
    """cluster -> since when it has had no Ready schedulable node, for those without one for
    longer than the node grace and not suspect (rule 1 owns those)."""
    return {
        c: since
        for c, since in memory.no_ready_node_since.items()
        if now - since > settings.node_grace and c not in suspects
    }


def _first_trigger(
    app: str,
    services: dict[str, set[str]],
    snapshot: Snapshot,
    memory: Memory,
    settings: Settings,
    judged: tuple[dict[str, tuple[str, float]], dict[str, tuple[str, float]]],
    no_node: dict[str, float],
    version: int | None,
    log: DecisionLog,
) -> Trigger | None:
    """The first failure rule that fires for the application, or None: rules 1, 2, 4 and 3 of
    the module's docstring, in that order. ``judged``: (the confirmed down clusters, moved away
    from; the suspects, avoided)."""
    now = snapshot.now
    down, suspects = judged
    unstable = recently_recovered(services, memory, settings, now) | unconfirmed_targets(snapshot, services)
    avoid = set(suspects) | unstable  # never a target of the move
    return (
        _cluster_down(app, services, down, avoid, version)
        or _no_ready_node(app, services, no_node, avoid, version, now, settings)
        # a new version not yet placed goes first: the workloads that run now are the old
        # version's, their failures are no evidence against it (a rollback's version replaces a
        # failing one)
        or _spec_changed(app, version, log, suspects, now)
        or _workload_trouble(app, services, snapshot, memory, settings, log, version, avoid)
    )


def _cluster_down(
    app: str,
    services: dict[str, set[str]],
    down: dict[str, tuple[str, float]],
    avoid: set[str],
    version: int | None,
) -> Trigger | None:
    """Rule 1: a service runs on a confirmed down cluster."""
    on_down = sorted({c for cs in services.values() for c in cs if c in down})
    if not on_down:
        return None
    why = "; ".join(f"cluster {c} down: {down[c][0]}" for c in on_down)
    hit = sorted(s for s, cs in services.items() if cs & set(on_down))
    return Trigger(
        app,
        "cluster-down",
        f"{why} (services {', '.join(hit)})",
        tuple(sorted(avoid)),
        None,
        version,
        min(down[c][1] for c in on_down),
    )


def _no_ready_node(
    app: str,
    services: dict[str, set[str]],
    no_node: dict[str, float],
    avoid: set[str],
    version: int | None,
    now: float,
    settings: Settings,
) -> Trigger | None:
    """Rule 2: a service runs on a cluster without a Ready schedulable node for the node grace."""
    on_no_node = sorted({c for cs in services.values() for c in cs if c in no_node})
    if not on_no_node:
        return None
    why = "; ".join(
        f"cluster {c} has no Ready schedulable node for {now - no_node[c]:.0f}s" for c in on_no_node
    )
    return Trigger(
        app,
        "node-not-ready",
        f"{why} (> {settings.node_grace:g}s) and could not reschedule",
        tuple(sorted(set(on_no_node) | avoid)),
        None,
        version,
        min(no_node[c] for c in on_no_node),
        tuple(on_no_node),
    )


def _spec_changed(
    app: str,
    version: int | None,
    log: DecisionLog,
    suspects: dict[str, tuple[str, float]],
    now: float,
) -> Trigger | None:
    """Rule 4 (judged before rule 3): the KB holds a version the log has not placed."""
    known = log.versions.get(app)
    if version is None or known is None or version == known:
        return None
    return Trigger(
        app,
        "spec-changed",
        f"application spec changed: version {known} -> {version}",
        tuple(sorted(suspects)),
        None,
        version,
        now,
    )


def _workload_trouble(
    app: str,
    services: dict[str, set[str]],
    snapshot: Snapshot,
    memory: Memory,
    settings: Settings,
    log: DecisionLog,
    version: int | None,
    avoid: set[str],
) -> Trigger | None:
    """Rule 3: a workload of the application's current placement Failed or is stuck
    Progressing (by service, then cluster), unless its reports may predate the placement."""
    now = snapshot.now
    settling: bool | None = None  # read from the log at the first report that is not Healthy
    for w in snapshot.workloads_of(app):
        if w.get("cluster") not in services.get(w.get("service", ""), ()):
            continue
        if w.get("status") == "Healthy":
            continue
        if settling is None:
            settling = placement_settling(log, app, now, settings)
        if settling:
            continue  # may describe the objects the newest placement replaced: wait for a new report
        problem = _workload_problem(w, app, memory, settings, now)
        if problem is not None:
            return _workload_trigger(app, w, problem, log, version, settings, avoid)
    return None


def _workload_problem(
    w: dict[str, Any], app: str, memory: Memory, settings: Settings, now: float
) -> tuple[str, str, float] | None:
    """(kind, why, since when) of a workload report that is Failed, or Progressing for longer
    than the backstop; None for any other report."""
    cluster, service = w["cluster"], w.get("service")
    since = memory.progressing_since.get((cluster, app, service or ""))
    if w.get("status") == "Failed":
        return (
            "workload-failed",
            f"Failed on {cluster}: {w.get('reason') or 'no reason given'}",
            float(w.get("since") or now),
        )
    if w.get("status") == "Progressing" and since is not None and now - since > settings.progressing_timeout:
        return (
            "workload-stuck",
            f"Progressing on {cluster} for {now - since:.0f}s > {settings.progressing_timeout:g}s",
            since,
        )
    return None


def _workload_trigger(
    app: str,
    w: dict[str, Any],
    problem: tuple[str, str, float],
    log: DecisionLog,
    version: int | None,
    settings: Settings,
    avoid: set[str],
) -> Trigger:
    """Move the service away from the cluster it failed on, or - if this version of it already
    failed on enough clusters - report the version as failing instead of moving it."""
    kind, why, began = problem
    cluster, service = w["cluster"], w.get("service")
    # the clusters this version of the service already failed on, by the replicated log: a
    # move never goes back to one, and a version failing on enough of them stops moving
    tried = failed_on(log, app, version, service) | {cluster}
    if len(tried) >= settings.max_version_failures:
        return Trigger(
            app,
            VERSION_FAILING,
            f"version {version} of {app}: service {service} {why}; it already failed on "
            f"{', '.join(sorted(tried - {cluster})) or 'no other cluster'} - {len(tried)} clusters "
            f"(at most {settings.max_version_failures}): the version fails, not the clusters; not "
            "moving it again (deploy a version that works, or roll back to the last one that did)",
            (),
            service,
            version,
            began,
            tuple(sorted(tried)),
        )
    return Trigger(
        app,
        kind,
        f"service {service} {why}"
        + (f" (it already failed on {', '.join(sorted(tried - {cluster}))})" if tried - {cluster} else ""),
        tuple(sorted(tried | avoid)),
        service,
        version,
        began,
        tuple(sorted(tried)),
    )


def failed_on(log: DecisionLog, app: str, version: int | None, service: str | None) -> set[str]:
    """Clusters on which this spec version of the service failed, by the decisions the log
    keeps (each pins the cluster it moved the service away from)."""
    return {
        c
        for d in log.decisions.values()
        if d["app"] == app
        and d.get("spec_version") == version
        and d.get("service") == service
        and d.get("kind") in FAILURE_KINDS
        for c in d.get("pinned") or ()
    }


def unsettled(snapshot: Snapshot, memory: Memory, settings: Settings) -> tuple[str, ...]:
    """The clusters no drift move may go to now (sorted): healthy for less than
    ``stable_seconds``, credentials refused, or a capacity jump not yet confirmed. Found once
    per ``detect`` call (which updates ``memory`` first): every cluster for each application
    cost 0.7 s a tick at 1,000 applications on 1,000 clusters."""
    found = snapshot.fleet_memo.get("unsettled")
    if found is None:
        now, unconfirmed, broken = snapshot.now, snapshot.unconfirmed or {}, snapshot.broken()
        found = snapshot.fleet_memo["unsettled"] = tuple(
            sorted(
                name
                for name in (c["name"] for c in snapshot.inventory.get("clusters", []))
                if now - memory.healthy_since.get(name, now) < settings.stable_seconds
                or name in broken
                or name in unconfirmed
            )
        )
    return found


def _drift(
    app: str,
    record: dict[str, Any],
    snapshot: Snapshot,
    memory: Memory,
    settings: Settings,
    services: dict[str, set[str]],
    version: int | None,
    replan: Replanner,
    log: DecisionLog,
    suspects: dict[str, tuple[str, float]],
) -> Trigger | None:
    """Rule 5, judged only once the application may move again (``min_dwell``) and every
    cluster it runs on is steady (settling.py): the drift judge, on clusters healthy for
    ``stable_seconds``, finds a placement better by more than the hysteresis."""
    now = snapshot.now
    if not (may_drift(app, log, now, settings) and steady(services, snapshot, memory, settings, suspects)):
        return None
    hosting = {c for cs in services.values() for c in cs}
    unstable = tuple(c for c in unsettled(snapshot, memory, settings) if c not in hosting)
    current = (snapshot.inventory.get("placements") or {}).get(app) or {}
    found = replan(record, snapshot.inventory, current, unstable)
    if found is None:
        return None
    new, why = found
    if placed_clusters(new) == services:
        return None
    return Trigger(app, "qos-drift", f"QoS drift: {why}", unstable, None, version, now)
