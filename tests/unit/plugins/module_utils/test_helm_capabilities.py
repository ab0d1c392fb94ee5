"""Issue 34.1: a chart that declares ``kubeVersion`` renders and plans. The project's helm
defaults to its own release's Kubernetes (v1.34, not v1.20); a chart is rendered for the
clusters it may go to (the lowest version and the common group-versions of the inventory's
clusters its kubeVersion admits); a cluster the chart's kubeVersion refuses is ineligible, with
the reason in the plan's explanation, instead of failing the render. The public podinfo chart
(charts/podinfo, unchanged, see its SOURCE.md) is one of the charts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils import kube_versions
from ansible_collections.qonnect.core.plugins.module_utils.app_source import inline
from ansible_collections.qonnect.core.plugins.module_utils.placement import (
    InventoryError,
    PlacementError,
    place,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import QosSpecError, load_application
from support import project_helm

ROOT = Path(__file__).resolve().parents[4]
CHARTS = Path(__file__).resolve().parent / "charts"
PODINFO = CHARTS / "podinfo" / "podinfo-6.14.1.tgz"
CAPS = CHARTS / "capabilities"


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    """The project's helm (support.project_helm); none found fails the tests."""
    try:
        return project_helm()
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def helm_on_path(helm_bin, monkeypatch):
    monkeypatch.setenv("PATH", f"{helm_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    return helm_bin


def spec(entry: dict, name: str = "shop", constraints: dict | None = None) -> dict:
    service = {"name": "web", "manifests": [entry]}
    if constraints:
        service["constraints"] = constraints
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": name},
        "spec": {"objective": {"cost": 1.0}, "services": [service]},
    }


def cluster(name: str, version: str | None, apis: list[str] | None = None, tier: str = "edge") -> dict:
    entry: dict = {
        "name": name,
        "tier": tier,
        "nodes": [
            {
                "name": f"{name}-n1",
                "allocatable": {"cpu": 4.0, "memory": 8 * 2**30, "ephemeral_storage": 10**11},
                "requested": {"cpu": 0.0, "memory": 0, "ephemeral_storage": 0},
            }
        ],
    }
    if version is not None:
        entry["kube_version"] = version
    if apis is not None:
        entry["api_versions"] = apis
    return entry


BASE_APIS = ["v1", "apps/v1", "autoscaling/v2", "batch/v1"]
FLEET = [
    cluster("edge-new", "v1.34.4", [*BASE_APIS, "monitoring.coreos.com/v1"]),
    cluster("edge-mid", "v1.30.2+k3s1", [*BASE_APIS, "monitoring.coreos.com/v1"]),
    cluster("edge-old", "v1.22.17", ["v1", "apps/v1", "autoscaling/v2beta2"]),
]


def config(app) -> dict:
    (cm,) = [m for m in app.services[0].manifests if m["kind"] == "ConfigMap"]
    return cm["data"]


def test_the_projects_helm_defaults_to_its_own_kubernetes(helm_bin):
    """Built with helm's Makefile's link flags: v1.34 (its client-go), not helm's v1.20."""
    done = subprocess.run(
        [str(helm_bin / "helm"), "template", "x", str(CAPS)], capture_output=True, text=True, check=True
    )
    assert 'kubeVersion: "v1.34.0"' in done.stdout


def test_public_chart_with_kube_version_renders_without_an_inventory(helm_on_path, tmp_path):
    """podinfo as upstream ships it (kubeVersion >=1.23.0-0), as a chart archive: helm's default
    admits it; its kubeVersion becomes the service's constraint."""
    app = load_application(spec({"helm": str(PODINFO)}, name="podinfo"), base_dir=str(tmp_path))
    kinds = sorted((m["kind"], m["metadata"]["name"]) for m in app.services[0].manifests)
    assert kinds == [("Deployment", "podinfo"), ("Service", "podinfo")]
    assert app.services[0].kube_version == [">=1.23.0-0"]
    assert app.services[0].requests["cpu"] > 0


def test_chart_rendered_for_the_clusters_it_may_go_to(helm_on_path, tmp_path):
    """The lowest version and the common group-versions of the clusters the chart admits:
    edge-old (v1.22) is refused by kubeVersion and narrows nothing."""
    app = load_application(spec({"helm": str(CAPS)}), base_dir=str(tmp_path), clusters=FLEET)
    data = config(app)
    assert data["kubeVersion"] == "v1.30.2"
    assert data["minor"] == "30"
    assert data["hpa"] == "autoscaling/v2"
    assert data["monitoring"] == "true"  # served by both admitted clusters


