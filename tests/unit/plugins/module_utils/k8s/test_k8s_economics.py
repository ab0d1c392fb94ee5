"""Node economics for the cluster record come from node labels read with the admin's kubeconfig
(issue 25: the KB no longer takes them from agent reports)."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.k8s.economics import node_economics
from ansible_collections.qonnect.core.plugins.module_utils.runners.cluster import desired_record


def _node(name: str, **labels: str) -> dict:
    return {"name": name, "workloads": True, "labels": labels}


def test_labels_become_the_registered_economics():
    nodes = [
        _node("w1", **{"qonnect.io/price-eur-h": "16.3884", "qonnect.io/energy-kwh": "0.0024042"}),
        _node("w2", **{"qonnect.io/bandwidth-gbps": "52.5", "qonnect.io/price-eur-h": "nan"}),
        _node("w3", **{"qonnect.io/price-eur-h": "-1", "qonnect.io/energy-kwh": "cheap"}),
        _node("cp"),
    ]
    assert node_economics(nodes) == {
        "w1": {"price_eur_h": 16.3884, "energy_kwh": 0.0024042},
        "w2": {"bandwidth_gbps": 52.5},  # NaN, negative and non-numbers are left out
    }


def test_gathered_nodes_register_their_economics():
    nodes = [_node("w1", **{"qonnect.io/price-eur-h": "2", "qonnect.io/tier": "edge"})]
    record = desired_record({"kubeconfig": "/k"}, nodes)
    assert record["node_economics"] == {"w1": {"price_eur_h": 2.0}} and record["tier"] == "edge"
    assert "node_economics" not in desired_record({"kubeconfig": "/k"}, [_node("w1")])
