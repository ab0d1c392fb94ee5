"""Issue 34.6: a cluster name the inventory does not know, in ``exclude``, is an error naming it
and the known names, in deploy, placement and ``qonnect plan``; nothing is stored or applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement.references import (
    UnknownClusterError,
    check_cluster_names,
)
from ansible_collections.qonnect.core.plugins.modules import deploy, placement
from qonnect.cli import main

ROOT = Path(__file__).resolve().parents[4]
ENERGY = str(ROOT / "examples" / "bookinfo" / "energy-first.yml")
PAPER_FILE = ROOT / "examples" / "inventories" / "paper.json"
PAPER = json.loads(PAPER_FILE.read_text())


def test_every_unknown_name_is_listed_with_the_known_ones():
    with pytest.raises(UnknownClusterError) as err:
        check_cluster_names(PAPER, exclude=["edge-11", "cloud-1", "nowhere"])
    assert err.value.errors == [
        "exclude[0]: 'edge-11' is not a known cluster (did you mean edge-1?)",
        "exclude[2]: 'nowhere' is not a known cluster",
    ]
    msg = err.value.fail_fields()["msg"]
    assert msg.startswith("unknown clusters (2 errors): exclude[0]: 'edge-11'")
    assert "known clusters: cloud-1, cloud-2" in msg and "edge-1" in msg
    check_cluster_names(PAPER, exclude=["edge-1"])  # known names pass
    check_cluster_names(PAPER, exclude=None)


def test_placement_module_refuses_a_typo(run_module, kb):
    out = run_module(placement, {"src": ENERGY, "inventory": PAPER, "exclude": ["edge-11"]})
    assert out["failed"] and "'edge-11' is not a known cluster (did you mean edge-1?)" in out["msg"]
    assert out["errors"] == ["exclude[0]: 'edge-11' is not a known cluster (did you mean edge-1?)"]
    assert "known clusters: cloud-1" in out["msg"]


def test_deploy_refuses_a_typo_and_changes_nothing(run_module, kb, federation):
    _clusters, log = federation
    writes, events = kb.writes, len(kb.events)
    out = run_module(deploy, {"src": ENERGY, "exclude": ["edge-11"]})
    assert out["failed"] and "'edge-11' is not a known cluster" in out["msg"]
    assert not log and kb.writes == writes and len(kb.events) == events  # nothing stored or applied
    # with a given plan the exclusions are still the stored policy: checked all the same
    plan = {"services": {"ratings": [{"cluster": "edge-1", "replicas": 1}]}}
    out = run_module(deploy, {"name": "bookinfo", "plan": plan, "exclude": ["edge-11"]})
    assert out["failed"] and "'edge-11' is not a known cluster" in out["msg"]
    assert not log and kb.writes == writes


def test_a_controller_run_is_not_held_by_a_cluster_removed_since(run_module, kb, federation):
    """A fenced (controller) run's exclusions are its own decisions': a stale name is harmless."""
    out = run_module(deploy, {"name": "bookinfo", "exclude": ["gone-1"], "fencing": {"term": 1, "seq": 1}})
    assert not out.get("failed"), out


def test_qonnect_plan_refuses_a_typo(capsys):
    args = ["plan", "--spec", ENERGY, "--inventory", str(PAPER_FILE), "--exclude", "edge-11"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "'edge-11' is not a known cluster (did you mean edge-1?)" in err
    assert "known clusters: cloud-1" in err and "Traceback" not in err
