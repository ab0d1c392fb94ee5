"""Who owns which fact (issue 25, item 1), against live KBs on SQLite and PostgreSQL.

An intruder holding one cluster's agent token reports "edge-3 costs 0.0001 EUR/h, uses 1e-7 kWh
and has 1000 CPUs". The economics belong to the admin's registration, so the inventory, the
placement engine and the Ansible inventory plugin keep the registered ones; the capacity is an
observation, bounded by the registered maximum or by growth over the epoch's first report."""

from __future__ import annotations

import time

import pytest
from ansible_collections.qonnect.core.plugins.inventory.kb import cluster_vars
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import place
from ansible_collections.qonnect.core.plugins.module_utils.qos.load import load_application
from ansible_collections.qonnect.core.plugins.module_utils.qos.model import Application
from qonnect.kb import trust
from test_kb_api import spec

pytestmark = pytest.mark.timeout(120)
GIB = 2**30
FORGED = {"price_eur_h": 0.0001, "energy_kwh": 1e-7, "bandwidth_gbps": 1000.0}


def node(name: str, cpu: float = 8.0, memory: int = 16 * GIB, **extra: float) -> dict:
    return {"name": name, "ready": True, "allocatable": {"cpu": cpu, "memory": memory}, **extra}


def report(client: KBClient, cluster: str, nodes: list[dict]) -> dict:
    return client.report(cluster, {"seq": time.time_ns() // 1000, "ts": time.time(), "nodes": nodes})


def _cluster(inventory: dict, name: str) -> dict:
    return next(c for c in inventory["clusters"] if c["name"] == name)


def test_forged_economics_never_reach_the_inventory_nor_ansible(live_kb, fresh):
    name = fresh("edge")
    registered = {"price_eur_h": 2.5, "energy_kwh": 0.004, "bandwidth_gbps": 1.0}
    live_kb.admin.register_cluster(
        {
            "name": name,
            "tier": "edge",
            "economics": registered,
            "node_economics": {"n2": {"price_eur_h": 3.0}},
        }
    )
    stolen = live_kb.client("agent", name)
    # the agent's reports still carry economics (old agents send node labels): accepted, ignored
    ack = report(stolen, name, [node("n1", **FORGED), node("n2", **FORGED)])
    assert ack["applied"] is True
    inventory = live_kb.admin.inventory()
    nodes = {n["name"]: n for n in _cluster(inventory, name)["nodes"]}
    assert {k: nodes["n1"][k] for k in registered} == registered
    assert nodes["n2"]["price_eur_h"] == 3.0 and nodes["n2"]["energy_kwh"] == 0.004  # per node, then default
    listed = {n["name"]: n for n in live_kb.admin.request("GET", f"/api/v1/clusters/{name}/nodes")["nodes"]}
    assert listed["n1"]["price_eur_h"] == 2.5
    # the Ansible inventory plugin's host vars (its cheap/green groups are built from them)
    hostvars = cluster_vars(_cluster(inventory, name), live_kb.admin.get_cluster(name), [])
    assert hostvars["price_eur_h"] == 2.5 + 3.0 and hostvars["energy_kwh"] == pytest.approx(0.004)
    # the registration, which only an admin can change, shows the owned facts
    record = live_kb.client("reader").get_cluster(name)
    assert record["economics"] == registered and record["node_economics"]["n2"]["price_eur_h"] == 3.0
    for change in (
        lambda: stolen.update_cluster(name, {"economics": FORGED}),
        lambda: stolen.request("PUT", f"/api/v1/clusters/{name}", {"tier": "edge", "economics": FORGED}),
    ):
        with pytest.raises(KBError) as err:
            change()
        assert err.value.status == 403


def test_an_unregistered_price_is_unknown_not_the_reported_one(live_kb, fresh):
    name = fresh("edge")
    live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    report(live_kb.client("agent", name), name, [node("n1", **FORGED)])
    n1 = _cluster(live_kb.admin.inventory(), name)["nodes"][0]
    assert all(n1.get(key) is None for key in FORGED)


def test_an_invented_or_dropped_node_never_makes_a_cluster_cheaper(live_kb, fresh):
    """An agent chooses which nodes it reports: a node the registration does not name gets its
    least favourable registered node's economics (no default registered), and the Ansible
    inventory's price counts a registered node the agent stopped reporting."""
    name = fresh("edge")
    n1 = {"price_eur_h": 3.0, "energy_kwh": 0.01, "bandwidth_gbps": 2.0}
    n2 = {"price_eur_h": 5.0, "energy_kwh": 0.02, "bandwidth_gbps": 1.0}
    live_kb.admin.register_cluster({"name": name, "tier": "edge", "node_economics": {"n1": n1, "n2": n2}})
    stolen = live_kb.client("agent", name)
    assert report(stolen, name, [node("n1"), node("fake-9", **FORGED)])["applied"]  # n2 dropped
    inventory = live_kb.admin.inventory()
    nodes = {n["name"]: n for n in _cluster(inventory, name)["nodes"]}
    assert {k: nodes["fake-9"][k] for k in n2} == n2  # the dearest, hungriest, slowest registered
    hostvars = cluster_vars(_cluster(inventory, name), live_kb.admin.get_cluster(name), [])
    assert hostvars["price_eur_h"] == 3.0 + 5.0 + 5.0  # n1, fake-9 as the worst, and n2 still
    assert hostvars["energy_kwh"] == pytest.approx((0.01 + 0.02 + 0.02) / 3)


def test_forged_capacity_is_refused_until_an_admin_re_registers(live_kb, fresh):
    name = fresh("edge")
    live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    agent = live_kb.client("agent", name)
    assert report(agent, name, [node("n1"), node("n2")])["applied"]  # the epoch's baseline: 16 CPUs
    for forged in (
        [node("n1", cpu=1000.0), node("n2")],  # a capacity jump
        [node("n1"), node("n2"), *(node(f"new-{i}", cpu=32.0) for i in range(4))],  # new nodes
        [node("n1", memory=10**15), node("n2")],
    ):
        with pytest.raises(KBError) as err:
            report(agent, name, forged)
        assert err.value.status == 422 and err.value.message.startswith("nodes:"), err.value.message
    inv = _cluster(live_kb.admin.inventory(), name)
    assert sorted(n["name"] for n in inv["nodes"]) == ["n1", "n2"] and inv["free"]["cpu"] == 16.0
    # the baseline is in the inventory: a new leader checks a claim over it (controller/capacity.py)
    assert inv["capacity_baseline"]["cpu"] == 16.0 and inv["capacity_baseline"]["memory"] == 32 * GIB
    # shrinking and growing back, and growth within the bound, are observations like any other
    assert report(agent, name, [node("n1")])["applied"]
    assert report(agent, name, [node("n1"), node("n2"), node("n3", cpu=40.0)])["applied"]  # 56 <= 4 x 16
    # the admin re-registers: a new epoch, whose first report sets a new baseline
    live_kb.admin.request("PUT", f"/api/v1/clusters/{name}", {"tier": "edge"})
    assert _cluster(live_kb.admin.inventory(), name)["capacity_baseline"] is None
    assert report(agent, name, [node("n1", cpu=1000.0)])["applied"]
    inv = _cluster(live_kb.admin.inventory(), name)
    assert inv["free"]["cpu"] == 1000.0 and inv["capacity_baseline"]["cpu"] == 1000.0


def test_a_registered_capacity_bounds_even_the_first_report(live_kb, fresh):
    name = fresh("edge")
    live_kb.admin.register_cluster({"name": name, "tier": "edge", "capacity": {"cpu": 12}})
    agent = live_kb.client("agent", name)
    with pytest.raises(KBError) as err:
        report(agent, name, [node("n1", cpu=8.0), node("n2", cpu=8.0)])
    assert err.value.status == 422 and "registered capacity" in err.value.message
    assert report(agent, name, [node("n1", cpu=8.0), node("n2", cpu=4.0)])["applied"]
    live_kb.admin.update_cluster(name, {"capacity": {"cpu": 64}})  # the admin raises it
    deadline = time.monotonic() + 10  # another instance's bound is seen one batch late
    while True:
        try:
            assert report(agent, name, [node("n1", cpu=32.0), node("n2", cpu=32.0)])["applied"]
            break
        except KBError:
            if time.monotonic() > deadline:
                raise
    assert live_kb.admin.get_cluster(name)["capacity"] == {"cpu": 64.0}


def test_a_stolen_token_cannot_pull_an_application(db_url_factory, kb_process, make_token):
    """The reproduction: edge-3's token claims the cheapest, greenest, biggest nodes; the
    placement engine (the controller's) still picks the cluster that really is greenest."""
    db = db_url_factory("sqlite")
    kb = KBClient(kb_process(db).url, make_token(db, "admin"))
    paper = {"green-1": 0.001, "edge-3": 0.02}  # kWh, as the admin registered them
    for name, energy in paper.items():
        kb.register_cluster({"name": name, "tier": "cloud", "economics": {"energy_kwh": energy}})
        agent = KBClient(
            kb.url, kb.request("POST", "/api/v1/tokens", {"role": "agent", "cluster": name})["token"]
        )
        assert report(agent, name, [node("n1")])["applied"]
    stolen = KBClient(
        kb.url, kb.request("POST", "/api/v1/tokens", {"role": "agent", "cluster": "edge-3"})["token"]
    )
    assert report(stolen, "edge-3", [node("n1", **FORGED)])["applied"]
    with pytest.raises(KBError):
        report(stolen, "edge-3", [node("n1", cpu=1000.0, **FORGED)])
    kb.put_application("ratings", spec("ratings", energy=1.0))
    app = Application.from_dict(kb.get_application("ratings")["application"])
    plan = place(app, kb.inventory(), explain=False)
    assert {e["cluster"] for entries in plan.services.values() for e in entries} == {"green-1"}


def test_a_forged_latency_cannot_make_a_path_faster(db_url_factory, kb_process, make_token):
    """A stolen token of edge-liar reports 0 ms to the database's site, whose own agent measures
    that path at 40 ms (and edge-honest's at 5 ms). A path's latency is the larger of its two
    ends' measurements, so the latency-first web service stays next to the honest measurement."""
    db = db_url_factory("sqlite")
    kb = KBClient(kb_process(db).url, make_token(db, "admin"))
    sites = {"db-site": "cloud", "edge-honest": "edge", "edge-liar": "edge"}
    measured = {
        "db-site": {"edge-honest": 5.0, "edge-liar": 40.0},
        "edge-honest": {"db-site": 5.0},
        "edge-liar": {"db-site": 0.0},  # the forgery
    }
    for name, tier in sites.items():
        kb.register_cluster({"name": name, "tier": tier, "location": f"loc-{name}"})
        agent = KBClient(
            kb.url, kb.request("POST", "/api/v1/tokens", {"role": "agent", "cluster": name})["token"]
        )
        ack = agent.report(
            name,
            {
                "seq": time.time_ns() // 1000,
                "ts": time.time(),
                "nodes": [node("n1")],
                "latencies": measured[name],
            },
        )
        assert ack["applied"]
    matrix = kb.latency()
    assert matrix["loc-edge-liar"]["loc-db-site"] == 40.0 and matrix["loc-db-site"]["loc-edge-liar"] == 40.0
    assert matrix["loc-edge-honest"]["loc-db-site"] == 5.0
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    app = load_application(
        {
            "apiVersion": "qonnect.io/v1",
            "kind": "Application",
            "metadata": {"name": "near"},
            "spec": {
                "objective": {"energy": 0, "cost": 0, "performance": 0, "latency": 1.0},
                "services": [
                    {"name": "db", "tier": "cloud", "manifests": [manifest]},
                    {"name": "web", "tier": "edge", "dependsOn": ["db"], "manifests": [manifest]},
                ],
            },
        }
    )
    plan = place(app, kb.inventory(), explain=False)
    assert [e["cluster"] for e in plan.services["web"]] == ["edge-honest"]


def test_the_bounds_are_documented_numbers():
    assert trust.SKEW_SECONDS == 60.0 and trust.CAPACITY_GROWTH == 4.0
    assert trust.max_seq(1_800_000_000.0) == 1_800_000_060_000_000
