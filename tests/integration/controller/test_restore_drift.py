"""Issue 22.5: what drifted on a live cluster comes back (the leader's self-heal).

A real federation on the emulator (testbed, KB, one agent per cluster, the user's deploy
playbook, one controller replica): a Deployment deleted as ``kubectl delete`` would is applied
again within 30 s, one edited out of band gets its applied fields back, each with a
``controller.restored`` event; an application labelled ``qonnect.io/self-heal: "false"`` only
gets a ``controller.drifted`` event and stays as it is. test_restore_drift_kube.py deletes a
Deployment on real API servers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from _controller_stack import Stack, wait_for
from _drift import client_of, deleted_and_restored, events_after, last_event_id, running
from qonnect.controller import selfheal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running(tmp_path_factory.mktemp("drift"), "emulator") as stack:
        yield stack


def test_deleted_deployment_is_back_within_30s(fed: Stack):
    print(f"deleted Deployment restored after {deleted_and_restored(fed):.1f}s")


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
