"""What-if failures and the N-1 survivability report (issue 37): placement/whatif.py.

The what-if is not a second planner: its plans are compared with what the controller's own heal
planner (``replan.engine_planner``) returns for the same requests on the inventory as the
controller sees it once the clusters failed (unhealthy, their nodes' heartbeats stale).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement import batch as batch_module
from ansible_collections.qonnect.core.plugins.module_utils.placement import place, place_many
from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import objective
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import Fleet
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import Inventory
from ansible_collections.qonnect.core.plugins.module_utils.placement.whatif import (
    Tenant,
    WhatIf,
    scenario_list,
    survivability,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application, Service
from qonnect.controller import replan

ROOT = Path(__file__).resolve().parents[5]
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())
OBJECTIVE = {"energy": 0.6, "cost": 0.3, "performance": 0.3, "latency": 0.5}
MEMORY = 2**27  # exactly representable: dict and array arithmetic agree to the bit
# site label: one cluster of each tier per site
SITES = {"cloud-1": "a", "fog-1": "a", "edge-1": "a", "cloud-2": "b", "fog-2": "b", "edge-2": "b"}


def svc(name="svc", tier="any", replicas=1, cpu=0.5, **kw) -> Service:
    return Service(
        name=name,
        tier=tier,
        replicas=replicas,
        requests={"cpu": cpu, "memory": MEMORY, "ephemeral_storage": 0},
        **kw,
    )


def app(name, *services, survive=None) -> Application:
    return Application(
        name=name,
        namespace=name,
        objective=dict(OBJECTIVE),
        services=list(services) or [svc()],
        survive=survive,
    )


def world(running: dict[str, dict[str, list[str]]], apps: list[Application], tweak=None) -> dict:
    """The paper fleet (site labels added) with ``running`` = {app: {service: [cluster per
    replica]}} placed: each replica's requests added to its cluster's node."""
    inv = copy.deepcopy(PAPER)
    nodes = {}
    for c in inv["clusters"]:
        if c["name"] in SITES:
            c["labels"]["site"] = SITES[c["name"]]
        nodes[c["name"]] = c["nodes"][0]
    if tweak:
        tweak({c["name"]: c for c in inv["clusters"]})
    by_name = {a.name: a for a in apps}
    placements = {}
    for name, services in running.items():
        placements[name] = {}
        for s_name, clusters in services.items():
            req = by_name[name].service(s_name).requests
            for cluster in clusters:
                for r in ("cpu", "memory"):
                    nodes[cluster]["requested"][r] += req[r]
            per = {c: clusters.count(c) for c in sorted(set(clusters))}
            placements[name][s_name] = [
                {"cluster": c, "replicas": k, "nodes": [nodes[c]["name"]] * k} for c, k in per.items()
            ]
    inv["placements"] = placements
    return inv


def as_failed(inventory: dict, failed) -> dict:
    """The inventory as the controller's snapshot has it once ``failed`` went down: the clusters
    unhealthy and their nodes' last report older than the heartbeat timeout."""
    out = copy.deepcopy(inventory)
    for c in out["clusters"]:
        if c["name"] in failed:
            c["healthy"] = False
            c["heartbeat_age"] = 120.0
            for n in c["nodes"]:
                n["heartbeat_age"] = 120.0
    return out


def controller_heal(inventory: dict, tenants: list[Tenant], failed, defaults=("weighted", 0.1)):
    """What the controller's heal planner returns when ``failed`` went down: one request per
    application with a replica there, in name order, each with its stored policy and the failed
    clusters added to its exclusions (as the failure's decision and _plan build them)."""
    hit = sorted(
        t.name
        for t in tenants
        if any(e["cluster"] in failed for es in inventory["placements"].get(t.name, {}).values() for e in es)
    )
    by = {t.name: t for t in tenants}
    requests = [
        replan.PlanRequest(
            {"name": n, "application": by[n].app.to_dict()},
            tuple(sorted({*failed, *by[n].exclude})),
            by[n].scorer,
            by[n].hysteresis,
        )
        for n in hit
    ]
    planner = replan.engine_planner(*defaults)
    return hit, planner(requests, as_failed(inventory, failed))


