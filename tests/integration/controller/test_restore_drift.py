"""Issue 22.5: what drifted on a live cluster comes back (the leader's self-heal).

A real federation on the emulator (testbed, KB, one agent per cluster, the user's deploy
playbook, one controller replica): a Deployment deleted as ``kubectl delete`` would is applied
again within 30 s, one edited out of band gets its applied fields back, each with a
``controller.restored`` event; an application labelled ``qonnect.io/self-heal: "false"`` only
gets a ``controller.drifted`` event and stays as it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from _controller_stack import Stack, wait_for
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.keys import OWNER_ANNOTATION
from qonnect.controller import selfheal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

OPTIONS = ["--agent-interval", "1"]


def spec(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """A two-service application with inline manifests (nothing to read from disk)."""

    def service(svc: str) -> dict[str, Any]:
        def match() -> dict[str, str]:
            return {"app": svc}

        return {
            "name": svc,
            "tier": "any",
            "manifests": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": svc},
                    "spec": {"selector": match(), "ports": [{"port": 80, "targetPort": 8080}]},
                },
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": svc},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": match()},
                        "template": {
                            "metadata": {"labels": match()},
                            "spec": {
                                "containers": [
                                    {
                                        "name": svc,
                                        "image": "registry.example/web:1.0",
                                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                    }
                                ]
                            },
                        },
                    },
                },
            ],
        }

    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": name, "labels": labels},
        "spec": {"objective": {"energy": 1.0}, "services": [service("web"), service("db")]},
    }


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two applications deployed (one self-healing, one only reporting) and a leader."""
    root = tmp_path_factory.mktemp("drift")
    stack = Stack(root)
    try:
        stack.start_kb()
        stack.start_testbed(3)
        stack.start_agents(1.0)
        for name, labels in (("heal", {}), ("watch", {selfheal.SELF_HEAL_LABEL: "false"})):
            path = root / f"{name}.yml"
            path.write_text(yaml.safe_dump(spec(name, labels)))
            stack.deploy(path)
        stack.start_replicas(1, OPTIONS)
        stack.wait_leader(timeout=30)
        yield stack
    finally:
        stack.close()


def client_of(stack: Stack, app: str, service: str) -> tuple[str, Any]:
    """The cluster that runs the service, and an API client for it (as kubectl would use)."""
    cluster = stack.placement(app)[service][0]["cluster"]
    record = next(c for c in stack.federation["clusters"] if c["name"] == cluster)
    return cluster, get_client(cluster, record["kubeconfig"], record.get("context"))


def events_after(stack: Stack, app: str, after: int, etype: str) -> list[dict[str, Any]]:
    """Events of a type newer than ``after`` that the KB says a controller token wrote."""
    return [
        e for e in stack.events(app) if e["id"] > after and e["type"] == etype and e["role"] == "controller"
    ]


def last_event_id(stack: Stack) -> int:
    return max([e["id"] for e in stack.events()] or [0])


def test_deleted_deployment_is_back_within_30s(fed: Stack):
    cluster, client = client_of(fed, "heal", "web")
    uid = client.get("apps/v1", "Deployment", "web", "heal")["metadata"]["uid"]
    after = last_event_id(fed)
    assert client.delete("apps/v1", "Deployment", "web", "heal")
    deleted = time.monotonic()

    def recreated() -> dict[str, Any] | None:
        live = client.get("apps/v1", "Deployment", "web", "heal")
        return live if live and live["metadata"]["uid"] != uid else None

    back = wait_for(recreated, 30, 0.2, "web to be restored")
    took = time.monotonic() - deleted
    assert took < 30.0
    assert back["metadata"]["annotations"][OWNER_ANNOTATION] == "heal/heal"
    restored = wait_for(
        lambda: events_after(fed, "heal", after, selfheal.RESTORED), 10, 0.2, "the restored event"
    )
    assert len(restored) == 1, [e["message"] for e in restored]
    event = restored[0]
    assert event["cluster"] == cluster and event["reason"] == "missing"
    assert "Deployment heal/web" in event["message"] and "service web" in event["message"]
    print(f"deleted Deployment restored after {took:.1f}s")


def test_an_out_of_band_edit_is_undone(fed: Stack):
    cluster, client = client_of(fed, "heal", "db")
    after = last_event_id(fed)
    res = client.resource("apps/v1", "Deployment")
    patch = {
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "db", "image": "evil:6.6"}]}}}
    }
    client._dyn().patch(
        res, body=patch, name="db", namespace="heal", content_type="application/strategic-merge-patch+json"
    )
    edited = client.get("apps/v1", "Deployment", "db", "heal")
    assert edited["spec"]["replicas"] == 3

    def healed() -> bool:
        live = client.get("apps/v1", "Deployment", "db", "heal")
        containers = live["spec"]["template"]["spec"]["containers"]
        return live["spec"]["replicas"] == 1 and containers[0]["image"] == "registry.example/web:1.0"

    wait_for(healed, 30, 0.2, "the edit to be undone")
    restored = wait_for(
        lambda: events_after(fed, "heal", after, selfheal.RESTORED), 10, 0.2, "the restored event"
    )
    assert [e["reason"] for e in restored] == ["modified"]
    assert restored[0]["cluster"] == cluster and "spec.replicas" in restored[0]["message"]


def test_an_application_that_only_reports_drift_is_left_alone(fed: Stack):
    cluster, client = client_of(fed, "watch", "web")
    after = last_event_id(fed)
    assert client.delete("apps/v1", "Deployment", "web", "watch")
    drifted = wait_for(
        lambda: events_after(fed, "watch", after, selfheal.DRIFTED), 30, 0.2, "the drift event"
    )
    assert drifted[0]["cluster"] == cluster and "not restored" in drifted[0]["message"]
    time.sleep(selfheal.INTERVAL + 2)  # a further pass neither restores nor repeats the event
    assert client.get("apps/v1", "Deployment", "web", "watch") is None
    assert len(events_after(fed, "watch", after, selfheal.DRIFTED)) == 1
    assert not events_after(fed, "watch", after, selfheal.RESTORED)
