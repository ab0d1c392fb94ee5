"""Detector rules on plain KB snapshots."""

from __future__ import annotations

from dataclasses import replace

from qonnect.controller.detector import Memory, Settings, Snapshot
from qonnect.controller.statemachine import DecisionLog
from qonnect.controller.triggers import VERSION_FAILING, detect

S = Settings(
    heartbeat_timeout=6.0,
    node_grace=10.0,
    progressing_timeout=30.0,
    stable_seconds=30.0,
    min_dwell=60.0,
    retry_cooldown=30.0,
)


def cluster(name, age=1.0, ready=True, healthy=True):
    return {
        "name": name,
        "tier": "edge",
        "healthy": healthy,
        "heartbeat_age": age,
        "nodes": [{"name": f"{name}-w", "ready": ready, "schedulable": True}],
    }


def snap(clusters, placements, workloads=(), apps=None, now=1000.0):
    apps = apps if apps is not None else [{"name": a, "version": 1, "application": {}} for a in placements]
    return Snapshot({"clusters": clusters, "placements": placements}, list(workloads), apps, now)


def on(*clusters):
    return [{"cluster": c, "replicas": 1} for c in clusters]


def known(log, app="shop", version=1):
    log.apply({"op": "observe", "app": app, "version": version, "term": 1, "node": "n"})
    return log


def test_stale_heartbeat_replaces_every_app_on_the_cluster():
    log = known(known(DecisionLog()), "blog")
    s = snap(
        [cluster("edge-1", age=7.5), cluster("edge-2")],
        {"shop": {"web": on("edge-1"), "db": on("edge-2")}, "blog": {"web": on("edge-2")}},
    )
    triggers, observe = detect(s, log, Memory(), S)
    assert observe == []
    assert [(t.app, t.kind, t.exclude) for t in triggers] == [("shop", "cluster-down", ("edge-1",))]
    assert "heartbeat 7.5s old > timeout 6s" in triggers[0].reason and "services web" in triggers[0].reason
    assert triggers[0].failed_at == 1000.0 - 7.5


def test_fresh_heartbeat_is_not_down_and_first_sight_is_observed():
    s = snap([cluster("edge-1", age=5.9)], {"shop": {"web": on("edge-1")}})
    triggers, observe = detect(s, DecisionLog(), Memory(), S)
    assert triggers == [] and observe == [("shop", 1)]


def test_unhealthy_cluster_with_fresh_heartbeat_is_down():
    s = snap([cluster("edge-1", age=1.0, healthy=False), cluster("edge-2")], {"shop": {"web": on("edge-1")}})
    triggers, _observed = detect(s, known(DecisionLog()), Memory(), S)
    assert triggers[0].kind == "cluster-down" and "unhealthy" in triggers[0].reason


def test_app_with_migration_in_flight_is_skipped():
    log = known(DecisionLog())
    log.apply({"op": "decide", "term": 1, "node": "n", "app": "shop", "reason": "x", "exclude": ["edge-1"]})
    s = snap([cluster("edge-1", age=60)], {"shop": {"web": on("edge-1")}})
    assert detect(s, log, Memory(), S)[0] == []


def test_failed_workload_moves_only_when_on_a_placed_cluster():
    wl = [
        {
            "cluster": "fog-1",
            "application": "shop",
            "service": "web",
            "status": "Failed",
            "reason": "CrashLoopBackOff",
            "since": 990.0,
        },
        {"cluster": "fog-9", "application": "shop", "service": "db", "status": "Failed", "since": 900.0},
    ]
    s = snap([cluster("fog-1"), cluster("fog-9")], {"shop": {"web": on("fog-1"), "db": on("fog-2")}}, wl)
    triggers, _observed = detect(s, known(DecisionLog()), Memory(), S)
    assert [(t.kind, t.service, t.exclude) for t in triggers] == [("workload-failed", "web", ("fog-1",))]
    assert "CrashLoopBackOff" in triggers[0].reason


def test_progressing_past_timeout_moves_the_service():
    memory, log = Memory(), known(DecisionLog())
    wl = [
        {"cluster": "fog-1", "application": "shop", "service": "web", "status": "Progressing", "since": 950.0}
    ]
    placements = {"shop": {"web": on("fog-1")}}
    assert detect(snap([cluster("fog-1")], placements, wl, now=975.0), log, memory, S)[0] == []
    triggers, _observed = detect(snap([cluster("fog-1")], placements, wl, now=981.0), log, memory, S)
    assert triggers[0].kind == "workload-stuck" and "31s > 30s" in triggers[0].reason


