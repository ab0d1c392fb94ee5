"""Issue 23 end to end: two applications in one namespace, objects made with kubectl, removal.

Real ansible-playbook runs against the paper testbed (shared session federation); the
clusters are read back through the Kubernetes API and written to with the real kubectl.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from ansible_federation import CLUSTERS, ROOT, recap
from support.kube import BINARIES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RELEASE = ROOT / "examples" / "bookinfo-release"
FOG = [c for c in CLUSTERS if c.startswith("fog-")]


def write_spec(tmp_path: Path, name: str, namespace: str, services: list[dict], **spec) -> str:
    path = tmp_path / f"{name}.yml"
    body = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"objective": {"energy": 1.0}, "services": services, **spec},
    }
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return str(path)


def web(name: str) -> list[dict]:
    labels = {"app": name}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"ports": [{"port": 80}], "selector": labels},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": name, "image": "nginx"}]},
                },
            },
        },
    ]


def kubectl(federation, cluster: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(BINARIES.bin() / "kubectl"), "--kubeconfig", federation.clusters[cluster]["kubeconfig"], *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)


def deployments(k8s, cluster: str, namespace: str) -> dict[str, dict]:
    apps = k8s(cluster)[1]
    return {
        d.metadata.name: {"labels": d.metadata.labels or {}, "ready": d.status.ready_replicas or 0}
        for d in apps.list_namespaced_deployment(namespace).items
    }


def namespace_live(k8s, cluster: str, name: str) -> bool:
    return any(
        n.metadata.name == name and not n.metadata.deletion_timestamp
        for n in k8s(cluster)[0].list_namespace().items
    )


def deploy(federation, spec: str):
    return federation.playbook("qonnect.core.deploy", "-e", f"app_file={spec}")


def remove(federation, app: str):
    result = federation.playbook("qonnect.core.remove", "-e", f"app={app}")
    assert recap(result)["failed"] == 0, result.stdout + result.stderr
    return result


def placed(federation, app: str) -> dict[str, list[str]]:
    current = federation.kb().get_placement(app)["current"]
    return {svc: [e["cluster"] for e in entries] for svc, entries in current.items()}


def wait_ready(k8s, cluster: str, namespace: str, names: list[str], timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        found = deployments(k8s, cluster, namespace)
        if all(found.get(n, {}).get("ready", 0) >= 1 for n in names) or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


def test_two_applications_share_a_namespace(federation, k8s, tmp_path):
    """shop: a selected subset of a release file (fog) and a Kustomize directory (edge), with a
    Namespace object of its own; shop-aio beside it in the same namespace; removing shop-aio
    leaves shop intact and healthy; removing shop leaves a team's ConfigMap and its namespace."""
    shop = write_spec(
        tmp_path,
        "shop",
        "shop",
        [
            {
                "name": "details",
                "tier": "fog",
                "manifests": [
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": "shop", "labels": {"team": "books"}},
                    },
                    {
                        "file": str(RELEASE / "bookinfo.manifests"),
                        "select": [
                            {"kind": "Service", "name": "details"},
                            {"kind": "ServiceAccount", "name": "bookinfo-details"},
                            {"kind": "Deployment", "name": "details-v1"},
                        ],
                    },
                ],
            },
            {
                "name": "ratings",
                "tier": "edge",
                "manifests": [{"kustomize": str(RELEASE / "ratings-overlay")}],
            },
        ],
    )
    result = deploy(federation, shop)
    assert recap(result)["failed"] == 0, result.stdout + result.stderr
    where = placed(federation, "shop")
    details, ratings = where["details"][0], where["ratings"][0]
    assert details.startswith("fog-") and ratings.startswith("edge-")
    again = deploy(federation, shop)
    assert recap(again)["changed"] == 0 and recap(again)["failed"] == 0, again.stdout
    ns = k8s(details)[0].read_namespace("shop")
    assert ns.metadata.labels["team"] == "books" and ns.metadata.labels["qonnect.io/application"] == "shop"

    # shop-aio in the same namespace, on the cluster that runs details
    aio = write_spec(
        tmp_path,
        "shop-aio",
        "shop",
        [{"name": "cart", "tier": "fog", "manifests": web("cart")}],
    )
    others = json.dumps({"exclude": [c for c in FOG if c != details]})
    result = federation.playbook("qonnect.core.deploy", "-e", f"app_file={aio}", "-e", others)
    assert recap(result)["failed"] == 0, result.stdout + result.stderr
    assert placed(federation, "shop-aio")["cart"] == [details]
    both = deployments(k8s, details, "shop")
    assert both["details-v1"]["labels"]["qonnect.io/application"] == "shop"
    assert both["cart"]["labels"]["qonnect.io/application"] == "shop-aio"

    remove(federation, "shop-aio")
    left = wait_ready(k8s, details, "shop", ["details-v1"])
    assert "cart" not in left and left["details-v1"]["ready"] >= 1
    assert namespace_live(k8s, details, "shop")
    assert k8s(details)[0].read_namespace("shop").metadata.labels["qonnect.io/application"] == "shop"
    assert wait_ready(k8s, ratings, "shop", ["ratings-v1"])["ratings-v1"]["ready"] >= 1
    again = deploy(federation, shop)  # shop still whole: nothing to redo
    assert recap(again)["changed"] == 0, again.stdout

    # a team's ConfigMap beside shop on the ratings cluster keeps that namespace
    kubectl(federation, ratings, "-n", "shop", "create", "configmap", "team-notes", "--from-literal=a=b")
    remove(federation, "shop")
    assert k8s(ratings)[0].read_namespaced_config_map("team-notes", "shop").data == {"a": "b"}
    assert namespace_live(k8s, ratings, "shop")
    assert not deployments(k8s, ratings, "shop")
    assert not namespace_live(k8s, details, "shop")
    kubectl(federation, ratings, "delete", "namespace", "shop", "--wait=false")


