"""Issue 34.1: ``qonnect plan --inventory FILE`` renders a chart that declares ``kubeVersion``
(the public podinfo chart, unchanged) for the file's clusters; the one its kubeVersion refuses
is shown rejected with the reason, the others plan. The project's helm comes first on PATH."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from qonnect.cli import main
from support import project_helm

ROOT = Path(__file__).resolve().parents[3]
PODINFO = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "charts" / "podinfo" / "podinfo-6.14.1.tgz"


@pytest.fixture
def helm_on_path(monkeypatch):
    try:
        bin_dir = project_helm()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def node(cluster: str) -> dict:
    return {
        "name": f"{cluster}-worker",
        "allocatable": {"cpu": 4.0, "memory": 8 * 2**30, "ephemeral_storage": 10**11},
        "requested": {"cpu": 0.0, "memory": 0, "ephemeral_storage": 0},
    }


def test_plan_renders_a_kube_version_chart_for_the_inventory(helm_on_path, tmp_path, capsys):
    (tmp_path / "podinfo.yml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "qonnect.io/v1",
                "kind": "Application",
                "metadata": {"name": "podinfo"},
                "spec": {
                    "objective": {"latency": 1.0},
                    "services": [{"name": "web", "tier": "edge", "manifests": [{"helm": str(PODINFO)}]}],
                },
            }
        )
    )
    inventory = {
        "clusters": [
            {
                "name": "edge-1",
                "tier": "edge",
                "kube_version": "v1.22.17",
                "api_versions": ["v1"],
                "nodes": [node("edge-1")],
            },
            {
                "name": "edge-2",
                "tier": "edge",
                "kube_version": "v1.34.4",
                "api_versions": ["v1"],
                "nodes": [node("edge-2")],
            },
        ]
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    args = ["plan", "--spec", str(tmp_path / "podinfo.yml"), "--inventory", str(tmp_path / "inventory.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "web" in out and "-> edge-2 x1" in out, out
    assert "rejected: Kubernetes v1.22.17 is outside the chart's kubeVersion >=1.23.0-0" in out, out
