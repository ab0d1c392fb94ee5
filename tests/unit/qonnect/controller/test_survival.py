"""The leader's survivability watch (controller/survival.py, issue 37): one event per transition,
incremental recomputation of only the scenarios a change touched, policies cached, a new leader
starting from the KB's record."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement import whatif
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent
from qonnect.controller import survival
from qonnect.controller.detector import Snapshot
from qonnect.controller.survival import FLEET, LOST, REGAINED, Fingerprint, Watch

GI = 2**30


def node(name: str, cpu: float, used: float = 0.0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": True,
        "schedulable": True,
        "pressure": {"memory": False, "disk": False, "pid": False},
        "allocatable": {"cpu": cpu, "memory": 8 * GI, "ephemeral_storage": 100 * GI},
        "requested": {"cpu": used, "memory": 0, "ephemeral_storage": 0},
        "bandwidth_gbps": 10.0,
        "energy_kwh": 0.001,
        "price_eur_h": 1.0,
        "heartbeat_age": 1.0,
        "labels": {"kubernetes.io/hostname": name},
    }


def cluster(name: str, cpu: float = 2.0, used: float = 0.0, healthy: bool = True) -> dict[str, Any]:
    return {
        "name": name,
        "tier": "cloud",
        "location": name,
        "labels": {"site": name[0]},
        "healthy": healthy,
        "heartbeat_age": 1.0,
        "nodes": [node(f"{name}-w", cpu, used)],
    }


def application(name: str, cpu: str = "1500m", version: int = 1) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]},
    }
    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {"services": [{"name": "web", "manifests": [pod]}]},
    }
    from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application

    return {"name": name, "version": version, "application": load_application(spec).to_dict()}


class FakeKB:
    """list_events / post_event as the KB answers them (role: the writer's)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.reads: dict[str | None, int] = {}
        self.fence = (0, 0)
        self.down = False

    def list_events(self, application: str | None = None, limit: int = 100, **_: Any) -> list[dict[str, Any]]:
        if self.down:
            raise KBError(0, "KB away")
        self.reads[application] = self.reads.get(application, 0) + 1
        found = [e for e in self.events if application is None or e.get("application") == application]
        return copy.deepcopy(found[-limit:])

    def post_event(self, body: dict[str, Any], role: str = "controller") -> dict[str, Any]:
        if self.down:
            raise KBError(0, "KB away")
        fencing = body.get("fencing")
        if fencing and (fencing["term"], fencing["seq"]) < self.fence:
            raise KBError(409, "fencing token older than the controller fence")
        event = dict(copy.deepcopy(body), id=len(self.events) + 1, ts=1.0 + len(self.events), role=role)
        self.events.append(event)
        return event

    def of(self, *types: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] in types]


class Fleet:
    """A KB's view: clusters, applications and where they run (what a tick's snapshot holds)."""

    def __init__(self) -> None:
        self.clusters = [cluster("a"), cluster("b")]
        self.apps: dict[str, dict[str, Any]] = {}
        self.placed: dict[str, dict[str, Any]] = {}
        self.updated: dict[str, float] = {}

    def deploy(self, name: str, on: str, cpu: float = 1.5, version: int = 1) -> None:
        self.apps[name] = application(name, f"{int(cpu * 1000)}m", version)
        self.placed[name] = {"web": [{"cluster": on, "replicas": 1, "nodes": [f"{on}-w"]}]}
        self.updated[name] = self.updated.get(name, 0.0) + 1.0
        for c in self.clusters:
            if c["name"] == on:
                c["nodes"][0]["requested"]["cpu"] += cpu

    def snapshot(self) -> tuple[Snapshot, list[dict[str, Any]]]:
        inventory = {
            "clusters": copy.deepcopy(self.clusters),
            "latency_ms": {},
            "placements": copy.deepcopy(self.placed),
        }
        records = [
            {"application": n, "current": p, "updated": self.updated[n]}
            for n, p in sorted(self.placed.items())
        ]
        return Snapshot(inventory, [], [self.apps[n] for n in sorted(self.apps)], 0.0), records


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch(kb: FakeKB, clock: Clock, every: float = 5.0) -> Watch:
    return Watch(kb, every=every, background=False, clock=clock)


