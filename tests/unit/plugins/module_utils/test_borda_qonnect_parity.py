"""Borda as QONNECT ranks it, on QONNECT's own evaluation numbers (issue 13.6)."""

from __future__ import annotations

import copy
import json

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement import place
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application
from support.qonnect_evaluation import ROOT, inventory_from_csv

EXAMPLE = ROOT / "examples" / "inventories" / "qonnect-evaluation.json"
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}


def app(tier: str = "any", **qos) -> object:
    return load_application(
        {
            "apiVersion": "swarmchestrate.tu-berlin.de/v1",
            "kind": "Application",
            "metadata": {"name": "demo", "qos": qos or {"energy": 1.0}},
            "spec": {f"{tier}_svc": [CONFIGMAP]},
        }
    )


def test_example_inventory_is_qonnects_nodes_csv_unrounded():
    assert json.loads(EXAMPLE.read_text()) == inventory_from_csv()
    nodes = {n["name"]: n for c in inventory_from_csv()["clusters"] for n in c["nodes"]}
    assert nodes["cloud-energy-worker"]["allocatable"]["memory"] == 7160844288
    assert nodes["cloud-performance-worker"]["allocatable"]["ephemeral_storage"] == 6261530624
    assert nodes["fog-cost-worker"]["allocatable"]["ephemeral_storage"] == 4114046976


@pytest.mark.parametrize(
    ("qos", "profile"),
    [({"energy": 1.0}, "energy"), ({"pricing": 1.0}, "cost"), ({"performance": 1.0}, "performance")],
)
def test_borda_picks_qonnects_profile_per_tier(qos, profile):
    inventory = json.loads(EXAMPLE.read_text())
    for tier in ("cloud", "fog", "edge"):
        plan = place(app(tier, **qos), inventory, scorer="borda").to_dict()
        assert plan["services"][f"{tier}-svc"][0]["cluster"] == f"{tier}-{profile}"


def test_explanation_orders_ties_by_total_score_not_name():
    """Two clusters whose kept nodes score the same: QONNECT's second key (the total score of
    all their nodes) ranks b-cl first, and the explanation lists them in that order."""
    inventory = json.loads(EXAMPLE.read_text())
    template = inventory["clusters"][0]
    clusters = []
    for name, energies in (("a-cl", (0.001, 0.009)), ("b-cl", (0.001, 0.005))):
        cluster = copy.deepcopy(template)
        cluster.update(name=name, location=name, tier="fog", labels={"qonnect.io/tier": "fog"})
        node = cluster["nodes"][0]
        cluster["nodes"] = []
        for i, energy in enumerate(energies):
            n = copy.deepcopy(node)
            n.update(name=f"{name}-{i}", energy_kwh=energy)
            n["labels"] = {"kubernetes.io/hostname": f"{name}-{i}", "qonnect.io/tier": "fog"}
            cluster["nodes"].append(n)
        clusters.append(cluster)
    plan = place(
        app("fog"), {"clusters": clusters, "latency_ms": {}, "placements": {}}, scorer="borda"
    ).to_dict()
    rows = plan["explanation"]["fog-svc"]
    assert [r["cluster"] for r in rows] == ["b-cl", "a-cl"]
    assert rows[0]["total"] == rows[1]["total"]  # the kept nodes tie ...
    assert rows[0]["total_all_nodes"] > rows[1]["total_all_nodes"]  # ... the totals decide
    assert plan["services"]["fog-svc"][0]["cluster"] == "b-cl"
