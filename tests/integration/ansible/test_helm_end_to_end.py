"""Issue 23, end to end on the emulator: a local Helm chart (tests/unit/plugins/module_utils/
charts/twotier), rendered by the project's helm (scripts/build-helm.sh) through {helm: CHART_DIR}
entries, split over two tiers with selector/select, deployed with the deploy playbook, idempotent
on a second run, and removed."""

from __future__ import annotations

import time

import pytest
import yaml
from ansible_federation import ROOT, recap

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHART = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "charts" / "twotier"


def ready(k8s, cluster: str, namespace: str, name: str, timeout: float = 60.0) -> bool:
    apps = k8s(cluster)[1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {d.metadata.name: d for d in apps.list_namespaced_deployment(namespace).items}
        if name in found and (found[name].status.ready_replicas or 0) >= 1:
            return True
        time.sleep(0.3)
    return False


def test_chart_deployed_over_two_tiers(federation, k8s, tmp_path, helm_on_path):
    (tmp_path / "cache-values.yaml").write_text("cache: {cpu: 20m}\n")
    chart = {"helm": str(CHART), "valuesFiles": ["cache-values.yaml"], "values": {"team": "qonnect"}}
    spec = tmp_path / "charted.yml"
    spec.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "qonnect.io/v1",
                "kind": "Application",
                "metadata": {"name": "charted", "namespace": "charted"},
                "spec": {
                    "objective": {"latency": 1.0},
                    "services": [
                        {
                            "name": "web",
                            "tier": "edge",
                            "dependsOn": ["cache"],
                            "manifests": [
                                {**chart, "selector": {"matchLabels": {"app.kubernetes.io/component": "web"}}}
                            ],
                        },
                        {
                            "name": "cache",
                            "tier": "fog",
                            "manifests": [
                                {
                                    **chart,
                                    "select": [
                                        {"kind": "Deployment", "name": "charted-cache"},
                                        {"kind": "Service", "name": "charted-cache"},
                                    ],
                                }
                            ],
                        },
                    ],
                },
            },
            sort_keys=False,
        )
    )
    result = federation.playbook("qonnect.core.deploy", "-e", f"app_file={spec}")
    assert recap(result)["failed"] == 0, result.stdout + result.stderr
    current = federation.kb().get_placement("charted")["current"]
    web, cache = current["web"][0]["cluster"], current["cache"][0]["cluster"]
    assert web.startswith("edge-") and cache.startswith("fog-")

    assert ready(k8s, web, "charted", "charted-web") and ready(k8s, cache, "charted", "charted-cache")
    core_web, apps_web = k8s(web)
    deployment = apps_web.read_namespaced_deployment("charted-web", "charted")
    assert deployment.metadata.labels["team"] == "qonnect"  # the inline value
    assert deployment.metadata.labels["qonnect.io/application"] == "charted"
    assert deployment.metadata.annotations["qonnect.io/owner"] == "charted/charted"
    assert core_web.read_namespaced_service_account("charted-web", "charted")
    assert "charted-cache" not in {
        d.metadata.name for d in apps_web.list_namespaced_deployment("charted").items
    }
    # web reaches its cache on the fog cluster through the address stub
    stub = core_web.read_namespaced_service("charted-cache", "charted")
    assert stub.spec.type == "ExternalName" and cache in stub.spec.external_name
    cache_pod = k8s(cache)[1].read_namespaced_deployment("charted-cache", "charted").spec.template.spec
    assert cache_pod.containers[0].resources.requests["cpu"] == "20m"  # the values file

    again = federation.playbook("qonnect.core.deploy", "-e", f"app_file={spec}")
    assert recap(again)["changed"] == 0 and recap(again)["failed"] == 0, again.stdout

    gone = federation.playbook("qonnect.core.remove", "-e", "app=charted")
    assert recap(gone)["failed"] == 0, gone.stdout + gone.stderr
    for cluster in (web, cache):
        assert not k8s(cluster)[1].list_namespaced_deployment("charted").items


PODINFO = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "charts" / "podinfo" / "podinfo-6.14.1.tgz"


def test_public_chart_with_kube_version_deploys(federation, k8s, tmp_path, helm_on_path):
    """Issue 34.1: podinfo as upstream ships it (kubeVersion >=1.23.0-0; see its SOURCE.md) is
    rendered for the clusters the agents report, placed, deployed Ready, unchanged on a second
    run, and removed; the KB's copy keeps the chart's kubeVersion as the service's constraint."""
    kb = federation.kb()
    clusters = wait_reported(kb)
    spec = tmp_path / "podinfo.yml"
    spec.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "qonnect.io/v1",
                "kind": "Application",
                "metadata": {"name": "podinfo", "namespace": "podinfo"},
                "spec": {
                    "objective": {"latency": 1.0},
                    "services": [{"name": "web", "tier": "edge", "manifests": [{"helm": str(PODINFO)}]}],
                },
            }
        )
    )
    result = federation.playbook("qonnect.core.deploy", "-e", f"app_file={spec}")
    assert recap(result)["failed"] == 0, result.stdout + result.stderr
    (entry,) = kb.get_placement("podinfo")["current"]["web"]
    assert entry["cluster"] in clusters
    assert ready(k8s, entry["cluster"], "podinfo", "podinfo")
    stored = kb.get_application("podinfo")["application"]
    assert stored["services"][0]["constraints"]["kube_version"] == [">=1.23.0-0"]

    again = federation.playbook("qonnect.core.deploy", "-e", f"app_file={spec}")
    assert recap(again)["changed"] == 0 and recap(again)["failed"] == 0, again.stdout

    gone = federation.playbook("qonnect.core.remove", "-e", "app=podinfo")
    assert recap(gone)["failed"] == 0, gone.stdout + gone.stderr
    assert not k8s(entry["cluster"])[1].list_namespaced_deployment("podinfo").items


def wait_reported(kb, timeout: float = 60.0) -> set[str]:
    """The clusters whose agents reported their API server's version (every one, in time)."""
    deadline = time.monotonic() + timeout
    while True:
        clusters = kb.inventory()["clusters"]
        if all(c.get("kube_version") for c in clusters) or time.monotonic() > deadline:
            assert all(c.get("kube_version") for c in clusters), [c["name"] for c in clusters]
            return {c["name"] for c in clusters}
        time.sleep(0.5)