def test_kubectl_deployment_refused_then_adopted(federation, k8s, tmp_path):
    for cluster in FOG:
        kubectl(federation, cluster, "create", "namespace", "team")
        kubectl(federation, cluster, "-n", "team", "create", "deployment", "web", "--image=nginx")

    def written() -> dict:  # what a write would change (readiness moves on by itself)
        return {c: {n: d["labels"] for n, d in deployments(k8s, c, "team").items()} for c in FOG}

    before = written()
    spec = write_spec(tmp_path, "team-web", "team", [{"name": "web", "tier": "fog", "manifests": web("web")}])

    check = federation.playbook("qonnect.core.deploy", "-e", f"app_file={spec}", "--check")
    result = deploy(federation, spec)
    for run in (check, result):
        assert recap(run)["failed"] == 1, run.stdout
        assert "refusing to deploy team-web" in run.stdout
        assert "Deployment team/web (field manager kubectl" in run.stdout
    assert written() == before
    for cluster in FOG:
        assert not k8s(cluster)[0].list_namespaced_service("team").items

    adopted = write_spec(
        tmp_path, "team-web", "team", [{"name": "web", "tier": "fog", "manifests": web("web")}], adopt=True
    )
    result = federation.playbook("qonnect.core.deploy", "-e", f"app_file={adopted}", "--diff")
    assert recap(result)["failed"] == 0, result.stdout + result.stderr
    host = placed(federation, "team-web")["web"][0]
    assert deployments(k8s, host, "team")["web"]["labels"]["qonnect.io/application"] == "team-web"

    remove(federation, "team-web")
    assert "web" not in deployments(k8s, host, "team")  # adopted: now its own, so removed
    for cluster in FOG:
        assert namespace_live(k8s, cluster, "team")  # kubectl made the namespace: it stays
        if cluster != host:
            assert "qonnect.io/application" not in deployments(k8s, cluster, "team")["web"]["labels"]
        kubectl(federation, cluster, "delete", "namespace", "team", "--wait=false")


def test_removal_keeps_a_namespace_holding_a_bare_pod(federation, k8s, tmp_path):
    spec = write_spec(
        tmp_path, "pod-keep", "pod-keep", [{"name": "web", "tier": "fog", "manifests": web("web")}]
    )
    assert recap(deploy(federation, spec))["failed"] == 0
    host = placed(federation, "pod-keep")["web"][0]
    assert wait_ready(k8s, host, "pod-keep", ["web"])["web"]["ready"] >= 1
    kubectl(federation, host, "-n", "pod-keep", "run", "debug", "--image=busybox", "--restart=Never")

    remove(federation, "pod-keep")
    assert not deployments(k8s, host, "pod-keep")  # the application's own objects went
    assert k8s(host)[0].read_namespaced_pod("debug", "pod-keep").metadata.name == "debug"
    assert namespace_live(k8s, host, "pod-keep")  # the team's bare Pod keeps the namespace
    kubectl(federation, host, "delete", "namespace", "pod-keep", "--wait=false")
