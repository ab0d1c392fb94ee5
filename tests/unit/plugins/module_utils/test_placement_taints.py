"""Taint-aware placement: a node whose NoSchedule/NoExecute taints a service does not tolerate is
no room for it, and its pods are never pinned to it (they would stay Pending for ever)."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement import (
    InventoryError,
    PlacementError,
    place,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import Fleet
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import Inventory
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application

CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}
CP_TOLERATION = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}


def deployment(cpu: str, tolerations=None) -> dict:
    spec = {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec},
        },
    }


def app(cpu: str, tolerations=None, replicas: int = 1):
    return load_application(
        {
            "apiVersion": "qonnect.io/v1",
            "kind": "Application",
            "metadata": {"name": "shop"},
            "spec": {
                "objective": {"performance": 1.0},
                "services": [
                    {"name": "web", "replicas": replicas, "manifests": [deployment(cpu, tolerations)]}
                ],
            },
        }
    )


def node(name: str, cpu: float, taints=None, energy: float = 1.0) -> dict:
    return {
        "name": name,
        "ready": True,
        "schedulable": True,
        "allocatable": {"cpu": cpu, "memory": 64 * 2**30, "ephemeral_storage": 0},
        "requested": {"cpu": 0, "memory": 0, "ephemeral_storage": 0},
        "energy_kwh": energy,
        "price_eur_h": 1.0,
        "bandwidth_gbps": 1.0,
        "taints": taints or [],
    }


def inventory() -> dict:
    # edge-1: a big tainted control-plane node and a full worker; edge-2: a small worker.
    return {
        "clusters": [
            {
                "name": "edge-1",
                "tier": "edge",
                "nodes": [node("edge-1-cp", 32, [CONTROL_PLANE]), node("edge-1-w", 0.1)],
            },
            {"name": "edge-2", "tier": "edge", "nodes": [node("edge-2-w", 2)]},
        ]
    }


@pytest.mark.parametrize("scorer", ["weighted", "borda", "optimal"])
def test_a_tainted_control_plane_node_is_no_room(scorer):
    plan = place(app("1"), inventory(), scorer=scorer)
    assert plan.services["web"] == [{"cluster": "edge-2", "replicas": 1, "nodes": ["edge-2-w"]}]


def test_nothing_fits_anywhere_but_on_the_tainted_node_is_a_placement_error():
    with pytest.raises(PlacementError) as err:
        place(app("4"), inventory())
    assert "capacity" in str(err.value)


@pytest.mark.parametrize("scorer", ["weighted", "optimal"])
def test_a_service_that_tolerates_the_taint_may_use_the_node(scorer):
    plan = place(app("4", [CP_TOLERATION]), inventory(), scorer=scorer)
    assert plan.services["web"] == [{"cluster": "edge-1", "replicas": 1, "nodes": ["edge-1-cp"]}]


def test_the_explanation_names_the_taint_and_min_free_ignores_tainted_room():
    inv = inventory()
    inv["clusters"][0]["nodes"] = [node("edge-1-cp", 32, [CONTROL_PLANE])]
    fleet = Fleet(Inventory.from_dict(inv))
    assert fleet.node_reason[0] == "tainted node-role.kubernetes.io/control-plane:NoSchedule"
    assert fleet.node_ok.tolist() == [False, True] and fleet.has_ok_node.tolist() == [False, True]
    plan = place(app("1"), inv, explain=True)
    rows = {r["cluster"]: r for r in plan.explanation["web"]}
    assert "edge-1-cp tainted node-role.kubernetes.io/control-plane:NoSchedule" in rows["edge-1"]["reason"]


def test_prefer_no_schedule_does_not_block():
    inv = inventory()
    inv["clusters"][0]["nodes"][0]["taints"] = [{"key": "spot", "value": "", "effect": "PreferNoSchedule"}]
    assert Fleet(Inventory.from_dict(inv)).node_ok.tolist() == [True, True, True]


def test_malformed_taints_are_reported_with_their_path():
    inv = inventory()
    inv["clusters"][0]["nodes"][0]["taints"] = [{"key": "a", "effect": "Sometimes"}, {"effect": "NoSchedule"}]
    with pytest.raises(InventoryError) as err:
        Inventory.from_dict(inv)
    assert err.value.errors == [
        "clusters[0].nodes[0].taints[0].effect: 'Sometimes' is not one of NoSchedule, PreferNoSchedule, NoExecute",
        "clusters[0].nodes[0].taints[1]: expected a taint with a non-empty key",
    ]


def test_cluster_facts_count_no_room_on_tainted_nodes():
    inv = Inventory.from_dict(inventory())
    facts = {c.name: c.facts() for c in inv.clusters}
    assert facts["edge-1"]["free"]["cpu"] == 0.1 and facts["edge-1"]["allocatable"]["cpu"] == 0.1
    assert facts["edge-1"]["node_count"] == 2  # the node itself is still listed
    spec = app("100m")
    spec.services[0].filter = "free.cpu >= `1`"
    plan = place(spec, inventory(), explain=True)
    assert plan.services["web"][0]["cluster"] == "edge-2"
    rows = {r["cluster"]: r for r in plan.explanation["web"]}
    assert rows["edge-1"]["reason"] == "filter 'free.cpu >= `1`' is false for this cluster"
