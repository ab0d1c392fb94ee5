"""Issue 22, "confirm before acting": a cluster is down only on independent evidence.

The detector rules on plain snapshots (with the leader's probes as the loop passes them), the
bounded, cached prober of confirm.py against real HTTP servers, the durable recovery memory
through journal.py, and the loop's own lag.
"""

from __future__ import annotations

import dataclasses
import http.server
import threading
import time

import pytest
import yaml
from qonnect.controller import journal
from qonnect.controller.confirm import Confirmer, probe_cluster
from qonnect.controller.detector import (
    CLUSTER_GRACE,
    CLUSTER_GRACE_LABEL,
    ApiProbe,
    Memory,
    Settings,
    Snapshot,
)
from qonnect.controller.statemachine import DecisionLog
from qonnect.controller.triggers import detect
from support.specs import kubeconfig as kubeconfig_doc

S = Settings(heartbeat_timeout=6.0, node_grace=10.0, stable_seconds=30.0, cluster_grace=CLUSTER_GRACE)
DOWN = ApiProbe(False, "no answer from the API (ConnectionRefusedError: refused)")
UP = ApiProbe(True, "the API answers (HTTP 200)")


def cluster(name, age=1.0, healthy=True, **extra):
    nodes = [{"name": f"{name}-w", "ready": True, "schedulable": True}]
    return dict(name=name, tier="edge", healthy=healthy, heartbeat_age=age, nodes=nodes, **extra)


def on(*clusters):
    return [{"cluster": c, "replicas": 1} for c in clusters]


def known(app="shop"):
    log = DecisionLog()
    log.apply({"op": "observe", "app": app, "version": 1, "term": 1, "node": "n"})
    return log


def snap(clusters, now, probes=None, placements=None, heard_for=None):
    placements = placements or {"shop": {"web": on("edge-1"), "db": on("edge-2")}}
    apps = [{"name": a, "version": 1, "application": {}} for a in placements]
    return Snapshot(
        {"clusters": clusters, "placements": placements}, [], apps, now, heard_for=heard_for, probes=probes
    )


def unreachable(name="edge-1"):
    return cluster(
        name, healthy=False, reachable=False, error="listing nodes: ConnectionRefusedError: [Errno 111]"
    )


# -- case 1: a 15 s API-server outage -----------------------------------------------------------


def test_a_15_second_api_outage_never_migrates():
    """Suspect from the first unhealthy report, the leader's probe fails too, and the API is back
    after 15 s: within the grace nothing is decided, and afterwards nothing is left to decide."""
    log, memory = known(), Memory()
    for t in range(0, 16):  # the listener is closed for 15 s
        s = snap([unreachable(), cluster("edge-2"), cluster("edge-3")], 1000.0 + t, {"edge-1": DOWN})
        assert detect(s, log, memory, S)[0] == [], f"decided {t}s into a 15 s outage"
    for t in range(16, 60):
        s = snap([cluster("edge-1"), cluster("edge-2"), cluster("edge-3")], 1000.0 + t, {})
        assert detect(s, log, memory, S)[0] == []
    kinds = [n.kind for n in memory.notices]
    assert kinds == ["cluster-suspect", "cluster-recovered"], kinds


def test_a_confirmed_outage_moves_after_the_grace_and_says_why():
    log, memory = known(), Memory()
    for t in range(0, int(CLUSTER_GRACE)):
        s = snap([unreachable(), cluster("edge-2"), cluster("edge-3")], 1000.0 + t, {"edge-1": DOWN})
        assert detect(s, log, memory, S)[0] == []
    s = snap([unreachable(), cluster("edge-2"), cluster("edge-3")], 1000.0 + CLUSTER_GRACE, {"edge-1": DOWN})
    (trigger,), _observe = detect(s, log, memory, S)
    assert trigger.kind == "cluster-down" and trigger.exclude == ("edge-1",)
    # issue item 13: the KB's error is in the reason, and so is the leader's own confirmation
    assert "ConnectionRefusedError: [Errno 111]" in trigger.reason
    assert "the controller's own probe fails too" in trigger.reason
    assert f"grace {CLUSTER_GRACE:g}s" in trigger.reason
    assert trigger.failed_at == 1000.0


