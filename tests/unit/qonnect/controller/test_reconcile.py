"""reconcile_cluster: what it removes from a cluster that came back, in which order, and through
which deployer (the KB, the cluster's client and the deployers are recording stand-ins)."""

from __future__ import annotations

import time
from collections import namedtuple
from typing import Any

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.k8s import client as k8s_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s import deployer as k8s_deployer
from ansible_collections.qonnect.core.plugins.module_utils.k8s import render
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, ROLE_LABEL, SERVICE_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application, Service
from qonnect.controller.reconcile import reconcile_cluster

Target = namedtuple("Target", "name record")
OLD = "2020-01-01T00:00:00Z"


def obj(kind: str, app: str, ns: str, service: str | None = None, role: str | None = None, at: str = OLD):
    labels = {APP_LABEL: app}
    if service:
        labels[SERVICE_LABEL] = service
    if role:
        labels[ROLE_LABEL] = role
    api = "apps/v1" if kind == "Deployment" else "v1"
    meta = {"name": f"{app}-{service or kind.lower()}", "labels": labels, "creationTimestamp": at}
    if kind == "Namespace":
        meta["name"] = ns
    else:
        meta["namespace"] = ns
    return api, kind, {"metadata": meta}


class Client:
    def __init__(self, name: str, objects: list[tuple[str, str, dict]]) -> None:
        self.name = name
        self.objects = objects

    def list(self, api_version, kind, namespace, selector):
        assert namespace is None and selector == APP_LABEL
        return [o for a, k, o in self.objects if (a, k) == (api_version, kind)]


class KB:
    def __init__(self, log: list, clusters: list[dict], placements: dict, specs: dict) -> None:
        self.log = log
        self.clusters = clusters
        self.placements = placements
        self.specs = specs

    def list_clusters(self):
        self.log.append(("list_clusters",))
        return self.clusters

    def request(self, method, path):
        self.log.append(("request", method, path))
        return {"placements": [{"application": a, "current": p} for a, p in self.placements.items()]}

    def get_application(self, app):
        self.log.append(("get_application", app))
        spec = self.specs.get(app)
        if isinstance(spec, KBError):
            raise spec
        if spec is None:
            raise KBError(404, f"no application {app}")
        return {"application": spec.to_dict()}


def app_of(name: str, ns: str, *services: str) -> Application:
    return Application(
        name=name,
        namespace=ns,
        objective={},
        services=[
            Service(name=s, manifests=[{"kind": "Deployment", "metadata": {"name": s}}]) for s in services
        ],
    )


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    log: list = []
    clients: dict[str, Client] = {}
    made: list[dict] = []

    class Result(dict):
        status = "ok"

    class Deployer:
        def __init__(self, app, namespace, services, plan, targets, **kw):
            self.made = {
                "how": "Deployer",
                "name": app,
                "args": (app, namespace, services, plan, targets),
                "kw": kw,
            }
            made.append(self.made)
            log.append(("Deployer", app))

        def remove(self):
            log.append(("remove", self.made["name"]))
            return world["results"].get(self.made["name"], {})

        def converge(self, cluster):
            log.append(("converge", self.made["name"], cluster))
            return Result()

    def application_deployer(application, plan, targets, **kw):
        d = Deployer.__new__(Deployer)
        d.made = {
            "how": "application_deployer",
            "name": application.name,
            "args": (application, plan, targets),
            "kw": kw,
        }
        made.append(d.made)
        log.append(("application_deployer", application.name))
        return d

    def client_of(target):
        log.append(("client_of", target.name))
        return clients.setdefault(target.name, Client(target.name, []))

    monkeypatch.setattr(k8s_client, "client_of", client_of)
    monkeypatch.setattr(render, "record_target", lambda name, record: Target(name, record["kubeconfig"]))
    monkeypatch.setattr(render, "application_deployer", application_deployer)
    monkeypatch.setattr(k8s_deployer, "Deployer", Deployer)
    world = {"log": log, "clients": clients, "made": made, "results": {}}
    return world


def test_an_unknown_cluster_or_one_without_credentials_is_left_alone(world):
    kb = KB(world["log"], [{"name": "c1"}], {}, {})
    assert reconcile_cluster("c1", kb, lambda app: False, lambda step: None) == ([], False)
    assert reconcile_cluster("c2", kb, lambda app: False, lambda step: None) == ([], False)
    assert world["log"] == [("list_clusters",), ("list_clusters",)]