def test_node_not_ready_waits_for_the_cluster_then_moves():
    memory, log = Memory(), known(DecisionLog())
    placements = {"shop": {"web": on("edge-1")}}
    assert detect(snap([cluster("edge-1", ready=False)], placements, now=100.0), log, memory, S)[0] == []
    assert detect(snap([cluster("edge-1", ready=False)], placements, now=109.0), log, memory, S)[0] == []
    triggers, _observed = detect(
        snap([cluster("edge-1", ready=False)], placements, now=111.0), log, memory, S
    )
    assert triggers[0].kind == "node-not-ready" and triggers[0].exclude == ("edge-1",)
    # the node came back before the grace ended elsewhere: no move
    memory2 = Memory()
    detect(snap([cluster("edge-1", ready=False)], placements, now=100.0), log, memory2, S)
    detect(snap([cluster("edge-1", ready=True)], placements, now=105.0), log, memory2, S)
    assert detect(snap([cluster("edge-1", ready=False)], placements, now=112.0), log, memory2, S)[0] == []


def test_spec_change_replaces():
    log = known(DecisionLog(), version=1)
    s = snap([cluster("c1")], {"shop": {"web": on("c1")}}, apps=[{"name": "shop", "version": 2}])
    triggers, _observed = detect(s, log, Memory(), S)
    assert (
        triggers[0].kind == "spec-changed"
        and triggers[0].spec_version == 2
        and "1 -> 2" in triggers[0].reason
    )


def test_deleted_app_version_is_forgotten_and_never_deployed_app_ignored():
    log = known(DecisionLog(), "gone")
    s = snap([cluster("c1")], {"gone": {"web": on("c1")}}, apps=[{"name": "new", "version": 1}])
    assert detect(s, log, Memory(), S) == ([], [("gone", None)])


class Replanner:
    """Records its calls; proposes moving every service to ``target``."""

    def __init__(self, target):
        self.target, self.calls = target, []

    def __call__(self, record, inventory, current, exclude):
        self.calls.append(exclude)
        return {svc: on(self.target) for svc in current}, "objective 0.5 -> 0.3"


def test_drift_respects_dwell_time_and_unstable_clusters():
    log, memory = known(DecisionLog()), Memory()
    placements = {"shop": {"web": on("c1")}}
    replan = Replanner("c2")
    triggers, _observed = detect(
        snap([cluster("c1"), cluster("c2")], placements, now=100.0), log, memory, S, replan
    )
    assert triggers[0].kind == "qos-drift" and triggers[0].exclude == ("c2",), "c2 just appeared: unstable"
    triggers, _observed = detect(
        snap([cluster("c1"), cluster("c2")], placements, now=131.0), log, memory, S, replan
    )
    assert triggers[0].exclude == ()
    # a recent migration of the app: no drift move within min_dwell
    log.apply(
        {"op": "decide", "term": 1, "node": "n", "app": "shop", "reason": "x", "exclude": [], "ts": 120.0}
    )
    did = log.inflight["shop"]
    log.apply({"op": "start", "id": did, "term": 1, "node": "n"})
    log.apply(
        {"op": "finish", "id": did, "attempt": 1, "result": "succeeded", "term": 1, "node": "n", "ts": 125.0}
    )
    assert (
        detect(snap([cluster("c1"), cluster("c2")], placements, now=150.0), log, memory, S, replan)[0] == []
    )
    assert detect(snap([cluster("c1"), cluster("c2")], placements, now=186.0), log, memory, S, replan)[0]


def test_flapping_cluster_never_counts_as_stable():
    log, memory = known(DecisionLog()), Memory()
    replan = Replanner("c2")
    placements = {"shop": {"web": on("c1")}}
    for i in range(10):  # c2 flaps every 10 s for 100 s
        age = 20.0 if i % 2 else 1.0
        detect(
            snap([cluster("c1"), cluster("c2", age=age)], placements, now=100.0 + 10 * i),
            log,
            memory,
            S,
            replan,
        )
    assert all("c2" in exclude for exclude in replan.calls)


