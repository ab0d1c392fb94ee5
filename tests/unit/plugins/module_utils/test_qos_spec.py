"""QoS spec loading: both formats, every error at once, round trip, JSON Schema agreement."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    Application,
    QosSpecError,
    load_application,
    load_application_file,
    parse_quantity,
)
from support import qonnect_reference

ROOT = Path(__file__).resolve().parents[4]
BOOKINFO = ROOT / "examples" / "bookinfo"
SCHEMA = json.loads((ROOT / "docs" / "qos-spec.schema.json").read_text())
DEPLOY = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}},
                    {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                ],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
            }
        }
    },
}


def spec(**service) -> dict:
    svc = {"name": "web", "manifests": [DEPLOY], **service}
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": "demo"},
        "spec": {"objective": {"energy": 1}, "services": [svc]},
    }


def errors_of(data, **kw) -> list[str]:
    with pytest.raises(QosSpecError) as info:
        load_application(data, **kw)
    return info.value.errors


@pytest.mark.parametrize("name", ["energy-first", "cost-first", "performance-first", "latency-first"])
def test_bookinfo_specs_place_tiers_as_qonnect(name):
    app = load_application_file(str(BOOKINFO / f"{name}.yml"))
    assert app.name == "bookinfo" and app.namespace == "bookinfo"
    assert {s.name: s.tier for s in app.services} == {
        "productpage": "cloud",
        "details": "fog",
        "reviews": "fog",
        "ratings": "edge",
    }
    reviews = app.service("reviews")
    assert [m["metadata"]["name"] for m in reviews.manifests if m["kind"] == "Deployment"] == [
        "reviews-v1",
        "reviews-v2",
        "reviews-v3",
    ]
    assert reviews.requests == {"cpu": 0.3, "memory": 3 * 256 * 2**20, "ephemeral_storage": 0}
    images = {
        c["image"]
        for s in app.services
        for m in s.manifests
        if m["kind"] == "Deployment"
        for c in m["spec"]["template"]["spec"]["containers"]
    }
    assert (
        all(re.fullmatch(r"docker\.io/istio/examples-bookinfo-\w+-v\d:1\.20\.2", i) for i in images)
        and len(images) == 6
    )


def test_requests_follow_kubernetes_effective_request():
    svc = load_application(spec()).services[0]
    # containers: 0.25 + 1 (limit stands in) = 1.25 < init 2 -> 2 cpu; memory 128Mi + 1Gi
    assert svc.requests["cpu"] == 2.0
    assert svc.requests["memory"] == 128 * 2**20 + 2**30


def test_round_trip_is_json_serialisable_and_lossless():
    app = load_application_file(str(BOOKINFO / "latency-first.yml"))
    data = json.loads(json.dumps(app.to_dict()))
    again = Application.from_dict(data)
    assert again.to_dict() == app.to_dict()
    assert again.service("productpage").max_latency == [{"from": "edge-1", "ms": 45.0}]
    assert again.service("productpage").depends_on == ["details", "reviews"]


def test_qonnect_original_format_converts_to_one_service_per_tier():
    app = load_application_file(str(BOOKINFO / "qonnect-original.yml"))
    assert app.source_format == "swarmchestrate.tu-berlin.de/v1"
    assert app.objective == {"energy": 0.8, "cost": 0.1, "performance": 0.1, "latency": 0.0}
    assert [(s.name, s.tier, s.replicas, s.spread) for s in app.services] == [
        ("cloud-svc", "cloud", 1, 1),
        ("fog-svc", "fog", 1, 1),
        ("edge-svc", "edge", 1, 1),
    ]
    fog = app.service("fog-svc")
    assert {m["metadata"]["name"] for m in fog.manifests if m["kind"] == "Deployment"} == {
        "details-v1",
        "reviews-v1",
        "reviews-v2",
        "reviews-v3",
    }


def test_qonnect_bundle_as_yaml_text():
    text = yaml.safe_dump_all([DEPLOY, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}])
    app = load_application(
        {
            "apiVersion": "swarmchestrate.tu-berlin.de/v1",
            "kind": "Application",
            "metadata": {"name": "x", "qos": {"pricing": 1}},
            "edge_svc": text,
        }
    )
    assert [s.name for s in app.services] == ["edge-svc"]
    assert len(app.services[0].manifests) == 2 and app.objective["cost"] == 1.0


def test_every_error_is_reported_at_once_with_its_path():
    data = spec(tier="cloude", replicas=0, dependsOn=["nope"])
    data["spec"]["objective"] = {"energy": 1.5, "speed": 1}
    data["spec"]["services"].append({"name": "Bad_Name", "manifests": [{"kind": "Pod"}]})
    errs = errors_of(data)
    assert "spec.services[0].tier: 'cloude' is not one of cloud, fog, edge, any" in errs
    assert "spec.services[0].replicas: 0 is not an integer >= 1" in errs
    assert "spec.services[0].dependsOn: 'nope' is not a service of this application" in errs
    assert "spec.objective.energy: 1.5 is not a number between 0 and 1" in errs
    assert any(e.startswith("spec.objective.speed: unknown field") for e in errs)
    assert any(e.startswith("spec.services[1].name: 'Bad_Name' is not a DNS label") for e in errs)
    assert "spec.services[1].manifests[0].apiVersion: is required (a non-empty string)" in errs
    assert len(errs) >= 7


@pytest.mark.parametrize(
    "service, expected",
    [
        ({"spread": 3, "replicas": 2}, "spec.services[0].spread: 3 is more than replicas (2)"),
        ({"constraints": {"filter": "tier =="}}, "spec.services[0].constraints.filter: 'tier =='"),
        (
            {"constraints": {"maxLatency": {"from": "x", "ms": -1}}},
            "spec.services[0].constraints.maxLatency.ms: -1 is not a positive number",
        ),
        (
            {"constraints": {"minFree": {"cpu": "lots"}}},
            "spec.services[0].constraints.minFree.cpu: 'lots' is not a non-negative",
        ),
        (
            {"constraints": {"clusterSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}},
            "spec.services[0].constraints.clusterSelector.matchExpressions[0].operator: 'Is' is not",
        ),
        (
            {
                "manifests": [
                    {
                        **DEPLOY,
                        "spec": {
                            "template": {
                                "spec": {
                                    "containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]
                                }
                            }
                        },
                    }
                ]
            },
            "spec.services[0].manifests[0].spec.template.spec.containers[0].resources.requests.cpu: "
            "'lots' is not a Kubernetes quantity",
        ),
        (
            {"manifests": [{"file": "missing.yaml"}]},
            "spec.services[0].manifests[0].file: cannot read manifest file 'missing.yaml'",
        ),
    ],
)
def test_constraint_errors(service, expected, tmp_path):
    errs = errors_of(spec(**service), base_dir=str(tmp_path))
    assert any(e.startswith(expected) for e in errs), errs


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "app.yml"
    bad.write_text("apiVersion: qonnect.io/v1\nkind: Application\nmetadata:\n  name: [x\n")
    with pytest.raises(QosSpecError) as info:
        load_application_file(str(bad))
    assert re.match(rf"{re.escape(str(bad))}:\d+:\d+: YAML syntax error", info.value.errors[0])


def test_manifest_file_syntax_error_and_unknown_api_version(tmp_path):
    (tmp_path / "m.yaml").write_text("kind: Pod\n  bad: indent\n")
    errs = errors_of(spec(manifests=[{"file": "m.yaml"}]), base_dir=str(tmp_path))
    assert any("m.yaml:2:" in e and "YAML syntax error" in e for e in errs)
    assert errors_of({"apiVersion": "v9", "kind": "Application"}) == [
        "apiVersion: 'v9' is not one of qonnect.io/v1, swarmchestrate.tu-berlin.de/v1"
    ]
    assert errors_of("- a list") == ["<spec>: expected a mapping (the Application), got a list"]


def test_quantities():
    assert parse_quantity("250m") == 0.25
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1e3") == 1000.0
    assert parse_quantity(2) == 2.0
    with pytest.raises(ValueError):
        parse_quantity("ten")


def _doc_examples() -> list[dict]:
    text = (ROOT / "docs" / "qos-spec.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    return [yaml.safe_load(b) for b in blocks if b.startswith("apiVersion")]


def test_examples_validate_against_the_json_schema():
    validator = jsonschema.Draft202012Validator(SCHEMA)
    docs = _doc_examples() + [yaml.safe_load(p.read_text()) for p in BOOKINFO.glob("*.yml")]
    assert len(docs) >= 9
    for doc in docs:
        assert not list(validator.iter_errors(doc)), doc["metadata"]["name"]
    broken = spec(tier="cloude")
    assert list(validator.iter_errors(broken))


def test_doc_examples_load(tmp_path):
    (tmp_path / "manifests").mkdir()
    for name in ("productpage", "details", "reviews", "ratings"):
        (tmp_path / "manifests" / f"{name}.yaml").write_text(
            (BOOKINFO / "manifests" / f"{name}.yaml").read_text()
        )
    (tmp_path / "manifests" / "cache.yaml").write_text(yaml.safe_dump(DEPLOY))
    for doc in _doc_examples():
        assert load_application(doc, base_dir=str(tmp_path)).name == doc["metadata"]["name"]


# -- issue 13: every bad spec refused whole, with paths, within bounds -------------------------

SAMPLE = qonnect_reference() / "sample-application"


def test_all_errors_together_with_duplicates():
    text = (
        "apiVersion: qonnect.io/v1\nkind: Application\nmetadata: {name: a}\nspec:\n"
        "  objective: {energy: 1, energy: 0}\n  services:\n  - {name: w, tier: cloud, tier: edge,"
        " replicas: 0, manifests: [{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}]}\n"
    )
    errs = errors_of(text)
    assert [e.split(":")[0] for e in errs] == [
        "spec.objective.energy",
        "spec.services[0].tier",
        "spec.services[0].replicas",
    ]


def test_limits_are_documented():
    from ansible_collections.qonnect.core.plugins.module_utils.qos import LIMITS

    doc = (ROOT / "docs" / "qos-spec.md").read_text()
    section = doc[doc.index("## Limits") :]
    for name, value in LIMITS.items():
        assert f"`{name}`" in section and f"{value:,}".replace(",", " ") in section.replace(",", " "), name


def test_qonnect_sample_with_its_bundles_loads_unchanged():
    bundles = {
        "cloud_svc": str(SAMPLE / "productpage.yaml"),
        "fog_svc": str(SAMPLE / "review-details.yaml"),
        "edge_svc": str(SAMPLE / "ratings.yaml"),
    }
    app = load_application_file(str(SAMPLE / "application.yaml"), bundles=bundles)
    assert app.name == "istio-sample" and app.labels == {"user-labels-1-key": "user-labels-1-value"}
    assert [(s.name, s.tier) for s in app.services] == [
        ("cloud-svc", "cloud"),
        ("fog-svc", "fog"),
        ("edge-svc", "edge"),
    ]
    fog = app.service("fog-svc")
    assert sorted(m["metadata"]["name"] for m in fog.manifests if m["kind"] == "Deployment") == [
        "details-v1",
        "reviews-v1",
        "reviews-v2",
        "reviews-v3",
    ]
    with pytest.raises(QosSpecError) as info:
        load_application_file(str(SAMPLE / "application.yaml"))
    assert "--bundle cloud_svc=FILE" in info.value.errors[0]


def test_substitute_replaces_placeholders_everywhere():
    from ansible_collections.qonnect.core.plugins.module_utils.qos import QONNECT_PLACEHOLDERS, substitute

    obj = {"data": {"A": "[FOG_CLUSTER_IP]", "B": ["x [EDGE_CLUSTER_IP] y"]}, "n": 1}
    out = substitute(obj, {QONNECT_PLACEHOLDERS["fog"]: "10.0.0.2", QONNECT_PLACEHOLDERS["edge"]: "e"})
    assert out == {"data": {"A": "10.0.0.2", "B": ["x e y"]}, "n": 1}
    assert obj["data"]["A"] == "[FOG_CLUSTER_IP]"


def test_given_mappings_are_bounded_too():
    deep: list = []
    node = deep
    for _level in range(5000):
        node.append([])
        node = node[0]
    data = spec()
    data["spec"]["services"][0]["constraints"] = {"filter": deep}
    errs = errors_of(data)
    assert errs[0].startswith("spec.services[0].constraints.filter") and "deeper than the limit" in errs[0]


def test_cluster_grace_is_validated_with_its_path_and_kept():
    data = spec()
    for good in (0, 45, 604800):
        data["spec"]["clusterGraceSeconds"] = good
        app = load_application(data)
        assert app.cluster_grace_seconds == float(good)
        assert type(app).from_dict(app.to_dict()).cluster_grace_seconds == float(good)
    assert "cluster_grace_seconds" not in load_application(spec()).to_dict()  # unchanged when unset
    for bad in (-1, "soon", True, float("nan"), float("inf"), 10**9):
        data["spec"]["clusterGraceSeconds"] = bad
        assert [e for e in errors_of(data) if e.startswith("spec.clusterGraceSeconds:")], bad
    data["spec"]["clusterGraceSeconds"] = 30
    jsonschema.validate(data, SCHEMA)
    data["spec"]["clusterGraceSeconds"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)


def test_failure_grace_is_validated_with_its_path_and_kept():
    data = spec()
    data["spec"]["failureGraceSeconds"] = 900
    app = load_application(data)
    assert app.failure_grace_seconds == 900.0
    assert type(app).from_dict(app.to_dict()).failure_grace_seconds == 900.0
    assert "failure_grace_seconds" not in load_application(spec()).to_dict()  # unchanged when unset
    for bad in (0, -5, "soon", True, float("nan"), float("inf"), 10**9):
        data["spec"]["failureGraceSeconds"] = bad
        assert [e for e in errors_of(data) if e.startswith("spec.failureGraceSeconds:")], bad
