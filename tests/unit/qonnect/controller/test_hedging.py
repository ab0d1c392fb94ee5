"""Hedged failover's rules (issue 36): when a standby is started, when it is discarded, when it
is promoted, and every bound (doubt, flapping, opt-out, once per episode, the CPU share)."""

from __future__ import annotations

import dataclasses

from qonnect.controller import hedging
from qonnect.controller.detector import ApiProbe, Memory, Settings, Snapshot
from qonnect.controller.planning import PLANNED, SKIP, _hedged, _within_share
from qonnect.controller.statemachine import DecisionLog
from qonnect.controller.triggers import detect

S = Settings(heartbeat_timeout=6.0, cluster_grace=20.0, stable_seconds=30.0, hedge=True)
DOWN = ApiProbe(False, "no answer from the API (refused)")
UP = ApiProbe(True, "the API answers (HTTP 200)")
NAMES = ("edge-1", "edge-2", "edge-3", "fog-1")


def cluster(name, ok=True):
    out = {"name": name, "tier": "edge", "healthy": ok, "heartbeat_age": 1.0, "free": {"cpu": 2.0}}
    out["nodes"] = [{"name": f"{name}-w", "ready": True, "schedulable": True}]
    if not ok:
        out.update(reachable=False, error="listing nodes: ConnectionRefusedError")
    return out


def on(*clusters, role=None):
    return [{"cluster": c, "replicas": 1, **({"role": role} if role else {})} for c in clusters]


SHOP = {"web": on("edge-1"), "db": on("edge-2")}
HEDGED = {"web": on("edge-1") + on("edge-3", role="standby"), "db": on("edge-2")}


def snap(now, down=(), probes=None, placement=None, app=None, heard_for=60.0):
    clusters = [cluster(n, n not in down) for n in NAMES]
    record = {
        "name": "shop",
        "version": 1,
        "application": app or {"services": [{"name": "web", "requests": {"cpu": 0.5}}]},
    }
    probes = probes if probes is not None else {c: DOWN for c in down}
    inventory = {"clusters": clusters, "placements": {"shop": placement or SHOP}}
    return Snapshot(inventory, [], [record], now, heard_for=heard_for, probes=probes)


def tick(s, log=None, memory=None, settings=S):
    log = log or known()
    memory = memory if memory is not None else Memory()
    triggers, _observe = detect(s, log, memory, settings)
    return triggers + hedging.triggers(s, log, memory, settings, {t.app for t in triggers})


def known():
    log = DecisionLog()
    log.apply({"op": "observe", "app": "shop", "version": 1, "term": 1, "node": "n"})
    return log


def test_a_suspect_cluster_whose_probe_fails_is_hedged_at_once_not_after_the_grace():
    memory, log = Memory(), known()
    found = tick(snap(1000.0, down=("edge-1",)), log, memory)
    assert [(t.kind, t.app) for t in found] == [("hedge", "shop")]
    assert found[0].exclude == ("edge-1",)
    assert tick(snap(1001.0, down=("edge-1",)), log, memory) == []  # once per episode


def test_no_hedge_when_the_leaders_probe_answers_or_has_not_answered_or_hedging_is_off():
    assert tick(snap(1000.0, down=("edge-1",), probes={"edge-1": UP})) == []  # a dead agent
    assert tick(snap(1000.0, down=("edge-1",), probes={})) == []  # the probe has not answered yet
    off = dataclasses.replace(S, hedge=False)
    assert tick(snap(1000.0, down=("edge-1",)), settings=off) == []


def test_no_hedge_for_an_application_that_opted_out():
    app = {"hedge": False, "services": []}
    assert tick(snap(1000.0, down=("edge-1",), app=app)) == []


def test_no_hedge_when_the_controllers_own_view_is_doubtful():
    memory = Memory()
    assert tick(snap(1000.0, down=("edge-1",), heard_for=2.0), memory=memory) == []
    memory = Memory()
    assert tick(snap(1000.0, down=("edge-1", "edge-2")), memory=memory) == []  # 2 of 4 > 34 %
    said = [n for n in memory.notices if n.kind == "hedge-withheld"]
    assert {n.cluster for n in said} == {"edge-1", "edge-2"}
    assert "controller's own partition" in said[0].text


def test_a_flapping_cluster_is_hedged_once_not_each_time():
    memory, log = Memory(), known()
    assert [t.kind for t in tick(snap(1000.0, down=("edge-1",)), log, memory)] == ["hedge"]
    tick(snap(1005.0), log, memory)  # back
    assert tick(snap(1010.0, down=("edge-1",)), log, memory) == []  # suspect again within 30 s
    assert any(n.kind == "hedge-withheld" and "flapping" in n.text for n in memory.notices)
    tick(snap(1020.0), log, memory)
    found = tick(snap(1060.0, down=("edge-1",)), log, memory)  # 40 s later: a new episode
    assert [t.kind for t in found] == ["hedge"]