def tick(w: Watch, fleet: Fleet, clock: Clock, term: int = 1, leading: bool = True) -> bool:
    """One due tick; whether it recomputed the report."""
    clock.now += w.every
    snapshot, placements = fleet.snapshot()
    runs = w.runs
    w.tick(snapshot, placements, term, {"term": term, "seq": 1}, lambda: leading)
    return w.runs > runs


@pytest.fixture()
def kb() -> FakeKB:
    return FakeKB()


@pytest.fixture()
def clock() -> Clock:
    return Clock()


def test_each_transition_emits_one_event_and_a_recompute_without_change_emits_none(kb, clock):
    fleet = Fleet()
    fleet.deploy("x", "a")
    w = watch(kb, clock)
    assert tick(w, fleet, clock)
    assert w.status()["survivable"] is True
    assert kb.of(LOST, REGAINED) == []
    assert [e["data"]["survivable"] for e in kb.of(FLEET)] == [True]  # the first verdict, once
    # a deploy that leaves no room for either application if the other's cluster fails
    fleet.deploy("y", "b")
    assert tick(w, fleet, clock)
    lost = kb.of(LOST)
    assert sorted(e["application"] for e in lost) == ["x", "y"]
    x = next(e for e in lost if e["application"] == "x")
    assert "cluster a" in x["message"] and "CPU of cpu missing" in x["message"], x["message"]
    assert x["data"]["violations"][0]["scenario"] == "cluster a"
    assert x["fencing"] == {"term": 1, "seq": 1}
    fleet_events = kb.of(FLEET)
    assert [e["data"]["survivable"] for e in fleet_events] == [True, False]
    assert set(fleet_events[-1]["data"]["not_survivable"]) == {"x", "y"}
    assert fleet_events[-1]["data"]["first_shortfall"]["scenario"] == "cluster a"
    doc = w.status()
    assert doc["survivable"] is False and doc["not_survivable"] == ["x", "y"]
    assert doc["applications"]["x"]["violations"][0]["shortfall"].startswith("web: ")
    assert doc["spare"]["cloud"]["cpu_text"].endswith("CPU")
    # nothing changed: no recomputation at all, and no event
    count = len(kb.events)
    assert not tick(w, fleet, clock)
    # a capacity change that does not change the verdict: recomputed, no event
    fleet.clusters[0]["nodes"][0]["allocatable"]["cpu"] = 2.2
    assert tick(w, fleet, clock)
    assert len(kb.events) == count
    # room again (a third cluster): one regained event per application, one fleet event
    fleet.clusters.append(cluster("c", cpu=5.0))
    assert tick(w, fleet, clock)
    assert sorted(e["application"] for e in kb.of(REGAINED)) == ["x", "y"]
    assert len(kb.of(LOST)) == 2
    assert [e["data"]["survivable"] for e in kb.of(FLEET)] == [True, False, True]
    assert w.status()["survivable"] is True


def test_the_recompute_after_a_change_replans_only_the_touched_scenarios(kb, clock, monkeypatch):
    fleet = Fleet()
    fleet.clusters += [cluster("c", cpu=8.0), cluster("d", cpu=8.0)]
    fleet.deploy("x", "a", cpu=0.5)
    fleet.deploy("y", "c", cpu=0.5)
    calls: list[tuple[bool, set[str]]] = []
    real = whatif.survivability

    def spy(w, labels=(), previous=None, changed=()):
        report = real(w, labels, previous=previous, changed=changed)
        calls.append((previous is not None, set(changed), report.evaluated))
        return report

    monkeypatch.setattr(survival.whatif, "survivability", spy)
    w = watch(kb, clock)
    tick(w, fleet, clock)
    assert calls[-1][0] is False and calls[-1][2] == 2  # full: the scenarios of a and of c
    # a cluster that hosts nothing loses capacity: only the scenario whose plan went there (if
    # any) is planned again
    touched = {
        s.name: set(s.failed) | {c for o in s.outcomes.values() for c in o.targets()}
        for s in w.previous.scenarios
    }
    idle = next(
        c
        for c in ("b", "d")
        if any(c not in t for n, t in touched.items() if n in ("cluster a", "cluster c"))
    )
    expected = sum(1 for n in ("cluster a", "cluster c") if idle in touched[n])
    fleet.clusters[[c["name"] for c in fleet.clusters].index(idle)]["nodes"][0]["allocatable"]["cpu"] -= 0.5
    tick(w, fleet, clock)
    incremental, changed, evaluated = calls[-1]
    assert incremental and changed == {idle}
    assert w.status()["incremental"] is True
    assert evaluated == expected < 2, (touched, idle)
    # a new version of x (hosted on a): only a's side re-planned, y's scenario carried over
    fleet.deploy("x", "a", cpu=0.6, version=2)
    tick(w, fleet, clock)
    incremental, changed, evaluated = calls[-1]
    assert incremental and "a" in changed and "c" not in changed
    assert evaluated == 1, calls[-1]


