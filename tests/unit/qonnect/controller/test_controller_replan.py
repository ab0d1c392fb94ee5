"""QoS drift through the real placement engine: nothing to do on an unchanged fleet; a move once
another cluster becomes clearly better (here: the current edge cluster's energy use triples)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application_file
from qonnect.controller import replan as replan_module
from qonnect.controller.detector import Memory, Settings, Snapshot, placed_clusters
from qonnect.controller.replan import PlanRequest, drift_judge, engine_planner, engine_replanner
from qonnect.controller.statemachine import DecisionLog
from qonnect.controller.triggers import detect

REPO = Path(__file__).resolve().parents[4]


def setup_case():
    app = load_application_file(str(REPO / "examples" / "bookinfo" / "energy-first.yml"))
    inventory = json.loads((REPO / "examples" / "inventories" / "paper.json").read_text())
    replan = engine_replanner()
    assert replan is not None
    record = {"name": app.name, "version": 1, "application": app.to_dict()}
    first = replan(record, inventory, {}, ())
    assert first is not None
    current = {svc: [dict(e) for e in entries] for svc, entries in first[0].items()}
    inventory["placements"] = {app.name: current}
    return record, inventory, current, replan


def run(record, inventory, replan, now=1000.0):
    log = DecisionLog()
    log.apply({"op": "observe", "app": record["name"], "version": 1, "term": 1, "node": "n"})
    memory = Memory(healthy_since={c["name"]: 0.0 for c in inventory["clusters"]})
    snapshot = Snapshot(inventory, [], [record], now)
    return detect(snapshot, log, memory, Settings(), replan)[0]


def test_unchanged_fleet_has_no_drift():
    record, inventory, current, replan = setup_case()
    for c in inventory["clusters"]:
        c["heartbeat_age"] = 1.0
    # the engine really ran (a replanner that fails says None) and kept the placement
    again = replan(record, inventory, current, ())
    assert again is not None and again[0] == current
    assert run(record, inventory, replan) == []


def test_a_bug_in_the_engine_is_not_taken_for_no_drift(monkeypatch):
    """Only 'no plan' (PlacementError) and 'no usable fleet' (InventoryError) mean no drift move;
    anything else is a bug and must surface, not read as a quiet fleet."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement import batch

    record, inventory, current, _replan = setup_case()

    def broken(*args, **kwargs):
        raise TypeError("a bug in the engine")

    monkeypatch.setattr(batch, "place_many", broken)
    replan = engine_replanner()
    with pytest.raises(TypeError, match="a bug in the engine"):
        replan(record, inventory, current, ())


