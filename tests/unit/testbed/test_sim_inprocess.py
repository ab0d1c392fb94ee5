"""The simulation controllers against a real Store, in process (no server, fast)."""

from __future__ import annotations

import pytest
from qonnect_testbed.store import Store
from support.sim import run_scenario, until

pytestmark = pytest.mark.timeout(30)


def deployment(replicas: int, image: str, strategy: dict | None = None, cpu: str = "1") -> dict:
    spec = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "w"}},
        "template": {
            "metadata": {"labels": {"app": "w"}},
            "spec": {"containers": [{"name": "c", "image": image, "resources": {"requests": {"cpu": cpu}}}]},
        },
    }
    if strategy:
        spec["strategy"] = strategy
    return {"metadata": {"name": "w"}, "spec": spec}


def run(scenario) -> None:
    run_scenario(scenario, "paper", nodes=2)


def pods(store: Store) -> list[dict]:
    return store.list("pods", "default")[0]


def images(store: Store) -> list[str]:
    return sorted(p["spec"]["containers"][0]["image"] for p in pods(store))


def test_recreate_replaces_every_pod_at_once():
    async def scenario(store, sim):
        store.create("deployments", "default", deployment(3, "a:1", {"type": "Recreate"}))
        await until(lambda: store.get("deployments", "default", "w")["status"].get("readyReplicas") == 3)
        mixed = []

        def watch(event, resource, obj):
            if resource == "pods":
                mixed.append(len(set(images(store))) > 1)

        store.subscribe(watch)
        d = store.get("deployments", "default", "w")
        d["spec"]["template"]["spec"]["containers"][0]["image"] = "a:2"
        store.update("deployments", "default", d)
        await until(lambda: images(store) == ["a:2"] * 3)
        assert mixed and not any(mixed)  # old and new pods never existed together
        await until(lambda: store.get("deployments", "default", "w")["status"].get("readyReplicas") == 3)

    run(scenario)


def test_scale_down_removes_unschedulable_pods_first():
    async def scenario(store, sim):
        # nodes have 6 cpu each: 4 pods of 5 cpu -> 2 run, 2 stay Pending
        store.create("deployments", "default", deployment(4, "a:1", cpu="5"))
        await until(lambda: sum(1 for p in pods(store) if p["status"]["phase"] == "Running") == 2)
        d = store.get("deployments", "default", "w")
        d["spec"]["replicas"] = 2
        store.update("deployments", "default", d)
        await until(lambda: len(pods(store)) == 2)
        assert all(p["status"]["phase"] == "Running" for p in pods(store))
        status = store.get("deployments", "default", "w")["status"]
        assert (status["replicas"], status["readyReplicas"]) == (2, 2)
        assert "unavailableReplicas" not in status

    run(scenario)


def test_node_down_without_room_leaves_pods_pending_until_node_up():
    async def scenario(store, sim):
        store.create("deployments", "default", deployment(2, "a:1", cpu="4"))
        await until(lambda: store.get("deployments", "default", "w")["status"].get("readyReplicas") == 2)
        victim = next(p["spec"]["nodeName"] for p in pods(store))
        sim.nodes.set_down(victim)
        pending = await until(
            lambda: [
                p for p in pods(store) if p["status"]["phase"] == "Pending" and p["status"].get("conditions")
            ]
        )
        assert "Insufficient cpu" in pending[0]["status"]["conditions"][0]["message"]
        assert sim.summary()["nodes_ready"] == 1
        sim.nodes.set_up(victim)
        await until(lambda: store.get("deployments", "default", "w")["status"].get("readyReplicas") == 2)

    run(scenario)
