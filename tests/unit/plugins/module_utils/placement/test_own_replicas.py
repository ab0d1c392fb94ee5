"""An application's own running replicas are room for it, not a reason to leave (issue 22).

Found on the controller's KB-outage test: twin fog clusters without node prices, bookinfo
deployed on fog-1; the reports then counted bookinfo's own requests on fog-1, the performance
criterion (free capacity, min-max normalised) gave fog-1 0 and the empty fog-2 1, and every
drift check found "objective 0.8658 -> 0.9283" - a move away from itself, then back.
"""

from __future__ import annotations

import copy

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement import place, place_many
from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import objective
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application

CPU = 2.0  # of a 6-CPU node: a third of it, far beyond any hysteresis


def _node(name: str, requested_cpu: float) -> dict:
    return {
        "name": name,
        "ready": True,
        "allocatable": {"cpu": 6.0, "memory": 8e9, "ephemeral_storage": 1e11},
        "requested": {"cpu": requested_cpu, "memory": 0, "ephemeral_storage": 0},
    }


def _twins(used_on_a: float) -> dict:
    return {
        "clusters": [
            {"name": n, "tier": "fog", "location": n, "healthy": True, "nodes": [_node(f"{n}-w", u)]}
            for n, u in (("fog-a", used_on_a), ("fog-b", 0.0))
        ],
        "latency_ms": {},
        "placements": {},
    }


def _app(name: str = "shop") -> object:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(CPU)}}}]},
    }
    return load_application(
        {
            "apiVersion": "qonnect.io/v1",
            "kind": "Application",
            "metadata": {"name": name},
            "spec": {
                "objective": {"performance": 1.0},
                "services": [{"name": "s", "tier": "fog", "manifests": [pod]}],
            },
        }
    )


def _running_on_a(app_name: str = "shop") -> dict:
    """The inventory once the agents report the application running on fog-a."""
    inventory = _twins(CPU)
    inventory["placements"] = {app_name: {"s": [{"cluster": "fog-a", "nodes": ["fog-a-w"], "replicas": 1}]}}
    return inventory


@pytest.mark.parametrize("scorer", ["weighted", "borda", "optimal"])
def test_a_replan_keeps_an_application_where_only_its_own_pods_use_the_room(scorer):
    app = _app()
    assert place(app, _twins(0.0), scorer=scorer).clusters("s") in (["fog-a"], ["fog-b"])
    plan = place(app, _running_on_a(), scorer=scorer, hysteresis=0.1)
    assert plan.clusters("s") == ["fog-a"], f"{scorer} moved the application away from its own pods"


def test_the_current_placement_is_judged_as_the_plan_is():
    """The drift check compares objective(current) with plan.objective: one scale for both."""
    app, inventory = _app(), _running_on_a()
    plan = place(app, inventory, hysteresis=0.0)
    now = objective(app, inventory, {"services": inventory["placements"]["shop"]})
    assert now == pytest.approx(plan.objective)


def test_another_applications_pods_still_count_against_a_cluster():
    """Only the application's own replicas are released: a neighbour's use is real load."""
    app, inventory = _app(), _running_on_a("neighbour")
    assert place(app, inventory).clusters("s") == ["fog-b"]


def test_a_batch_judges_each_application_without_its_own_pods():
    app, other = _app(), _app("fresh")
    inventory = _running_on_a()
    result = place_many([app, other], copy.deepcopy(inventory))
    assert result.plans["shop"].clusters("s") == place(app, inventory).clusters("s") == ["fog-a"]
    # shop stays on fog-a (4 CPU free), so the fresh application finds fog-b (6 free) best
    assert result.plans["fresh"].clusters("s") == ["fog-b"]