def test_the_judge_parses_an_inventory_once_for_every_application_judged_on_it(monkeypatch):
    """Issue 38: one cluster's change re-judges every application, and each judgement parsed
    the whole inventory twice (about half its cost). An inventory the engine refuses is no
    drift for any of them, as before."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement import model

    records, inventory, planner = fleet_of_three()
    parses = []
    real = model.Inventory.from_dict.__func__
    monkeypatch.setattr(
        model.Inventory, "from_dict", classmethod(lambda cls, d: parses.append(1) or real(cls, d))
    )
    judge = drift_judge(planner)
    verdicts = judge_all(judge, records, tick(inventory))
    assert len(parses) == 1 and set(verdicts) == {"bookinfo", "cloudy", "edgy"}
    assert judge_all(judge, records, inventory) == verdicts and len(parses) == 2  # a new inventory
    broken = tick(inventory)
    broken["clusters"][0]["nodes"][0]["allocatable"]["cpu"] = -4
    assert judge_all(judge, records, broken) == {"bookinfo": None, "cloudy": None, "edgy": None}


def test_current_cluster_getting_much_worse_is_drift():
    record, inventory, current, replan = setup_case()
    edge = current["ratings"][0]["cluster"]
    worse = copy.deepcopy(inventory)
    for c in worse["clusters"]:
        c["heartbeat_age"] = 1.0
        if c["name"] == edge:
            for n in c["nodes"]:
                n["energy_kwh"] *= 3
    triggers = run(record, worse, replan)
    assert [t.kind for t in triggers] == ["qos-drift"] and "objective" in triggers[0].reason


def placed_with(policy: dict, app_file: str, tweak=None):
    """The application placed where the heal's planner puts it with ``policy``; then the fleet
    changed by ``tweak`` = (cluster, factor on its nodes' energy)."""
    app = load_application_file(str(REPO / "examples" / "bookinfo" / app_file))
    inventory = json.loads((REPO / "examples" / "inventories" / "paper.json").read_text())
    record = {"name": app.name, "version": 1, "application": app.to_dict(), "policy": policy}
    planner = engine_planner("weighted", 0.1)
    request = PlanRequest(record, (), policy.get("scorer"), policy.get("hysteresis"))
    current = planner([request], copy.deepcopy(inventory)).services[app.name]
    inventory["placements"] = {app.name: current}
    for c in inventory["clusters"]:
        c["heartbeat_age"] = 1.0
        if tweak and c["name"] == tweak[0]:
            for n in c["nodes"]:
                n["energy_kwh"] *= tweak[1]
    return record, inventory, current, planner


@pytest.mark.parametrize(
    ("policy", "app_file", "tweak"),
    [
        ({"scorer": "borda"}, "latency-first.yml", None),  # where borda put it, weighted moves it
        ({"scorer": "optimal", "hysteresis": 0.5}, "energy-first.yml", ("fog-1", 1.1)),  # a small gain
    ],
)
def test_an_application_is_judged_with_its_own_scorer_and_hysteresis(policy, app_file, tweak):
    """Issue 38 (one judge): drift was judged with the weighted scorer and the controller's
    hysteresis whatever the user deployed with, so an application placed by its own scorer was
    moved by another's verdict. The judge now asks the heal's planner with the stored policy."""
    record, inventory, _current, planner = placed_with(policy, app_file, tweak)
    defaults = drift_judge(planner, lambda _record: {})  # the old verdict: the controller's defaults
    (old,) = run(record, inventory, defaults)
    assert old.kind == "qos-drift" and "weighted scorer, hysteresis 0.1" in old.reason
    assert run(record, inventory, engine_replanner()) == []
    assert run(record, inventory, drift_judge(planner)) == []


def test_a_judged_drift_is_the_move_the_heal_then_plans():
    """Over fleets whose energy figures changed, for each stored policy: whenever the judge calls
    drift, the heal's planner (the controller's, with that policy) places the application
    exactly where the judge said, so a decided drift is never re-planned into something else."""
    import random

    rng = random.Random(38)
    drifts = steady = 0
    for policy in ({"scorer": "borda"}, {"scorer": "optimal", "hysteresis": 0.3}, {}):
        for _trial in range(12):
            cluster = rng.choice(["cloud-1", "cloud-2", "fog-1", "fog-2", "edge-1", "edge-2"])
            record, inventory, current, planner = placed_with(
                policy, "energy-first.yml", (cluster, rng.choice([0.5, 1.1, 1.3, 2.0]))
            )
            found = drift_judge(planner)(record, inventory, current, ())
            if found is None or placed_clusters(found[0]) == placed_clusters(current):
                steady += 1
                continue
            drifts += 1
            heal = planner(
                [PlanRequest(record, (), policy.get("scorer"), policy.get("hysteresis"))], inventory
            )
            assert heal.services[record["name"]] == found[0]
            assert f"{policy.get('scorer', 'weighted')} scorer" in found[1]
    assert drifts >= 3 and steady >= 3  # both verdicts were exercised


# -- judged again only when something it depends on changed (issue 38, the idle leader) -----------


class Counted:
    """The real judge, counting the applications it judged."""

    def __init__(self, judge, tells=True):
        self.judge, self.calls, self.tells = judge, [], tells

    def __call__(self, record, inventory, current, exclude):
        self.calls.append(record["name"])
        return self.judge(record, inventory, current, exclude)

    def __getattr__(self, name):  # the judge's other answers (``unaffected``...), uncounted
        if name == "unaffected" and not self.__dict__.get("tells", True):
            raise AttributeError(name)  # a judge that cannot tell what a change can move
        return getattr(self.__dict__["judge"], name)


def fleet_of_three():
    """Three applications placed on the paper fleet: all-edge, all-cloud, and Bookinfo (every tier)."""
    base = load_application_file(str(REPO / "examples" / "bookinfo" / "energy-first.yml")).to_dict()
    inventory = json.loads((REPO / "examples" / "inventories" / "paper.json").read_text())
    planner = engine_planner("weighted", 0.1)
    records, placements = [], {}
    for name, tier in (("edgy", "edge"), ("cloudy", "cloud"), ("bookinfo", None)):
        spec = copy.deepcopy(base)
        spec["name"] = name
        for svc in spec["services"]:
            svc["tier"] = tier or svc["tier"]
        record = {"name": name, "version": 1, "updated": 1.0, "application": spec, "policy": {}}
        placements[name] = planner([PlanRequest(record, ())], inventory).services[name]
        records.append(record)
    inventory["placements"] = placements
    return records, inventory, planner


def tick(inventory, age=1.0):
    """The next tick's inventory: a new object, every heartbeat age moved on (a node that
    stopped reporting stays stale, a little older)."""
    out = copy.deepcopy(inventory)
    for c in out["clusters"]:
        c["heartbeat_age"] = age
        for n in c["nodes"]:
            n["heartbeat_age"] = n["heartbeat_age"] + age if n.get("heartbeat_age", 0) > 15 else age
    return out


def judge_all(gate, records, inventory):
    return {r["name"]: gate(r, inventory, inventory["placements"][r["name"]], ()) for r in records}


def test_an_unchanged_fleet_is_judged_once_however_many_ticks():
    records, inventory, planner = fleet_of_three()
    counted = Counted(drift_judge(planner))
    gate = replan_module.ChangeGate(counted)
    first = judge_all(gate, records, tick(inventory))
    for t in range(10):
        assert judge_all(gate, records, tick(inventory, age=1.0 + t)) == first  # ages move, nothing else
    assert sorted(counted.calls) == ["bookinfo", "cloudy", "edgy"] and gate.judged == 3


def test_any_change_the_engine_reads_rejudges_and_ages_alone_do_not():
    """The fleet is read whole: the engine normalises over every usable node, so a change on
    a cluster an application cannot use may still change its verdict (seed 19 of the walk below
    found it when only eligible clusters counted). This judge cannot tell what a change can
    move, so every change re-judges every application (the one that can is tested below)."""
    records, inventory, planner = fleet_of_three()
    counted = Counted(drift_judge(planner), tells=False)
    gate = replan_module.ChangeGate(counted)
    judge_all(gate, records, tick(inventory))
    changes = {
        "requests": lambda inv: inv["clusters"][6]["nodes"][0]["requested"].update(cpu=1.5),
        "a stale report": lambda inv: inv["clusters"][6]["nodes"][0].update(heartbeat_age=60.0),
        "readiness": lambda inv: inv["clusters"][0]["nodes"][0].update(ready=False),
        "economics": lambda inv: inv["clusters"][3]["nodes"][0].update(price_eur_h=1.0),
        "a label": lambda inv: inv["clusters"][3]["labels"].update(zone="b"),
        "latency": lambda inv: inv["latency_ms"]["edge-1"].update({"cloud-1": 99.0}),
        "the largest latency, through a place outside the fleet": lambda inv: inv["latency_ms"][
            "fog-2"
        ].update({"kb": 500.0}),
    }
    for what, change in changes.items():
        counted.calls.clear()
        changed = tick(inventory, age=2.0)
        change(changed)
        judge_all(gate, records, changed)
        assert sorted(counted.calls) == ["bookinfo", "cloudy", "edgy"], what
        counted.calls.clear()
        judge_all(gate, records, tick(changed, age=3.0))
        assert counted.calls == [], what  # the same fleet again: the verdicts stand
        judge_all(gate, records, tick(inventory))  # back to the start for the next change
        assert len(counted.calls) == 3, what
    # there and back; the two latency changes count as such
    assert gate.reasons == {"fleet": 3 * 2 * (len(changes) - 2), "latency": 3 * 2 * 2}
    counted.calls.clear()
    record = {**records[0], "policy": {"scorer": "borda"}}  # a deploy stored a new policy
    gate(record, inventory, inventory["placements"][record["name"]], ())
    gate(record, inventory, inventory["placements"][record["name"]], ("edge-1",))  # must avoid edge-1 now
    gate({**record, "version": 2}, inventory, inventory["placements"][record["name"]], ("edge-1",))
    gate({**record, "version": 2}, inventory, {}, ("edge-1",))  # its placement changed
    assert counted.calls == ["edgy"] * 4


def judged_once(records, inventory, planner):
    """A counted judge behind a gate that has judged every application once."""
    counted = Counted(drift_judge(planner))
    gate = replan_module.ChangeGate(counted)
    judge_all(gate, records, tick(inventory))
    counted.calls.clear()
    return counted, gate


def with_places_outside(records, inventory):
    """Every cluster's round trip to the KB (the agents measure it: a place no cluster is) and
    to a users' site, which Bookinfo's productpage must stay within 40 ms of."""
    for c in inventory["clusters"]:
        inventory["latency_ms"][c["location"]]["kb"] = 1.5
        inventory["latency_ms"][c["location"]]["users"] = 20.0 if c["tier"] == "cloud" else 5.0
    records = copy.deepcopy(records)
    for svc in records[2]["application"]["services"]:
        if svc["name"] == "productpage":
            svc["constraints"]["max_latency"] = [{"from": "users", "ms": 40}]
    return records, inventory


def test_an_agents_round_trip_to_the_kb_rejudges_nothing_and_a_place_an_application_names_only_it():
    """Issue 38: the agents report their round trip to the KB at every report, and the table
    was printed whole, so an idle leader re-judged every application twice a minute."""
    records, inventory, planner = fleet_of_three()
    records, inventory = with_places_outside(records, inventory)
    counted, gate = judged_once(records, inventory, planner)
    changed = tick(inventory, age=2.0)
    for row in changed["latency_ms"].values():
        row["kb"] = 1.7
    judge_all(gate, records, changed)
    assert counted.calls == []
    changed = tick(changed, age=3.0)
    changed["latency_ms"]["edge-2"]["users"] = 30.0  # below the table's largest value
    judge_all(gate, records, changed)
    assert counted.calls == ["bookinfo"]
    assert gate.reasons == {"places outside": 1}  # why, as /status shows it
    assert gate.fleet_changes == {}  # the KB's round trips and the users' site: no fleet change


def with_a_lone_service(records, inventory, planner):
    """A fourth application: Bookinfo's details service alone (no dependency, no maxLatency),
    which no latency score or filter reads."""
    records = copy.deepcopy(records)
    spec = copy.deepcopy(records[2]["application"])
    spec["name"] = "lonely"
    spec["services"] = [svc for svc in spec["services"] if svc["name"] == "details"]
    assert spec["services"] and not spec["services"][0]["depends_on"]
    record = {"name": "lonely", "version": 1, "updated": 1.0, "application": spec, "policy": {}}
    inventory["placements"]["lonely"] = planner([PlanRequest(record, ())], inventory).services["lonely"]
    return [*records, record], inventory


def test_latencies_among_the_clusters_rejudge_only_the_applications_that_read_them():
    """Issue 38: the view's full re-read brings every agent's newest measured round trips, so
    an idle leader re-judged every application once a minute though a service with no dependency
    and no maxLatency scores the same whatever the latencies are."""
    records, inventory, planner = fleet_of_three()
    records, inventory = with_a_lone_service(records, inventory, planner)
    assert [replan_module.reads_latency(r) for r in records] == [True, True, True, False]
    counted, gate = judged_once(records, inventory, planner)
    changed = tick(inventory, age=2.0)
    for row in changed["latency_ms"].values():
        for peer in row:
            row[peer] = round(row[peer] * 1.03, 3)  # measured again, a little different
    judge_all(gate, records, changed)
    assert sorted(counted.calls) == ["bookinfo", "cloudy", "edgy"]
    assert gate.reasons == {"latency": 3}
    counted.calls.clear()
    broken = tick(changed, age=3.0)
    broken["latency_ms"]["edge-1"]["cloud-1"] = -1.0  # the engine refuses such a table: all judged
    judge_all(gate, records, broken)
    assert sorted(counted.calls) == ["bookinfo", "cloudy", "edgy", "lonely"]


@pytest.mark.parametrize("seed", [38, 2026, 19, 7])
def test_the_gate_never_hides_a_changed_verdict(seed):
    """Over a random walk of fleet changes (economics, requests, readiness, report ages, latency
    among the clusters and to places outside the fleet), the gated judge answers exactly what
    judging every application every tick answers."""
    import random

    records, inventory, planner = fleet_of_three()
    records, inventory = with_places_outside(records, inventory)
    records, inventory = with_a_lone_service(records, inventory, planner)
    judge = drift_judge(planner)
    gate = replan_module.ChangeGate(judge)
    rng = random.Random(seed)
    now = tick(inventory)
    verdicts = set()
    for _step in range(40):
        now = tick(now, age=rng.choice([1.0, 2.0, 3.0]))
        c = rng.choice(now["clusters"])
        n = rng.choice(c["nodes"])
        change = rng.choice(["energy", "requested", "ready", "age", "latency", "outside", "none"])
        if change == "energy":
            n["energy_kwh"] *= rng.choice([0.5, 0.9, 1.1, 2.0])
        elif change == "requested":
            n["requested"]["cpu"] = max(0.0, n["requested"]["cpu"] + rng.choice([-0.5, 0.5, 2.0]))
        elif change == "ready":
            n["ready"] = not n["ready"]
        elif change == "age":
            n["heartbeat_age"] = 60.0 if n["heartbeat_age"] <= 15 else 1.0  # stops or resumes reporting
        elif change == "latency":
            row = now["latency_ms"][c["location"]]
            peer = rng.choice(sorted(row))
            row[peer] *= rng.choice([0.5, 2.0])
        elif change == "outside":  # the KB's round trip, or the users' site, now and then the largest
            row = now["latency_ms"][c["location"]]
            place = rng.choice(["kb", "users"])
            row[place] = rng.choice([0.5, 3.0, 30.0, 80.0])
        gated = judge_all(gate, records, now)
        assert gated == judge_all(judge, records, now)
        verdicts.update(str(v) for v in gated.values())
    assert gate.judged < 4 * 41  # some ticks were answered from the last verdict
    assert len(verdicts) > 2  # and the verdicts did change along the walk


def judged_apart(planner, records, inventory):
    """Each application judged by a judge of its own on a copy of its own: no parse, build of
    the engine's arrays or verdict shared with anything else."""
    return {
        r["name"]: drift_judge(planner)(r, copy.deepcopy(inventory), inventory["placements"][r["name"]], ())
        for r in records
    }


def set_cpu_requests(inventory, cluster, cpu):
    node = next(c for c in inventory["clusters"] if c["name"] == cluster)["nodes"][0]
    node["requested"]["cpu"] = cpu


def test_one_clusters_change_rejudges_only_the_applications_placed_on_or_eligible_for_it():
    """Issue 38: one cluster's capacity change re-judged every application. Edgy may use only
    edge clusters, cloudy only cloud ones, Bookinfo every cluster; each cluster has one node."""
    records, inventory, planner = fleet_of_three()
    counted, gate = judged_once(records, inventory, planner)

    def step(now, expected):
        counted.calls.clear()
        assert judge_all(gate, records, now) == judged_apart(planner, records, now)
        assert sorted(counted.calls) == expected

    # fog-2 (no application runs there, only Bookinfo may) frees 0.1 core: within the scale
    now = tick(inventory, age=2.0)
    set_cpu_requests(now, "fog-2", 0.15)
    step(now, ["bookinfo"])
    assert gate.carried == 2
    # edge-1, where edgy and Bookinfo's ratings run, frees 0.1 core: cloudy cannot use it
    now = tick(now, age=3.0)
    set_cpu_requests(now, "edge-1", 0.15)
    step(now, ["bookinfo", "edgy"])
    assert gate.carried == 3
    step(tick(now, age=4.0), [])  # the same fleet again
    # fog-2 becomes the fleet's fullest node: the lowest performance every score is scaled from
    now = tick(now, age=5.0)
    set_cpu_requests(now, "fog-2", 3.0)
    step(now, ["bookinfo", "cloudy", "edgy"])
    # it frees 1 core, still the fullest: the lowest performance moves again
    now = tick(now, age=6.0)
    set_cpu_requests(now, "fog-2", 2.0)
    step(now, ["bookinfo", "cloudy", "edgy"])
    # a stale report takes fog-2 out of the scale (its nodes no longer count): what it held moves
    now = tick(now, age=7.0)
    next(c for c in now["clusters"] if c["name"] == "fog-2")["nodes"][0]["heartbeat_age"] = 60.0
    step(now, ["bookinfo", "cloudy", "edgy"])
    assert gate.carried == 3 and gate.reasons == {"fleet": 1 + 2 + 3 * 3}


def test_a_change_the_user_excluded_or_another_scorer_cannot_see_keeps_the_verdict():
    """The user's stored exclusions and scorer are the judge's: cloudy excludes cloud-1 (then
    runs elsewhere), Bookinfo is planned with borda; a change on cloud-1 within the scale
    re-judges only Bookinfo, which may use cloud-1."""
    records, inventory, planner = fleet_of_three()
    records[1]["policy"] = {"exclude": ["cloud-1"]}
    records[2]["policy"] = {"scorer": "borda"}
    for r in records[1:]:
        request = PlanRequest(r, tuple(r["policy"].get("exclude", ())), r["policy"].get("scorer"))
        inventory["placements"][r["name"]] = planner([request], inventory).services[r["name"]]
    assert "cloud-1" not in {e["cluster"] for es in inventory["placements"]["cloudy"].values() for e in es}
    counted, gate = judged_once(records, inventory, planner)
    now = tick(inventory, age=2.0)
    set_cpu_requests(now, "cloud-1", 0.15)
    assert judge_all(gate, records, now) == judged_apart(planner, records, now)
    assert sorted(counted.calls) == ["bookinfo"] and gate.carried == 2


def walk(seed, steps=40):
    """A gate and a judge over a random walk of fleet changes on the three applications, with
    places outside the fleet, a lone service and random stored policies (scorers, exclusions,
    hysteresis); asserts at every step that the gate answers what judging everything answers."""
    import random

    records, inventory, planner = fleet_of_three()
    records, inventory = with_places_outside(records, inventory)
    records, inventory = with_a_lone_service(records, inventory, planner)
    rng = random.Random(seed)
    policies = [{}, {"scorer": "borda"}, {"scorer": "optimal"}, {"hysteresis": 0.0}, {"exclude": ["cloud-1"]}]
    for record in records:
        record["policy"] = rng.choice(policies)
    gate = replan_module.ChangeGate(drift_judge(planner))
    now = tick(inventory)
    for _step in range(steps):
        now = tick(now, age=rng.choice([1.0, 2.0, 3.0]))
        for _change in range(rng.choice([1, 1, 1, 2])):
            random_change(rng, now)
        assert judge_all(gate, records, now) == judged_apart(planner, records, now)
    return gate


def random_change(rng, inventory):
    c = rng.choice(inventory["clusters"])
    n = rng.choice(c["nodes"])
    change = rng.choice(
        ["energy", "price", "requested", "requested", "ready", "age", "label", "latency", "none"]
    )
    if change == "energy":
        n["energy_kwh"] *= rng.choice([0.5, 0.9, 1.1, 2.0])
    elif change == "price":
        n["price_eur_h"] *= rng.choice([0.5, 0.99, 1.01, 2.0])
    elif change == "requested":
        n["requested"]["cpu"] = max(0.0, n["requested"]["cpu"] + rng.choice([-0.5, -0.1, 0.1, 0.5, 2.0]))
    elif change == "ready":
        n["ready"] = not n["ready"]
    elif change == "age":
        n["heartbeat_age"] = 60.0 if n["heartbeat_age"] <= 15 else 1.0
    elif change == "label":
        c.setdefault("labels", {})["zone"] = rng.choice(["a", "b"])
    elif change == "latency":
        row = inventory["latency_ms"][c["location"]]
        row[rng.choice(sorted(row))] *= rng.choice([0.5, 2.0])


@pytest.mark.parametrize("seed", [3, 11, 42, 2027])
def test_verdicts_kept_through_a_change_are_the_ones_judging_everything_gives(seed):
    """The kept verdicts are exact: any policy, any change, one or two clusters at a time."""
    gate = walk(seed)
    assert gate.carried > 0  # the walk did keep verdicts through changes


def test_the_judge_builds_the_engines_arrays_once_per_inventory(monkeypatch):
    """At 1,000 clusters a build of the engine's arrays cost most of a judgement's 9 ms, and
    each judgement built them twice (to plan, and for the current placement's objective)."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import Fleet

    records, inventory, planner = fleet_of_three()
    builds = []
    real = Fleet.__init__
    monkeypatch.setattr(Fleet, "__init__", lambda self, inv: builds.append(1) or real(self, inv))
    judge = drift_judge(planner)
    verdicts = judge_all(judge, records, tick(inventory))
    assert len(builds) == 1 and verdicts == judged_apart(planner, records, inventory)
    judge_all(judge, records, tick(inventory))
    assert len(builds) == 2 + 3  # the new inventory's; judged_apart built one per application


def test_the_detector_reads_the_fleet_wide_sets_once_per_tick(monkeypatch):
    """The drift rules asked every cluster whether its credentials were refused once per
    application, twice: 0.7 s a tick at 1,000 applications on 1,000 clusters. What a tick asks
    no longer grows with the applications."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement import model
    from qonnect.controller import detector, settling, triggers

    records, inventory, planner = fleet_of_three()
    asked = []

    def counted(cluster):
        asked.append(cluster.get("name"))
        return model.credentials_broken(cluster)

    for module in (detector, triggers, settling):  # wherever a rule may call it
        monkeypatch.setattr(module, "credentials_broken", counted, raising=False)

    def asked_per_tick(records):
        log = DecisionLog()
        for r in records:
            log.apply({"op": "observe", "app": r["name"], "version": 1, "term": 1, "node": "n"})
        memory = Memory(healthy_since={c["name"]: 0.0 for c in inventory["clusters"]})
        gate = replan_module.ChangeGate(drift_judge(planner))
        counts = []
        for t in range(3):
            asked.clear()
            snapshot = Snapshot(tick(inventory, age=1.0 + t), [], records, 1000.0 + t)
            detect(snapshot, log, memory, Settings(), gate)
            counts.append(len(asked))
        assert gate.judged == len(records)  # the drift rule ran for every application
        return counts

    more = copy.deepcopy(records)
    for i in range(20):  # twenty more applications, placed where Bookinfo runs
        more.append({**copy.deepcopy(records[2]), "name": f"copy{i}"})
        inventory["placements"][f"copy{i}"] = inventory["placements"]["bookinfo"]
    few = asked_per_tick(records)
    assert few == asked_per_tick(more)
    assert all(0 < n <= 3 * len(inventory["clusters"]) for n in few)
