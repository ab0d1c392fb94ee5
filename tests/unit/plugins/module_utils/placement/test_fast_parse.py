"""The inventory's fast paths (issue 21.6) give what the checked paths give, and errors still
name each bad path: a clean node or latency row is accepted in one pass, anything else is
walked field by field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement import (
    Inventory,
    InventoryError,
    model,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import Fleet, np

ROOT = Path(__file__).resolve().parents[5]
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())


def variants() -> list[dict]:
    """Paper nodes with the shapes a KB report may have: nulls, absent fields, ints, labels."""
    out = []
    node = copy.deepcopy(PAPER["clusters"][0]["nodes"][0])
    out.append(node)
    out.append(dict(node, heartbeat_age=None, pressure=None, labels=None))
    out.append({k: v for k, v in node.items() if k not in ("ready", "bandwidth_gbps", "heartbeat_age")})
    out.append(dict(node, allocatable={"cpu": 4, "memory": 2**33}, requested={"cpu": None}))
    out.append(dict(node, energy_kwh=0, price_eur_h=None, labels={"a": 1, 2: "b"}))
    out.append(dict(node, pressure={"memory": 1}, ready=False, schedulable=False))
    out.append(dict(node, taints=[{"key": "k", "effect": "NoSchedule"}]))
    return out


@pytest.mark.parametrize("raw", variants())
def test_a_node_parses_to_the_same_node_on_either_path(raw, monkeypatch):
    fast = model._Reader().node(raw, "n")
    monkeypatch.setattr(model, "_clean_node", lambda _raw: None)
    checked = model._Reader()
    assert fast == checked.node(raw, "n") and not checked.errors


def test_the_fleet_of_a_parsed_inventory_is_the_same_on_either_path(monkeypatch):
    fast = Fleet(Inventory.from_dict(PAPER))
    monkeypatch.setattr(model, "_clean_node", lambda _raw: None)
    checked = Fleet(Inventory.from_dict(PAPER))
    for attr in ("alloc", "free0", "bandwidth", "energy", "price", "node_ok", "latency"):
        assert np.array_equal(getattr(fast, attr), getattr(checked, attr)), attr
    assert fast.lmax == checked.lmax and fast.node_reason == checked.node_reason


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"cpu": -1}, "clusters[0].nodes[0].allocatable.cpu: -1 is not a number >= 0"),
        ({"cpu": True}, "clusters[0].nodes[0].allocatable.cpu: True is not a number >= 0"),
        ({"cpu": "4"}, "clusters[0].nodes[0].allocatable.cpu: '4' is not a number >= 0"),
    ],
)
def test_a_bad_node_field_is_still_named(patch, message):
    inv = copy.deepcopy(PAPER)
    inv["clusters"][0]["nodes"][0]["allocatable"].update(patch)
    with pytest.raises(InventoryError) as err:
        Inventory.from_dict(inv)
    assert message in str(err.value)


@pytest.mark.parametrize("value", [-1, True, "3", None, [1]])
def test_a_bad_latency_is_still_named(value):
    inv = copy.deepcopy(PAPER)
    src = next(iter(inv["latency_ms"]))
    dst = next(iter(inv["latency_ms"][src]))
    inv["latency_ms"][src][dst] = value
    with pytest.raises(InventoryError) as err:
        Inventory.from_dict(inv)
    assert f"latency_ms.{src}.{dst}: {value!r} is not a number >= 0" in str(err.value)
