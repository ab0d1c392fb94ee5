"""Issue 23: a {helm: CHART_DIR, release, values, valuesFiles} manifest entry is what
``helm template`` renders of a local chart (the project's helm, scripts/build-helm.sh), as the
application's release in its namespace; select/selector split it over services; a missing or
failing helm, a directory without Chart.yaml and unknown keys are errors naming the path."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    QosSpecError,
    load_application,
    load_application_file,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import manifests as manifests_module
from support import project_helm

ROOT = Path(__file__).resolve().parents[4]
CHART = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "charts" / "twotier"


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    """The project's helm (support.project_helm); none found fails the tests, it does not skip them."""
    try:
        return project_helm()
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def helm_on_path(helm_bin, monkeypatch):
    monkeypatch.setenv("PATH", f"{helm_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    return helm_bin


def spec(*services, name="shop", namespace="shop"):
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"objective": {"cost": 1.0}, "services": list(services)},
    }


def service(name, *entries, tier="any"):
    return {"name": name, "tier": tier, "manifests": list(entries)}


def errors(data, base_dir):
    with pytest.raises(QosSpecError) as caught:
        load_application(data, base_dir=str(base_dir))
    return caught.value.errors


def names(svc) -> list[tuple[str, str]]:
    return sorted((m["kind"], m["metadata"]["name"]) for m in svc.manifests)