def test_a_hedged_application_is_discarded_when_its_cluster_is_back_and_kept_while_suspect():
    memory, log = Memory(), known()
    assert tick(snap(1000.0, down=("edge-1",), placement=HEDGED), log, memory) == []
    found = tick(snap(1004.0, placement=HEDGED), log, memory)
    assert [t.kind for t in found] == ["hedge-discard"]
    assert found[0].reason == (
        "hedge discarded: edge-1 came back within its grace; the standby copies started "
        "while it was suspect (web on edge-3) are removed, placement unchanged"
    )


def test_a_confirmed_failure_of_a_hedged_application_is_a_cluster_down_move():
    memory, log = Memory(), known()
    for t in range(0, 22):
        found = tick(snap(1000.0 + t, down=("edge-1",), placement=HEDGED), log, memory)
    assert [t.kind for t in found] == ["cluster-down"]


# -- the plans ------------------------------------------------------------------------------
def decision(kind, exclude=("edge-1",), did="d-1", app="shop"):
    return {"id": did, "app": app, "kind": kind, "exclude": list(exclude)}


def test_the_standby_plan_adds_copies_only_for_what_runs_on_the_suspect_cluster():
    planned = {"web": on("edge-3"), "db": on("fog-1")}  # the planner would move db too
    kind, plan = _hedged((PLANNED, planned), decision("hedge"), SHOP)
    assert kind == PLANNED
    assert plan == {"web": on("edge-1") + on("edge-3", role="standby"), "db": on("edge-2")}


def test_a_hedge_that_does_not_fit_is_not_started_and_says_why():
    kind, why = _hedged(("defer", "no cluster has 4 CPU free"), decision("hedge"), SHOP)
    assert kind == SKIP and why == "hedge not started: no cluster has 4 CPU free"
    kind, why = _hedged((PLANNED, {"web": on("edge-1"), "db": on("edge-2")}), decision("hedge"), SHOP)
    assert kind == SKIP and "no standby fits" in why


def test_a_confirmed_move_promotes_the_standby_whatever_the_planner_prefers():
    planned = {"web": on("fog-1"), "db": on("edge-2")}
    kind, plan = _hedged((PLANNED, planned), decision("cluster-down"), HEDGED)
    assert (kind, plan) == (PLANNED, {"web": on("edge-3"), "db": on("edge-2")})


def test_discarded_is_the_placement_before_the_hedge():
    assert hedging.discarded(HEDGED) == SHOP


def test_the_hedges_of_a_batch_take_at_most_their_share_of_the_free_cpu():
    s = snap(1000.0, down=("edge-1",))  # 3 clusters x 2 CPU free, share 0.5: 3 CPU
    apps = [
        {"name": f"a{i}", "application": {"services": [{"name": "web", "requests": {"cpu": 1.0}}]}}
        for i in range(5)
    ]
    s = dataclasses.replace(s, applications=apps)
    by_app = {f"a{i}": decision("hedge", did=f"d-{i}", app=f"a{i}") for i in range(5)}
    plan = {"web": on("edge-1") + on("edge-3", role="standby")}
    verdicts = {f"d-{i}": (PLANNED, plan) for i in range(5)}
    out = _within_share(verdicts, by_app, s, S)
    assert [out[f"d-{i}"][0] for i in range(5)] == [PLANNED] * 3 + [SKIP] * 2
    assert "50% of the fleet's free CPU is 3" in out["d-3"][1]


def test_a_service_with_a_live_instance_elsewhere_is_not_hedged():
    spread = {"web": on("edge-1", "fog-1"), "db": on("fog-1")}
    assert tick(snap(1000.0, down=("edge-1",), placement=spread)) == []
    mixed = {"web": on("edge-1", "fog-1"), "db": on("edge-1")}
    (found,) = tick(snap(1000.0, down=("edge-1",), placement=mixed))
    assert found.kind == "hedge"  # db runs only on edge-1
    planned = {"web": on("fog-1", "edge-3"), "db": on("edge-3")}
    kind, plan = _hedged((PLANNED, planned), decision("hedge"), mixed)
    assert kind == PLANNED and plan == {
        "web": on("edge-1", "fog-1"),
        "db": on("edge-1") + on("edge-3", role="standby"),
    }
