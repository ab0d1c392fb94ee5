"""Issue 34.1 through the modules: a chart declaring ``kubeVersion`` (the public podinfo chart,
unchanged) is rendered for the clusters of the KB's inventory (application, deploy) or of the
placement module's given ``inventory``; a cluster it refuses is ineligible with the reason; the
stored spec keeps the chart's kubeVersion, so later placements judge clusters by it."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.modules import application, placement
from support import project_helm

ROOT = Path(__file__).resolve().parents[4]
PODINFO = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "charts" / "podinfo" / "podinfo-6.14.1.tgz"
CAPS = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "charts" / "capabilities"


@pytest.fixture
def helm_on_path(monkeypatch):
    """The project's helm first on PATH (support.project_helm); none found fails."""
    try:
        bin_dir = project_helm()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def cluster(name: str, version: str) -> dict:
    node = {
        "name": f"{name}-n1",
        "allocatable": {"cpu": 4.0, "memory": 8 * 2**30, "ephemeral_storage": 10**11},
        "requested": {"cpu": 0.0, "memory": 0, "ephemeral_storage": 0},
    }
    return {
        "name": name,
        "tier": "edge",
        "kube_version": version,
        "api_versions": ["v1", "apps/v1"],
        "nodes": [node],
    }


INVENTORY = {"clusters": [cluster("edge-old", "v1.22.17"), cluster("edge-new", "v1.31.2")], "latency_ms": {}}


def spec_file(tmp_path: Path, chart: Path) -> str:
    path = tmp_path / "app.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "qonnect.io/v1",
                "kind": "Application",
                "metadata": {"name": "podinfo"},
                "spec": {"services": [{"name": "web", "manifests": [{"helm": str(chart)}]}]},
            }
        )
    )
    return str(path)


def test_placement_module_renders_for_the_given_inventory(run_module, helm_on_path, tmp_path):
    out = run_module(
        placement, {"src": spec_file(tmp_path, PODINFO), "inventory": INVENTORY, "explain": True}
    )
    assert not out.get("failed"), out
    assert [e["cluster"] for e in out["plan"]["services"]["web"]] == ["edge-new"]
    rows = {r["cluster"]: r for r in out["plan"]["explanation"]["web"]}
    assert rows["edge-old"]["reason"] == "Kubernetes v1.22.17 is outside the chart's kubeVersion >=1.23.0-0"


def test_application_module_renders_for_the_kbs_inventory_and_keeps_the_constraint(
    run_module, kb, helm_on_path, tmp_path
):
    kb.inventory_doc = copy.deepcopy(INVENTORY)
    assert run_module(application, {"src": spec_file(tmp_path, CAPS)})["version"] == 1
    stored = kb.apps["podinfo"]
    (config,) = [m for m in stored["application"]["services"][0]["manifests"] if m["kind"] == "ConfigMap"]
    assert config["data"]["kubeVersion"] == "v1.31.2"  # edge-old is refused by the chart
    assert stored["spec"]["spec"]["services"][0]["constraints"] == {"kubeVersion": [">=1.23.0-0"]}
    assert stored["application"]["services"][0]["constraints"]["kube_version"] == [">=1.23.0-0"]
