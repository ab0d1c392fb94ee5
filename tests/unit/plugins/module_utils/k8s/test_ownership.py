"""Issue 23: qonnect never adopts, overwrites or deletes what it does not own."""

from __future__ import annotations

import copy

from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import APPLY_ORDER, apply_rank
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, OWNER_ANNOTATION
from support.shop_cases import PLAN_A, SERVICES, dep, deployer, svc

OTHER = {"aio": [svc("cart"), dep("cart-v1", "cart")]}


def other_app(clusters, services=None, **kw):
    services = OTHER if services is None else services
    targets = {n: Target(n, f"/k/{n}.yaml", domain=f"{n}.example") for n in clusters}
    plan = {s: [{"cluster": "c1", "replicas": 1}] for s in services}
    return Deployer(
        "shop-aio",
        "shop",
        services,
        plan,
        targets,
        client_factory=lambda t: clusters[t.name],
        wait_timeout=2.0,
        **kw,
    )


def remover(clusters, app="shop-aio", services=None):
    services = OTHER if services is None else services
    targets = {n: Target(n, f"/k/{n}.yaml") for n in clusters}
    return Deployer(
        app, "shop", services, {}, targets, previous=set(clusters), client_factory=lambda t: clusters[t.name]
    )


def snapshot(clusters):
    return {n: copy.deepcopy(c.objects) for n, c in clusters.items()}


def test_every_object_records_its_owner(fleet):
    clusters = fleet[0]
    deployer(clusters, PLAN_A).run()
    for obj in clusters["c1"].objects.values():
        assert obj["metadata"]["annotations"][OWNER_ANNOTATION] == "shop/shop", obj["metadata"]["name"]


def test_two_applications_share_a_namespace_and_removing_one_keeps_the_other(fleet):
    clusters = fleet[0]
    assert not deployer(clusters, PLAN_A).run()["failed"]
    out = other_app(clusters).run()
    assert not out["failed"], out["message"]
    ns = clusters["c1"].get("v1", "Namespace", "shop")
    assert ns["metadata"]["labels"][APP_LABEL] == "shop"  # not taken over by the second app
    assert (
        clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop")["metadata"]["labels"][APP_LABEL]
        == "shop"
    )
    removed = remover(clusters).remove()
    assert not removed["failed"]
    assert clusters["c1"].get("apps/v1", "Deployment", "cart-v1", "shop") is None
    # shop is intact: its namespace, workloads and services
    assert clusters["c1"].get("v1", "Namespace", "shop") is not None
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is not None
    assert clusters["c1"].get("v1", "Service", "back", "shop") is not None
    # and a second deploy of shop is a no-op (nothing of it was touched)
    assert deployer(clusters, PLAN_A, previous={"c1", "c2"}).run()["changed"] is False


def test_same_name_of_another_application_is_refused_everywhere_at_once(fleet):
    clusters, log = fleet
    deployer(clusters, PLAN_A).run()
    before, writes = snapshot(clusters), len(log)
    clash = {"aio": [svc("front"), dep("front-v1", "front")], "db": [svc("back")]}
    plan = {"aio": [{"cluster": "c1"}], "db": [{"cluster": "c2"}]}
    targets = {n: Target(n, f"/k/{n}.yaml") for n in clusters}
    for check_mode in (True, False):
        out = Deployer(
            "shop-aio",
            "shop",
            clash,
            plan,
            targets,
            client_factory=lambda t: clusters[t.name],
            check_mode=check_mode,
        ).run()
        assert out["failed"]
        message = out["message"]
        assert "c1: Deployment shop/front-v1 (qonnect application shop/shop)" in message
        assert "c1: Service shop/front (qonnect application shop/shop)" in message
        assert "c2: Service shop/back (qonnect application shop/shop)" in message
        assert "adopt: true" in message
        assert snapshot(clusters) == before and len(log) == writes