def same_as_controller(whatif: WhatIf, inventory: dict, tenants, failed) -> None:
    scenario = whatif.fail(failed)
    hit, found = controller_heal(inventory, tenants, failed, whatif.defaults)
    assert list(scenario.outcomes) == hit
    placed = {a: o.services for a, o in scenario.outcomes.items() if o.placed}
    assert placed == found.services  # every service's clusters, replicas and nodes
    assert {a for a, o in scenario.outcomes.items() if not o.placed} == set(found.unplaceable)
    for a, o in scenario.outcomes.items():
        if not o.placed:
            assert o.reason == found.unplaceable[a]


# --- which applications, with which policy, in which order -----------------------------------


def test_fail_replaces_only_the_applications_on_the_failed_cluster():
    apps = [app("a", svc("web", "cloud")), app("b", svc("web", "fog")), app("c", svc("web", "cloud"))]
    inv = world({"a": {"web": ["cloud-1"]}, "b": {"web": ["fog-1"]}, "c": {"web": ["cloud-2"]}}, apps)
    w = WhatIf(inv, [Tenant(a) for a in apps])
    scenario = w.fail(["cloud-1"])
    assert list(scenario.outcomes) == ["a"]
    moved = scenario.outcomes["a"].moves["web"]
    assert moved["from"] == ["cloud-1"]
    assert moved["to"] and "cloud-1" not in moved["to"]
    assert scenario.survivable
    assert w.fail(["edge-3"]).outcomes == {}  # hosts nothing: nothing to heal


def test_plans_are_the_controller_planners_for_the_same_requests():
    """Not a second implementation: each stored policy (scorer, hysteresis, exclusions) and the
    defaults, several applications sharing clusters, single and multi-cluster failures."""
    apps = [
        app("alpha", svc("api", "cloud", 2, spread=2), svc("db", "fog", depends_on=["api"])),
        app("bravo", svc("web", "any", 3, cpu=1.0)),
        app("charlie", svc("edge", "edge", 2, spread=2), svc("api", "fog", depends_on=["edge"])),
        app("delta", svc("one", "cloud", cpu=2.0)),
    ]
    running = {
        "alpha": {"api": ["cloud-1", "cloud-3"], "db": ["fog-1"]},
        "bravo": {"web": ["cloud-1", "fog-3", "edge-3"]},
        "charlie": {"edge": ["edge-1", "edge-3"], "api": ["fog-1"]},
        "delta": {"one": ["cloud-3"]},
    }
    tenants = [
        Tenant(apps[0]),  # the controller's defaults
        Tenant(apps[1], "borda", None, ("fog-2",)),
        Tenant(apps[2], "weighted", 0.5, ()),
        Tenant(apps[3], "optimal", 0.0, ("cloud-2",)),
    ]
    inv = world(running, apps)
    w = WhatIf(inv, tenants)
    for failed in (
        ["cloud-1"],
        ["cloud-3"],
        ["fog-1"],
        ["edge-3"],
        ["cloud-1", "fog-1"],
        ["cloud-3", "edge-1"],
    ):
        same_as_controller(w, inv, tenants, failed)
    # with other defaults, as a controller started with another hysteresis
    w2 = WhatIf(inv, tenants, defaults=("borda", 0.3))
    same_as_controller(w2, inv, tenants, ["cloud-1"])


def test_the_stored_policy_is_the_one_used():
    """An application deployed with borda and an exclusion heals with borda, avoiding it."""
    a = app("solo", svc("web", "cloud"))
    inv = world({"solo": {"web": ["cloud-1"]}}, [a])
    scenario = WhatIf(inv, [Tenant(a, "borda", 0.0, ("cloud-3",))]).fail(["cloud-1"])
    expected = place(a, as_failed(inv, ["cloud-1"]), "borda", ("cloud-1", "cloud-3"), hysteresis=0.0)
    assert scenario.outcomes["solo"].moves["web"]["to"] == ["cloud-2"] == expected.clusters("web")
    assert scenario.outcomes["solo"].objective_after == pytest.approx(expected.objective)


