"""prepare / apply_one: labels, pinning, replicas, hash-based no-op detection."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils import keys
from ansible_collections.qonnect.core.plugins.module_utils.k8s import apply

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "ratings-v1", "labels": {"app": "ratings"}},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "ratings"}},
        "template": {
            "metadata": {"labels": {"app": "ratings"}},
            "spec": {"containers": [{"name": "ratings", "image": "x"}]},
        },
    },
}


def test_prepare_labels_namespace_replicas_and_pinning():
    obj = apply.prepare(DEPLOYMENT, "bookinfo", "ratings", "bi", replicas=3, nodes=["n2", "n1"])
    meta = obj["metadata"]
    assert meta["namespace"] == "bi"
    assert meta["labels"] == {
        "app": "ratings",
        "app.kubernetes.io/managed-by": "qonnect",
        "qonnect.io/application": "bookinfo",
        "qonnect.io/service": "ratings",
    }
    assert obj["spec"]["template"]["metadata"]["labels"]["qonnect.io/service"] == "ratings"
    assert obj["spec"]["selector"] == {"matchLabels": {"app": "ratings"}}  # selectors are immutable
    assert obj["spec"]["replicas"] == 3
    terms = obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}]}
    ]
    assert DEPLOYMENT["spec"]["replicas"] == 1  # the input is not modified


def test_pinning_is_anded_with_existing_terms():
    dep = apply.prepare(DEPLOYMENT, "a", "s", "ns", nodes=["n1"])
    dep["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"].insert(
        0, {"key": "disk", "operator": "In", "values": ["ssd"]}
    )
    again = apply.prepare(dep, "a", "s", "ns", nodes=["n3"])
    exprs = again["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert exprs == [
        {"key": "disk", "operator": "In", "values": ["ssd"]},
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n3"]},
    ]


def test_hash_changes_with_content_only():
    a = apply.prepare(DEPLOYMENT, "a", "s", "ns", replicas=1)
    b = apply.prepare(DEPLOYMENT, "a", "s", "ns", replicas=1)
    c = apply.prepare(DEPLOYMENT, "a", "s", "ns", replicas=2)
    h = keys.HASH_ANNOTATION
    assert a["metadata"]["annotations"][h] == b["metadata"]["annotations"][h]
    assert a["metadata"]["annotations"][h] != c["metadata"]["annotations"][h]


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"kind": "Service", "metadata": {"name": "x"}}, "apiVersion"),
        ({"apiVersion": "v1", "kind": "Service"}, "metadata.name"),
    ],
)
def test_prepare_rejects_incomplete_manifests(bad, field):
    with pytest.raises(ValueError, match=field):
        apply.prepare(bad, "a", "svc", "ns")


def test_contains_ignores_server_defaults_but_not_changes():
    live = {"spec": {"ports": [{"port": 80, "protocol": "TCP"}], "type": "ClusterIP"}}
    assert apply.contains(live, {"spec": {"ports": [{"port": 80}]}})
    assert not apply.contains(live, {"spec": {"ports": [{"port": 81}]}})
    assert not apply.contains(live, {"spec": {"ports": [{"port": 80}, {"port": 81}]}})
    assert apply.contains({"x": 1.0}, {"x": 1})


def test_apply_one_create_then_noop(fleet):
    clusters, log = fleet
    c = clusters["c1"]
    ns = apply.namespace_object("ns", "a")
    assert apply.apply_one(c, ns, None, False)["action"] == "create"
    desired = apply.prepare(DEPLOYMENT, "a", "s", "ns")
    first = apply.apply_one(c, desired, None, False)
    assert first["changed"] and first["action"] == "create"
    live = c.get("apps/v1", "Deployment", "ratings-v1", "ns")
    writes = len(log)
    second = apply.apply_one(c, desired, live, False)
    assert second == {"key": "apps/v1/Deployment/ns/ratings-v1", "action": "unchanged", "changed": False}
    assert len(log) == writes  # nothing was sent


def test_apply_one_check_mode_writes_nothing(fleet):
    clusters, log = fleet
    c = clusters["c1"]
    apply.apply_one(c, apply.namespace_object("ns", "a"), None, False)
    live_ns = c.get("v1", "Namespace", "ns")
    desired = apply.prepare(DEPLOYMENT, "a", "s", "ns")
    apply.apply_one(c, desired, None, False)
    live = c.get("apps/v1", "Deployment", "ratings-v1", "ns")
    changed = apply.prepare(DEPLOYMENT, "a", "s", "ns", replicas=4)
    before = len(log)
    out = apply.apply_one(c, changed, live, True)
    assert out["changed"] and out["action"] == "update"
    assert out["after"]["spec"]["replicas"] == 4 and out["before"]["spec"]["replicas"] == 1
    assert len(log) == before
    assert c.get("apps/v1", "Deployment", "ratings-v1", "ns")["spec"]["replicas"] == 1
    assert apply.apply_one(c, apply.namespace_object("ns", "a"), live_ns, True)["changed"] is False


def test_service_type_switch_replaces_object(fleet):
    clusters, log = fleet
    c = clusters["c1"]
    apply.apply_one(c, apply.namespace_object("ns", "a"), None, False)
    real = apply.prepare(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "ratings"},
            "spec": {"ports": [{"port": 9080}]},
        },
        "a",
        "ratings",
        "ns",
    )
    apply.apply_one(c, real, None, False)
    stub = apply.address_stub("ratings", "ns", "a", "ratings", "ratings.ns.svc.c2.qonnect.local")
    out = apply.apply_one(c, stub, c.get("v1", "Service", "ratings", "ns"), False)
    assert out["changed"]
    assert ("c1", "delete", "Service", "ratings") in log
    live = c.get("v1", "Service", "ratings", "ns")
    assert live["spec"] == {"type": "ExternalName", "externalName": "ratings.ns.svc.c2.qonnect.local"}
    assert live["metadata"]["labels"]["qonnect.io/role"] == "address"


def test_secret_values_never_reach_the_diff(fleet):
    clusters, _log = fleet
    c = clusters["c1"]
    apply.apply_one(c, apply.namespace_object("ns", "a"), None, False)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db"},
        "stringData": {"password": "hunter2-first"},
    }
    first = apply.apply_one(c, apply.prepare(secret, "a", "s", "ns"), None, False)
    assert "hunter2" not in str(first)
    live = c.get("v1", "Secret", "db", "ns")
    secret["stringData"]["password"] = "hunter2-second"
    second = apply.apply_one(c, apply.prepare(secret, "a", "s", "ns"), live, False)
    assert second["changed"] and "hunter2" not in str(second)
    assert c.get("v1", "Secret", "db", "ns")["stringData"]["password"] == "hunter2-second"
