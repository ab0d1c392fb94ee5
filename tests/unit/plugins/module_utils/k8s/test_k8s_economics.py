"""Node economics for the cluster record come from node labels read with the admin's kubeconfig
(issue 25: the KB no longer takes them from agent reports)."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.k8s.economics import node_economics
from ansible_collections.qonnect.core.plugins.module_utils.runners.cluster import decide, desired_record


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


def _params(**extra) -> dict:
    return {"state": "present", "kubeconfig": "/k", **extra}


REGISTERED = {
    "name": "edge-3",
    "tier": "edge",
    "location": "edge-3",
    "kubeconfig": "/k",
    "economics": {"price_eur_h": 2.0, "energy_kwh": 0.004},
    "node_economics": {"n1": {"price_eur_h": 2.5, "bandwidth_gbps": 1.0}},
}


def test_a_re_registration_takes_no_label_that_makes_a_node_more_favourable():
    """Issue 25: a member cluster's admin labels a node 'nearly free'; the platform admin's next
    scheduled registration run must not copy that into the registration unreviewed."""
    forged = [
        _node("n1", **{"qonnect.io/price-eur-h": "0.0001", "qonnect.io/bandwidth-gbps": "100"}),
        _node("n2", **{"qonnect.io/energy-kwh": "0.0000001"}),  # below the cluster default
    ]
    change = decide("edge-3", _params(), REGISTERED, forged)
    assert change.action == "none" and change.cluster == REGISTERED
    assert change.held == [
        "node n1: price_eur_h 2.5 -> 0.0001 from its label needs approval",
        "node n1: bandwidth_gbps 1 -> 100 from its label needs approval",
        "node n2: energy_kwh 0.004 -> 1e-07 from its label needs approval",
    ]
    approved = decide("edge-3", _params(approve_economics=True), REGISTERED, forged)
    assert approved.action == "update" and approved.held == []
    assert approved.body["node_economics"]["n1"] == {"price_eur_h": 0.0001, "bandwidth_gbps": 100.0}


def test_a_label_may_make_a_node_less_favourable_without_approval():
    dearer = [_node("n1", **{"qonnect.io/price-eur-h": "4", "qonnect.io/energy-kwh": "0.01"})]
    change = decide("edge-3", _params(), REGISTERED, dearer)
    assert change.action == "update"
    # the price and energy apply; the registered bandwidth has lost its label and is kept
    assert change.body["node_economics"] == {
        "n1": {"price_eur_h": 4.0, "bandwidth_gbps": 1.0, "energy_kwh": 0.01}
    }
    assert change.held == ["node n1: bandwidth_gbps label removed, registered 1 kept"]
    first = decide("edge-9", _params(tier="edge"), None, dearer)  # a first registration is the review
    assert (
        first.action == "register"
        and first.held == []
        and first.body["node_economics"]["n1"]["price_eur_h"] == 4.0
    )
