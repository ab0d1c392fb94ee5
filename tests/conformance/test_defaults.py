"""What the API server fills in: canonical quantities, requests from limits, pod defaults."""

from __future__ import annotations

import pytest
from conformance_engines import deployment, pod, status_of
from kubernetes import client
from support import wait_for

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(120)]

# given -> as the server stores it (resource.Quantity's canonical form)
CANONICAL = {
    "0.5": "500m",
    "2000m": "2",
    "1000": "1k",
    "1024": "1024",
    "1e3": "1e3",
    "100m": "100m",
    "1.5Gi": "1536Mi",
    "2048Mi": "2Gi",
    "0.1Gi": "107374182400m",
    "1k": "1k",
    "7.16G": "7160M",
}


def test_quantities_are_stored_in_canonical_form(engine, ns):
    core = engine.core()
    givens = list(CANONICAL)
    containers = [
        {
            "name": f"c{i}",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": given}, "limits": {"cpu": given}},
        }
        for i, given in enumerate(givens)
    ]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "q"},
        "spec": {"containers": containers, "nodeSelector": {"qonnect.io/none": "x"}},
    }
    stored = core.create_namespaced_pod(ns, body)
    got = {
        given: c.resources.requests["cpu"] for given, c in zip(givens, stored.spec.containers, strict=True)
    }
    assert got == CANONICAL


def test_an_invalid_quantity_is_400(engine, ns):
    with pytest.raises(client.ApiException) as err:
        engine.core().create_namespaced_pod(ns, pod("bad", resources={"requests": {"cpu": "lots"}}))
    assert err.value.status == 400 and status_of(err.value)["reason"] == "BadRequest"
    assert "quantities must match the regular expression" in status_of(err.value)["message"]


def test_pod_requests_default_from_limits(engine, ns):
    stored = engine.core().create_namespaced_pod(
        ns, pod("lim", resources={"limits": {"cpu": "250m", "memory": "64Mi"}})
    )
    assert stored.spec.containers[0].resources.requests == {"cpu": "250m", "memory": "64Mi"}
    assert stored.status.qos_class == "Guaranteed"


def test_pod_templates_are_not_defaulted_but_their_pods_are(engine, ns):
    body = deployment("lim", replicas=1)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "250m"}}
    stored = engine.apps().create_namespaced_deployment(ns, body)
    assert stored.spec.template.spec.containers[0].resources.requests is None
    pods = wait_for(
        lambda: engine.core().list_namespaced_pod(ns, label_selector="app=lim").items,
        what="the Deployment's pod",
    )
    assert pods[0].spec.containers[0].resources.requests == {"cpu": "250m"}
    assert pods[0].status.qos_class == "Burstable"


def test_pod_defaults(engine, ns):
    stored = engine.core().create_namespaced_pod(ns, pod("d"))
    spec = stored.spec
    assert (spec.restart_policy, spec.dns_policy, spec.scheduler_name) == (
        "Always",
        "ClusterFirst",
        "default-scheduler",
    )
    assert spec.service_account_name == "default" and spec.termination_grace_period_seconds == 30
    assert spec.enable_service_links is True and spec.priority == 0
    assert spec.containers[0].image_pull_policy == "IfNotPresent"
    assert stored.status.qos_class == "BestEffort" and stored.status.phase == "Pending"
    tolerations = {(t.key, t.effect, t.operator): t.toleration_seconds for t in spec.tolerations or []}
    assert set(tolerations) == {
        ("node.kubernetes.io/not-ready", "NoExecute", "Exists"),
        ("node.kubernetes.io/unreachable", "NoExecute", "Exists"),
    }
    assert all(isinstance(s, int) for s in tolerations.values())
    if engine.is_emulator:  # --default-*-toleration-seconds default to 0: eviction at once
        assert set(tolerations.values()) == {0}
    else:
        assert set(tolerations.values()) == {300}  # kube-apiserver's DefaultTolerationSeconds
