"""The shop application both Deployer tests use: two services, two plans and a Deployer on
in-memory clusters (a module of its own: test modules do not import each other)."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target


def svc(name):
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"port": 9080}], "selector": {"app": name}},
    }


def dep(name, app):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": app, "image": "img"}]},
            },
        },
    }


SERVICES = {
    "front": [svc("front"), dep("front-v1", "front")],
    "back": [svc("back"), dep("back-v1", "back")],
}


def deployer(clusters, plan, previous=None, **kw):
    targets = {n: Target(n, f"/k/{n}.yaml", domain=f"{n}.example") for n in clusters}
    return Deployer(
        "shop",
        "shop",
        SERVICES,
        plan,
        targets,
        previous=previous,
        client_factory=lambda t: clusters[t.name],
        wait_timeout=kw.pop("wait_timeout", 2.0),
        **kw,
    )


PLAN_A = {
    "front": [{"cluster": "c1", "replicas": 2, "nodes": ["c1-n"]}],
    "back": [{"cluster": "c2", "replicas": 1}],
}
PLAN_B = {
    "front": [{"cluster": "c1", "replicas": 2, "nodes": ["c1-n"]}],
    "back": [{"cluster": "c3", "replicas": 1}],
}