def test_policies_are_read_once_and_again_only_when_the_version_or_deploy_changes(kb, clock):
    fleet = Fleet()
    fleet.clusters.append(cluster("c", cpu=8.0))
    fleet.deploy("x", "a", cpu=0.5)
    fleet.deploy("y", "b", cpu=0.5)
    kb.post_event(intent.event("x", intent.APPLIED, {"scorer": "optimal", "exclude": []}, 1), role="admin")
    w = watch(kb, clock)
    tick(w, fleet, clock)
    assert kb.reads == {"x": 1, "y": 1, None: 1}  # each policy once; the fleet's last verdict once
    assert w.previous is not None
    assert w.policy_seen["x"][0] == "optimal" and w.policy_seen["y"][0] is None  # the stored policy
    for _step in range(3):  # capacity changes: recomputed, no policy read again
        fleet.clusters[2]["nodes"][0]["allocatable"]["cpu"] += 1
        tick(w, fleet, clock)
    assert kb.reads["x"] == 1 and kb.reads["y"] == 1
    fleet.deploy("x", "a", cpu=0.5, version=2)  # a new version of x: x's policy only
    tick(w, fleet, clock)
    assert kb.reads["x"] == 2 and kb.reads["y"] == 1
    # while a deploy is applying, its policy is not cached
    kb.post_event(intent.event("y", intent.APPLYING, {"scorer": "borda", "exclude": []}), role="admin")
    fleet.updated["y"] += 1
    tick(w, fleet, clock)
    tick(w, fleet, clock)
    assert kb.reads["y"] == 3


def test_a_new_leader_starts_from_the_kbs_record_and_reemits_nothing(kb, clock):
    fleet = Fleet()
    fleet.deploy("x", "a")
    fleet.deploy("y", "b")
    first = watch(kb, clock)
    tick(first, fleet, clock, term=1)
    assert len(kb.of(LOST)) == 2 and len(kb.of(FLEET)) == 1
    kb.fence = (2, 1)  # a new leader raised the fence
    second = watch(kb, clock)
    tick(second, fleet, clock, term=2)
    assert len(kb.of(LOST)) == 2 and len(kb.of(FLEET)) == 1  # same verdict: nothing again
    # the deposed leader's late event is refused by the fence, and it does not think it said it
    fleet.clusters.append(cluster("c", cpu=5.0))
    tick(first, fleet, clock, term=1)
    assert kb.of(REGAINED) == []
    assert first.recorded["x"] is False
    tick(second, fleet, clock, term=2)
    assert sorted(e["application"] for e in kb.of(REGAINED)) == ["x", "y"]
    # the same replica leading again in a later term re-reads the KB, not its memory
    second.recorded["x"] = False
    kb.fence = (3, 1)
    tick(second, fleet, clock, term=3)
    assert len(kb.of(REGAINED)) == 2


def test_only_the_leader_announces_and_a_kb_outage_is_retried(kb, clock):
    fleet = Fleet()
    fleet.deploy("x", "a")
    fleet.deploy("y", "b")
    w = watch(kb, clock)
    tick(w, fleet, clock, leading=False)  # lost leadership while computing: nothing written
    assert kb.events == []
    kb.down = True
    w2 = watch(kb, clock)
    tick(w2, fleet, clock)
    assert w2.status()["state"] == "not computed yet"
    kb.down = False
    tick(w2, fleet, clock)
    assert len(kb.of(LOST)) == 2


def test_off_and_the_fingerprint_ignores_heartbeat_ages(kb, clock):
    w = Watch(kb, every=0, background=False, clock=clock)
    fleet = Fleet()
    fleet.deploy("x", "a")
    assert not tick(w, fleet, clock) and kb.events == [] and w.checks == 0
    assert w.status()["state"].startswith("off")
    snap = fleet.snapshot()[0]
    aged = copy.deepcopy(snap)
    aged.inventory["clusters"][0]["heartbeat_age"] = 9.0
    aged.inventory["clusters"][0]["nodes"][0]["heartbeat_age"] = 9.0
    assert Fingerprint(aged).same(Fingerprint(snap))
    aged.inventory["clusters"][0]["healthy"] = False
    assert Fingerprint(aged).changed(Fingerprint(snap)) == {"a"}