def test_kubectl_object_refused_then_adopted_with_adopt(fleet):
    clusters, log = fleet
    c1 = clusters["c1"]
    c1.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    team = dep("front-v1", "front")
    team["metadata"].update(namespace="shop", managedFields=[{"manager": "kubectl-client-side-apply"}])
    c1.apply(team)
    before, writes = snapshot(clusters), len(log)
    out = deployer(clusters, PLAN_A).run()
    assert out["failed"]
    assert "c1: Deployment shop/front-v1 (field manager kubectl-client-side-apply)" in out["message"]
    assert snapshot(clusters) == before and len(log) == writes

    check = deployer(clusters, PLAN_A, check_mode=True, adopt=True).run()
    assert not check["failed"]
    adopted = [d for d in check["diff"] if d["before_header"].startswith("c1: Deployment shop/front-v1 ")]
    assert adopted and adopted[0]["before"]["metadata"]["name"] == "front-v1"  # the real before
    assert {"key": "apps/v1/Deployment/shop/front-v1", "action": "adopt"} in check["clusters"]["c1"][
        "objects"
    ]
    assert snapshot(clusters) == before

    out = deployer(clusters, PLAN_A, adopt={"front"}).run()
    assert not out["failed"], out["message"]
    live = c1.get("apps/v1", "Deployment", "front-v1", "shop")
    assert live["metadata"]["labels"][APP_LABEL] == "shop"
    # the namespace a team made is shared, not taken: removal keeps it
    assert APP_LABEL not in (c1.get("v1", "Namespace", "shop")["metadata"].get("labels") or {})
    remover(clusters, "shop", SERVICES).remove()
    assert c1.get("apps/v1", "Deployment", "front-v1", "shop") is None
    assert c1.get("v1", "Namespace", "shop") is not None


def test_removal_leaves_foreign_objects_and_their_namespace(fleet):
    clusters = fleet[0]
    deployer(clusters, PLAN_A).run()
    clusters["c2"].apply(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "team-db", "namespace": "shop"}}
    )
    check = remover(clusters, "shop", SERVICES)
    check.check_mode = True
    planned = {c: {o["key"] for o in r["objects"]} for c, r in check.remove()["clusters"].items()}
    assert "v1/Namespace//shop" in planned["c1"]
    assert "v1/Namespace//shop" not in planned["c2"]  # the team's Secret keeps it
    assert "v1/Secret/shop/team-db" not in planned["c2"]
    remover(clusters, "shop", SERVICES).remove()
    assert clusters["c2"].get("v1", "Secret", "team-db", "shop") is not None
    assert clusters["c2"].get("v1", "Namespace", "shop") is not None
    assert clusters["c2"].get("apps/v1", "Deployment", "back-v1", "shop") is None
    assert clusters["c1"].get("v1", "Namespace", "shop") is None  # nothing foreign there


def test_namespace_manifest_is_merged_into_the_applications_namespace(fleet):
    clusters, log = fleet
    services = copy.deepcopy(SERVICES)
    services["front"].insert(
        0, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"team": "a"}}}
    )
    targets = {n: Target(n, f"/k/{n}.yaml") for n in clusters}

    def run(previous=None):
        return Deployer(
            "shop",
            "shop",
            services,
            PLAN_A,
            targets,
            previous=previous,
            client_factory=lambda t: clusters[t.name],
        ).run()

    assert not run()["failed"]
    namespaces = [k for k in clusters["c1"].objects if k[1] == "Namespace"]
    assert len(namespaces) == 1
    assert clusters["c1"].get("v1", "Namespace", "shop")["metadata"]["labels"]["team"] == "a"
    writes = len(log)
    again = run({"c1", "c2"})
    assert again["changed"] is False and len(log) == writes


def test_objects_are_applied_by_kind_not_file_order(fleet):
    clusters, log = fleet
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "front"}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "front"}}
    services = {"front": [dep("front-v1", "front"), svc("front"), config, account]}
    targets = {n: Target(n, f"/k/{n}.yaml") for n in clusters}
    Deployer(
        "shop",
        "shop",
        services,
        {"front": [{"cluster": "c1"}]},
        targets,
        client_factory=lambda t: clusters[t.name],
    ).run()
    kinds = [k for (_c, verb, k, _n) in log if verb == "apply"]
    assert kinds == ["Namespace", "ServiceAccount", "ConfigMap", "Service", "Deployment"]
    assert apply_rank({"kind": "Widget"}) == len(APPLY_ORDER)
