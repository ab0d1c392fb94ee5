"""QoS drift through the real placement engine: nothing to do on an unchanged fleet; a move once
another cluster becomes clearly better (here: the current edge cluster's energy use triples)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application_file
from qonnect.controller.detector import Memory, Settings, Snapshot, detect
from qonnect.controller.replan import engine_replanner
from qonnect.controller.statemachine import DecisionLog

REPO = Path(__file__).resolve().parents[4]


def setup_case():
    app = load_application_file(str(REPO / "examples" / "bookinfo" / "energy-first.yml"))
    inventory = json.loads((REPO / "examples" / "inventories" / "paper.json").read_text())
    replan = engine_replanner()
    assert replan is not None
    record = {"name": app.name, "version": 1, "application": app.to_dict()}
    first = replan(record, inventory, {}, (), 0.1)
    assert first is not None
    current = {svc: [dict(e) for e in entries] for svc, entries in first[0].items()}
    inventory["placements"] = {app.name: current}
    return record, inventory, current, replan


def run(record, inventory, replan, now=1000.0):
    log = DecisionLog()
    log.apply({"op": "observe", "app": record["name"], "version": 1, "term": 1, "node": "n"})
    memory = Memory(healthy_since={c["name"]: 0.0 for c in inventory["clusters"]})
    snapshot = Snapshot(inventory, [], [record], now)
    return detect(snapshot, log, memory, Settings(), replan)[0]


def test_unchanged_fleet_has_no_drift():
    record, inventory, current, replan = setup_case()
    for c in inventory["clusters"]:
        c["heartbeat_age"] = 1.0
    # the engine really ran (a replanner that fails says None) and kept the placement
    again = replan(record, inventory, current, (), 0.1)
    assert again is not None and again[0] == current
    assert run(record, inventory, replan) == []


def test_a_bug_in_the_engine_is_not_taken_for_no_drift(monkeypatch):
    """Only 'no plan' (PlacementError) and 'no usable fleet' (InventoryError) mean no drift move;
    anything else is a bug and must surface, not read as a quiet fleet."""
    from ansible_collections.qonnect.core.plugins.module_utils import placement

    record, inventory, current, _replan = setup_case()

    def broken(*args, **kwargs):
        raise TypeError("a bug in the engine")

    monkeypatch.setattr(placement, "place", broken)
    replan = engine_replanner()
    with pytest.raises(TypeError, match="a bug in the engine"):
        replan(record, inventory, current, (), 0.1)


def test_current_cluster_getting_much_worse_is_drift():
    record, inventory, current, replan = setup_case()
    edge = current["ratings"][0]["cluster"]
    worse = copy.deepcopy(inventory)
    for c in worse["clusters"]:
        c["heartbeat_age"] = 1.0
        if c["name"] == edge:
            for n in c["nodes"]:
                n["energy_kwh"] *= 3
    triggers = run(record, worse, replan)
    assert [t.kind for t in triggers] == ["qos-drift"] and "objective" in triggers[0].reason
