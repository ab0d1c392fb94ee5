"""The detector's vocabulary, and how it judges clusters: suspect, down, back.

Every controller job reads the types here (``Settings``, ``Snapshot``, ``Memory``, ``Trigger``,
``Notice``, ``ApiProbe``); the rules that turn a snapshot into triggers (triggers.py) and the
waits they respect (settling.py) build on this module, which imports neither, so the types and
the cluster judgement have one home and no import cycle. Pure functions over plain data (the
KB's inventory and the leader's own memory of how long things have been so), so every rule is
unit-testable.

A cluster down, confirmed (triggers.py's rule 1): a heartbeat older than ``heartbeat_timeout``,
or its agent saying the cluster API is unreachable, only makes a cluster *suspect*
(``down_clusters``). It is down (``confirmed_down``) when the leader's own probe of the
cluster's API (``Snapshot.probes``, services/qonnect/controller/confirm.py) fails too, and has
been suspect for the cluster grace (``cluster_grace``, or the cluster's label
``qonnect.io/cluster-grace-seconds``; an application's own spec.clusterGraceSeconds for its
services, ``down_for``): a 15 s API-server blip never moves anything.
A silent agent on a cluster whose API answers the leader is ``agent-down`` (a notice, no
move); an agent whose credentials are refused (401/403) is ``credentials-broken`` (a notice,
no move, and its last-known capacity stands).
Heartbeat age is only evidence once the controller has heard from the KB for a whole
heartbeat timeout (``Snapshot.heard_for``): right after a KB outage - or a stall of the
controller's own host - every heartbeat is old because nobody could report (or be heard),
not because every cluster failed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.keys import CLUSTER_GRACE_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import credentials_broken

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
    # application -> its workload reports, by service then cluster (``workloads_of``)
    by_application: dict[Any, list[dict[str, Any]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # what the detector asks of the whole fleet for every application, found once (``broken``)
    fleet_memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def broken(self) -> frozenset[str]:
        """The clusters whose credentials were refused (their capacity is last-known), found
        once per snapshot: a set of every cluster for each application cost 0.2 s a tick at
        1,000 applications on 1,000 clusters."""
        found = self.fleet_memo.get("broken")
        if found is None:
            found = self.fleet_memo["broken"] = frozenset(
                c["name"] for c in self.inventory.get("clusters", []) if credentials_broken(c)
            )
        return found

    def workloads_of(self, app: str) -> list[dict[str, Any]]:
        """The application's workload reports, by service then cluster: indexed once per
        snapshot, since the detector asks for every application each tick (sorting every report
        for each application made a tick quadratic in the applications: 0.09 of a core at 1,000)."""
        if not self.by_application and self.workloads:
            for w in sorted(self.workloads, key=lambda w: (w.get("service", ""), w.get("cluster", ""))):
                self.by_application.setdefault(w.get("application"), []).append(w)
        return self.by_application.get(app, [])


# replan(app_record, inventory, current_placement, exclude) -> (new placement, why), or None when
# the current placement is good enough (judged with the application's own stored policy)
Replanner = Callable[
    [dict[str, Any], dict[str, Any], dict[str, Any], tuple[str, ...]],
    "tuple[dict[str, Any], str] | None",
]


def spec_version(record: Mapping[str, Any] | None) -> int | None:
    """The spec version of an application record (an int, or None when absent or malformed)."""
    value = (record or {}).get("version")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
