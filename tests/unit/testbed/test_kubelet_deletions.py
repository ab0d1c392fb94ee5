"""The real engine's simulated kubelet confirms a pod's deletion even when the API server was
away at that moment (issue 22, item 12: after an API server restart, pods of a ReplicaSet scaled
down stayed Terminating for ever, beside their replacements, and their namespace never went).

The kubelet talks to the API server through ``KubeApi``; here a stand-in for that HTTP client
refuses the first calls as a stopped API server does, then answers."""

from __future__ import annotations

import asyncio

import pytest
from qonnect_testbed import fleet
from qonnect_testbed.kube import kubelet
from qonnect_testbed.kube.api import KubeApiError

pytestmark = pytest.mark.timeout(30)


class ApiServerAway:
    """DELETE answers as an API server that is stopped for the first ``away`` calls."""

    def __init__(self, away: int, then: KubeApiError | None = None) -> None:
        self.away = away
        self.then = then
        self.deletes: list[tuple[str, dict]] = []

    async def delete(self, path: str, body: dict | None = None) -> dict:
        self.deletes.append((path, body or {}))
        if len(self.deletes) <= self.away:
            raise KubeApiError(0, "connection refused")
        if self.then is not None:
            raise self.then
        return {}


def _kubelets(api: ApiServerAway) -> kubelet.Kubelets:
    spec = fleet.expand(fleet.load("tiers"))
    cluster = next(c for c in spec.clusters if c.name == "fog-1")
    return kubelet.Kubelets(api, cluster, policy=None, version="v1.34.0")  # type: ignore[arg-type]


def _terminating_pod(node: str) -> dict:
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u-1",
            "deletionTimestamp": "2026-12-04T00:00:00Z",
        },
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": "nginx"}]},
        "status": {"phase": "Running"},
    }


def _drive(kubelets: kubelet.Kubelets, pod: dict, seconds: float) -> None:
    async def main() -> None:
        kubelets._observe(pod)
        task = kubelets._tasks[pod["metadata"]["uid"]]
        await asyncio.wait_for(task, seconds)

    asyncio.run(main())


def test_a_deletion_refused_while_the_api_server_is_down_is_confirmed_when_it_answers(monkeypatch):
    monkeypatch.setattr(kubelet, "DELETE_AFTER", 0.01)
    monkeypatch.setattr(kubelet, "DELETE_RETRY", 0.01)
    api = ApiServerAway(away=3)
    kubelets = _kubelets(api)
    worker = next(n for n in kubelets.nodes if n.endswith("worker"))
    _drive(kubelets, _terminating_pod(worker), 5)
    assert len(api.deletes) == 4  # three refused while the server was away, then confirmed
    path, body = api.deletes[-1]
    assert path == "/api/v1/namespaces/shop/pods/web-1"
    assert body["gracePeriodSeconds"] == 0 and body["preconditions"] == {"uid": "u-1"}


@pytest.mark.parametrize("code", [404, 409])
def test_a_pod_already_gone_or_replaced_ends_the_confirmation(monkeypatch, code):
    monkeypatch.setattr(kubelet, "DELETE_AFTER", 0.01)
    monkeypatch.setattr(kubelet, "DELETE_RETRY", 0.01)
    api = ApiServerAway(away=1, then=KubeApiError(code, "gone"))
    kubelets = _kubelets(api)
    worker = next(n for n in kubelets.nodes if n.endswith("worker"))
    _drive(kubelets, _terminating_pod(worker), 5)
    assert len(api.deletes) == 2
