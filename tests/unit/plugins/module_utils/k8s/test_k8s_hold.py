"""A plan's held cluster (hedged failover, issue 36): a standby copy is made elsewhere while
the suspect cluster is neither touched nor removed, callers point at the standby, and the two
ways out - discard (the cluster came back) and promote (its failure confirmed) - converge."""

from __future__ import annotations

from support.shop_cases import PLAN_A, deployer

HEDGED = {
    "front": [{"cluster": "c1", "replicas": 2, "nodes": ["c1-n"]}],
    "back": [{"cluster": "c2", "replicas": 1}, {"cluster": "c3", "replicas": 1, "role": "standby"}],
}
PROMOTED = {"front": PLAN_A["front"], "back": [{"cluster": "c3", "replicas": 1}]}


def stub(cluster, name="back"):
    return cluster.get("v1", "Service", name, "shop")["spec"]


def test_a_hedge_makes_the_standby_and_never_touches_the_held_cluster(fleet):
    clusters, log = fleet
    deployer(clusters, PLAN_A).run()
    clusters["c2"].down = True  # suspect: its API does not answer
    start = len(log)
    out = deployer(clusters, HEDGED, previous={"c1", "c2"}, hold={"c2"}).run()
    assert not out["failed"], out["message"]
    assert "c2 held: not touched" in out["message"]
    assert [op for op in log[start:] if op[0] == "c2"] == []  # not even a read that failed
    assert "c2" not in out["clusters"]
    assert clusters["c3"].get("apps/v1", "Deployment", "back-v1", "shop")["spec"]["replicas"] == 1
    # callers prefer the live standby over the held cluster's instance, which stays listed
    spec = stub(clusters["c1"])
    assert spec["externalName"] == "back.shop.svc.c3.example"
    annotations = clusters["c1"].get("v1", "Service", "back", "shop")["metadata"]["annotations"]
    assert annotations["qonnect.io/addresses"].split(",")[-1].strip() == "back.shop.svc.c2.example"
    clusters["c2"].down = False
    assert clusters["c2"].get("apps/v1", "Deployment", "back-v1", "shop") is not None  # kept


def test_a_discarded_hedge_removes_the_standby_and_points_callers_back(fleet):
    clusters = fleet[0]
    deployer(clusters, PLAN_A).run()
    clusters["c2"].down = True
    deployer(clusters, HEDGED, previous={"c1", "c2"}, hold={"c2"}).run()
    clusters["c2"].down = False  # back within its grace
    out = deployer(clusters, PLAN_A, previous={"c1", "c2", "c3"}).run()
    assert not out["failed"], out["message"]
    assert clusters["c3"].get("apps/v1", "Deployment", "back-v1", "shop") is None
    assert clusters["c3"].get("v1", "Namespace", "shop") is None
    assert stub(clusters["c1"])["externalName"] == "back.shop.svc.c2.example"
    assert clusters["c2"].get("apps/v1", "Deployment", "back-v1", "shop") is not None


def test_a_confirmed_failure_keeps_the_standby_as_the_placement(fleet):
    clusters = fleet[0]
    deployer(clusters, PLAN_A).run()
    clusters["c2"].down = True
    deployer(clusters, HEDGED, previous={"c1", "c2"}, hold={"c2"}).run()
    out = deployer(clusters, PROMOTED, previous={"c1", "c2", "c3"}).run()
    assert not out["failed"], out["message"]
    assert out["clusters"]["c2"]["status"] == "unreachable"  # its copies: orphans for later
    assert clusters["c3"].get("apps/v1", "Deployment", "back-v1", "shop") is not None
    assert stub(clusters["c1"])["externalName"] == "back.shop.svc.c3.example"


def test_a_run_overtaken_while_it_waits_stops_at_its_next_fence_check(fleet, monkeypatch):
    """A controller's run waiting on a slow rollout checks its fence while it waits: overtaken
    (a newer leader, or a user's newer version), it stops then, not at the end of its wait."""
    import time

    from ansible_collections.qonnect.core.plugins.module_utils.fencing import FencedError
    from ansible_collections.qonnect.core.plugins.module_utils.k8s import deployer as deployer_module

    monkeypatch.setattr(deployer_module, "FENCE_POLL_SECONDS", 0.2)
    clusters = fleet[0]
    clusters["c1"].ready = clusters["c2"].ready = False  # a rollout that takes long
    steps: list[str] = []

    def fence(step: str) -> None:
        steps.append(step)
        if step == "wait":
            raise FencedError("fencing: version 3 stored meanwhile: this run places version 2")

    t0 = time.monotonic()
    out = deployer(clusters, PLAN_A, wait_timeout=30, before_step=fence).run()
    assert time.monotonic() - t0 < 5, "stopped within its wait, not after 30 s"
    assert out["failed"] and steps[:2] == ["apply", "wait"], steps
    assert "version 3 stored meanwhile" in out["clusters"]["c1"]["error"]