def two_for_one_slot(first_listed: str):
    """Two applications on cloud-1 (made big enough for both), each needing 6 CPU: once cloud-1
    fails only cloud-3 (9.75 CPU free) has room, for one of them."""
    apps = [app(n, svc("big", "cloud", cpu=6.0)) for n in ("alpha", "beta")]

    def roomy(clusters):
        clusters["cloud-1"]["nodes"][0]["allocatable"]["cpu"] = 16.0

    inv = world({"alpha": {"big": ["cloud-1"]}, "beta": {"big": ["cloud-1"]}}, apps, roomy)
    tenants = [Tenant(a) for a in apps]
    if first_listed == "beta":
        tenants.reverse()
    return inv, tenants


@pytest.mark.parametrize("first_listed", ["alpha", "beta"])
def test_two_applications_for_the_last_room_the_first_by_name_gets_it(first_listed):
    inv, tenants = two_for_one_slot(first_listed)
    w = WhatIf(inv, tenants)
    scenario = w.fail(["cloud-1"])
    assert list(scenario.outcomes) == ["alpha", "beta"]  # the controller's order, not the caller's
    alpha, beta = scenario.outcomes["alpha"], scenario.outcomes["beta"]
    assert alpha.placed and alpha.moves["big"]["to"] == ["cloud-3"]
    assert not beta.placed and not scenario.survivable
    short = beta.shortfall
    assert short.service == "big" and short.resource == "cpu"
    assert short.missing == pytest.approx(6.0) and short.room_for == 0 and short.replicas == 1
    assert short.text() == "big: 6 CPU of cpu missing (room for 0 of 1 replicas)"
    assert scenario.first_shortfall() is short
    assert beta.reason.startswith("big: no eligible cluster (capacity") and "without cloud-1" in beta.reason
    # the spare cloud capacity once alpha runs on cloud-3: cloud-2 5.75 + cloud-3 3.75 CPU
    assert scenario.spare["cloud"]["cpu"] == pytest.approx(5.75 + 3.75)
    assert scenario.delta["cloud"]["cpu"] == pytest.approx(-6.0)
    same_as_controller(w, inv, tenants, ["cloud-1"])


def test_objective_before_is_the_engines_objective_of_where_it_runs():
    a = app("solo", svc("web", "cloud"), svc("db", "fog", depends_on=["web"]))
    inv = world({"solo": {"web": ["cloud-1"], "db": ["fog-2"]}}, [a])
    w = WhatIf(inv, [Tenant(a)])
    outcome = w.fail(["cloud-1"]).outcomes["solo"]
    assert outcome.objective_before == pytest.approx(
        objective(a, inv, {"services": inv["placements"]["solo"]})
    )
    assert w.fail(["fog-2"]).outcomes["solo"].objective_before == outcome.objective_before


# --- shortfalls -----------------------------------------------------------------------------


def edge_pair(edge3_free: float, spread: int = 2):
    a = app("pair", svc("cache", "edge", 2, cpu=1.0, spread=spread))

    def fill_edge3(clusters):
        node = clusters["edge-3"]["nodes"][0]
        node["requested"]["cpu"] = node["allocatable"]["cpu"] - edge3_free

    inv = world({"pair": {"cache": ["edge-1", "edge-2"]}}, [a], fill_edge3)
    return inv, [Tenant(a)]


def test_shortfall_when_the_spread_is_what_room_cannot_meet():
    """edge-2 keeps its replica (and has room for more), but the spread needs a second edge
    cluster with room for one replica: edge-3 has 0.5 CPU, the replica needs 1."""
    inv, tenants = edge_pair(0.5)
    w = WhatIf(inv, tenants)
    outcome = w.fail(["edge-1"]).outcomes["pair"]
    assert not outcome.placed
    short = outcome.shortfall
    assert short.constraint.startswith("spread 2")
    assert short.spread_bound and short.clusters_with_room == 1 and short.spread == 2
    assert short.resource == "cpu" and short.missing == pytest.approx(1.0)
    assert "room on 1 of the 2 distinct clusters its spread needs" in short.text()
    same_as_controller(w, inv, tenants, ["edge-1"])
    # with room on edge-3 it survives
    assert WhatIf(*edge_pair(3.0)).fail(["edge-1"]).survivable