def test_same_failure_is_not_retried_in_a_tight_loop():
    log = known(DecisionLog())
    s = snap([cluster("edge-1", age=60)], {"shop": {"web": on("edge-1")}})
    (trigger,), _observed = detect(s, log, Memory(), S)
    log.apply(
        {
            "op": "decide",
            "term": 1,
            "node": "n",
            "app": "shop",
            "reason": "x",
            "exclude": list(trigger.exclude),
            "key": trigger.key,
        }
    )
    did = log.inflight["shop"]
    log.apply({"op": "start", "id": did, "term": 1, "node": "n"})
    log.apply(
        {"op": "finish", "id": did, "attempt": 1, "result": "failed", "term": 1, "node": "n", "ts": 995.0}
    )
    assert detect(s, log, Memory(), S)[0] == []
    later = snap([cluster("edge-1", age=60)], {"shop": {"web": on("edge-1")}}, now=1030.0)
    assert detect(later, log, Memory(), S)[0]


# -- issue 11 ---------------------------------------------------------------------------------------


def test_right_after_a_kb_outage_stale_heartbeats_are_not_failures():
    """Every heartbeat is 20 s old because nobody could report: within the grace nothing is down."""
    clusters = [cluster(f"edge-{i}", age=20.0) for i in range(1, 5)]
    placements = {"shop": {"web": on("edge-1")}, "blog": {"web": on("edge-2")}}
    log = known(known(DecisionLog()), "blog")
    s = Snapshot(
        {"clusters": clusters, "placements": placements},
        [],
        [{"name": a, "version": 1, "application": {}} for a in placements],
        1000.0,
        heard_for=1.0,
    )
    assert detect(s, log, Memory(), S)[0] == []
    after_grace = Snapshot(s.inventory, [], s.applications, 1010.0, heard_for=S.heartbeat_timeout + 1)
    assert {t.app for t in detect(after_grace, log, Memory(), S)[0]} == {"shop", "blog"}, (
        "real failures still count"
    )


def test_unhealthy_report_counts_even_within_the_grace():
    s = Snapshot(
        {
            "clusters": [cluster("edge-1", healthy=False), cluster("edge-2")],
            "placements": {"shop": {"web": on("edge-1")}},
        },
        [],
        [{"name": "shop", "version": 1, "application": {}}],
        1000.0,
        heard_for=0.5,
    )
    assert [t.kind for t in detect(s, known(DecisionLog()), Memory(), S)[0]] == ["cluster-down"]


def test_a_migration_avoids_a_cluster_that_just_recovered():
    """--stable-seconds applies to migrations too: edge-3 came back 3 s ago, so the re-placement
    of shop (on edge-1, which fails) must not move services onto it."""
    memory = Memory()
    log = known(DecisionLog())
    placements = {"shop": {"web": on("edge-1"), "db": on("edge-2")}}
    detect(
        snap([cluster("edge-1"), cluster("edge-2"), cluster("edge-3", age=60)], placements, now=990.0),
        log,
        memory,
        S,
    )
    detect(
        snap([cluster("edge-1"), cluster("edge-2"), cluster("edge-3")], placements, now=997.0), log, memory, S
    )
    triggers, _observed = detect(
        snap([cluster("edge-1", age=9), cluster("edge-2"), cluster("edge-3")], placements, now=1000.0),
        log,
        memory,
        S,
    )
    assert triggers[0].kind == "cluster-down" and triggers[0].exclude == ("edge-1", "edge-3")
    later = detect(
        snap(
            [cluster("edge-1", age=9), cluster("edge-2"), cluster("edge-3")],
            placements,
            now=997.0 + S.stable_seconds + 1,
        ),
        DecisionLog(),
        memory,
        S,
    )[0]
    assert later[0].exclude == ("edge-1",), "after stable_seconds it may be used again"


def test_node_not_ready_on_two_clusters_names_both():
    memory = Memory()
    dead = [{"name": "w", "ready": False, "schedulable": True}]
    clusters = [dict(cluster("edge-1"), nodes=dead), dict(cluster("edge-2"), nodes=dead), cluster("edge-3")]
    placements = {"shop": {"web": on("edge-1"), "db": on("edge-2")}}
    log = known(DecisionLog())
    detect(snap(clusters, placements, now=1000.0), log, memory, S)
    trigger = detect(snap(clusters, placements, now=1000.0 + S.node_grace + 1), log, memory, S)[0][0]
    assert trigger.kind == "node-not-ready" and "edge-1" in trigger.reason and "edge-2" in trigger.reason
    assert trigger.exclude == ("edge-1", "edge-2") and trigger.pinned == ("edge-1", "edge-2")


