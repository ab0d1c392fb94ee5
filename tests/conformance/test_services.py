"""Service defaults that qonnect's address stubs depend on (issue 23): an ExternalName Service
gets no clusterIP and no IP families on a real API server, a ClusterIP Service gets both, and
a Service switched to ExternalName gives its clusterIP back."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(120)]


def service(name: str, **spec: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"port": 9080}], **spec},
    }


def test_an_external_name_service_has_no_cluster_ip(engine, ns):
    stub = service("stub", type="ExternalName", externalName="ratings.shop.svc.edge-1.qonnect.local")
    stored = engine.core().create_namespaced_service(ns, stub).to_dict()["spec"]
    assert stored["type"] == "ExternalName"
    assert stored["external_name"] == "ratings.shop.svc.edge-1.qonnect.local"
    assert stored["cluster_ip"] is None and stored["cluster_ips"] is None
    assert stored["ip_families"] is None and stored["ip_family_policy"] is None
    assert stored["internal_traffic_policy"] is None
    assert stored["session_affinity"] == "None"
    assert stored["ports"][0]["protocol"] == "TCP" and stored["ports"][0]["target_port"] == 9080
    again = engine.core().read_namespaced_service("stub", ns).to_dict()["spec"]
    assert again["cluster_ip"] is None


def test_a_cluster_ip_service_gets_an_address_and_families(engine, ns):
    stored = engine.core().create_namespaced_service(ns, service("real", selector={"app": "x"})).spec
    assert stored.type == "ClusterIP" and stored.cluster_ip and stored.cluster_ips == [stored.cluster_ip]
    assert stored.ip_families == ["IPv4"] and stored.ip_family_policy == "SingleStack"
    assert stored.internal_traffic_policy == "Cluster"


def test_switching_to_external_name_releases_the_cluster_ip(engine, ns):
    core = engine.core()
    core.create_namespaced_service(ns, service("flip", selector={"app": "x"}))
    patch = {"spec": {"type": "ExternalName", "externalName": "flip.example", "selector": None}}
    stored = core.patch_namespaced_service("flip", ns, patch).to_dict()["spec"]
    assert stored["type"] == "ExternalName" and stored["external_name"] == "flip.example"
    assert stored["cluster_ip"] is None and stored["cluster_ips"] is None
    assert stored["ip_families"] is None and stored["ip_family_policy"] is None