def test_the_recomputation_runs_off_the_tick_one_at_a_time(kb, clock):
    import threading

    fleet = Fleet()
    fleet.deploy("x", "a")
    gate = threading.Event()
    w = Watch(kb, every=5.0, background=True, clock=clock)
    real = w.compute

    def slow(*args):
        gate.wait(10)
        real(*args)

    w.compute = slow  # type: ignore[method-assign]
    clock.now += 5
    snapshot, placements = fleet.snapshot()
    assert w.tick(snapshot, placements, 1, None, lambda: True)  # returns at once: on its own thread
    assert w.status()["state"] == "not computed yet"
    clock.now += 5
    fleet.deploy("y", "b")
    snapshot, placements = fleet.snapshot()
    assert not w.tick(snapshot, placements, 1, None, lambda: True)  # one at a time
    gate.set()
    w.thread.join(10)
    assert w.status()["state"] == "computed" and w.runs == 1


# -- require_survivable (runners/survive.py) ------------------------------------------------------


class DeployKB(FakeKB):
    """What survive.check reads: the inventory, the stored applications, their events."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__()
        self.fleet = fleet

    def inventory(self) -> dict[str, Any]:
        return self.fleet.snapshot()[0].inventory

    def list_applications(self) -> list[dict[str, Any]]:
        return [self.fleet.apps[n] for n in sorted(self.fleet.apps)]


def test_with_planned_adds_the_placement_and_the_replicas_requests():
    from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
    from ansible_collections.qonnect.core.plugins.module_utils.runners.survive import with_planned

    fleet = Fleet()
    fleet.deploy("x", "a", cpu=0.5)
    inventory = fleet.snapshot()[0].inventory
    new = Application.from_dict(application("x", "1200m", 2)["application"])
    old = Application.from_dict(fleet.apps["x"]["application"])
    planned = {"web": [{"cluster": "b", "replicas": 1, "nodes": ["b-w"]}]}
    out = with_planned(inventory, new, planned, old)
    used = {c["name"]: c["nodes"][0]["requested"]["cpu"] for c in out["clusters"]}
    assert used == {"a": 0.0, "b": 1.2}  # the running version off a, the new one on b
    assert out["placements"]["x"] == planned
    assert inventory["clusters"][0]["nodes"][0]["requested"]["cpu"] == 0.5  # the input is not changed
    fresh = Application.from_dict(application("z", "300m")["application"])
    out = with_planned(inventory, fresh, {"web": [{"cluster": "a", "replicas": 2}]})  # no nodes: the first
    assert out["clusters"][0]["nodes"][0]["requested"]["cpu"] == pytest.approx(1.1)


def test_require_survivable_refuses_naming_scenario_application_and_shortfall():
    from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
    from ansible_collections.qonnect.core.plugins.module_utils.runners import survive

    fleet = Fleet()
    fleet.deploy("x", "a")
    kb = DeployKB(fleet)
    y = Application.from_dict(application("y")["application"])
    with pytest.raises(survive.NotSurvivable) as caught:
        survive.check(kb, y, {"web": [{"cluster": "b", "replicas": 1, "nodes": ["b-w"]}]}, {})
    text = caught.value.fail_fields()["msg"]
    assert text.startswith("refused by require_survivable"), text
    assert "x: if cluster a fails: web: " in text and "CPU of cpu missing" in text, text
    assert "y: if cluster b fails" in text, text
    assert kb.events == []  # nothing written
    small = Application.from_dict(application("y", "200m")["application"])
    report = survive.check(kb, small, {"web": [{"cluster": "b", "replicas": 1, "nodes": ["b-w"]}]}, {})
    assert report["survivable"] is True


def test_status_shows_the_verdict_per_application_first_shortfall_and_spare(kb, clock):
    from qonnect import status as cli_status
    from qonnect.controller.status import render, survivability_lines

    fleet = Fleet()
    fleet.deploy("x", "a")
    fleet.deploy("y", "b")
    w = watch(kb, clock)
    tick(w, fleet, clock)
    doc = w.status()
    text = "\n".join(survivability_lines(doc))
    assert "survivability (N-1): NO (2 of 2 application(s))" in text, text
    assert "x: not if cluster a: web: " in text and "first shortfall: cluster a: x: " in text, text
    assert "least spare in cloud: " in text, text
    assert survivability_lines(None) == []  # a replica without it (older) shows nothing
    assert survivability_lines({"state": "not computed yet"}) == ["survivability: not computed yet"]
    replica = {
        "node": "n1",
        "name": "r1",
        "state": "leader",
        "is_leader": True,
        "leader": "n1",
        "term": 1,
        "commit_index": 1,
        "last_applied": 1,
        "has_quorum": True,
        "peers": {},
        "kb": "ok",
        "why": "leading",
        "inflight": [],
        "recent": [],
        "survivability": doc,
    }
    assert "survivability (N-1): NO" in render({"http://r1": replica})
    # qonnect status: the leader's live report, else the fleet verdict the KB recorded
    controller = {"survivability": doc}
    live = cli_status.survivability(kb, controller)
    assert live["source"] == "controller" and live["not_survivable"] == ["x", "y"]
    assert "x: not if cluster a" in "\n".join(cli_status._survivability_lines(live))
    recorded = cli_status.survivability(kb, {})
    assert recorded["source"] == "kb" and recorded["survivable"] is False
    assert recorded["not_survivable"] == ["x", "y"]
    lines = "\n".join(cli_status._survivability_lines(recorded))
    assert (
        "survivability (N-1): NO (as the controller recorded it" in lines and "x: not if cluster a" in lines
    )
    assert "unknown" in cli_status._survivability_lines(cli_status.survivability(FakeKB(), {}))[0]


def test_event_data_fits_the_kbs_8_kib_whatever_the_names():
    import json

    long = "n" * 250
    doc = {
        "survivable": False,
        "not_survivable": [f"{long}-{i}" for i in range(80)],
        "applications": {
            f"{long}-{i}": {
                "survivable": False,
                "violations": [{"scenario": f"cluster {long}", "shortfall": "x" * 600}],
            }
            for i in range(80)
        },
        "first_shortfall": {"scenario": f"cluster {long}", "application": long, "text": "y" * 900},
        "spare": {"cloud": {"cpu": 1.0, "cpu_text": "1 CPU", "cpu_scenario": "cluster a"}},
    }
    data = survival.fleet_data(doc)
    assert len(json.dumps(data)) <= 8192 and data["not_survivable_count"] == 80
    assert 0 < len(data["not_survivable"]) < 80 and "cpu_scenario" not in data["spare"]["cloud"]
    found = survival.fitted(doc["applications"][f"{long}-0"]["violations"] * 30)
    assert 0 < len(found) <= 20 and len(json.dumps(found)) <= 8192


def test_require_survivable_refuses_only_what_the_deploy_breaks():
    """A failure the fleet already had is reported, not held against an unrelated deploy (the
    issue: refuse a deploy that *would make* the fleet non-survivable)."""
    from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
    from ansible_collections.qonnect.core.plugins.module_utils.runners import survive

    fleet = Fleet()
    fleet.clusters.append(cluster("c", cpu=5.0))
    fleet.deploy("x", "a")
    fleet.deploy("w", "b")  # if a fails x goes to c; if b fails w goes to c (one at a time)
    fleet.deploy("big", "c", cpu=3.0)  # if c fails nothing has room: big was never survivable
    kb = DeployKB(fleet)
    small = Application.from_dict(application("s", "100m")["application"])
    report = survive.check(kb, small, {"web": [{"cluster": "a", "replicas": 1, "nodes": ["a-w"]}]}, {})
    assert report["survivable"] is False  # still reported ...
    assert [v["scenario"] for v in report["applications"]["big"]["violations"]] == ["cluster c"]
    assert report["applications"]["s"]["violations"] == []  # ... and not this deploy's doing
    hog = Application.from_dict(application("h", "900m")["application"])
    with pytest.raises(survive.NotSurvivable) as caught:  # takes c's last room: x and w break
        survive.check(kb, hog, {"web": [{"cluster": "c", "replicas": 1, "nodes": ["c-w"]}]}, {})
    text = caught.value.fail_fields()["msg"]
    assert "x: if cluster a fails" in text and "w: if cluster b fails" in text, text
    assert "big:" not in text, text  # the failure it already had is not blamed on this deploy
