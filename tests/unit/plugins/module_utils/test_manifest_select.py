"""Issue 23: manifest entries pick documents from a multi-document file or a Kustomize directory;
unknown keys are errors naming them; a manifest's namespace is never silently rewritten."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    QosSpecError,
    load_application,
    load_application_file,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import manifests as manifests_module

ROOT = Path(__file__).resolve().parents[4]
RELEASE = ROOT / "examples" / "bookinfo-release"
KUBE_BIN = Path.home() / ".cache" / "qonnect" / "kube" / "v1.34.4" / "bin"


def spec(*services, namespace="shop"):
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": "shop", "namespace": namespace},
        "spec": {"objective": {"cost": 1.0}, "services": list(services)},
    }


def service(name, *entries):
    return {"name": name, "manifests": list(entries)}


def errors(data, base_dir):
    with pytest.raises(QosSpecError) as caught:
        load_application(data, base_dir=str(base_dir))
    return caught.value.errors


@pytest.fixture
def kubectl_on_path(monkeypatch):
    if not (KUBE_BIN / "kubectl").exists():
        pytest.fail(f"the project's kubectl is not built at {KUBE_BIN}")
    monkeypatch.setenv("PATH", f"{KUBE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def kinds(svc):
    return [(m["kind"], m["metadata"]["name"]) for m in svc.manifests]


def test_upstream_release_file_split_over_tiers(kubectl_on_path):
    app = load_application_file(str(RELEASE / "app.yml"))
    assert kinds(app.service("productpage")) == [
        ("Service", "productpage"),
        ("ServiceAccount", "bookinfo-productpage"),
        ("Deployment", "productpage-v1"),
    ]
    assert sorted(kinds(app.service("reviews"))) == [
        ("Deployment", "reviews-v1"),
        ("Deployment", "reviews-v2"),
        ("Deployment", "reviews-v3"),
        ("Service", "reviews"),
        ("ServiceAccount", "bookinfo-reviews"),
    ]
    # rendered by kubectl kustomize: the overlay's image pin is in the manifests
    ratings = {m["kind"]: m for m in app.service("ratings").manifests}
    image = ratings["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "docker.io/istio/examples-bookinfo-ratings-v1:1.20.2"
    assert {s.tier for s in app.services} == {"cloud", "fog", "edge"}
    # every object of the file is used exactly once
    used = [k for s in app.services for k in kinds(s)]
    assert len(used) == len(set(used)) == 14


def test_unknown_key_and_unmatched_selection_are_named(tmp_path):
    (tmp_path / "all.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata: {name: a, labels: {app: a}}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
    )
    found = errors(
        spec(
            service("one", {"file": "all.yaml", "selct": [{"kind": "Service", "name": "a"}]}),
            service("two", {"file": "all.yaml", "select": [{"kind": "Service", "name": "nope"}]}),
            service("three", {"file": "all.yaml", "kustomize": "x"}),
        ),
        tmp_path,
    )
    assert any(e.startswith("spec.services[0].manifests[0].selct: unknown field") for e in found), found
    assert any(
        e.startswith("spec.services[1].manifests[0].select[0]: no Service named 'nope'") for e in found
    )
    assert any("spec.services[2].manifests[0]: give one of file, kustomize or helm" in e for e in found)


def test_label_selector_picks_documents(tmp_path):
    (tmp_path / "all.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata: {name: a, labels: {app: a}}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, labels: {app: b}}\n"
    )
    app = load_application(
        spec(
            service("a", {"file": "all.yaml", "selector": {"matchLabels": {"app": "a"}}}),
            service("b", {"file": "all.yaml", "select": [{"kind": "ConfigMap", "name": "b"}]}),
        ),
        base_dir=str(tmp_path),
    )
    assert kinds(app.service("a")) == [("Service", "a")]
    assert kinds(app.service("b")) == [("ConfigMap", "b")]


def test_kustomize_without_kubectl_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "kustomization.yaml").write_text("resources: []\n")
    monkeypatch.setattr(manifests_module, "kubectl_path", lambda: None)
    found = errors(spec(service("a", {"kustomize": "k"})), tmp_path)
    assert found == [
        "spec.services[0].manifests[0].kustomize: kubectl is needed to render a Kustomize directory "
        "and was not found on PATH"
    ]


def test_kustomize_failure_is_reported(tmp_path, kubectl_on_path):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "kustomization.yaml").write_text("resources: [missing.yaml]\n")
    found = errors(spec(service("a", {"kustomize": "k"})), tmp_path)
    assert len(found) == 1 and found[0].startswith(
        "spec.services[0].manifests[0].kustomize: kubectl kustomize"
    )


def test_namespace_manifest_and_foreign_namespace(tmp_path):
    ns_other = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "elsewhere"}}
    found = errors(spec(service("a", ns_other, cm)), tmp_path)
    assert (
        "spec.services[0].manifests[Namespace other]: a Namespace in the manifests must be the application's namespace 'shop'"
        in found
    )
    assert any(
        e.startswith("spec.services[0].manifests[ConfigMap c].metadata.namespace: 'elsewhere' differs")
        for e in found
    )
    ok = load_application(
        spec(
            service(
                "a",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}},
                {**cm, "metadata": {"name": "c", "namespace": "shop"}},
            )
        ),
        base_dir=str(tmp_path),
    )
    assert [m["kind"] for m in ok.service("a").manifests] == ["Namespace", "ConfigMap"]


def test_adopt_flags_round_trip(tmp_path):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    data = spec({"name": "a", "adopt": True, "manifests": [cm]}, {"name": "b", "manifests": [cm]})
    app = load_application(data, base_dir=str(tmp_path))
    assert app.adopted() == {"a"}
    data["spec"]["adopt"] = True
    again = type(app).from_dict(load_application(data, base_dir=str(tmp_path)).to_dict())
    assert again.adopted() is True
    data["spec"]["adopt"] = "yes"
    assert "spec.adopt: 'yes' is not a boolean (true or false)" in errors(data, tmp_path)


def test_release_example_agrees_with_the_json_schema():
    import json

    import jsonschema
    import yaml

    schema = json.loads((ROOT / "docs" / "qos-spec.schema.json").read_text())
    data = yaml.safe_load((RELEASE / "app.yml").read_text())
    jsonschema.validate(data, schema)
    data["spec"]["services"][0]["manifests"][0]["selct"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"fiel": "all.yaml"}, ["fiel"]),
        ({"chart": "x"}, ["chart"]),  # helm is an entry of its own (test_manifest_helm.py)
        ({"fiel": "all.yaml", "select": [{"kind": "Service", "name": "a"}]}, ["fiel"]),
    ],
)
def test_an_entry_neither_manifest_nor_reference_names_its_keys(tmp_path, entry, named):
    found = errors(spec(service("a", entry)), tmp_path)
    for key in named:
        assert any(e.startswith(f"spec.services[0].manifests[0].{key}: unknown field") for e in found), found
    assert not any("apiVersion" in e and "is required" in e for e in found), found
    if "select" in entry:
        assert "spec.services[0].manifests[0]: select needs file, kustomize or helm beside it" in found


def qonnect_spec(bundle):
    return {
        "apiVersion": "swarmchestrate.tu-berlin.de/v1",
        "kind": "Application",
        "metadata": {"name": "shop", "qos": {"pricing": 1}},
        "spec": {"edge_svc": bundle},
    }


def test_qonnect_bundles_refuse_a_foreign_namespace_too(tmp_path):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "other"}}
    found = errors(qonnect_spec([cm]), tmp_path)
    assert any(
        e.startswith("spec.edge_svc[ConfigMap c].metadata.namespace: 'other' differs") for e in found
    ), found
    (tmp_path / "edge.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: elsewhere}\n")
    data = qonnect_spec("edge.yaml")
    del data["spec"]
    with pytest.raises(QosSpecError) as caught:
        load_application(data, base_dir=str(tmp_path), bundles={"edge_svc": "edge.yaml"})
    assert any(e.startswith("bundles.edge_svc[Namespace elsewhere]:") for e in caught.value.errors)
    same = {**cm, "metadata": {"name": "c", "namespace": "shop"}}
    app = load_application(qonnect_spec([same]), base_dir=str(tmp_path))
    assert [m["metadata"]["name"] for m in app.services[0].manifests] == ["c"]
