"""Issue 37: the placement module's ``simulate_failures`` and ``survivability``: the heal the
controller would plan if clusters failed now, for the whole fleet of the KB or for a given
inventory and spec; in check mode the same (nothing is changed either way)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.app_source import load_given
from ansible_collections.qonnect.core.plugins.modules import placement

ROOT = Path(__file__).resolve().parents[4]
ENERGY = str(ROOT / "examples" / "bookinfo" / "energy-first.yml")
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())
HOME = {"productpage": "cloud-1", "details": "fog-1", "reviews": "fog-1", "ratings": "edge-1"}


def placed(where: dict[str, str]) -> dict:
    return {svc: [{"cluster": c, "replicas": 1, "nodes": [f"{c}-worker"]}] for svc, c in where.items()}


@pytest.fixture
def fleet(kb):
    """The KB holds the paper's clusters, Bookinfo where energy-first puts it and ``pinned``,
    whose one service may only run on fog-1."""
    kb.inventory_doc = copy.deepcopy(PAPER)
    kb.inventory_doc["placements"] = {"bookinfo": placed(HOME), "pinned": placed({"web": "fog-1"})}
    app, spec = load_given({"src": ENERGY})
    kb.put_application(app.name, spec)
    kb.put_application(
        "pinned",
        {
            "apiVersion": "qonnect.io/v1",
            "kind": "Application",
            "metadata": {"name": "pinned"},
            "spec": {
                "services": [
                    {
                        "name": "web",
                        "tier": "fog",
                        "constraints": {"clusterSelector": {"matchLabels": {"qonnect.io/profile": "energy"}}},
                        "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}}],
                    }
                ]
            },
        },
    )
    return kb


@pytest.mark.parametrize("check_mode", [False, True])
def test_simulate_failures_of_the_whole_fleet_from_the_kb(run_module, fleet, check_mode):
    writes, events = fleet.writes, len(fleet.events)
    out = run_module(placement, {"simulate_failures": {"clusters": ["fog-1"]}}, check_mode=check_mode)
    assert not out.get("failed"), out
    assert out["changed"] is False and "plan" not in out  # no application asked for: no plan
    sim = out["simulation"]
    assert sim["failed"] == ["fog-1"] and sim["survivable"] is False
    bookinfo = sim["applications"]["bookinfo"]
    assert bookinfo["placed"] and bookinfo["moves"]["details"] == {"from": ["fog-1"], "to": ["fog-2"]}
    assert sim["applications"]["pinned"]["placed"] is False
    assert sim["first_shortfall"]["service"] == "web"
    assert fleet.writes == writes and len(fleet.events) == events  # nothing stored
    rows = {r["cluster"]: r for r in bookinfo["explanation"]["details"]}  # explain: true (default)
    assert rows["fog-1"]["eligible"] is False and rows["fog-2"]["eligible"] is True
    quiet = run_module(placement, {"simulate_failures": {"clusters": ["fog-1"]}, "explain": False})
    assert "explanation" not in quiet["simulation"]["applications"]["bookinfo"]


def test_simulate_failures_by_label_with_a_given_inventory_and_spec(run_module, kb):
    args = {"src": ENERGY, "inventory": PAPER, "simulate_failures": {"labels": {"tier": "edge"}}}
    out = run_module(placement, args)
    assert not out.get("failed"), out
    assert out["plan"]["application"] == "bookinfo"  # the plan as before, beside the simulation
    sim = out["simulation"]
    assert sim["scenario"] == "tier=edge" and sim["failed"] == ["edge-1", "edge-2", "edge-3"]
    assert sim["survivable"] is False and sim["first_shortfall"]["service"] == "ratings"
    # bookinfo is not placed in the given inventory: placed first as a deploy would, and said so
    assert "bookinfo: not placed in the inventory" in json.dumps(out["warnings"])
    assert kb.writes == 0


def test_every_unknown_cluster_and_label_is_an_error_at_once(run_module, fleet):
    args = {"simulate_failures": {"clusters": ["fog-11", "edge-1", "nowhere"], "labels": {"site": "west"}}}
    out = run_module(placement, args)
    assert out["failed"]
    assert out["errors"] == [
        "simulate_failures.clusters[0]: 'fog-11' is not a known cluster (did you mean fog-1?)",
        "simulate_failures.clusters[2]: 'nowhere' is not a known cluster",
        "simulate_failures.labels[0]: no cluster has site=west (no cluster has the label 'site')",
    ]
    assert out["msg"].startswith("cannot simulate these failures (3 errors):")
    assert "known clusters: cloud-1" in out["msg"]


def test_survivability_report(run_module, fleet):
    out = run_module(placement, {"survivability": True, "survivability_labels": ["tier"]}, check_mode=True)
    assert not out.get("failed"), out
    report = out["survivability"]
    assert report["survivable"] is False
    assert report["applications"]["bookinfo"]["violations"] == []
    assert [v["scenario"] for v in report["applications"]["pinned"]["violations"]] == ["cluster fog-1"]
    assert {s["scenario"] for s in report["scenarios"]} >= {"cluster fog-1", "tier=edge"}
    assert "simulation" not in out


def test_a_source_or_a_simulation_is_required(run_module, fleet):
    out = run_module(placement, {})
    assert out["failed"]
    assert "one of name, spec or src is required (unless simulate_failures or survivability)" in out["msg"]
    out = run_module(placement, {"simulate_failures": {}})
    assert (
        out["failed"]
        and "simulate_failures.clusters: name at least one cluster or label to fail" in out["msg"]
    )