def test_default_settings_leave_a_transient_failure_to_the_agents_grace():
    """A workload Progressing for minutes (a flaky registry, a surge pod waiting for room) is the
    agent's to judge against the Deployment's progress deadline (600 s by default): with the
    product's defaults the controller does not move it; past the backstop it does."""
    defaults = Settings()
    assert defaults.progressing_timeout > 600
    log, memory = known(DecisionLog()), Memory()
    waiting = [
        {
            "cluster": "fog-1",
            "application": "shop",
            "service": "web",
            "status": "Progressing",
            "reason": "ErrImagePull",
            "since": 1000.0 - 300,
        }
    ]
    s = snap([cluster("fog-1"), cluster("fog-2")], {"shop": {"web": on("fog-1")}}, waiting)
    assert detect(s, log, memory, defaults)[0] == []
    late = snap(
        [cluster("fog-1"), cluster("fog-2")],
        {"shop": {"web": on("fog-1")}},
        waiting,
        now=1000.0 + defaults.progressing_timeout,
    )
    assert [t.kind for t in detect(late, log, memory, defaults)[0]] == ["workload-stuck"]


# A version that fails wherever it goes stops moving (issue 22.4).
#
# Reproduced on the emulator stack: a crash-looping version was moved 4 times in 3.6 minutes
# (edge-3 -> edge-2 -> edge-1 -> edge-2 -> edge-1), each decision excluding only the cluster it
# had just failed on. Now each move avoids every cluster that version already failed on (by the
# replicated decision log), and once it failed on ``max_version_failures`` clusters the detector
# returns a ``version-failing`` trigger the leader reports and never acts on.


def failing(where: str, version: int = 2, now: float = 1000.0) -> Snapshot:
    """shop v``version`` placed on ``where`` and crash-looping there."""
    workloads = [
        {
            "cluster": where,
            "application": "shop",
            "service": "web",
            "status": "Failed",
            "reason": "CrashLoopBackOff: back-off restarting failed container",
            "since": now - 5,
        }
    ]
    clusters = [cluster(f"edge-{i}") for i in (1, 2, 3)]
    apps = [{"name": "shop", "version": version, "application": {}}]
    return Snapshot({"clusters": clusters, "placements": {"shop": {"web": on(where)}}}, workloads, apps, now)


def moved(log: DecisionLog, trigger, ts: float) -> None:
    """The leader's decision on the trigger, ended as the executor ends it (succeeded)."""
    res = log.apply(
        {
            "op": "decide",
            "term": 1,
            "node": "n",
            "app": trigger.app,
            "service": trigger.service,
            "kind": trigger.kind,
            "reason": trigger.reason,
            "exclude": list(trigger.exclude),
            "pinned": list(trigger.pinned),
            "spec_version": trigger.spec_version,
            "ts": ts,
        }
    )
    assert log.apply({"op": "start", "term": 1, "node": "n", "id": res["id"], "ts": ts})["ok"]
    finish = {"op": "finish", "term": 1, "node": "n", "id": res["id"], "attempt": 1, "result": "succeeded"}
    assert log.apply({**finish, "ts": ts + 5})["ok"]


def test_each_move_avoids_every_cluster_the_version_failed_on_then_it_stops():
    log = known(DecisionLog(), version=2)
    first = detect(failing("edge-3"), log, Memory(), S)[0]
    assert [(t.kind, t.exclude) for t in first] == [("workload-failed", ("edge-3",))]
    moved(log, first[0], 1000.0)
    second = detect(failing("edge-2", now=1100.0), log, Memory(), S)[0]
    assert [t.kind for t in second] == [VERSION_FAILING], [t.reason for t in second]
    why = second[0].reason
    assert "version 2 of shop" in why and "edge-3" in why and "CrashLoopBackOff" in why, why
    assert second[0].pinned == ("edge-2", "edge-3")


def test_a_higher_bound_accumulates_the_exclusions_until_it_is_reached():
    settings = replace(S, max_version_failures=3)
    log = known(DecisionLog(), version=2)
    for where, now in (("edge-3", 1000.0), ("edge-2", 1100.0)):
        (trigger,) = detect(failing(where, now=now), log, Memory(), settings)[0]
        assert trigger.kind == "workload-failed"
        moved(log, trigger, now)
    assert trigger.exclude == ("edge-2", "edge-3") and "already failed on edge-3" in trigger.reason
    (last,) = detect(failing("edge-1", now=1200.0), log, Memory(), settings)[0]
    assert last.kind == VERSION_FAILING and last.pinned == ("edge-1", "edge-2", "edge-3")


