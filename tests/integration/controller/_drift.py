"""The federation of the restore-drift tests (issue 22.5), on either engine: a KB, three
clusters with their agents, two applications deployed with the user's playbook (``heal``, and
``watch`` labelled to only report drift) and one controller replica."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from _controller_stack import Stack, wait_for
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.keys import OWNER_ANNOTATION, SELF_HEAL_LABEL
from qonnect.controller import selfheal

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


def federation(root: Path, engine: str) -> Stack:
    """Two applications deployed (one self-healing, one only reporting) and a leader."""
    stack = Stack(root)
    try:
        stack.start_kb()
        stack.start_testbed(3, engine=engine)
        stack.start_agents(1.0)
        for name, labels in (("heal", {}), ("watch", {SELF_HEAL_LABEL: "false"})):
            path = root / f"{name}.yml"
            path.write_text(yaml.safe_dump(spec(name, labels)))
            stack.deploy(path)
        stack.start_replicas(1, OPTIONS)
        stack.wait_leader(timeout=30)
    except BaseException:
        stack.close()
        raise
    return stack


@contextlib.contextmanager
def running(root: Path, engine: str) -> Iterator[Stack]:
    """The federation, closed afterwards whatever happens."""
    stack = federation(root, engine)
    try:
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


def deleted_and_restored(stack: Stack) -> float:
    """Delete heal's web Deployment as ``kubectl delete`` does; the seconds until it is back."""
    cluster, client = client_of(stack, "heal", "web")
    uid = client.get("apps/v1", "Deployment", "web", "heal")["metadata"]["uid"]
    after = last_event_id(stack)
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
        lambda: events_after(stack, "heal", after, selfheal.RESTORED), 10, 0.2, "the restored event"
    )
    assert len(restored) == 1, [e["message"] for e in restored]
    event = restored[0]
    assert event["cluster"] == cluster and event["reason"] == "missing"
    assert "Deployment heal/web" in event["message"] and "service web" in event["message"]
    return took
