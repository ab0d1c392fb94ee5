"""qonnect.core.application and qonnect.core.placement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.modules import application, placement

ROOT = Path(__file__).resolve().parents[4]
ENERGY = str(ROOT / "examples" / "bookinfo" / "energy-first.yml")
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())


@pytest.fixture(autouse=True)
def paper_inventory(kb):
    """The application module stores a spec only once it places on the KB's inventory."""
    kb.inventory_doc = PAPER


def test_unplaceable_spec_is_not_stored(run_module, kb):
    """Issue 13.5: an impossible maxLatency is refused and never becomes the current version."""
    assert run_module(application, {"src": ENERGY})["version"] == 1
    spec = yaml.safe_load(Path(ENERGY).read_text())
    for service in spec["spec"]["services"]:
        for entry in service["manifests"]:
            entry["file"] = str(Path(ENERGY).parent / entry["file"])
    spec["spec"]["services"][0].setdefault("constraints", {})["maxLatency"] = [
        {"from": "edge-1", "ms": 0.001}
    ]
    out = run_module(application, {"spec": spec})
    assert out["failed"] and out["msg"].startswith("not stored: the spec cannot be placed")
    assert "maxLatency" in out["msg"] and kb.writes == 1
    assert kb.apps["bookinfo"]["version"] == 1


def test_store_inlines_manifests_and_is_idempotent(run_module, kb):
    out = run_module(application, {"src": ENERGY}, diff=True)
    assert out["changed"] and out["version"] == 1
    assert out["application"]["name"] == "bookinfo"
    stored = kb.apps["bookinfo"]["spec"]
    kinds = {m["kind"] for s in stored["spec"]["services"] for m in s["manifests"]}
    assert {"Deployment", "Service"} <= kinds  # file references replaced by the manifests
    again = run_module(application, {"src": ENERGY}, check_mode=True)
    assert again["changed"] is False and again["version"] == 1
    assert run_module(application, {"src": ENERGY})["changed"] is False and kb.writes == 1


def test_every_error_is_reported(run_module, kb):
    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": "x"},
        "spec": {"objective": {"energy": 2}, "services": [{"name": "a", "tier": "cloude"}]},
    }
    out = run_module(application, {"spec": spec})
    assert out["failed"]
    assert any(e.startswith("spec.objective.energy") for e in out["errors"])
    assert any(e.startswith("spec.services[0].tier") for e in out["errors"])
    assert any(e.startswith("spec.services[0].manifests") for e in out["errors"])
    assert kb.writes == 0


def test_name_must_match(run_module):
    out = run_module(application, {"src": ENERGY, "name": "other"})
    assert out["failed"] and out["msg"].startswith("name:")


def test_absent_and_check_mode(run_module, kb):
    run_module(application, {"src": ENERGY})
    out = run_module(application, {"name": "bookinfo", "state": "absent"}, check_mode=True)
    assert out["changed"] and "bookinfo" in kb.apps
    assert run_module(application, {"name": "bookinfo", "state": "absent"})["changed"]
    assert "bookinfo" not in kb.apps


def test_placement_from_stored_app_with_exclude(run_module, kb):
    run_module(application, {"src": ENERGY})
    kb.inventory_doc = PAPER
    out = run_module(placement, {"name": "bookinfo"})
    assert out["changed"] is False
    first = out["plan"]["services"]["ratings"][0]["cluster"]
    assert first.startswith("edge-")
    other = run_module(placement, {"name": "bookinfo", "exclude": [first], "explain": False})
    assert other["plan"]["services"]["ratings"][0]["cluster"] not in (first,)
    assert kb.writes == 1  # placement wrote nothing


def test_placement_with_given_inventory_and_infeasible(run_module):
    out = run_module(placement, {"src": ENERGY, "inventory": PAPER})
    assert set(out["plan"]["services"]) == {"productpage", "details", "reviews", "ratings"}
    edges = [c["name"] for c in PAPER["clusters"] if c["tier"] == "edge"]
    bad = run_module(placement, {"src": ENERGY, "inventory": PAPER, "exclude": edges})
    assert bad["failed"] and bad["service"] == "ratings"


@pytest.mark.parametrize("scorer", ["borda", "weighted"])
def test_scorers(run_module, scorer):
    out = run_module(placement, {"src": ENERGY, "inventory": PAPER, "scorer": scorer})
    assert out["plan"]["scorer"] == scorer


def test_rollback_to_stores_an_older_spec_as_the_newest_version(run_module, kb):
    """Issue 34.5: the application module rolls back through the KB's /rollback; check mode
    changes nothing, the diff shows the spec before and after, a second run changes nothing."""
    run_module(application, {"src": ENERGY})
    spec = kb.apps["bookinfo"]["spec"]
    changed = json.loads(json.dumps(spec))
    changed["spec"]["objective"] = {"energy": 0.5, "cost": 0.5}
    assert run_module(application, {"spec": changed})["version"] == 2
    writes = kb.writes
    check = run_module(application, {"name": "bookinfo", "rollback_to": 1}, check_mode=True, diff=True)
    assert check["changed"] and not check.get("failed"), check
    assert kb.writes == writes and kb.apps["bookinfo"]["version"] == 2
    assert check["diff"]["before"]["objective"] != check["diff"]["after"]["objective"]
    done = run_module(application, {"name": "bookinfo", "rollback_to": 1})
    assert done["changed"] and done["version"] == 3, done
    assert done["rollback"]["failing"] == 2 and done["rollback"]["restores"] == 1
    assert kb.apps["bookinfo"]["spec"] == kb.versions["bookinfo"][0]["spec"]
    again = run_module(application, {"name": "bookinfo", "rollback_to": 1})
    assert again["changed"] is False and kb.apps["bookinfo"]["version"] == 3
    missing = run_module(application, {"name": "bookinfo", "rollback_to": 9})
    assert missing["failed"] and missing["msg"].startswith("rollback_to:") and "1 to 3" in missing["msg"]
    both = run_module(application, {"name": "bookinfo", "rollback_to": 1, "src": ENERGY})
    assert both["failed"] and "mutually exclusive" in both["msg"]
    nameless = run_module(application, {"rollback_to": 1})
    assert nameless["failed"] and "name" in nameless["msg"]