def test_chart_split_over_two_tiers(helm_on_path):
    web = {"helm": str(CHART), "selector": {"matchLabels": {"app.kubernetes.io/component": "web"}}}
    cache = {
        "helm": str(CHART),
        "select": [{"kind": "Deployment", "name": "shop-cache"}, {"kind": "Service", "name": "shop-cache"}],
    }
    app = load_application(
        spec(service("web", web, tier="edge"), service("cache", cache, tier="fog")), base_dir=str(ROOT)
    )
    by = {s.name: s for s in app.services}
    assert names(by["web"]) == [
        ("Deployment", "shop-web"),
        ("Service", "shop-web"),
        ("ServiceAccount", "shop-web"),
    ]
    assert names(by["cache"]) == [("Deployment", "shop-cache"), ("Service", "shop-cache")]
    # the release is the application, in its namespace; the chart's default values
    for svc in app.services:
        assert {m["metadata"]["namespace"] for m in svc.manifests} == {"shop"}
    deployment = next(m for m in by["web"].manifests if m["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "docker.io/library/nginx:1.27"
    assert pod["containers"][0]["env"][0]["value"] == "shop-cache:6379"
    assert by["web"].requests["cpu"] == pytest.approx(0.1)


def test_values_files_then_values_and_release(helm_on_path, tmp_path):
    (tmp_path / "edge.yaml").write_text(
        "web: {image: docker.io/library/nginx:1.27-alpine, cpu: 200m}\nteam: a\n"
    )
    entry = {
        "helm": str(CHART),
        "release": "front",
        "valuesFiles": ["edge.yaml"],
        "values": {"team": "b"},  # given last: wins over the files, as with helm -f
        "select": [{"kind": "Deployment", "name": "front-web"}],
    }
    app = load_application(spec(service("web", entry), namespace="shops"), base_dir=str(tmp_path))
    (doc,) = app.services[0].manifests
    assert doc["metadata"]["namespace"] == "shops"
    assert doc["metadata"]["labels"]["team"] == "b"
    assert doc["spec"]["template"]["spec"]["containers"][0]["image"] == "docker.io/library/nginx:1.27-alpine"
    assert app.services[0].requests["cpu"] == pytest.approx(0.2)


def test_values_from_yaml_text_with_a_date(helm_on_path, tmp_path):
    """values as the spec's YAML gives them: an unquoted date is a date to the YAML reader, and
    goes to helm as the string helm itself would read."""
    (tmp_path / "app.yml").write_text(
        "apiVersion: qonnect.io/v1\nkind: Application\nmetadata: {name: shop}\nspec:\n  services:\n"
        f"    - name: web\n      manifests:\n        - helm: {CHART}\n"
        "          values: {team: 2024-01-01}\n"
        "          select: [{kind: Deployment, name: shop-web}]\n"
    )
    (doc,) = load_application_file(str(tmp_path / "app.yml")).services[0].manifests
    assert doc["metadata"]["labels"]["team"] == "2024-01-01"


def test_whole_chart_without_select(helm_on_path):
    app = load_application(spec(service("all", {"helm": str(CHART)})), base_dir=str(ROOT))
    kinds = sorted(m["kind"] for m in app.services[0].manifests)
    assert kinds == ["Deployment", "Deployment", "Service", "Service", "ServiceAccount"]


def test_helm_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(manifests_module, "helm_path", lambda: None)
    found = errors(spec(service("a", {"helm": str(CHART)})), tmp_path)
    assert found == [
        f"spec.services[0].manifests[0].helm: helm is needed to render the chart {str(CHART)!r} "
        "and was not found on PATH"
    ]


def test_failing_chart_names_its_path(helm_on_path, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(CHART, bad)
    (bad / "templates" / "broken.yaml").write_text('kind: "{{ .Values.web.image | nosuchfunction }}"\n')
    found = errors(spec(service("a", {"helm": "bad"})), tmp_path)
    assert len(found) == 1, found
    assert found[0].startswith("spec.services[0].manifests[0].helm: helm template 'bad' failed: ")
    assert "nosuchfunction" in found[0]


def test_not_a_chart_and_bad_keys_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    found = errors(
        spec(
            service("a", {"helm": "empty"}),
            service("b", {"helm": str(CHART), "value": {"x": 1}, "valuesFiles": "one.yaml"}),
            service("c", {"file": "x.yaml", "release": "r"}),
            service("d", {"helm": str(CHART), "kustomize": "x"}),
            service("e", {"helm": str(CHART), "values": ["x"]}),
        ),
        tmp_path,
    )
    assert (
        "spec.services[0].manifests[0].helm: 'empty' is not a chart directory (a directory with "
        "Chart.yaml) or a chart archive (.tgz)" in found
    )
    assert any(e.startswith("spec.services[1].manifests[0].value: unknown field") for e in found), found
    assert "spec.services[1].manifests[0].valuesFiles: expected a list of values file paths" in found
    assert any(e.startswith("spec.services[2].manifests[0].release: unknown field") for e in found), found
    assert (
        "spec.services[3].manifests[0]: give one of file, kustomize or helm, not kustomize and helm" in found
    )
    assert "spec.services[4].manifests[0].values: expected a mapping of chart values, got a list" in found


def test_missing_values_file_is_named(tmp_path):
    found = errors(spec(service("a", {"helm": str(CHART), "valuesFiles": ["nope.yaml"]})), tmp_path)
    assert found == ["spec.services[0].manifests[0].valuesFiles[0]: cannot read values file 'nope.yaml'"]


def test_schema_knows_the_helm_entry():
    schema = json.loads((ROOT / "docs" / "qos-spec.schema.json").read_text())
    entry = {
        "helm": "charts/shop",
        "release": "shop",
        "values": {"web": {"replicas": 2}},
        "valuesFiles": ["edge.yaml"],
        "select": [{"kind": "Deployment", "name": "shop-web"}],
    }
    jsonschema.validate(spec(service("a", entry)), schema)
    for bad in ({**entry, "value": {}}, {**entry, "valuesFiles": "edge.yaml"}, {"helm": ""}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(spec(service("a", bad)), schema)


def test_chart_templates_are_plain_yaml():
    """The chart's files are YAML as they are (values only in quoted strings), so the
    collection's YAML lint reads them like any other file."""
    for path in CHART.rglob("*.yaml"):
        assert yaml.safe_load(path.read_text()) is not None, path
