"""Issue 23: every deletion and refusal is for one application identity (<namespace>/<app>)."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target, object_diff
from ansible_collections.qonnect.core.plugins.module_utils.k8s.ownership import owned_by
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, MANAGED_BY, OWNER_ANNOTATION
from support.shop_cases import PLAN_A, SERVICES, deployer

PLAN_C1 = {"front": [{"cluster": "c1", "replicas": 1}], "back": [{"cluster": "c1", "replicas": 1}]}


def shop_in(clusters, namespace, services=None, plan=None, **kw):
    """The application `shop` in `namespace` (same name, another identity)."""
    targets = {n: Target(n, f"/k/{n}.yaml", domain=f"{n}.example") for n in clusters}
    return Deployer(
        "shop",
        namespace,
        SERVICES if services is None else services,
        PLAN_C1 if plan is None else plan,
        targets,
        client_factory=lambda t: clusters[t.name],
        wait_timeout=kw.pop("wait_timeout", 2.0),
        **kw,
    )


def objects_in(cluster, namespace):
    return {
        k: v for k, v in cluster.objects.items() if namespace in (k[2], k[3] if k[1] == "Namespace" else None)
    }


def labelled(kind, name, namespace, app="shop", owner=None):
    meta = {"name": name, "labels": {MANAGED_BY: "qonnect", APP_LABEL: app}}
    if namespace:
        meta["namespace"] = namespace
    if owner:
        meta["annotations"] = {OWNER_ANNOTATION: owner}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def test_owned_by_is_exactly_one_identity():
    assert owned_by(labelled("ConfigMap", "c", "shop", owner="shop/shop"), "shop", "shop/shop")
    assert not owned_by(labelled("ConfigMap", "c", "shop2", owner="shop2/shop"), "shop", "shop/shop")
    # written before the owner annotation: its namespace and labels are the identity
    assert owned_by(labelled("ConfigMap", "c", "shop"), "shop", "shop/shop")
    assert not owned_by(labelled("ConfigMap", "c", "shop2"), "shop", "shop/shop")
    assert not owned_by(labelled("ConfigMap", "c", "shop", app="shop-aio"), "shop", "shop/shop")
    # an annotation naming this identity on an object in another namespace does not make it ours
    assert not owned_by(labelled("ConfigMap", "c", "shop2", owner="shop/shop"), "shop", "shop/shop")
    # cluster-scoped: only the annotation can tell which namespace's `shop` wrote it
    assert owned_by(labelled("ClusterRole", "r", None, owner="shop/shop"), "shop", "shop/shop")
    assert not owned_by(labelled("ClusterRole", "r", None), "shop", "shop/shop")
    assert owned_by(labelled("Namespace", "shop", None), "shop", "shop/shop")
    assert not owned_by(labelled("Namespace", "shop2", None), "shop", "shop/shop")


def test_removal_keeps_the_same_named_application_of_another_namespace(fleet):
    clusters = fleet[0]
    c1 = clusters["c1"]
    assert not shop_in(clusters, "shop").run()["failed"]
    assert not shop_in(clusters, "shop2").run()["failed"]
    other = copy.deepcopy(objects_in(c1, "shop2"))
    for check_mode in (True, False):
        remover = shop_in(clusters, "shop", plan={}, previous={"c1"}, check_mode=check_mode)
        out = remover.remove()
        assert not out["failed"]
        keys = {o["key"] for o in out["clusters"]["c1"]["objects"]}
        assert keys and not any("/shop2/" in k or k.endswith("//shop2") for k in keys), keys
    assert objects_in(c1, "shop2") == other
    assert c1.get("v1", "Namespace", "shop") is None


def test_roll_back_keeps_the_same_named_application_of_another_namespace(fleet):
    clusters = fleet[0]
    c1 = clusters["c1"]
    assert not shop_in(clusters, "shop2").run()["failed"]
    other = copy.deepcopy(objects_in(c1, "shop2"))
    c1.ready = False
    out = shop_in(clusters, "shop", wait_timeout=0.2).run()
    assert out["failed"] and out["rolled_back"]
    assert c1.get("v1", "Namespace", "shop") is None  # the failed first deploy left nothing
    # the other namespace's shop is untouched (readiness aside, the fake keeps no status)
    assert objects_in(c1, "shop2") == other


def cluster_role(name):
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }


def test_a_teams_cluster_role_is_refused_before_the_namespace_exists(fleet):
    clusters, log = fleet
    c1 = clusters["c1"]
    team = cluster_role("reader")
    team["metadata"]["managedFields"] = [{"manager": "kubectl-create"}]
    c1.apply(team)
    services = {**SERVICES, "front": [*SERVICES["front"], cluster_role("reader")]}
    before, writes = copy.deepcopy(c1.objects), len(log)
    for check_mode in (True, False):
        out = shop_in(clusters, "shop", services=services, check_mode=check_mode).run()
        assert out["failed"]
        assert "c1: ClusterRole reader (field manager kubectl-create)" in out["message"]
        assert c1.objects == before and len(log) == writes
    assert c1.get("v1", "Namespace", "shop") is None
    out = shop_in(clusters, "shop", services=services, adopt={"front"}).run()
    assert not out["failed"], out["message"]
    taken = c1.get("rbac.authorization.k8s.io/v1", "ClusterRole", "reader")
    assert taken["metadata"]["annotations"][OWNER_ANNOTATION] == "shop/shop"
    assert any(o["action"] == "adopt" for o in out["clusters"]["c1"]["objects"])


def test_the_applications_own_cluster_role_is_not_refused_on_a_new_namespace(fleet):
    clusters = fleet[0]
    services = {**SERVICES, "front": [*SERVICES["front"], cluster_role("reader")]}
    assert not shop_in(clusters, "shop", services=services).run()["failed"]
    clusters["c1"].delete("v1", "Namespace", "shop")
    again = shop_in(clusters, "shop", services=services).run()
    assert not again["failed"], again["message"]


def team_object(kind, name, api_version="v1", **extra):
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "shop"}, **extra}


RBAC = "rbac.authorization.k8s.io/v1"
TEAM_OBJECTS = {
    "bare pod": team_object("Pod", "debug", spec={"containers": [{"name": "c", "image": "busybox"}]}),
    "pod of an operator's resource": team_object(
        "Pod",
        "db-0",
        metadata={
            "name": "db-0",
            "namespace": "shop",
            "ownerReferences": [{"kind": "Database", "name": "db", "uid": "u-db", "controller": True}],
        },
    ),
    "role": team_object("Role", "reader", RBAC, rules=[]),
    "role binding": team_object("RoleBinding", "reader", RBAC, roleRef={"kind": "Role", "name": "reader"}),
    "network policy": team_object("NetworkPolicy", "deny", "networking.k8s.io/v1", spec={}),
    "config map": team_object("ConfigMap", "team"),
    "secret": team_object("Secret", "team"),
    "service account": team_object("ServiceAccount", "robot"),
    "claim": team_object("PersistentVolumeClaim", "data", spec={}),
    "job": team_object("Job", "once", "batch/v1", spec={}),
    "cron job": team_object("CronJob", "nightly", "batch/v1", spec={}),
    "ingress": team_object("Ingress", "web", "networking.k8s.io/v1", spec={}),
}


@pytest.mark.parametrize("what", sorted(TEAM_OBJECTS))
def test_removal_keeps_a_namespace_that_holds_a_teams_object(fleet, what):
    clusters = fleet[0]
    assert not deployer(clusters, PLAN_A).run()["failed"]
    clusters["c1"].apply(TEAM_OBJECTS[what])
    out = deployer(clusters, {}, previous={"c1", "c2"}).remove()
    assert not out["failed"]
    assert clusters["c1"].get("v1", "Namespace", "shop") is not None, what
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is None
    assert clusters["c2"].get("v1", "Namespace", "shop") is None  # nothing foreign there


def add_pods_of(cluster, deployment):
    """What Kubernetes adds for a Deployment: a ReplicaSet and a Pod, both dependents."""
    uid = "u-" + deployment["metadata"]["name"]
    deployment["metadata"]["uid"] = uid
    cluster.objects[("apps/v1", "Deployment", "shop", deployment["metadata"]["name"])] = deployment
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    rs = team_object("ReplicaSet", "front-v1-5d9", "apps/v1", spec={})
    rs["metadata"].update(uid="u-rs", labels=dict(labels), ownerReferences=[{"uid": uid, "controller": True}])
    pod = team_object("Pod", "front-v1-5d9-x", spec={})
    pod["metadata"].update(labels=dict(labels), ownerReferences=[{"uid": "u-rs", "controller": True}])
    cluster.objects[("apps/v1", "ReplicaSet", "shop", "front-v1-5d9")] = rs
    cluster.objects[("v1", "Pod", "shop", "front-v1-5d9-x")] = pod


def test_the_applications_own_pods_and_kubernetes_objects_do_not_keep_the_namespace(fleet):
    clusters = fleet[0]
    c1 = clusters["c1"]
    assert not deployer(clusters, PLAN_A).run()["failed"]
    add_pods_of(c1, c1.get("apps/v1", "Deployment", "front-v1", "shop"))
    c1.apply(team_object("ServiceAccount", "default"))
    c1.apply(team_object("ConfigMap", "kube-root-ca.crt"))
    out = deployer(clusters, {}, previous={"c1", "c2"}).remove()
    assert not out["failed"]
    assert c1.get("v1", "Namespace", "shop") is None


class Guarded:
    """A cluster on which qonnect may not list some kinds (least-privilege RBAC), and that can
    tell which namespaced kinds it serves (as a ClusterClient does through discovery)."""

    def __init__(self, inner, forbidden=(), served=()):
        self.inner, self.forbidden, self.served = inner, set(forbidden), list(served)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def list(self, api_version, kind, namespace=None, label_selector=None):
        if kind in self.forbidden:
            raise K8sError(self.inner.name, f"HTTP 403: {kind} is forbidden", 403)
        return self.inner.list(api_version, kind, namespace, label_selector)

    def namespaced_kinds(self):
        return self.served


def remove_through(clusters, wrap):
    targets = {n: Target(n, f"/k/{n}.yaml") for n in clusters}
    return Deployer(
        "shop",
        "shop",
        SERVICES,
        {},
        targets,
        previous=set(clusters),
        client_factory=lambda t: wrap(clusters[t.name]),
    ).remove()


def test_a_kind_qonnect_may_not_list_keeps_the_namespace(fleet):
    clusters = fleet[0]
    assert not deployer(clusters, PLAN_A).run()["failed"]
    out = remove_through(clusters, lambda c: Guarded(c, forbidden={"Role"}))
    assert not out["failed"], out["message"]
    assert clusters["c1"].get("v1", "Namespace", "shop") is not None
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is None


def test_every_served_namespaced_kind_is_looked_at(fleet):
    clusters = fleet[0]
    assert not deployer(clusters, PLAN_A).run()["failed"]
    widget = team_object("Widget", "w", "example.com/v1")
    clusters["c1"].apply(widget)
    clusters["c2"].apply(team_object("Event", "front.17", "v1"))  # the cluster's own record
    served = [("example.com/v1", "Widget"), ("v1", "Event"), ("example.com/v1", "Gadget")]
    out = remove_through(clusters, lambda c: Guarded(c, forbidden={"Gadget"}, served=served))
    assert not out["failed"], out["message"]
    assert clusters["c1"].get("example.com/v1", "Widget", "w", "shop") is not None
    assert clusters["c1"].get("v1", "Namespace", "shop") is not None
    assert clusters["c2"].get("v1", "Namespace", "shop") is None  # an Event is no owner


def test_an_adopted_object_says_so_in_the_diff_header():
    outcome = {
        "key": "apps/v1/Deployment/shop/web",
        "action": "adopt",
        "changed": True,
        "before": {},
        "after": {},
    }
    entry = object_diff("c1", outcome)
    assert entry["before_header"] == entry["after_header"]
    assert entry["after_header"].startswith("c1: Deployment shop/web ")
    assert "adopt" in entry["after_header"]
    assert object_diff("c1", {**outcome, "action": "update"})["after_header"] == "c1: Deployment shop/web"


def test_the_documented_deploy_role_may_list_every_kind_removal_looks_at():
    from pathlib import Path

    import yaml
    from ansible_collections.qonnect.core.plugins.module_utils.k8s.prune import FOREIGN_KINDS, SWEEP_KINDS

    root = Path(__file__).resolve().parents[5]
    docs = yaml.safe_load((root / "docs" / "rbac" / "deploy-clusterrole.yml").read_text())["items"]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    listable = {
        (group, resource)
        for rule in role["rules"]
        if "list" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    plural = {
        "Ingress": "ingresses",
        "NetworkPolicy": "networkpolicies",
        "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    }
    for api_version, kind in (*SWEEP_KINDS, *FOREIGN_KINDS):
        group = api_version.rpartition("/")[0]
        assert (group, plural.get(kind, kind.lower() + "s")) in listable, kind


def test_served_kinds_are_the_listable_namespaced_resources_not_their_lists():
    import threading
    from types import SimpleNamespace

    from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import ClusterClient
    from kubernetes.dynamic.resource import Resource, ResourceList

    def res(kind, namespaced=True, verbs=("get", "list"), name=None, preferred=True, api_version="v1"):
        plural = name or kind.lower() + "s"
        return Resource(
            prefix="api",
            api_version=api_version,
            kind=kind,
            namespaced=namespaced,
            verbs=list(verbs),
            name=plural,
            preferred=preferred,
        )

    found = [
        res("Pod"),
        res("Event"),
        ResourceList(None, api_version="v1", base_kind="Event"),
        res("Node", namespaced=False),
        res("Binding", verbs=("create",)),
        res("Pod", name="pods/log"),
        res("Widget", api_version="v1beta1", preferred=False),
    ]
    client = object.__new__(ClusterClient)
    client.name, client._lock = "c1", threading.Lock()
    client._dynamic = SimpleNamespace(resources=SimpleNamespace(search=lambda: found))
    assert client.namespaced_kinds() == [("v1", "Event"), ("v1", "Pod")]
