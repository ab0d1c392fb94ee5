"""place_many: a batch of applications on one build of the fleet (issue 21.6).

Each plan of a batch is checked against place() on an inventory whose ``requested`` holds the
earlier plans, so the batch is the same engine with the capacity carried over, not another one.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement import (
    BatchResult,
    PlacementError,
    capacity_violations,
    place,
    place_many,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement import batch as batch_module
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application, Service

ROOT = Path(__file__).resolve().parents[5]
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())
SCORERS = ("borda", "weighted", "optimal")
# requests exactly representable in binary, so "requested + plan" on the dict and "free - plan"
# in the arrays give the same numbers to the bit
CPU, MEMORY = 0.25, 2**27


def one_service(name: str, tier: str = "any", replicas: int = 1, cpu: float = CPU, **svc) -> Application:
    return Application(
        name=name,
        namespace=name,
        objective={"energy": 0.6, "cost": 0.3, "performance": 0.3, "latency": 0.5},
        services=[
            Service(
                name="svc",
                tier=tier,
                replicas=replicas,
                requests={"cpu": cpu, "memory": MEMORY, "ephemeral_storage": 0},
                **svc,
            )
        ],
    )


def apps(count: int) -> list[Application]:
    tiers = ("cloud", "fog", "edge", "any")
    return [one_service(f"app-{i}", tiers[i % 4], 1 + i % 3) for i in range(count)]


def with_plan(inventory: dict, app: Application, plan) -> dict:
    """The inventory once ``plan`` runs: each planned replica's requests added to its node."""
    out = copy.deepcopy(inventory)
    nodes = {n["name"]: n for c in out["clusters"] for n in c["nodes"]}
    for svc in app.services:
        for entry in plan.services[svc.name]:
            for node in entry["nodes"]:
                for r, value in svc.requests.items():
                    nodes[node]["requested"][r] += value
    return out


def fits_once(tier: str) -> float:
    """A CPU request every ``tier`` node of the paper fleet has room for once and none twice."""
    free = [
        n["allocatable"]["cpu"] - n["requested"]["cpu"]
        for c in PAPER["clusters"]
        if c["tier"] == tier
        for n in c["nodes"]
    ]
    assert max(free) / 2 < min(free)
    return (max(free) / 2 + min(free)) / 2


@pytest.mark.parametrize("scorer", SCORERS)
def test_one_application_gets_place_s_plan(scorer):
    app = one_service("solo", "fog", 2)
    result = place_many([app], PAPER, scorer=scorer, explain=True)
    assert result.errors == {}
    assert result.plans["solo"].to_dict() == place(app, PAPER, scorer=scorer, explain=True).to_dict()


@pytest.mark.parametrize("scorer", SCORERS)
def test_each_plan_is_place_on_the_inventory_holding_the_earlier_plans(scorer):
    batch = apps(8)
    result = place_many(batch, PAPER, scorer=scorer)
    assert list(result.plans) == [a.name for a in batch] and not result.errors
    inventory = PAPER
    for app in batch:
        alone = place(app, inventory, scorer=scorer, explain=False)
        assert result.plans[app.name].to_dict() == alone.to_dict(), app.name
        inventory = with_plan(inventory, app, alone)


def test_later_applications_see_the_capacity_earlier_ones_took():
    """Two applications that each fit any fog cluster once and none twice: placed one at a time
    on the same inventory both pick the same cluster (an overcommit); in a batch the second goes
    elsewhere."""
    cpu = fits_once("fog")
    first, second = one_service("first", "fog", cpu=cpu), one_service("second", "fog", cpu=cpu)
    alone = [place(a, PAPER, explain=False).clusters("svc") for a in (first, second)]
    assert alone[0] == alone[1]
    result = place_many([first, second], PAPER)
    assert result.plans["first"].clusters("svc") == alone[0]
    assert result.plans["second"].clusters("svc") != alone[0]
    combined = with_plan(PAPER, first, result.plans["first"])
    assert capacity_violations(second, combined, result.plans["second"]) == 0