def test_capabilities_follow_the_inventory(helm_on_path, tmp_path):
    """A group-version one admitted cluster lacks is not claimed; a lazily given inventory is
    asked once, only because the spec has a chart."""
    asked: list[int] = []

    def clusters() -> list:
        asked.append(1)
        return [*FLEET[:1], cluster("edge-plain", "v1.28.0", BASE_APIS)]

    app = load_application(spec({"helm": str(CAPS)}), base_dir=str(tmp_path), clusters=clusters)
    data = config(app)
    assert (data["kubeVersion"], data["monitoring"], data["sidecars"]) == ("v1.28.0", "false", "false")
    assert asked == [1]
    inline_only = spec({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    load_application(inline_only, base_dir=str(tmp_path), clusters=clusters)
    assert asked == [1]


def test_a_cluster_the_chart_refuses_is_ineligible_with_the_reason(helm_on_path, tmp_path):
    app = load_application(
        spec({"helm": str(PODINFO)}, name="podinfo"), base_dir=str(tmp_path), clusters=FLEET
    )
    plan = place(app, {"clusters": FLEET}).to_dict()
    rows = {r["cluster"]: r for r in plan["explanation"]["web"]}
    assert rows["edge-old"]["eligible"] is False
    assert rows["edge-old"]["reason"] == "Kubernetes v1.22.17 is outside the chart's kubeVersion >=1.23.0-0"
    assert rows["edge-new"]["eligible"] and rows["edge-mid"]["eligible"]
    assert {e["cluster"] for e in plan["services"]["web"]} <= {"edge-new", "edge-mid"}
    with pytest.raises(PlacementError) as caught:
        place(app, {"clusters": [FLEET[2]]})
    assert "kubeVersion '>=1.23.0-0'" in str(caught.value)


def test_a_cluster_without_a_reported_version_is_not_judged(helm_on_path, tmp_path):
    app = load_application(spec({"helm": str(PODINFO)}, name="podinfo"), base_dir=str(tmp_path))
    plan = place(app, {"clusters": [cluster("edge-file", None)]}).to_dict()
    assert plan["services"]["web"][0]["cluster"] == "edge-file"


def test_the_constraint_outlives_inlining(helm_on_path, tmp_path):
    """What the KB stores (manifests inline) keeps the chart's kubeVersion, so the controller's
    later placements judge clusters by it too."""
    raw = spec({"helm": str(PODINFO)}, name="podinfo")
    app = load_application(raw, base_dir=str(tmp_path))
    body = inline(raw, app)
    assert body["spec"]["services"][0]["constraints"] == {"kubeVersion": [">=1.23.0-0"]}
    stored = load_application(body, base_dir=str(tmp_path))
    assert stored.services[0].kube_version == [">=1.23.0-0"]
    assert type(app).from_dict(stored.to_dict()).services[0].kube_version == [">=1.23.0-0"]


def test_spec_kube_version_is_checked(tmp_path):
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    app = load_application(spec(manifest, constraints={"kubeVersion": ">=1.30"}), base_dir=str(tmp_path))
    assert app.services[0].kube_version == [">=1.30"]
    with pytest.raises(QosSpecError) as caught:
        load_application(
            spec(manifest, constraints={"kubeVersion": [">=1.30", ">=one"]}), base_dir=str(tmp_path)
        )
    assert caught.value.errors == [
        "spec.services[0].constraints.kubeVersion[1]: '>=one' is not a list of comparisons "
        "(e.g. '>=1.23.0-0 <1.35.0')"
    ]


def test_inventory_fields_are_checked():
    with pytest.raises(InventoryError) as caught:
        place(
            load_application(spec({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
            {"clusters": [cluster("a", "latest", "apps/v1")]},  # type: ignore[arg-type]
        )
    assert caught.value.errors == [
        "clusters[0].kube_version: 'latest' is not a Kubernetes version (e.g. v1.34.4)",
        "clusters[0].api_versions: expected a list of API group-versions (e.g. apps/v1)",
    ]


@pytest.mark.parametrize(
    ("constraint", "version", "holds"),
    [
        (">=1.23.0-0", "v1.34.4", True),
        (">=1.23.0-0", "v1.22.17", False),
        (">=1.23.0-0", "v1.28.3-eks-4f4795d", True),  # helm reads the leading numbers only
        (">=1.19.0-0 <1.30.0-0", "v1.30.0", False),
        (">= 1.21, < 1.35", "v1.34.1", True),
        ("^1.20", "v1.34.0", True),
        ("~1.20", "v1.21.0", False),
        ("1.2 - 1.4.5", "v1.4.6", False),
        (">1.22", "v1.22.9", False),
        ("<=1.22", "v1.22.9", True),
        ("1.23.x || >=1.30", "v1.31.0", True),
        ("1.23.x || >=1.30", "v1.24.0", False),
        ("!=1.25.0", "v1.25.0", False),
    ],
)
def test_constraints_as_helm_checks_them(constraint, version, holds):
    assert kube_versions.satisfies(constraint, kube_versions.kube_version(version)) is holds


def test_render_target_rule():
    assert kube_versions.render_target(FLEET, [">=1.23.0-0"]) == (
        "v1.30.2",
        sorted([*BASE_APIS, "monitoring.coreos.com/v1"]),
    )
    assert kube_versions.render_target(FLEET) == ("v1.22.17", ["apps/v1", "v1"])
    assert kube_versions.render_target([cluster("x", None)]) == (None, [])
    assert kube_versions.render_target(FLEET, [">=1.40"]) == (None, [])