def test_reconcile_removes_what_the_kb_does_not_place_there(world):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    objects = [
        obj("Deployment", "a-busy", "a", "web"),
        obj("Deployment", "b-young", "b", "web", at=now),
        obj("Deployment", "c-fine", "c", "web"),
        obj("Service", "c-fine", "c", "web"),
        obj("Deployment", "d-gone", "d-ns", "web"),
        obj("ConfigMap", "d-gone", "d-ns", "web"),
        obj("Deployment", "e-moved", "e-ns", "web"),
        obj("Deployment", "f-extra", "f-ns", "web"),
        obj("Deployment", "f-extra", "f-ns", "db"),
        obj("Service", "f-extra", "f-ns", "cache", role="address"),
        obj("Deployment", "g-lost", "g-ns", "web"),
        obj("Deployment", "g-lost", "g-ns", "api"),
        obj("Namespace", "h-ns-only", "h-ns"),
    ]
    world["clients"]["c1"] = client = Client("c1", objects)
    placements = {
        "c-fine": {"web": [{"cluster": "c1"}]},
        "e-moved": {"web": [{"cluster": "c2"}]},
        "f-extra": {
            "web": [{"cluster": "c1"}],
            "db": [{"cluster": "c2"}],
            "cache": [{"cluster": "c9"}],
            "old": [{"cluster": "c2"}],
        },
        "g-lost": {"web": [{"cluster": "c1"}]},
    }
    specs = {
        "e-moved": app_of("e-moved", "e-ns", "web"),
        "f-extra": app_of("f-extra", "f-ns", "web", "db", "cache"),
    }
    clusters = [{"name": "c1", "kubeconfig": "k1"}, {"name": "c2", "kubeconfig": "k2"}, {"name": "c3"}]
    kb = KB(world["log"], clusters, placements, specs)
    world["results"] = {"d-gone": {"failed": True, "message": "boom"}, "e-moved": {"changed": True}}
    busy_asked: list[str] = []
    steps: list[str] = []

    def busy(app):
        busy_asked.append(app)
        return app == "a-busy"

    done, later = reconcile_cluster("c1", kb, busy, steps.append)

    assert later is True
    assert done == [
        ("d-gone", "removed d-gone (2 object(s)): the KB places none of it on c1 (boom)"),
        ("e-moved", "removed e-moved (1 object(s)): the KB places none of it on c1"),
        ("f-extra", "removed f-extra service(s) db from c1: the KB places them elsewhere (ok)"),
        ("g-lost", "removed g-lost service(s) api from c1: the KB places them elsewhere (ok)"),
        ("h-ns-only", "removed h-ns-only (0 object(s)): the KB places none of it on c1"),
    ]
    assert busy_asked == [
        "a-busy",
        "b-young",
        "c-fine",
        "d-gone",
        "e-moved",
        "f-extra",
        "g-lost",
        "h-ns-only",
    ]
    assert world["log"] == [
        ("list_clusters",),
        ("client_of", "c1"),
        ("request", "GET", "/api/v1/placements"),
        ("get_application", "d-gone"),
        ("Deployer", "d-gone"),
        ("remove", "d-gone"),
        ("get_application", "e-moved"),
        ("Deployer", "e-moved"),
        ("remove", "e-moved"),
        ("get_application", "f-extra"),
        ("application_deployer", "f-extra"),
        ("converge", "f-extra", "c1"),
        ("get_application", "g-lost"),
        ("Deployer", "g-lost"),
        ("converge", "g-lost", "c1"),
        ("get_application", "h-ns-only"),
        ("Deployer", "h-ns-only"),
        ("remove", "h-ns-only"),
    ]
    d_gone, e_moved, f_extra, g_lost, h_ns = world["made"]
    t1 = Target("c1", "k1")
    t2 = Target("c2", "k2")
    assert d_gone["args"] == ("d-gone", "d-ns", {}, {}, {"c1": t1})
    assert e_moved["args"] == (
        "e-moved",
        "e-ns",
        {"web": [{"kind": "Deployment", "metadata": {"name": "web"}}]},
        {},
        {"c1": t1},
    )
    assert h_ns["args"] == ("h-ns-only", "h-ns", {}, {}, {"c1": t1})
    for removal in (d_gone, e_moved, h_ns):
        assert set(removal["kw"]) == {"previous", "client_factory", "before_step"}
        assert removal["kw"]["previous"] == {"c1"}
        assert removal["kw"]["client_factory"](t2) is client  # the cluster's own client, whatever asked
        assert removal["kw"]["before_step"] == steps.append

    application, plan, targets = f_extra["args"]
    assert f_extra["how"] == "application_deployer" and application == Application.from_dict(
        specs["f-extra"].to_dict()
    )
    assert plan == {"web": [{"cluster": "c1"}], "db": [{"cluster": "c2"}], "cache": [{"cluster": "c9"}]}
    assert targets == {"c1": t1, "c2": t2}  # c9 has no record: not a target
    assert g_lost["how"] == "Deployer"
    assert g_lost["args"] == ("g-lost", "g-ns", {}, {}, {})
    for converged in (f_extra, g_lost):
        kw = converged["kw"]
        assert set(kw) == {"previous", "client_factory", "before_step", "wait"}
        assert kw["previous"] == {"c1"} and kw["wait"] is False and kw["before_step"] == steps.append
        assert kw["client_factory"](t1) is client
        world["log"].clear()
        assert kw["client_factory"](t2) is world["clients"]["c2"]
        assert world["log"] == [("client_of", "c2")]
    assert steps == []


def test_only_busy_or_young_applications_ask_for_another_look(world):
    world["clients"]["c1"] = Client("c1", [obj("Deployment", "c-fine", "c", "web")])
    kb = KB(world["log"], [{"name": "c1", "kubeconfig": "k"}], {"c-fine": {"web": [{"cluster": "c1"}]}}, {})
    assert reconcile_cluster("c1", kb, lambda app: False, lambda step: None) == ([], False)


def test_a_kb_error_other_than_not_found_stops_the_pass(world):
    world["clients"]["c1"] = Client(
        "c1", [obj("Deployment", "a", "a", "web"), obj("Deployment", "b", "b", "web")]
    )
    kb = KB(world["log"], [{"name": "c1", "kubeconfig": "k"}], {}, {"a": KBError(503, "busy")})
    with pytest.raises(KBError) as exc:
        reconcile_cluster("c1", kb, lambda app: False, lambda step: None)
    assert exc.value.status == 503
    assert ("get_application", "b") not in world["log"]