def test_a_cluster_label_overrides_the_grace():
    log, memory = known(), Memory()
    short = dict(unreachable(), labels={CLUSTER_GRACE_LABEL: "5"})
    assert detect(snap([short, cluster("edge-2")], 1000.0, {"edge-1": DOWN}), log, memory, S)[0] == []
    assert detect(snap([short, cluster("edge-2")], 1005.0, {"edge-1": DOWN}), log, memory, S)[0]
    # a label that is not a number of seconds is ignored: --cluster-grace applies
    bad, memory = dict(unreachable(), labels={CLUSTER_GRACE_LABEL: "soon"}), Memory()
    detect(snap([bad, cluster("edge-2")], 1000.0, {"edge-1": DOWN}), log, memory, S)
    assert detect(snap([bad, cluster("edge-2")], 1005.0, {"edge-1": DOWN}), log, memory, S)[0] == []


def test_an_applications_own_grace_overrides_the_clusters_both_ways():
    """spec.clusterGraceSeconds (Karmada's clusterTolerations, per application): on one down
    cluster, "patient" (60 s) stays past the cluster grace, "eager" (5 s) moves before it, and
    "plain" (no grace of its own) moves at the cluster grace."""
    placements = {app: {"web": on("edge-1")} for app in ("patient", "eager", "plain")}
    graces = {"patient": 60.0, "eager": 5.0}
    apps = [
        {
            "name": a,
            "version": 1,
            "application": {"cluster_grace_seconds": graces[a]} if a in graces else {},
        }
        for a in placements
    ]
    log, memory = DecisionLog(), Memory()
    for app in placements:
        log.apply({"op": "observe", "app": app, "version": 1, "term": 1, "node": "n"})
    moved: dict[str, float] = {}
    for t in range(0, 70):
        s = Snapshot(
            {"clusters": [unreachable(), cluster("edge-2")], "placements": placements},
            [],
            apps,
            1000.0 + t,
            probes={"edge-1": DOWN},
        )
        for trigger in detect(s, log, memory, S)[0]:
            assert trigger.kind == "cluster-down" and trigger.exclude == ("edge-1",)
            moved.setdefault(trigger.app, t)
    assert moved == {"eager": 5, "plain": int(CLUSTER_GRACE), "patient": 60}, moved


def test_a_probe_that_has_not_answered_yet_keeps_the_cluster_suspect():
    log, memory = known(), Memory()
    for t in range(0, 60, 5):
        s = snap([unreachable(), cluster("edge-2")], 1000.0 + t, probes={})
        assert detect(s, log, memory, S)[0] == []


# -- case 2: a dead agent on a healthy cluster ---------------------------------------------------


def test_a_silent_agent_on_a_reachable_cluster_is_agent_down_not_a_failover():
    log, memory = known(), Memory()
    for t in range(0, 45):  # the agent is killed for 45 s; its cluster's API answers the leader
        s = snap([cluster("edge-1", age=1.0 + t), cluster("edge-2")], 1000.0 + t, {"edge-1": UP})
        assert detect(s, log, memory, S)[0] == [], f"moved {t}s after the agent died"
    (notice,) = [n for n in memory.notices if n.kind == "agent-down"]
    assert notice.cluster == "edge-1" and "its API answers the controller" in notice.text
    assert len(memory.notices) == 1, "announced once, not every tick"


def test_a_silent_agent_on_an_unreachable_cluster_is_down_after_the_grace():
    log, memory = known(), Memory()
    detect(snap([cluster("edge-1", age=7.0), cluster("edge-2")], 1000.0, {"edge-1": DOWN}), log, memory, S)
    late = snap([cluster("edge-1", age=7.0 + CLUSTER_GRACE), cluster("edge-2")], 1000.0 + CLUSTER_GRACE)
    (trigger,), _observe = detect(dataclasses.replace(late, probes={"edge-1": DOWN}), log, memory, S)
    assert trigger.kind == "cluster-down" and "heartbeat" in trigger.reason


# -- case 3: refused credentials ---------------------------------------------------------------


class Replanner:
    """Would move every service to ``target`` (as drift from zero free capacity did)."""

    def __init__(self, target):
        self.target = target

    def __call__(self, record, inventory, current, exclude):
        return {svc: on(self.target) for svc in current}, "objective 0.5 -> 0.3"


def test_refused_credentials_are_announced_once_and_move_nothing():
    log, memory = known(), Memory()
    broken = cluster(
        "edge-1",
        credentials_broken=True,
        reachable=True,
        error="forbidden: the agent needs these rights: list nodes (all namespaces)",
    )
    for t in range(0, 200, 5):
        s = snap([broken, cluster("edge-2"), cluster("edge-3")], 1000.0 + t)
        assert detect(s, log, memory, S, Replanner("edge-3"))[0] == [], f"moved at +{t}s"
    (notice,) = memory.notices
    assert notice.kind == "credentials-broken" and "forbidden: the agent needs" in notice.text


