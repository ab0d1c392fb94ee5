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
