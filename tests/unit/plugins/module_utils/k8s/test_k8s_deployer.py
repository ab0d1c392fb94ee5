"""Deployer: phases, cross-cluster addresses, make-before-break, partial failure, removal."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from support.shop_cases import PLAN_A, PLAN_B, SERVICES, deployer


def test_first_deploy_places_services_and_address_stubs(fleet):
    clusters = fleet[0]
    out = deployer(clusters, PLAN_A).run()
    assert not out["failed"] and out["changed"]
    c1, c2, c3 = clusters["c1"], clusters["c2"], clusters["c3"]
    assert c1.get("apps/v1", "Deployment", "front-v1", "shop")["spec"]["replicas"] == 2
    assert c1.get("apps/v1", "Deployment", "back-v1", "shop") is None
    assert c1.get("v1", "Service", "back", "shop")["spec"] == {
        "type": "ExternalName",
        "externalName": "back.shop.svc.c2.example",
    }
    assert c2.get("v1", "Service", "front", "shop")["spec"]["externalName"] == "front.shop.svc.c1.example"
    assert c2.get("apps/v1", "Deployment", "back-v1", "shop")["spec"]["replicas"] == 1
    assert c3.get("v1", "Namespace", "shop") is None  # not part of the application
    assert set(out["clusters"]) == {"c1", "c2"}


def test_second_run_changes_nothing(fleet):
    clusters, log = fleet
    deployer(clusters, PLAN_A).run()
    writes = len(log)
    out = deployer(clusters, PLAN_A, previous={"c1", "c2"}).run()
    assert out["changed"] is False and not out["failed"]
    assert len(log) == writes
    assert out["diff"] == []


def test_migration_is_make_before_break(fleet):
    clusters, log = fleet
    deployer(clusters, PLAN_A).run()
    start = len(log)
    out = deployer(clusters, PLAN_B, previous={"c1", "c2"}).run()
    assert not out["failed"], out["message"]
    ops = log[start:]
    new_ready = ops.index(("c3", "apply", "Deployment", "back-v1"))
    old_gone = ops.index(("c2", "delete", "Deployment", "back-v1"))
    switch = ops.index(("c1", "apply", "Service", "back"))  # the stub re-pointed to c3
    assert new_ready < switch < old_gone
    assert (
        clusters["c1"].get("v1", "Service", "back", "shop")["spec"]["externalName"]
        == "back.shop.svc.c3.example"
    )
    assert clusters["c2"].get("v1", "Namespace", "shop") is None  # left the plan entirely
    assert out["clusters"]["c2"]["in_plan"] is False


def test_unready_new_placement_keeps_the_old_one(fleet):
    clusters, _log = fleet
    deployer(clusters, PLAN_A).run()
    clusters["c3"].ready = False
    out = deployer(clusters, PLAN_B, previous={"c1", "c2"}, wait_timeout=0.3).run()
    assert out["failed"]
    assert out["clusters"]["c3"]["status"] == "failed"
    assert "Deployment/back-v1" in out["clusters"]["c3"]["not_ready"][0]
    assert out["clusters"]["c2"]["status"] == "skipped"
    assert clusters["c2"].get("apps/v1", "Deployment", "back-v1", "shop") is not None
    assert (
        clusters["c1"].get("v1", "Service", "back", "shop")["spec"]["externalName"]
        == "back.shop.svc.c2.example"
    )
    assert "previous placement keeps serving" in out["message"]


def test_unreachable_old_cluster_is_a_warning(fleet):
    clusters = fleet[0]
    deployer(clusters, PLAN_A).run()
    clusters["c2"].down = True
    out = deployer(clusters, PLAN_B, previous={"c1", "c2"}).run()
    assert not out["failed"]
    assert out["clusters"]["c2"]["status"] == "unreachable"
    assert out["warnings"] and out["warnings"][0].startswith("c2: unreachable")
    assert clusters["c3"].get("apps/v1", "Deployment", "back-v1", "shop") is not None


def test_check_mode_touches_nothing(fleet):
    clusters, log = fleet
    out = deployer(clusters, PLAN_A, check_mode=True).run()
    assert out["changed"] and not log
    headers = {d["after_header"] for d in out["diff"]}
    assert "c1: Deployment shop/front-v1" in headers  # one diff per object (issue 14.6)
    assert "would deploy to" in out["message"]
    deployer(clusters, PLAN_A).run()
    writes = len(log)
    out = deployer(clusters, PLAN_B, previous={"c1", "c2"}, check_mode=True).run()
    assert out["changed"] and len(log) == writes
    actions = {o["key"]: o["action"] for o in out["clusters"]["c2"]["objects"]}
    assert actions["apps/v1/Deployment/shop/back-v1"] == "delete"


def test_remove_deletes_everything_it_applied(fleet):
    clusters = fleet[0]
    deployer(clusters, PLAN_A).run()
    clusters["c1"].apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foreign", "namespace": "shop"}}
    )
    d = Deployer(
        "shop",
        "shop",
        SERVICES,
        {},
        {n: Target(n, "/k") for n in clusters},
        previous={"c1", "c2"},
        client_factory=lambda t: clusters[t.name],
    )
    out = d.remove()
    assert out["changed"] and not out["failed"]
    assert clusters["c2"].get("v1", "Namespace", "shop") is None
    # issue 23: a foreign object keeps its namespace (and itself); only shop's objects went
    assert clusters["c1"].get("v1", "Namespace", "shop") is not None
    assert clusters["c1"].get("v1", "ConfigMap", "foreign", "shop") is not None
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is None


def test_plan_naming_unknown_service_is_rejected(fleet):
    clusters = fleet[0]
    try:
        deployer(clusters, {"nope": [{"cluster": "c1"}]})
    except ValueError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("expected ValueError")
