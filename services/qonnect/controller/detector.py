"""What needs doing: derives migration triggers from one snapshot of the KB.

Pure functions over plain data (the KB's inventory, workloads and applications, the decision
log, and the leader's own memory of how long things have been so), so every rule is
unit-testable. The controller loop turns triggers into committed decisions.

Rules (one trigger per application at most; the first rule that fires wins):
1. cluster down, confirmed: a heartbeat older than ``heartbeat_timeout``, or its agent saying
   the cluster API is unreachable, only makes a cluster *suspect*. It is down when the leader's
   own probe of the cluster's API (``Snapshot.probes``, services/qonnect/controller/confirm.py)
   fails too, and has been suspect for the cluster grace (``cluster_grace``, or the cluster's
   label ``qonnect.io/cluster-grace-seconds``): a 15 s API-server blip never moves anything.
   A silent agent on a cluster whose API answers the leader is ``agent-down`` (a notice, no
   move); an agent whose credentials are refused (401/403) is ``credentials-broken`` (a
   notice, no move, and its last-known capacity stands). -> re-place every application with a
   service on a down cluster, without the suspect ones.
   Heartbeat age is only evidence once the controller has heard from the KB for a whole
   heartbeat timeout (``Snapshot.heard_for``): right after a KB outage - or a stall of the
   controller's own host - every heartbeat is old because nobody could report (or be heard),
   not because every cluster failed.
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

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.keys import CLUSTER_GRACE_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import credentials_broken

from qonnect.controller.statemachine import FAILED, DecisionLog

# Longer than Kubernetes' default progress deadline (600 s), after which the agent reports a
# stuck workload Failed itself: the controller's own clock only catches an agent that never does.
PROGRESSING_BACKSTOP = 900.0
# The controller's default cluster grace (``--cluster-grace``): longer than a 15 s API-server
# outage plus an agent interval and a probe's cache, so such a blip never migrates anything.
CLUSTER_GRACE = 20.0
# a service of one spec version that failed on this many clusters stops moving (issue 22.4)
MAX_VERSION_FAILURES = 2


@dataclass(frozen=True)
class Settings:
    """Detector thresholds in seconds; defaults meet the 15 s recovery target with 2 s agents."""

    heartbeat_timeout: float = 6.0
    node_grace: float = 10.0
    progressing_timeout: float = PROGRESSING_BACKSTOP
    stable_seconds: float = 30.0
    min_dwell: float = 60.0
    retry_cooldown: float = 30.0
    hysteresis: float = 0.1
    cluster_grace: float = 0.0  # seconds a cluster stays suspect before it is down (CLI: CLUSTER_GRACE)
    max_version_failures: int = MAX_VERSION_FAILURES
    # hedged failover (hedging.py): standby copies while a cluster is suspect (CLI: --hedge)
    hedge: bool = False
    hedge_max_suspect: float = 0.34  # more of the fleet suspect at once: no hedge (a partition)
    hedge_share: float = 0.5  # at most this share of the fleet's free CPU for one batch's standbys


@dataclass(frozen=True)
class ApiProbe:
    """The leader's own look at a cluster's API (confirm.py): did it answer at all?"""

    reachable: bool | None  # it answered (a 401/403 too); None: could not look (no kubeconfig...)
    detail: str  # what it answered, or why not (no credentials)
    at: float = 0.0  # wall-clock time of the probe


@dataclass(frozen=True)
class Notice:
    """Something the leader tells the KB about a cluster without moving anything."""

    kind: str  # agent-down, credentials-broken, cluster-recovered
    cluster: str
    text: str
    ts: float
    episode: str = ""  # what makes it a new story (default: the kind); a 403 then a 401 are two


@dataclass(frozen=True)
class Trigger:
    """A reason to re-place one application."""

    app: str
    kind: str
    reason: str
    exclude: tuple[str, ...] = ()
    service: str | None = None
    spec_version: int | None = None
    failed_at: float | None = None  # best estimate of when the problem began (for detect_seconds)
    pinned: tuple[str, ...] = ()  # clusters avoided for this trigger's own reason (not cluster health)

    @property
    def key(self) -> str:
        """Identity of the trigger, to not retry the same failing thing in a tight loop."""
        return f"{self.kind}:{self.app}:{self.service or '*'}:{','.join(self.exclude)}"


@dataclass
class Memory:
    """The leader's own observations over time. Not replicated, but what recovered when is
    seeded from the KB's ``controller.cluster.recovered`` events by a new leader (journal.py),
    so it applies the same stabilisation window; the rest starts afresh, which only makes it
    more patient."""

    healthy_since: dict[str, float] = field(default_factory=dict)
    no_ready_node_since: dict[str, float] = field(default_factory=dict)
    progressing_since: dict[tuple[str, str, str], float] = field(default_factory=dict)
    down_seen: set[str] = field(default_factory=set)  # clusters this leader saw down
    recovered_at: dict[str, float] = field(default_factory=dict)  # seen down, then back: when
    suspect_since: dict[str, float] = field(default_factory=dict)  # unconfirmed trouble since
    degraded_since: dict[str, float] = field(default_factory=dict)  # some node not Ready since
    noticed: dict[str, str] = field(default_factory=dict)  # cluster -> the notice kind announced
    notices: list[Notice] = field(default_factory=list)  # for the loop to post (and clear)
    failing_reported: set[tuple[str, int | None, str | None]] = field(
        default_factory=set
    )  # app, version, service
    rollback_tried: set[tuple[str, int | None]] = field(default_factory=set)  # app, failing version
    # hedging.py: the suspects of the last tick, when each stopped being suspect, the episode
    # (suspect since) each application was hedged for, and why a cluster's hedge was withheld
    hedge_suspects: set[str] = field(default_factory=set)
    suspect_ended: dict[str, float] = field(default_factory=dict)
    hedged: dict[str, float] = field(default_factory=dict)
    hedge_withheld: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """What the detector reads from the KB in one tick."""

    inventory: dict[str, Any]
    workloads: list[dict[str, Any]]
    applications: list[dict[str, Any]]
    now: float
    heard_for: float | None = None  # seconds the controller has read the KB without a gap (None: unknown)
    probes: Mapping[str, ApiProbe] | None = None  # the leader's own probes (None: no prober, evidence as is)
    # clusters whose reported capacity jumped and the leader's own read has not confirmed it
    # (controller/capacity.py): no move goes there until it does; cluster -> why
    unconfirmed: Mapping[str, str] | None = None


# replan(app_record, inventory, current_placement, exclude) -> (new placement, why), or None when
# the current placement is good enough (judged with the application's own stored policy)
Replanner = Callable[
    [dict[str, Any], dict[str, Any], dict[str, Any], tuple[str, ...]],
    "tuple[dict[str, Any], str] | None",
]


def placed_clusters(placement: dict[str, Any]) -> dict[str, set[str]]:
    """service -> clusters it runs on, from a placement ``{service: [{"cluster": ...}]}``."""
    result: dict[str, set[str]] = {}
    for service, targets in (placement or {}).items():
        if isinstance(targets, list):
            result[service] = {t["cluster"] for t in targets if isinstance(t, dict) and t.get("cluster")}
    return result


def down_clusters(snapshot: Snapshot, settings: Settings) -> dict[str, tuple[str, float]]:
    """cluster -> (why its agent's evidence says it is down, estimated time it went down).

    Evidence only: a cluster here is *suspect*, avoided as a target, but moved away from only
    once ``confirmed_down`` agrees."""
    down: dict[str, tuple[str, float]] = {}
    now = snapshot.now
    grace = snapshot.heard_for is not None and snapshot.heard_for < settings.heartbeat_timeout
    for cluster in snapshot.inventory.get("clusters", []):
        age = cluster.get("heartbeat_age")
        if grace and (age is None or age > settings.heartbeat_timeout):
            continue  # the KB was out of reach a moment ago: agents had no chance to report yet
        if age is None:
            down[cluster["name"]] = ("no heartbeat ever received", now)
        elif age > settings.heartbeat_timeout:
            down[cluster["name"]] = (
                f"heartbeat {age:.1f}s old > timeout {settings.heartbeat_timeout:g}s",
                now - age,
            )
        elif (cluster.get("reachable") is False or cluster.get("healthy") is False) and not (
            credentials_broken(cluster)
        ):
            down[cluster["name"]] = (
                "the KB marks it unhealthy: its agent cannot reach the cluster API"
                f" ({cluster.get('error') or 'no detail'})",
                now,
            )
    return down


def cluster_grace(cluster: Mapping[str, Any], settings: Settings) -> float:
    """Seconds this cluster may be suspect before it is down: its label, else --cluster-grace."""
    raw = (cluster.get("labels") or {}).get(CLUSTER_GRACE_LABEL)
    try:
        value = float(raw) if raw is not None else math.nan
    except (TypeError, ValueError):
        value = math.nan
    return value if math.isfinite(value) and value >= 0 else settings.cluster_grace


def app_grace(record: Mapping[str, Any] | None) -> float | None:
    """The application's own cluster grace (spec.clusterGraceSeconds), or None."""
    value = ((record or {}).get("application") or {}).get("cluster_grace_seconds")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if value >= 0 else None


def shortest_graces(placements: Mapping[str, Any], apps: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """cluster -> the shortest spec.clusterGraceSeconds of the applications placed on it: the
    soonest a cluster can be down for one of them (the others still wait their own grace)."""
    out: dict[str, float] = {}
    for name, record in apps.items():
        grace = app_grace(record)
        if grace is None:
            continue
        for clusters in placed_clusters(placements.get(name) or {}).values():
            for cluster in clusters:
                out[cluster] = min(out.get(cluster, grace), grace)
    return out


def confirmed_down(
    snapshot: Snapshot,
    memory: Memory,
    settings: Settings,
    suspects: dict[str, tuple[str, float]],
    shortest: Mapping[str, float] | None = None,
) -> dict[str, tuple[str, float]]:
    """The suspects that are down on independent evidence: the leader's own probe fails too
    (or there is no prober), for at least the cluster's grace (or the shortest grace of an
    application on it, ``shortest``: each application then waits its own, see
    :func:`down_for`). Advances ``suspect_since`` and queues agent-down notices (a silent agent
    on a cluster whose API answers the leader)."""
    now = snapshot.now
    clusters = {c["name"]: c for c in snapshot.inventory.get("clusters", [])}
    down: dict[str, tuple[str, float]] = {}
    for name in list(memory.suspect_since):
        if name not in suspects:
            del memory.suspect_since[name]
    for name, (why, began) in suspects.items():
        probe = None if snapshot.probes is None else snapshot.probes.get(name)
        if probe is not None and probe.reachable:
            memory.suspect_since.pop(name, None)  # the API answers the leader: not a cluster failure
            _notice(
                memory,
                Notice(
                    "agent-down",
                    name,
                    f"cluster {name}: {why}, but its API answers the controller ({probe.detail}): "
                    "its agent is down or cut off, the cluster is not; nothing moves",
                    now,
                ),
            )
            continue
        grace = min(cluster_grace(clusters.get(name, {}), settings), (shortest or {}).get(name, math.inf))
        if name not in memory.suspect_since:
            memory.suspect_since[name] = now
            if grace and memory.noticed.get(name) != "agent-down":  # one episode, one story
                _notice(
                    memory,
                    Notice(
                        "cluster-suspect",
                        name,
                        f"cluster {name} suspect: {why}; the controller probes its API and waits "
                        f"{grace:g}s (cluster grace) before moving anything",
                        now,
                    ),
                )
        since = memory.suspect_since[name]
        if snapshot.probes is not None and probe is None:
            continue  # the leader's own probe has not answered yet: suspect, not down
        if now - since < grace:
            continue
        confirmed = (
            f"; the controller's own probe fails too ({probe.detail})"
            if probe is not None and probe.reachable is False
            else f"; not confirmed by the controller ({probe.detail})"
            if probe is not None
            else ""
        )
        suspect = f" and it has been suspect for {now - since:.0f}s (grace {grace:g}s)" if grace else ""
        down[name] = (f"{why}{confirmed}{suspect}", min(began, since))
    return down


def _notice(memory: Memory, notice: Notice) -> None:
    """Queue a notice once per episode (a cluster's state, not every tick)."""
    episode = notice.episode or notice.kind
    if memory.noticed.get(notice.cluster) != episode:
        memory.noticed[notice.cluster] = episode
        memory.notices.append(notice)


def update_memory(memory: Memory, snapshot: Snapshot, down: dict[str, tuple[str, float]]) -> None:
    """Advance the leader's clocks: since when is each cluster healthy / without a ready node
    (``down``: the suspects, so a blip too counts against a cluster's stability)."""
    now = snapshot.now
    for cluster in snapshot.inventory.get("clusters", []):
        name = cluster["name"]
        if name in down:
            memory.healthy_since.pop(name, None)
            memory.down_seen.add(name)
            memory.recovered_at.pop(name, None)
        else:
            memory.healthy_since.setdefault(name, now)
            if name in memory.down_seen:
                memory.down_seen.discard(name)
                memory.recovered_at[name] = now
                _notice(memory, Notice("cluster-recovered", name, f"cluster {name} is back", now))
        if credentials_broken(cluster):
            # The refusal (forbidden / unauthorized) is part of the episode: credentials mended and
            # broken another way between two looks are a new story, not the old one going on.
            refusal = str(cluster.get("error") or "").split(":", 1)[0]
            _notice(
                memory,
                Notice(
                    "credentials-broken",
                    name,
                    f"cluster {name}: the API refuses its agent's credentials "
                    f"({cluster.get('error') or 'no detail'}); the cluster is up, its last-known "
                    "capacity stands and nothing moves because of it",
                    now,
                    episode=f"credentials-broken:{refusal}",
                ),
            )
        elif name not in down and memory.noticed.get(name, "").startswith(
            ("agent-down", "credentials-broken")
        ):
            memory.noticed.pop(name)  # the episode is over: the next one is announced again
        nodes = cluster.get("nodes") or []
        if nodes and not any(n.get("ready") and n.get("schedulable", True) for n in nodes):
            memory.no_ready_node_since.setdefault(name, now)
        else:
            memory.no_ready_node_since.pop(name, None)
        if any(not n.get("ready", True) for n in nodes):
            memory.degraded_since.setdefault(name, now)
        else:
            memory.degraded_since.pop(name, None)
    seen = set()
    for w in snapshot.workloads:
        key = (w.get("cluster", ""), w.get("application", ""), w.get("service", ""))
        seen.add(key)
        if w.get("status") == "Progressing":
            memory.progressing_since.setdefault(key, float(w.get("since") or now))
        else:
            memory.progressing_since.pop(key, None)
    for key in set(memory.progressing_since) - seen:
        del memory.progressing_since[key]


def detect(
    snapshot: Snapshot, log: DecisionLog, memory: Memory, settings: Settings, replan: Replanner | None = None
) -> tuple[list[Trigger], list[tuple[str, int | None]]]:
    """Triggers for this tick, and (app, version) pairs to record as observed without moving.

    Applications with a migration in flight are skipped (at most one per application).
    """
    suspects = down_clusters(snapshot, settings)
    update_memory(memory, snapshot, suspects)
    capacity_notices(snapshot, memory)
    now = snapshot.now
    placements: dict[str, Any] = snapshot.inventory.get("placements") or {}
    apps = {a["name"]: a for a in snapshot.applications if isinstance(a, dict) and a.get("name")}
    down = confirmed_down(snapshot, memory, settings, suspects, shortest_graces(placements, apps))
    triggers: list[Trigger] = []
    observe: list[tuple[str, int | None]] = []
    no_node = {
        c: since
        for c, since in memory.no_ready_node_since.items()
        if now - since > settings.node_grace and c not in suspects
    }
    for app in sorted(set(placements) | set(apps)):
        if app in log.inflight:
            continue
        record = apps.get(app)
        version = _version(record)
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
        if (
            trigger is None
            and replan is not None
            and _may_drift(app, log, now, settings)
            and _steady(services, snapshot, memory, settings, suspects)
        ):
            trigger = _drift(app, record, snapshot, memory, settings, services, version, replan)
        if trigger is not None and not cooling_down(trigger, log, now, settings):
            triggers.append(trigger)
    return triggers, observe


def down_for(
    down: dict[str, tuple[str, float]],
    grace: float | None,
    snapshot: Snapshot,
    memory: Memory,
    settings: Settings,
) -> dict[str, tuple[str, float]]:
    """The down clusters one application moves off: those suspect for at least its own grace
    (spec.clusterGraceSeconds), else for the cluster's grace."""
    if not down:
        return {}  # the common tick: nothing to filter (this runs once per application)
    clusters = {c["name"]: c for c in snapshot.inventory.get("clusters", []) if c["name"] in down}
    out = {}
    for name, (why, began) in down.items():
        wait = grace if grace is not None else cluster_grace(clusters.get(name, {}), settings)
        if snapshot.now - memory.suspect_since.get(name, snapshot.now) >= wait:
            out[name] = (why if grace is None else f"{why}; the application's grace {grace:g}s", began)
    return out


def _version(record: dict[str, Any] | None) -> int | None:
    if not record:
        return None
    value = record.get("version")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
    for w in sorted(snapshot.workloads, key=lambda w: (w.get("service", ""), w.get("cluster", ""))):
        if w.get("application") != app or w.get("cluster") not in services.get(w.get("service", ""), ()):
            continue
        if w.get("status") == "Healthy":
            continue
        if settling is None:
            settling = _settling(log, app, now, settings)
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


def placed_at(log: DecisionLog, app: str) -> float | None:
    """When the newest attempt that wrote the application's objects ended (replicated: the
    time the leader committed with its ``finish``, ``cancel`` or give-up), else None."""
    for decision_id in reversed(log.order):
        decision = log.decisions[decision_id]
        ended = decision.get("ended_at")
        if decision["app"] == app and decision.get("attempts") and ended is not None:
            return float(ended)
    return None


def _settling(log: DecisionLog, app: str, now: float, settings: Settings) -> bool:
    """True while the application's workload reports may still be from before its newest
    placement: a Failed report of a replaced version's pod must not move the version that
    replaced it (issue 22.4). Every live agent reports within the heartbeat timeout, so a
    report still Failed after it was made under the objects now in place."""
    ended = placed_at(log, app)
    return ended is not None and now - ended < settings.heartbeat_timeout


VERSION_FAILING = "version-failing"  # a trigger the leader reports and does not act on
FAILURE_KINDS = ("workload-failed", "workload-stuck")


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


def unconfirmed_targets(snapshot: Snapshot, services: dict[str, set[str]]) -> set[str]:
    """Clusters whose capacity claim the leader has not confirmed and that run none of the
    app's services: no move goes there (what already runs there stays)."""
    hosting = {c for cs in services.values() for c in cs}
    return {c for c in (snapshot.unconfirmed or {}) if c not in hosting}


def capacity_notices(snapshot: Snapshot, memory: Memory) -> None:
    """One notice per cluster whose capacity claim is not confirmed (per episode)."""
    unconfirmed = snapshot.unconfirmed or {}
    for name, why in sorted(unconfirmed.items()):
        _notice(
            memory,
            Notice(
                "capacity-unconfirmed",
                name,
                f"cluster {name} {why}: no move goes there until its API confirms it",
                snapshot.now,
            ),
        )
    for name, kind in list(memory.noticed.items()):
        if kind == "capacity-unconfirmed" and name not in unconfirmed:
            memory.noticed.pop(name)  # confirmed (or gone): the next claim is announced again


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


def _may_drift(app: str, log: DecisionLog, now: float, settings: Settings) -> bool:
    last = log.last_for(app)
    if last is None:
        return True
    ended = last.get("ended_at") or last.get("decided_at") or 0.0
    return now - ended >= settings.min_dwell


def _steady(
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
    broken = {c["name"] for c in snapshot.inventory.get("clusters", []) if credentials_broken(c)}
    settle = settings.node_grace + settings.stable_seconds
    recent = {c for c, since in memory.degraded_since.items() if snapshot.now - since < settle}
    return not hosting & (set(suspects) | broken | recent)


def _drift(
    app: str,
    record: dict[str, Any],
    snapshot: Snapshot,
    memory: Memory,
    settings: Settings,
    services: dict[str, set[str]],
    version: int | None,
    replan: Replanner,
) -> Trigger | None:
    now = snapshot.now
    unstable = tuple(
        sorted(
            c["name"]
            for c in snapshot.inventory.get("clusters", [])
            if (
                now - memory.healthy_since.get(c["name"], now) < settings.stable_seconds
                or credentials_broken(c)
                or c["name"] in (snapshot.unconfirmed or {})
            )
            and not any(c["name"] in cs for cs in services.values())
        )
    )
    current = (snapshot.inventory.get("placements") or {}).get(app) or {}
    found = replan(record, snapshot.inventory, current, unstable)
    if found is None:
        return None
    new, why = found
    if placed_clusters(new) == services:
        return None
    return Trigger(app, "qos-drift", f"QoS drift: {why}", unstable, None, version, now)


def cooling_down(trigger: Trigger, log: DecisionLog, now: float, settings: Settings) -> bool:
    """Do not re-decide the same trigger right after it failed for good."""
    last = log.last_for(trigger.app)
    return bool(
        last
        and last["status"] == FAILED
        and last.get("key") == trigger.key
        and now - (last.get("ended_at") or 0.0) < settings.retry_cooldown
    )
