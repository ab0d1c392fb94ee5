"""The controller's self-heal pass (services/qonnect/controller/selfheal.py) on in-memory
clusters and an in-memory KB: bounded per pass, hands off what a deploy or a migration is
changing, fenced before each write, and only reporting (once) for an application that asks so."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.fencing import FencedError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.render import application_deployer, target_of
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
from qonnect.controller import selfheal
from support.memory_kb import MemoryKB
from support.shop_cases import PLAN_A, SERVICES, dep

TOKEN = {"term": 3, "seq": 7}


class KB(MemoryKB):
    """MemoryKB with the one raw request the pass makes (the list of placements)."""

    def request(self, method: str, path: str, body=None):
        assert (method, path) == ("GET", "/api/v1/placements")
        return {"placements": [copy.deepcopy(p) for p in self.placements.values()]}


def spec(labels=None):
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": "shop", "namespace": "shop", "labels": labels or {}},
        "spec": {
            "objective": {"energy": 1},
            "services": [{"name": n, "manifests": copy.deepcopy(m)} for n, m in SERVICES.items()],
        },
    }


@pytest.fixture
def world(fleet, monkeypatch):
    """shop deployed by PLAN_A (front on c1, back on c2) and recorded in the KB as settled."""
    clusters, _log = fleet
    monkeypatch.setattr(selfheal, "client_of", lambda target: clusters[target.name])
    kb = KB()

    def deploy(labels=None):
        kb.apps.clear()
        kb.put_application("shop", spec(labels))
        for name in clusters:
            kb.clusters[name] = {"name": name, "tier": "edge", "kubeconfig": f"/k/{name}.yaml", "labels": {}}
        app = Application.from_dict(kb.get_application("shop")["application"])
        targets = {n: target_of(n, kb.clusters[n], f"/k/{n}.yaml") for n in ("c1", "c2")}
        application_deployer(app, PLAN_A, targets, set(), client_factory=lambda t: clusters[t.name]).run()
        kb.put_placement("shop", {"desired": PLAN_A, "current": PLAN_A})

    deploy()
    return clusters, kb, deploy


def healer_for(kb, busy=lambda app: False, limit=20, confirm=0.0, clock=None):
    return selfheal.Healer(kb, busy, limit, confirm, clock or (lambda: 0.0))


def heal_pass(kb, before_step=lambda step: None, healer=None, **kw):
    """Two passes of one healer (the first sees a drift, the second confirms and acts); returns
    the healer and the objects the second pass re-applied."""
    healer = healer or healer_for(kb, **kw)
    healer.run(["c1", "c2", "c3"], set(), before_step, TOKEN)
    return healer, healer.run(["c1", "c2", "c3"], set(), before_step, TOKEN)


def test_a_settled_application_is_restored_with_an_event_per_object(world):
    clusters, kb, _deploy = world
    assert heal_pass(kb)[1] == 0  # nothing drifted right after the deploy
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")
    clusters["c2"].delete("v1", "Service", "back", "shop")
    assert heal_pass(kb)[1] == 2
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is not None
    assert clusters["c2"].get("v1", "Service", "back", "shop") is not None
    restored = [e for e in kb.events if e["type"] == selfheal.RESTORED]
    assert [(e["cluster"], e["reason"]) for e in restored] == [("c1", "missing"), ("c2", "missing")]
    assert all(e["fencing"] == TOKEN for e in restored)


def test_a_pass_restores_at_most_its_limit(world):
    clusters, kb, _deploy = world
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")
    clusters["c2"].delete("apps/v1", "Deployment", "back-v1", "shop")
    healer = healer_for(kb, limit=1)
    passes = [healer.run(["c1", "c2"], set(), lambda step: None, TOKEN) for _pass in range(4)]
    assert passes == [0, 1, 1, 0]  # seen, then one a pass (the rest waits), then nothing left


def test_a_migration_or_a_deploy_under_way_is_left_alone(world):
    clusters, kb, _deploy = world
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")
    assert heal_pass(kb, busy=lambda app: app == "shop")[1] == 0
    moved = {"front": [{"cluster": "c3", "replicas": 2}], "back": PLAN_A["back"]}
    kb.put_placement("shop", {"desired": moved})  # a deploy's intent, before it touches clusters
    assert heal_pass(kb)[1] == 0
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is None


def test_the_fence_is_checked_before_the_write(world):
    clusters, kb, _deploy = world
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")

    def fenced(step):
        raise FencedError(f"no longer leader: stopped before {step}")

    with pytest.raises(FencedError, match="restore Deployment shop/front-v1 on c1"):
        heal_pass(kb, before_step=fenced)
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is None
    assert not [e for e in kb.events if e["type"] == selfheal.RESTORED]


def test_an_application_that_only_reports_drift_gets_one_event_per_change(world):
    clusters, kb, deploy = world
    deploy({selfheal.SELF_HEAL_LABEL: "false"})
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")
    healer, writes = heal_pass(kb)
    assert writes == 0
    assert heal_pass(kb, healer=healer)[1] == 0
    drifted = [e for e in kb.events if e["type"] == selfheal.DRIFTED]
    assert len(drifted) == 1 and "not restored" in drifted[0]["message"]
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is None


def test_a_drift_is_acted_on_only_when_a_later_pass_confirms_it(world):
    clusters, kb, _deploy = world
    now = [100.0]
    healer = healer_for(kb, confirm=3.0, clock=lambda: now[0])
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")
    assert healer.run(["c1"], set(), lambda step: None, TOKEN) == 0  # seen once
    now[0] += 1.0
    assert healer.run(["c1"], set(), lambda step: None, TOKEN) == 0  # too soon to be sure
    now[0] += 3.0
    assert healer.run(["c1"], set(), lambda step: None, TOKEN) == 1
    assert healer.restored_on == {"c1"}


def test_a_removal_sweeping_before_it_clears_the_placement_is_not_drift(world):
    """qonnect.core.remove deletes the objects, then writes the empty placement: a pass in
    between sees objects missing under a settled placement, and must not put them back."""
    clusters, kb, _deploy = world
    healer = healer_for(kb)
    for name in clusters:
        for obj in list(clusters[name].objects.values()):
            clusters[name].delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], "shop")
    assert healer.run(["c1", "c2"], set(), lambda step: None, TOKEN) == 0
    kb.put_placement("shop", {"desired": {}, "current": {}})
    assert healer.run(["c1", "c2"], set(), lambda step: None, TOKEN) == 0
    assert all(not c.objects for c in clusters.values())


def test_an_object_the_cluster_refuses_is_tried_again_only_after_a_while(world):
    clusters, kb, _deploy = world
    now = [0.0]
    healer = healer_for(kb, clock=lambda: now[0])
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")
    original = clusters["c1"].apply

    def refuse(obj, dry_run=False):
        if obj["kind"] == "Deployment":
            raise K8sError("c1", "HTTP 422: Deployment.apps is invalid", 422)
        return original(obj, dry_run)

    clusters["c1"].apply = refuse
    runs = [healer.run(["c1"], set(), lambda step: None, TOKEN) for _run in range(4)]
    assert runs == [0, 1, 0, 0]  # seen, tried once, then left alone
    now[0] += selfheal.RETRY_SECONDS + 1
    clusters["c1"].apply = original
    retry = [healer.run(["c1"], set(), lambda step: None, TOKEN) for _run in range(2)]
    assert retry == [0, 1]  # confirmed anew, then restored
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop") is not None


def counting(cluster):
    """Count the reads a cluster serves (gets and lists), as its API server would."""
    reads = {"n": 0}
    for verb in ("get", "list"):
        original = getattr(cluster, verb)

        def counted(*args, _original=original, **kwargs):
            reads["n"] += 1
            return _original(*args, **kwargs)

        setattr(cluster, verb, counted)
    return reads


def place_copies(clusters, kb, count):
    """``count`` more applications like shop (each its own namespace), deployed and settled."""
    for i in range(count):
        name = f"shop{i}"
        body = spec()
        body["metadata"].update(name=name, namespace=name)
        kb.put_application(name, body)
        app = Application.from_dict(kb.get_application(name)["application"])
        targets = {n: target_of(n, kb.clusters[n], f"/k/{n}.yaml") for n in ("c1", "c2")}
        application_deployer(app, PLAN_A, targets, set(), client_factory=lambda t: clusters[t.name]).run()
        kb.put_placement(name, {"desired": PLAN_A, "current": PLAN_A})


def test_a_pass_reads_each_cluster_once_per_kind_however_many_applications_it_holds(world):
    """Issue 38: the idle leader's CPU grew with the applications, most of it in this pass's
    reads (a namespace get and seven lists per application and cluster, every 5 s)."""
    clusters, kb, _deploy = world
    reads = counting(clusters["c1"])
    healer = healer_for(kb)
    healer.run(["c1"], set(), lambda step: None, TOKEN)
    one = reads["n"]
    place_copies(clusters, kb, 20)
    reads["n"] = 0
    healer.run(["c1"], set(), lambda step: None, TOKEN)
    assert reads["n"] == one <= 4, f"21 applications took {reads['n']} reads, 1 took {one}"


def in_the_way(cluster):
    """shop's front-v1 replaced by a team's unlabelled Deployment of the same name."""
    cluster.delete("apps/v1", "Deployment", "front-v1", "shop")
    theirs = copy.deepcopy(dep("front-v1", "front"))
    theirs["metadata"].update(namespace="shop", labels={"team": "them"})
    cluster.apply(theirs)
    return cluster


def test_an_unlabelled_object_in_the_way_is_not_taken_for_a_missing_one(world):
    """The shared list holds only qonnect's labelled objects: a team's object with the name of
    one of ours must still be seen (and left alone), not re-applied over as missing."""
    clusters, kb, _deploy = world
    c1 = in_the_way(clusters["c1"])
    assert heal_pass(kb)[1] == 0
    live = c1.get("apps/v1", "Deployment", "front-v1", "shop")
    assert live["metadata"]["labels"] == {"team": "them"}
    assert not [e for e in kb.events if e["type"] == selfheal.RESTORED]


def test_a_pass_renders_from_the_records_the_tick_read_and_asks_the_kb_only_for_the_others(world):
    clusters, kb, _deploy = world
    place_copies(clusters, kb, 3)
    asked: list[str] = []
    original = kb.get_application

    def get_application(name):
        asked.append(name)
        return original(name)

    kb.get_application = get_application
    stored = {n: original(n) for n in ("shop", "shop0", "shop1")}  # the tick's view lacks shop2
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")
    healer = healer_for(kb)
    passes = [healer.run(["c1", "c2"], set(), lambda step: None, TOKEN, stored) for _pass in range(2)]
    assert passes == [0, 1] and clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop")
    assert asked == ["shop2", "shop2"]  # one read per pass, of the one the records lacked


def test_a_cluster_that_refuses_lists_across_namespaces_is_read_per_namespace(world):
    """RBAC limited to the application's namespaces: the pass still sees and restores drift."""
    clusters, kb, _deploy = world
    c1 = clusters["c1"]
    original = c1.list

    def namespaced_only(api_version, kind, namespace=None, label_selector=None):
        if namespace is None and kind != "Namespace":
            raise K8sError("c1", "HTTP 403: cannot list resource across all namespaces", 403)
        return original(api_version, kind, namespace, label_selector)

    c1.list = namespaced_only
    c1.delete("apps/v1", "Deployment", "front-v1", "shop")
    assert heal_pass(kb)[1] == 1
    assert c1.get("apps/v1", "Deployment", "front-v1", "shop") is not None