def test_shortfall_when_too_few_clusters_exist_for_the_spread():
    inv, tenants = edge_pair(5.0, spread=2)
    outcome = WhatIf(inv, tenants).fail(["edge-1", "edge-3"]).outcomes["pair"]
    short = outcome.shortfall
    assert short.resource is None and short.constraint.startswith("spread 2")
    assert "1 cluster(s) meet every other constraint" in short.text()


def test_shortfall_names_the_resource_that_runs_out_first():
    """Three replicas of 2 CPU and 6 GiB on the cloud tier once cloud-1 fails: CPU would fit
    six (cloud-2 two, cloud-3 four), memory two (one on each); one replica's memory is missing."""
    mem = 6 * 2**30
    a = app("fat", Service(name="m", tier="cloud", replicas=3, requests={"cpu": 2.0, "memory": mem}))
    inv = world({"fat": {"m": ["cloud-1", "cloud-1", "cloud-1"]}}, [a], _roomy("cloud-1", 12.0, 4e10))
    short = WhatIf(inv, [Tenant(a)]).fail(["cloud-1"]).outcomes["fat"].shortfall
    assert short.resource == "memory"
    fleet = Fleet(Inventory.from_dict(inv))
    room = sum(
        int(min(fleet.free0[v, 0] // 2.0, fleet.free0[v, 1] // mem))
        for v in range(fleet.num_nodes)
        if fleet.cluster_names[fleet.node_cluster[v]] in ("cloud-2", "cloud-3")
    )
    assert short.room_for == room < 3
    assert short.missing == pytest.approx((3 - room) * mem)
    assert short.text().endswith(f"(room for {room} of 3 replicas)")


def _roomy(cluster: str, cpu: float, memory: float):
    def tweak(clusters):
        alloc = clusters[cluster]["nodes"][0]["allocatable"]
        alloc["cpu"], alloc["memory"] = cpu, int(memory)

    return tweak


def test_shortfall_of_a_constraint_names_no_resource():
    a = app("picky", svc("web", "fog", cluster_selector={"match_labels": {"site": "a"}}))
    inv = world({"picky": {"web": ["fog-1"]}}, [a])
    outcome = WhatIf(inv, [Tenant(a)]).fail(["fog-1"]).outcomes["picky"]
    assert not outcome.placed and outcome.shortfall.resource is None
    assert outcome.shortfall.text().startswith("web: no cluster meets ")


# --- scenarios, labels, tiers, survive statements ------------------------------------------


def test_label_and_tier_scenarios():
    apps = [app("e", svc("edge", "edge")), app("f", svc("web", "fog"))]
    inv = world({"e": {"edge": ["edge-1"]}, "f": {"web": ["fog-1"]}}, apps)
    w = WhatIf(inv, [Tenant(a) for a in apps])
    assert w.matching("site", "a") == ["cloud-1", "edge-1", "fog-1"]
    assert w.label_values("tier") == ["cloud", "edge", "fog"]
    names = [n for n, _failed, _label in scenario_list(w, ["site", "tier"])]
    assert names[:9] == [f"cluster {c}" for c in w.cluster_names]
    assert names[9:] == ["site=a", "site=b", "tier=cloud", "tier=edge", "tier=fog"]
    edge_down = w.fail(w.matching("tier", "edge"), name="tier=edge", label=("tier", "edge"))
    assert list(edge_down.outcomes) == ["e"] and not edge_down.survivable
    assert edge_down.outcomes["e"].shortfall.resource is None
    assert "health" in edge_down.outcomes["e"].reason  # as the controller sees an all-down tier
    assert edge_down.spare["edge"] == {"cpu": 0.0, "memory": 0.0}
    assert edge_down.spare["fog"]["cpu"] == pytest.approx(5.75 + 5.75 + 9.75 - 0.5)
    site_a = w.fail(w.matching("site", "a"), name="site=a", label=("site", "a"))
    assert set(site_a.outcomes) == {"e", "f"} and site_a.survivable
    assert all(
        not set(o.moves[s]["to"]) & {"edge-1", "fog-1"} for o in site_a.outcomes.values() for s in o.moves
    )


def test_each_application_is_judged_against_its_own_survive_statement():
    """edge-only applications on two edge clusters (edge-3 too small for them): losing edge-1
    or site a breaks them all; only those that must survive it are in violation."""
    kinds = {
        "any-cluster": [{"cluster": "any"}],
        "default": None,  # N-1: any one cluster
        "nothing": [],  # no requirement
        "site": [{"label": "site"}],
    }
    apps = [app(n, svc("c", "edge", 2, cpu=2.0, spread=2), survive=s) for n, s in kinds.items()]

    def tight(clusters):
        for name in ("edge-1", "edge-2"):
            clusters[name]["nodes"][0]["allocatable"]["cpu"] = 12.0
        node = clusters["edge-3"]["nodes"][0]
        node["requested"]["cpu"] = node["allocatable"]["cpu"] - 1.0

    running = {a.name: {"c": ["edge-1", "edge-2"]} for a in apps}
    inv = world(running, apps, tight)
    report = survivability(WhatIf(inv, [Tenant(a) for a in apps]))
    assert "site=a" in [s.name for s in report.scenarios]  # asked for by an application
    verdicts = {n: sorted(v["scenario"] for v in a["violations"]) for n, a in report.applications.items()}
    assert verdicts == {
        "any-cluster": ["cluster edge-1", "cluster edge-2"],
        "default": ["cluster edge-1", "cluster edge-2"],
        "nothing": [],
        "site": ["site=a", "site=b"],
    }
    assert report.applications["default"]["must_survive"] == [{"cluster": "any"}]
    assert report.applications["nothing"]["must_survive"] == []
    assert not report.survivable
    only_lenient = [a for a in apps if a.name == "nothing"]
    inv2 = world({"nothing": running["nothing"]}, only_lenient, tight)
    assert survivability(WhatIf(inv2, [Tenant(only_lenient[0])])).survivable


def test_incremental_survivability_gives_the_full_verdicts_with_fewer_plans():
    """A capacity change on fog-3 (a heavy tenant arrives there): scenarios that needed it
    stop being survivable. The incremental report plans again only the scenarios that involve
    fog-3 or were not survivable, and reaches the same verdicts as a full recompute."""
    apps = [
        app("a1", svc("w", "fog", cpu=4.0)),
        app("a2", svc("w", "fog", cpu=4.0)),
        app("b", svc("w", "cloud"), svc("d", "edge", depends_on=["w"])),
        app("c", svc("w", "edge", 2, spread=2)),
    ]
    running = {
        "a1": {"w": ["fog-1"]},
        "a2": {"w": ["fog-2"]},
        "b": {"w": ["cloud-1"], "d": ["edge-1"]},
        "c": {"w": ["edge-2", "edge-3"]},
    }
    tenants = [Tenant(a) for a in apps]
    before = world(running, apps)
    full_before = survivability(WhatIf(before, tenants), ["site"])
    assert full_before.survivable

    def busy_fog3(clusters):
        clusters["fog-3"]["nodes"][0]["requested"]["cpu"] = 8.0

    after = world(running, apps, busy_fog3)
    w = WhatIf(after, tenants)
    incremental = survivability(w, ["site"], previous=full_before, changed={"fog-3"})
    full = survivability(WhatIf(after, tenants), ["site"])
    assert incremental.applications == full.applications
    assert [(s.name, s.survivable) for s in incremental.scenarios] == [
        (s.name, s.survivable) for s in full.scenarios
    ]
    assert not full.survivable  # the change mattered: fog-1 or fog-2 lost, nowhere to go
    assert incremental.evaluated < full.evaluated
    for s_inc, s_full in zip(incremental.scenarios, full.scenarios, strict=True):
        for tier, free in s_full.spare.items():
            assert s_inc.spare[tier] == pytest.approx(free)


def test_bad_cluster_names_are_reported_at_once():
    a = app("solo")
    w = WhatIf(world({"solo": {"svc": ["cloud-1"]}}, [a]), [Tenant(a)])
    with pytest.raises(ValueError) as err:
        w.fail(["nope", "cloud-1", "zzz"])
    assert "'nope' is not a cluster" in str(err.value) and "'zzz' is not a cluster" in str(err.value)


def test_a_bad_stored_policy_spoils_no_scenario():
    apps = [app("good", svc("w", "cloud")), app("odd", svc("w", "cloud"))]
    inv = world({"good": {"w": ["cloud-1"]}, "odd": {"w": ["cloud-1"]}}, apps)
    scenario = WhatIf(inv, [Tenant(apps[0]), Tenant(apps[1], "nosuch")]).fail(["cloud-1"])
    assert scenario.outcomes["good"].placed
    assert scenario.outcomes["odd"].reason.startswith("cannot be planned: scorer: 'nosuch'")


# --- the shared planner under what-if's reuse of one fleet ----------------------------------


def test_fallback_plans_each_application_from_the_capacity_the_batch_started_from(monkeypatch):
    """The whole batch fails after it moved capacity (e.g. the exact scorer's time limit):
    each application is planned alone from where the batch started, as the controller does."""
    inv, tenants = two_for_one_slot("alpha")
    real = batch_module.place_many

    def times_out(requests, inventory, *args, **kw):
        out = real(requests, inventory, *args, **kw)
        if len(requests) > 1:
            raise ValueError("optimal: time limit")
        return out

    monkeypatch.setattr(batch_module, "place_many", times_out)
    w = WhatIf(inv, tenants)
    scenario = w.fail(["cloud-1"])
    assert scenario.fallback == "optimal: time limit"
    # alone, each has cloud-3's room: both planned there (the controller commits them so too)
    for name in ("alpha", "beta"):
        assert scenario.outcomes[name].moves["big"]["to"] == ["cloud-3"]
    # cloud-3 is then overcommitted (9.75 - 12 CPU): it counts as no spare, not as less
    assert scenario.spare["cloud"]["cpu"] == pytest.approx(5.75)
    assert (w.fleet.free0 == w.start).all()
    monkeypatch.setattr(batch_module, "place_many", real)
    same = w.fail(["cloud-1"])
    assert not same.fallback and not same.outcomes["beta"].placed


def test_a_filter_reads_the_capacity_earlier_applications_of_a_batch_took():
    """The second application's JMESPath filter sees cloud-3 after the first took 8 CPU of it
    (the facts of a fleet are measured against the inventory's capacity, not against the
    capacity when a filter first asked for them)."""
    first = app("first", svc("big", "cloud", cpu=8.0))
    second = Application(
        name="second",
        namespace="second",
        objective={"performance": 1.0},
        services=[svc("w", "cloud", filter="free.cpu > `5`")],
    )
    result = place_many([first, second], PAPER)
    assert result.plans["first"].clusters("big") == ["cloud-3"]
    assert result.plans["second"].clusters("w") != ["cloud-3"]
    inv = copy.deepcopy(PAPER)
    inv["clusters"][2]["nodes"][0]["requested"]["cpu"] += 8.0
    assert result.plans["second"].services == place(second, inv, explain=False).services


def test_whatif_plans_alike_on_a_reused_fleet_and_a_fresh_one():
    """Scenario after scenario on one fleet build: the same plans as a fresh WhatIf per scenario
    (no state of one scenario leaks into the next)."""
    apps = [
        app("a", svc("w", "cloud", 2), svc("d", "fog", depends_on=["w"], filter="free.cpu > `1`")),
        app("b", svc("w", "any", 2, spread=2)),
    ]
    running = {"a": {"w": ["cloud-1", "cloud-2"], "d": ["fog-1"]}, "b": {"w": ["cloud-2", "edge-1"]}}
    inv = world(running, apps)
    tenants = [Tenant(apps[0]), Tenant(apps[1], "borda")]
    reused = WhatIf(inv, tenants)
    for failed in (["cloud-1"], ["cloud-2"], ["fog-1"], ["edge-1"], ["cloud-2"], ["cloud-1", "edge-1"]):
        got = reused.fail(failed)
        fresh = WhatIf(inv, tenants).fail(failed)
        assert {n: o.to_dict() for n, o in got.outcomes.items()} == {
            n: o.to_dict() for n, o in fresh.outcomes.items()
        }
        assert got.spare == fresh.spare


def test_incremental_after_a_cluster_loss_plans_again_what_the_heal_touched():
    """cloud-1 is lost and healed as its scenario planned: the incremental report plans again
    the scenarios of the healed applications (they run elsewhere now) and of the clusters they
    went to, carries the others over, and reaches the full recompute's verdicts."""
    apps = [
        app("a", svc("w", "cloud"), svc("d", "fog", depends_on=["w"])),
        app("b", svc("w", "edge")),
        app("c", svc("w", "fog", cpu=1.0)),
    ]
    running = {"a": {"w": ["cloud-1"], "d": ["fog-1"]}, "b": {"w": ["edge-2"]}, "c": {"w": ["fog-2"]}}
    tenants = [Tenant(x) for x in apps]
    inv = world(running, apps)
    before = survivability(WhatIf(inv, tenants))
    lost = next(s for s in before.scenarios if s.failed == ["cloud-1"])
    healed = {"w": lost.outcomes["a"].moves["w"]["to"], "d": lost.outcomes["a"].moves["d"]["to"]}
    assert "cloud-1" not in healed["w"]
    after = as_failed(world({**running, "a": healed}, apps), ["cloud-1"])
    changed = {"cloud-1", *healed["w"], *healed["d"], "fog-1"}
    w = WhatIf(after, tenants)
    incremental = survivability(w, previous=before, changed=changed)
    full = survivability(WhatIf(after, tenants))
    assert incremental.applications == full.applications
    assert [(s.name, s.survivable) for s in incremental.scenarios] == [
        (s.name, s.survivable) for s in full.scenarios
    ]
    assert 0 < incremental.evaluated < full.evaluated
    # b's scenario (edge-2) was carried over: a copy, the previous report left as it was
    carried = next(s for s in incremental.scenarios if s.failed == ["edge-2"])
    original = next(s for s in before.scenarios if s.failed == ["edge-2"])
    assert carried is not original and carried.outcomes["b"] is original.outcomes["b"]
    # a's scenarios are planned on where it runs now
    planned = next(s for s in incremental.scenarios if s.failed == healed["w"])
    assert planned.outcomes["a"].moves["w"]["from"] == healed["w"]


def forked_and_serial_reports() -> tuple[dict, dict]:
    """The same fleet's report planned in this process and in 2 forked workers."""
    apps = [app(f"app-{i}", svc("w", ("cloud", "fog", "edge", "any")[i % 4], 1 + i % 2)) for i in range(8)]
    clusters = [c["name"] for c in PAPER["clusters"]]
    tiers = {c["name"]: c["tier"] for c in PAPER["clusters"]}
    running = {}
    for i, a in enumerate(apps):
        pool = [c for c in clusters if a.services[0].tier in ("any", tiers[c])]
        running[a.name] = {"w": [pool[(i + k) % len(pool)] for k in range(a.services[0].replicas)]}
    inv = world(running, apps)
    tenants = [Tenant(a, "borda" if i % 3 == 0 else None) for i, a in enumerate(apps)]
    one = survivability(WhatIf(inv, tenants), ["site", "tier"])
    two = survivability(WhatIf(inv, tenants), ["site", "tier"], workers=2)
    return {**one.to_dict(), "seconds": 0}, {**two.to_dict(), "seconds": 0}


def test_a_report_planned_in_forked_workers_is_the_same():
    """Run in a process of its own, as users run ``--workers``: forking a test runner's worker,
    which has threads, can leave a child waiting on a lock no thread will release."""
    done = subprocess.run(
        [sys.executable, __file__],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    one, two = json.loads(done.stdout)
    assert two["evaluated"] == one["evaluated"] >= 4
    assert two == one


def test_the_latency_matrix_read_in_one_pass_is_the_general_ones():
    """A complete table takes the fast path; a location no cluster has still counts in the
    largest value; an incomplete one takes the general path: the same matrix either way."""
    complete = copy.deepcopy(PAPER)
    locations = sorted(c["location"] for c in complete["clusters"])  # the fleet's cluster order
    table = complete["latency_ms"]
    complete["latency_ms"] = {a: {b: table[a][b] for b in locations} for a in locations}
    far = copy.deepcopy(complete)
    far["latency_ms"]["moon"] = {"cloud-1": 1300.0}
    gap = copy.deepcopy(complete)
    del gap["latency_ms"]["edge-2"]["fog-1"]
    for inv in (complete, far, gap, PAPER):  # the paper's rows are in another order
        fleet = Fleet(Inventory.from_dict(inv))
        fast, fast_max = fleet._latency_matrix()
        general, general_max = fleet._latency_matrix_general()
        assert fast.tobytes() == general.tobytes() and fast_max == general_max
    assert Fleet(Inventory.from_dict(far)).lmax == 1300.0


def test_cluster_any_is_per_cluster_any():
    fleet = Fleet(Inventory.from_dict(PAPER))
    mask = fleet.node_ok.copy()
    mask[fleet.node_start[2]] = False
    assert fleet.cluster_any(mask).tolist() == [i != 2 for i in range(fleet.num_clusters)]
    assert not fleet.cluster_any(mask & False).any()


def test_policy_item_fills_in_the_controllers_defaults_only_where_none_was_stored():
    a = app("solo")
    assert batch_module.policy_item(a, None, None, ["x"], ("borda", 0.3)) == {
        "app": a,
        "scorer": "borda",
        "hysteresis": 0.3,
        "exclude": ("x",),
    }
    stored = batch_module.policy_item(a, "optimal", 0.0, (), ("borda", 0.3))
    assert (stored["scorer"], stored["hysteresis"]) == ("optimal", 0.0)  # 0.0 is a choice, not none
    with pytest.raises(ValueError, match="hysteresis"):
        batch_module.policy_item(a, None, -1, (), ("weighted", 0.1))


def test_incremental_carries_a_scenario_whose_replicas_still_fit_on_another_node():
    """The node a scenario's plan names filled up, but another node of that cluster has room:
    a feasible heal still exists, the scenario is carried over, the verdicts are the full
    recompute's. With no room left on the cluster at all, it is planned again."""
    a = Application(
        name="a", namespace="a", objective={"performance": 1.0}, services=[svc("w", "fog", cpu=2.0)]
    )

    def second_node(clusters):
        fog3 = clusters["fog-3"]
        extra = copy.deepcopy(fog3["nodes"][0])
        extra["name"] = "fog-3-extra"
        fog3["nodes"].append(extra)

    running = {"a": {"w": ["fog-1"]}}
    before = survivability(WhatIf(world(running, [a], second_node), [Tenant(a)]))
    planned = next(s for s in before.scenarios if s.failed == ["fog-1"])
    (entry,) = planned.outcomes["a"].services["w"]
    assert entry["cluster"] == "fog-3"
    named = entry["nodes"][0]

    def fill(node_names):
        def tweak(clusters):
            second_node(clusters)
            for n in clusters["fog-3"]["nodes"]:
                if n["name"] in node_names:
                    n["requested"]["cpu"] = n["allocatable"]["cpu"] - 1.0

        return tweak

    for full_nodes, carried in (({named}, True), ({"fog-3-worker", "fog-3-extra"}, False)):
        after = world(running, [a], fill(full_nodes))
        incremental = survivability(WhatIf(after, [Tenant(a)]), previous=before, changed={"fog-3"})
        full = survivability(WhatIf(after, [Tenant(a)]))
        assert incremental.applications == full.applications
        assert [(s.name, s.survivable) for s in incremental.scenarios] == [
            (s.name, s.survivable) for s in full.scenarios
        ]
        again = next(s for s in incremental.scenarios if s.failed == ["fog-1"])
        assert (again.outcomes["a"] is planned.outcomes["a"]) is carried


if __name__ == "__main__":  # test_a_report_planned_in_forked_workers_is_the_same's own process
    print(json.dumps(forked_and_serial_reports()))