def test_an_application_that_cannot_be_placed_is_reported_and_takes_nothing():
    huge = one_service("huge", "fog", cpu=10_000.0)
    small = one_service("small", "fog")
    result = place_many([huge, small], PAPER)
    assert isinstance(result, BatchResult)
    assert list(result.plans) == ["small"]
    assert isinstance(result.errors["huge"], PlacementError)
    assert "capacity" in str(result.errors["huge"])
    assert result.plans["small"].to_dict() == place(small, PAPER, explain=False).to_dict()
    assert result.to_dict()["errors"]["huge"] == str(result.errors["huge"])


def test_a_request_carries_its_own_policy():
    app = one_service("pinned", "fog")
    first = place(app, PAPER, explain=False).clusters("svc")[0]
    result = place_many([{"app": app, "exclude": [first], "scorer": "borda"}], PAPER, scorer="weighted")
    plan = result.plans["pinned"]
    assert plan.scorer == "borda"
    assert first not in plan.clusters("svc")
    assert plan.to_dict() == place(app, PAPER, scorer="borda", exclude=[first], explain=False).to_dict()


def test_current_placements_are_released_for_the_next_application():
    """An application moving off a cluster gives its replicas' capacity back to the batch."""
    cpu = fits_once("fog")
    mover, newcomer = one_service("mover", "fog", cpu=cpu), one_service("newcomer", "fog", cpu=cpu)
    home = place(newcomer, PAPER, explain=False).services["svc"]
    # mover runs where newcomer wants to go (its requests are in the inventory), and is moved away
    inventory = with_plan(PAPER, mover, type("P", (), {"services": {"svc": home}})())
    current = {"svc": copy.deepcopy(home)}
    result = place_many(
        [{"app": mover, "current": current, "exclude": [home[0]["cluster"]]}, newcomer], inventory
    )
    assert result.plans["newcomer"].services["svc"][0]["cluster"] == home[0]["cluster"]


def test_a_spec_filter_on_free_capacity_sees_the_batch_s_capacity():
    """JMESPath filters read the cluster facts: after the first plan they show its replicas."""
    cpu = fits_once("fog")
    free_cpu = f"free.cpu >= `{cpu}`"
    first = one_service("first", "fog", cpu=cpu, filter=free_cpu)
    second = one_service("second", "fog", cpu=cpu, filter=free_cpu)
    result = place_many([first, second], PAPER, scorer="borda", explain=True)
    taken = result.plans["first"].clusters("svc")[0]
    assert result.plans["second"].clusters("svc")[0] != taken
    rows = {r["cluster"]: r for r in result.plans["second"].explanation["svc"]}
    assert "filter" in rows[taken]["reason"]
    inventory = with_plan(PAPER, first, result.plans["first"])
    assert result.plans["second"].to_dict() == place(second, inventory, scorer="borda").to_dict()


def test_the_fleet_is_built_once_for_the_batch(monkeypatch):
    """The cost the issue measured: parsing and arrays per application (one build here)."""
    builds = []
    real = batch_module.Fleet

    def counting(inv):
        builds.append(inv)
        return real(inv)

    monkeypatch.setattr(batch_module, "Fleet", counting)
    result = place_many(apps(20), PAPER, scorer="borda")
    assert len(result.plans) == 20 and len(builds) == 1


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([{"scorer": "borda"}], "requests[0]: no 'app'"),
        ([{"app": one_service("a"), "pins": []}], "requests[0]: unknown key(s) pins"),
        (["a"], "requests[0]: str is not an Application"),
        ([one_service("a"), {"app": one_service("b"), "scorer": "best"}], "requests[1] (b): scorer: 'best'"),
        ([{"app": one_service("a"), "hysteresis": -1}], "requests[0] (a): hysteresis: -1"),
        ([{"app": one_service("a"), "current": []}], "requests[0] (a): current: expected"),
        ([one_service("a"), one_service("a")], "application(s) a requested more than once"),
    ],
)
def test_a_bad_request_is_named_before_anything_is_placed(requests, message):
    with pytest.raises(ValueError) as err:
        place_many(requests, PAPER)
    assert message in str(err.value)