def test_a_403_then_a_401_are_two_episodes_even_unseen_in_between():
    """Credentials mended and broken another way between two looks: announced again (CI saw a
    403 trial, a repair and a 401 trial fall between two leader ticks and the 401 go unsaid)."""
    log, memory = known(), Memory()
    for t, error in (
        (0, "forbidden: the agent needs these rights: list nodes"),
        (5, "unauthorized: refused"),
    ):
        broken = cluster("edge-1", credentials_broken=True, reachable=True, error=error)
        detect(snap([broken, cluster("edge-2")], 1000.0 + t), log, memory, S, Replanner("edge-2"))
        detect(snap([broken, cluster("edge-2")], 1001.0 + t), log, memory, S, Replanner("edge-2"))
    assert [(n.kind, n.text.split("(")[1][:9]) for n in memory.notices] == [
        ("credentials-broken", "forbidden"),
        ("credentials-broken", "unauthori"),
    ]


def test_nobody_moves_onto_a_cluster_whose_capacity_is_only_last_known():
    calls = []

    def replan(record, inventory, current, exclude):
        calls.append(exclude)
        return None

    broken = cluster("edge-3", credentials_broken=True, reachable=True, error="unauthorized: refused")
    memory = Memory()
    for t in range(0, 100, 10):
        detect(snap([cluster("edge-1"), cluster("edge-2"), broken], 1000.0 + t), known(), memory, S, replan)
    assert calls and all("edge-3" in exclude for exclude in calls)


# -- case 9: events that say what happened -----------------------------------------------------


def test_a_notready_node_is_not_qos_drift():
    """One of two nodes NotReady: capacity drops and the engine would move the app; that is the
    node-not-ready rule's (with its grace), not drift."""
    log, memory = known(), Memory()
    nodes = [{"name": "a", "ready": False, "schedulable": True}, {"name": "b", "ready": True}]
    sick = dict(cluster("edge-1"), nodes=nodes)
    for t in range(0, int(S.node_grace + S.stable_seconds), 5):
        s = snap([sick, cluster("edge-2"), cluster("edge-3")], 1000.0 + t)
        assert detect(s, log, memory, S, Replanner("edge-3"))[0] == [], f"drift at +{t}s"


# -- the prober ----------------------------------------------------------------------------------


class Api(http.server.BaseHTTPRequestHandler):
    status = 200
    delay = 0.0

    def do_GET(self):
        time.sleep(self.delay)
        body = b'{"kind":"NamespaceList","items":[]}'
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api(tmp_path):
    handler = type("Handler", (Api,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(kubeconfig_doc(f"http://127.0.0.1:{server.server_address[1]}", "t")))
    yield handler, {"name": "edge-1", "kubeconfig": str(kubeconfig), "labels": {}}
    server.shutdown()
    server.server_close()


def test_the_probe_reaches_the_api_through_the_kb_record(api):
    handler, record = api
    assert probe_cluster("edge-1", record).reachable is True
    handler.status = 403  # the controller's credentials refused: someone answers, the cluster is up
    found = probe_cluster("edge-1", record)
    assert found.reachable is True and "403" in found.detail
    handler.status = 503
    assert probe_cluster("edge-1", record).reachable is False


def test_the_probe_of_a_closed_port_fails_fast(tmp_path):
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(kubeconfig_doc("http://127.0.0.1:9", "secret-token")))
    started = time.monotonic()
    found = probe_cluster("edge-9", {"name": "edge-9", "kubeconfig": str(kubeconfig)})
    assert found.reachable is False and time.monotonic() - started < 5
    assert "secret-token" not in found.detail
    assert probe_cluster("edge-9", {"name": "edge-9"}).reachable is None, "no kubeconfig: no evidence"


def test_probes_are_bounded_cached_and_never_block():
    gate = threading.Event()
    calls: list[str] = []
    running = []
    peak = []

    def slow(name, record):
        calls.append(name)
        running.append(name)
        peak.append(len(running))
        gate.wait(5)
        running.remove(name)
        return ApiProbe(True, "ok", time.time())

    confirmer = Confirmer(lambda: [{"name": f"c{i}"} for i in range(10)], slow, ttl=3.0, max_parallel=3)
    try:
        started = time.monotonic()
        assert confirmer.probes([f"c{i}" for i in range(10)]) == {}  # nothing finished yet
        assert confirmer.probes([f"c{i}" for i in range(10)]) == {}  # one probe per cluster at a time
        assert time.monotonic() - started < 0.5, "the loop never waits for a probe"
        time.sleep(0.3)
        assert max(peak) == 3, "at most max_parallel probes at once"
        gate.set()
        deadline = time.monotonic() + 5
        while len(confirmer.probes([f"c{i}" for i in range(10)])) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(calls) == sorted(f"c{i}" for i in range(10))
        confirmer.probes(["c1"])
        assert calls.count("c1") == 1, "a fresh result is reused"
    finally:
        gate.set()
        confirmer.close()