def test_a_cluster_whose_lists_are_unchanged_is_not_checked_again_and_a_change_is(world, monkeypatch):
    """Issue 38: on an idle fleet of 1,000 applications most of the leader's CPU went into this
    pass decoding the same lists and rendering every application every 5 s to find nothing."""
    clusters, kb, _deploy = world
    place_copies(clusters, kb, 20)
    built = []
    real = selfheal.application_deployer
    monkeypatch.setattr(
        selfheal, "application_deployer", lambda *a, **kw: built.append(a[0].name) or real(*a, **kw)
    )
    healer = healer_for(kb)

    def run():
        return healer.run(["c1", "c2"], set(), lambda step: None, TOKEN)

    assert run() == 0 and len(built) == 42 and healer.unchanged == 0  # 21 applications on 2 clusters
    decoded = clusters["c1"].decoded
    built.clear()
    rv = clusters["c1"].rv
    clusters["c1"].apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t", "namespace": "shop"}}
    )
    assert clusters["c1"].rv > rv  # a team's write: every list's own resourceVersion moved
    assert run() == 0 and built == [] and healer.unchanged == 42
    assert clusters["c1"].decoded == decoded  # the same lists, read again but not decoded again
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop0")
    assert run() == 0  # seen: every application on c1 whose kinds' list changed is checked
    assert sorted(set(built)) == sorted(["shop", *(f"shop{i}" for i in range(20))]) and healer.unchanged == 21
    assert run() == 1 and clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop0")  # restored
    built.clear()
    run()  # the restore changed c1's list: checked again, clean
    assert run() == 0 and built and healer.unchanged == 42
    kb.put_application("shop", spec({"team": "a"}))  # a new version of the spec
    built.clear()
    assert run() == 0 and built == ["shop", "shop"] and healer.unchanged == 40


def test_an_unlabelled_object_in_the_way_is_looked_at_every_pass_until_it_is_gone(world):
    """What a check read beyond the shared lists (here a team's object with the name of one of
    ours, which no labelled list holds) keeps the application checked: once the object goes,
    the missing one is restored."""
    clusters, kb, _deploy = world
    c1 = in_the_way(clusters["c1"])
    healer = healer_for(kb)
    assert [healer.run(["c1"], set(), lambda step: None, TOKEN) for _pass in range(3)] == [0, 0, 0]
    assert healer.unchanged == 0
    c1.delete("apps/v1", "Deployment", "front-v1", "shop")
    assert [healer.run(["c1"], set(), lambda step: None, TOKEN) for _pass in range(2)] == [0, 1]
    assert c1.get("apps/v1", "Deployment", "front-v1", "shop")["metadata"]["labels"] != {"team": "them"}