def test_a_new_version_starts_with_a_clean_record():
    log = known(DecisionLog(), version=2)
    (trigger,) = detect(failing("edge-3"), log, Memory(), S)[0]
    moved(log, trigger, 1000.0)
    log.apply({"op": "observe", "app": "shop", "version": 3, "term": 1, "node": "n"})
    (fresh,) = detect(failing("edge-2", version=3, now=1100.0), log, Memory(), S)[0]
    assert fresh.kind == "workload-failed" and fresh.exclude == ("edge-2",)


def test_a_failing_version_is_not_judged_for_drift_either():
    """The version-failing trigger holds the application: no drift move sneaks it elsewhere."""
    log = known(DecisionLog(), version=2)
    (trigger,) = detect(failing("edge-3"), log, Memory(), S)[0]
    moved(log, trigger, 1000.0)
    calls = []

    def replan(*args):
        calls.append(args)
        return {"web": on("edge-1")}, "objective 0.5 -> 0.9"

    triggers = detect(failing("edge-2", now=2000.0), log, Memory(), S, replan)[0]
    assert [t.kind for t in triggers] == [VERSION_FAILING] and calls == []


def test_a_report_from_before_the_newest_placement_moves_nothing():
    """Issue 22.4, seen on the emulator: v2 failed on two clusters and was rolled back as v3;
    the spec-changed deploy of v3 ended, and the agent's last report - still v2's crashing pod
    on edge-2 - moved the healthy rolled-back version. A report counts once every live agent
    has reported since the attempt ended (the heartbeat timeout); a failure still reported
    then is the new objects' own."""
    log = known(DecisionLog(), version=3)
    log.versions["shop"] = 2
    (spec,) = detect(failing("edge-2", version=3, now=990.0), log, Memory(), S)[0]
    assert spec.kind == "spec-changed"
    moved(log, spec, 995.0)  # v3 applied on edge-2, ended at 1000.0
    assert log.versions["shop"] == 3
    for now in (1000.5, 1003.0, 1005.9):  # v2's report, not yet replaced
        assert detect(failing("edge-2", version=3, now=now), log, Memory(), S)[0] == [], now
    (late,) = detect(failing("edge-2", version=3, now=1006.5), log, Memory(), S)[0]
    assert late.kind == "workload-failed" and late.exclude == ("edge-2",)


def test_an_attempt_that_wrote_nothing_does_not_hold_failure_reports_back():
    """A decision ended without an attempt (cancelled before it ran) changed no object."""
    log = known(DecisionLog(), version=2)
    res = log.apply(
        {
            "op": "decide",
            "term": 1,
            "node": "n",
            "app": "shop",
            "kind": "qos-drift",
            "reason": "r",
            "exclude": [],
        }
    )
    log.apply({"op": "cancel", "term": 1, "node": "n", "id": res["id"], "ts": 999.0})
    (trigger,) = detect(failing("edge-2", now=1000.0), log, Memory(), S)[0]
    assert trigger.kind == "workload-failed"


def test_a_snapshot_hands_each_application_its_own_reports_in_service_then_cluster_order():
    """Rule 3 walks an application's reports; the detector asks for every application each
    tick, so the reports are indexed once per snapshot (sorted all over per application, a tick
    was quadratic in the applications)."""
    reports = [
        {"application": a, "service": s, "cluster": c, "status": "Healthy"}
        for a, s, c in [
            ("b", "web", "c2"),
            ("a", "web", "c1"),
            ("a", "db", "c2"),
            ("a", "db", "c1"),
            ("b", "db", "c1"),
        ]
    ]
    snap = Snapshot(inventory={}, workloads=reports, applications=[], now=0.0)
    assert [(w["service"], w["cluster"]) for w in snap.workloads_of("a")] == [
        ("db", "c1"),
        ("db", "c2"),
        ("web", "c1"),
    ]
    assert [(w["service"], w["cluster"]) for w in snap.workloads_of("b")] == [("db", "c1"), ("web", "c2")]
    assert snap.workloads_of("nobody") == [] and len(snap.workloads) == 5
