"""benchmarks/deploy.py --case shop: the 14-service application comes from ONE multi-document
release file, split over the three tiers by {file, select} entries without changing the file,
and loads as the spec format reads it (no testbed needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application_file

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("bench_deploy", ROOT / "benchmarks" / "deploy.py")
assert _spec and _spec.loader
deploy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deploy)


def test_shop_is_fourteen_services_from_one_file_over_three_tiers(tmp_path: Path) -> None:
    spec = deploy.write_shop(tmp_path)
    release = tmp_path / "shop.manifests"
    before = release.read_text()
    docs = list(yaml.safe_load_all(before))
    assert [d["kind"] for d in docs].count("Deployment") == 14
    assert "&id" not in before  # plain YAML, as upstream writes it (no anchors)
    written = yaml.safe_load(spec.read_text())
    entries = [m for s in written["spec"]["services"] for m in s["manifests"]]
    assert all(set(m) == {"file", "select"} and m["file"] == "shop.manifests" for m in entries)

    app = load_application_file(str(spec))
    assert release.read_text() == before
    assert len(app.services) == 14
    assert {s.tier for s in app.services} == {"cloud", "fog", "edge"}
    kinds = [m["kind"] for s in app.services for m in s.manifests]
    assert kinds.count("Deployment") == 14 and kinds.count("Service") == 14 and kinds.count("Namespace") == 1
    for svc in app.services:  # each service got exactly its own documents
        assert {m["metadata"]["name"] for m in svc.manifests if m["kind"] != "Namespace"} == {svc.name}


def test_percentile_and_summary() -> None:
    assert deploy.percentile([3.0, 1.0, 2.0], 99) == 3.0
    assert deploy.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert deploy.summary([1.0, 3.0, 2.0]) == {"median": 2.0, "p99": 3.0, "runs": [1.0, 3.0, 2.0]}
