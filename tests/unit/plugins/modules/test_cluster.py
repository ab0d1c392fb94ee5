"""qonnect.core.cluster and cluster_info against an in-memory KB."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.modules import cluster, cluster_info


def test_register_update_idempotent_remove(run_module, kb):
    args = {"name": "edge-1", "tier": "edge", "kubeconfig": "/k/edge-1.yaml", "labels": {"region": "eu"}}
    out = run_module(cluster, args, diff=True)
    assert out["changed"] and out["cluster"]["location"] == "edge-1"
    assert out["diff"]["after"]["tier"] == "edge"
    assert run_module(cluster, args)["changed"] is False
    out = run_module(cluster, dict(args, labels={"region": "us"}))
    assert out["changed"] and kb.clusters["edge-1"]["labels"] == {"region": "us"}
    assert run_module(cluster, {"name": "edge-1", "state": "absent"})["changed"]
    assert "edge-1" not in kb.clusters
    assert run_module(cluster, {"name": "edge-1", "state": "absent"})["changed"] is False


def test_check_mode_writes_nothing(run_module, kb):
    out = run_module(cluster, {"name": "fog-1", "tier": "fog"}, check_mode=True)
    assert out["changed"] and kb.writes == 0 and not kb.clusters


def test_new_cluster_needs_a_tier(run_module):
    out = run_module(cluster, {"name": "x"})
    assert out["failed"] and out["msg"].startswith("tier: required")


def test_bad_choice_names_the_field(run_module):
    out = run_module(cluster, {"name": "x", "tier": "cloude"})
    assert out["failed"] and "tier" in out["msg"] and "cloude" in out["msg"]


def test_gather_nodes_needs_a_kubeconfig(run_module):
    out = run_module(cluster, {"name": "x", "tier": "edge", "gather_nodes": True})
    assert out["failed"] and out["msg"].startswith("kubeconfig: required when gather_nodes is true")
    assert "k8s_host" in out["msg"]


def test_token_is_not_logged(run_module):
    out = run_module(cluster, {"name": "x", "tier": "edge", "kb_token": "s3cr3t-token"})
    assert "s3cr3t-token" not in str(out)


def test_cluster_info_filters(run_module, kb):
    kb.inventory_doc = {
        "clusters": [
            {"name": "a", "tier": "edge", "healthy": True, "nodes": []},
            {"name": "b", "tier": "edge", "healthy": False, "nodes": []},
            {"name": "c", "tier": "fog", "healthy": True, "nodes": []},
        ],
        "latency_ms": {"a": {"c": 3.0}},
        "placements": {"shop": {"front": [{"cluster": "a", "replicas": 1}]}},
    }
    out = run_module(cluster_info, {"tier": "edge", "healthy_only": True})
    assert [c["name"] for c in out["clusters"]] == ["a"]
    assert out["placements"]["shop"]["front"][0]["cluster"] == "a"
    assert [c["name"] for c in run_module(cluster_info, {"name": ["b", "c"]})["clusters"]] == ["b", "c"]
    assert out["changed"] is False


def test_label_economics_that_need_approval_are_warned_and_returned(run_module, kb, monkeypatch):
    """Issue 25: a re-registration with gather_nodes takes no label that makes a node cheaper."""
    from ansible_collections.qonnect.core.plugins.module_utils.runners import cluster as runner

    kb.register_cluster(
        {"name": "edge-3", "tier": "edge", "kubeconfig": "/k", "node_economics": {"n1": {"price_eur_h": 2.5}}}
    )
    labels = {"qonnect.io/price-eur-h": "0.0001"}
    from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule

    warned: list[str] = []
    monkeypatch.setattr(QonnectModule, "warn", lambda self, text: warned.append(text))
    monkeypatch.setattr(runner, "get_client", lambda *args: None)  # the nodes as the cluster shows them
    monkeypatch.setattr(
        runner, "node_facts", lambda client: [{"name": "n1", "workloads": True, "labels": labels}]
    )
    out = run_module(cluster, {"name": "edge-3", "kubeconfig": "/k", "gather_nodes": True})
    assert out["changed"] is False and out["economics_held"] == [
        "node n1: price_eur_h 2.5 -> 0.0001 from its label needs approval"
    ]
    assert len(warned) == 1 and "cluster edge-3: 1 node economics change(s)" in warned[0]
    assert "approve_economics=true takes them" in warned[0]
    assert kb.get_cluster("edge-3")["node_economics"]["n1"]["price_eur_h"] == 2.5


def test_a_missing_kubeconfig_is_named_once_per_cluster(run_module, tmp_path):
    """Issue 34.8: not "edge-9: edge-9: ... Invalid kube-config file. No configuration found."."""
    missing = str(tmp_path / "missing.yaml")
    many = run_module(
        cluster,
        {"clusters": [{"name": "edge-9", "tier": "edge", "kubeconfig": missing}], "gather_nodes": True},
    )
    assert many["failed"] and many["errors"] == {
        "edge-9": f"kubeconfig: {missing}: no such file on this host (gather_nodes reads it here)"
    }
    assert "edge-9: edge-9" not in many["msg"] and many["msg"].startswith("1 of 1 cluster(s) failed")
    one = run_module(cluster, {"name": "edge-9", "tier": "edge", "kubeconfig": missing, "gather_nodes": True})
    assert (
        one["failed"]
        and one["msg"] == f"kubeconfig: {missing}: no such file on this host (gather_nodes reads it here)"
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    many = run_module(
        cluster,
        {"clusters": [{"name": "edge-9", "tier": "edge", "kubeconfig": str(broken)}], "gather_nodes": True},
    )
    assert many["errors"]["edge-9"].startswith("cannot load kubeconfig"), many["errors"]