def test_a_result_is_refreshed_without_a_gap():
    """An agent-down cluster must not look "not probed yet" every ttl: the last result stands
    while the next probe runs (else the notice would flap between suspect and agent-down)."""
    gate = threading.Event()
    calls: list[float] = []

    def probe(name, record):
        calls.append(time.time())
        if len(calls) > 1:
            gate.wait(5)
        return ApiProbe(True, "ok", time.time())

    confirmer = Confirmer(lambda: [{"name": "c1"}], probe, ttl=0.2)
    try:
        deadline = time.monotonic() + 5
        while not confirmer.probes(["c1"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # older than ttl: a refresh starts and hangs
        assert confirmer.probes(["c1"])["c1"].reachable is True
        time.sleep(0.1)
        assert len(calls) == 2, "the refresh runs in the background"
        time.sleep(0.5)  # older than 3 ttl: no longer evidence
        assert confirmer.probes(["c1"]) == {}
    finally:
        gate.set()
        confirmer.close()


def test_a_probe_that_never_returns_is_no_answer_not_a_frozen_judgement():
    """A probe stuck in its client must not keep the cluster "not confirmed yet" for ever (the
    detector then neither moves nor says why): after give_up seconds it counts as no answer, and
    the stuck probe's late result does not overwrite a newer one."""
    gate = threading.Event()
    calls: list[float] = []

    def probe(name, record):
        calls.append(time.time())
        if len(calls) == 1:
            gate.wait(5)  # the first probe hangs
            return ApiProbe(True, "late answer", calls[0])
        return ApiProbe(False, "refused", time.time())

    confirmer = Confirmer(lambda: [{"name": "c1"}], probe, ttl=0.2, give_up=0.3)
    try:
        assert confirmer.probes(["c1"]) == {}
        time.sleep(0.4)
        result = confirmer.probes(["c1"])["c1"]
        assert result.reachable is False and "did not return" in result.detail, result
        time.sleep(0.3)  # older than ttl: a new probe starts, and answers
        deadline = time.monotonic() + 5
        while len(calls) < 2 and time.monotonic() < deadline:
            confirmer.probes(["c1"])
            time.sleep(0.05)
        gate.set()  # the stuck probe returns now, late: its answer is not taken
        seen = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            seen |= {r.detail for r in confirmer.probes(["c1"]).values()}
            time.sleep(0.02)
        assert "refused" in seen and "late answer" not in seen, seen
    finally:
        gate.set()
        confirmer.close()


def test_down_is_confirmed_only_by_a_fresh_probe():
    """A "no answer" older than ttl is no evidence: the API may be back (a 15 s blip)."""
    answers = iter([False, None])  # the first probe finds no answer, the second never returns
    gate = threading.Event()

    def probe(name, record):
        if next(answers) is None:
            gate.wait(5)
            return ApiProbe(True, "ok", time.time())
        return ApiProbe(False, "no answer", time.time())

    confirmer = Confirmer(lambda: [{"name": "c1"}], probe, ttl=1.0)
    try:
        deadline = time.monotonic() + 5
        found = confirmer.probes(["c1"])
        while not found and time.monotonic() < deadline:  # a loaded machine: read once per look
            time.sleep(0.02)
            found = confirmer.probes(["c1"])
        assert found["c1"].reachable is False
        time.sleep(1.2)
        assert confirmer.probes(["c1"]) == {}, "a stale 'no answer' confirms nothing"
    finally:
        gate.set()
        confirmer.close()


# -- case 8: durable recovery memory -------------------------------------------------------------


class EventsKB:
    def __init__(self):
        self.events = []

    def post_event(self, event):
        self.events.append(dict(event, id=len(self.events) + 1, role="controller", ts=event.get("ts", 0.0)))
        return self.events[-1]

    def list_events(self, since=None, limit=100, **_):
        return [e for e in self.events if since is None or e["ts"] > since][:limit]


def test_a_new_leader_remembers_what_just_recovered():
    """Leader 1 sees edge-3 down and back, and posts it; leader 2 (a fresh Memory) seeds its
    memory from the KB and keeps edge-3 out of a migration 26 s later, as leader 1 would."""
    kb, memory = EventsKB(), Memory()
    log = known()
    clusters = [cluster("edge-1"), cluster("edge-2"), cluster("edge-3")]
    placements = {"shop": {"web": on("edge-1"), "db": on("edge-2")}}
    detect(snap([*clusters[:2], cluster("edge-3", age=60)], 970.0, placements=placements), log, memory, S)
    detect(snap(clusters, 974.0, placements=placements), log, memory, S)
    for notice in memory.notices:
        journal.post_notice(kb, notice, {"term": 1, "seq": 1})
    assert [e["type"] for e in kb.events if e["cluster"] == "edge-3"][-1] == journal.RECOVERED
    fresh = Memory()
    journal.seed_memory(fresh, journal.recovered_in_kb(kb, 1000.0, S.stable_seconds))
    assert fresh.recovered_at == {"edge-3": 974.0}
    s = snap([cluster("edge-1", age=9), cluster("edge-2"), cluster("edge-3")], 1000.0, placements=placements)
    (trigger,), _observe = detect(s, log, fresh, dataclasses.replace(S, cluster_grace=0.0))
    assert trigger.kind == "cluster-down" and trigger.exclude == ("edge-1", "edge-3")


def test_recovery_events_not_written_by_a_controller_are_not_trusted():
    kb = EventsKB()
    kb.post_event({"type": journal.RECOVERED, "cluster": "edge-3", "ts": 990.0})
    kb.events[-1]["role"] = "admin"
    assert journal.recovered_in_kb(kb, 1000.0, 30.0) == {}


# -- case 7: a starved controller host -----------------------------------------------------------


def test_a_stalled_loop_restarts_the_heartbeat_grace():
    """A tick 9 s late (a starved host): heartbeats are no evidence until agents were heard again
    for a whole heartbeat timeout, exactly as after a KB outage."""
    from qonnect.controller.loop import Ticks
    from qonnect.controller.state import KBContact

    contact = KBContact(ok_since=time.monotonic() - 600.0)
    ticks = Ticks(1.0, max(2.0, S.heartbeat_timeout / 2), S.heartbeat_timeout, contact)
    ticks.lag()
    ticks.last -= 1.5  # an ordinary tick: no stall
    ticks.lag()
    assert time.monotonic() - contact.ok_since > 500
    ticks.last -= 10.0  # the next tick came 9 s late
    ticks.lag()
    heard_for = time.monotonic() - contact.ok_since
    assert heard_for < S.heartbeat_timeout
    every = [cluster(f"edge-{i}", age=12.0) for i in range(1, 9)]
    s = snap(every, 1000.0, placements={"shop": {"web": on("edge-1")}}, heard_for=heard_for)
    assert detect(s, known(), Memory(), dataclasses.replace(S, cluster_grace=0.0))[0] == []


def test_a_move_that_lowers_the_objective_is_not_called_drift(monkeypatch):
    """The engine moves off a current placement that lost room whatever the objective; that
    is a failure rule's case (node-not-ready...), never "QoS drift beyond hysteresis"."""
    import json
    from pathlib import Path

    from ansible_collections.qonnect.core.plugins.module_utils.placement import engine
    from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application_file
    from qonnect.controller.replan import engine_replanner

    repo = Path(__file__).resolve().parents[4]
    app = load_application_file(str(repo / "examples" / "bookinfo" / "energy-first.yml"))
    inventory = json.loads((repo / "examples" / "inventories" / "paper.json").read_text())
    record = {"name": app.name, "version": 1, "application": app.to_dict()}
    first = engine_replanner()(record, inventory, {}, ())
    assert first is not None
    monkeypatch.setattr(engine, "objective_on", lambda *args: first_objective(first) + 1.0)
    assert engine_replanner()(record, inventory, {}, ()) is None


def first_objective(found):
    return float(found[1].split(" -> ")[1].split()[0])


def test_start_events_say_which_clusters_are_avoided_not_left():
    """A drift move that only avoids the just-recovered fog-2 does not migrate "away from fog-2",
    and a move with no exclusions is not "away from nothing"."""
    drift = journal.started_text({"app": "bookinfo", "kind": "qos-drift", "exclude": ["fog-2"]}, 1, "r1")
    assert drift == "attempt 1 by r1: re-placing bookinfo for a better QoS, avoiding fog-2"
    free = journal.started_text({"app": "bookinfo", "kind": "qos-drift", "exclude": []}, 2, "r1")
    assert "nothing" not in free and "none" not in free and free.endswith("on any eligible cluster")
