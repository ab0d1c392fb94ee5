"""Issue 34.1, on a real emulated cluster: the agent reports its API server's gitVersion and
served group-versions, the KB serves them in the inventory (what the official Kubernetes client
reads from the same server), and a chart rendered for that inventory sees that version and
those group-versions in its ``.Capabilities``."""

from __future__ import annotations

from pathlib import Path

import pytest
from _agent_harness import wait_for
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

ROOT = Path(__file__).resolve().parents[3]
CAPS = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "charts" / "capabilities"

pytestmark = pytest.mark.timeout(300)


def served_by(kubeconfig: str) -> tuple[str, list[str]]:
    """The server's own answer, read with the official client (not the agent's collector)."""
    api = k8s_config.new_client_from_config(config_file=kubeconfig)
    try:
        version = k8s_client.VersionApi(api).get_code().git_version
        core = k8s_client.CoreApi(api).get_api_versions().versions
        groups = k8s_client.ApisApi(api).get_api_versions().groups
    finally:
        api.close()
    return version, sorted({*core, *(v.group_version for g in groups for v in g.versions)})


def test_the_inventory_carries_what_the_api_server_says(start_agent, kb, helm_on_path, tmp_path):
    agent = start_agent("edge-1")
    version, apis = served_by(agent.cluster["kubeconfig"])
    entry = wait_for(
        lambda: next(
            (c for c in kb.admin.inventory()["clusters"] if c["name"] == "edge-1" and c["kube_version"]), None
        ),
        60,
        "edge-1's server version in the KB's inventory",
    )
    assert entry["kube_version"] == version
    assert entry["api_versions"] == apis
    assert {"v1", "apps/v1"} <= set(apis)
    # a cluster whose agent has not reported yet says nothing (and narrows nothing)
    silent = next(c for c in kb.admin.inventory()["clusters"] if c["name"] == "cloud-1")
    assert (silent["kube_version"], silent["api_versions"]) == (None, [])

    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": "caps"},
        "spec": {"services": [{"name": "web", "manifests": [{"helm": str(CAPS)}]}]},
    }
    app = load_application(spec, base_dir=str(tmp_path), clusters=lambda: kb.admin.inventory()["clusters"])
    (config,) = [m for m in app.services[0].manifests if m["kind"] == "ConfigMap"]
    major, minor = version.lstrip("v").split(".")[:2]
    assert config["data"]["kubeVersion"].startswith(f"v{major}.{minor}.")
    assert config["data"]["hpa"] == ("autoscaling/v2" if "autoscaling/v2" in apis else "autoscaling/v1")
