"""Place many applications in one pass over the fleet: ``place_many(requests, inventory)``.

The inventory is parsed and turned into arrays once; each application is then placed, in the
order given, against the capacity the earlier ones left (their planned replicas taken, the
replicas they leave given back), so a heal of fifty applications does not parse a 1000-cluster
inventory fifty times nor plan two of them into the same last free slot. Each application's
plan is the one :func:`place` would return on an inventory whose ``requested`` already holds
the earlier plans; an application that cannot be placed is reported and takes no capacity.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import (
    check_request,
    place_on,
    release_current,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import PlacementError
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import (
    Fleet,
    np,
    request_vector,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import Inventory
from ansible_collections.qonnect.core.plugins.module_utils.placement.plan import Plan

# per-application policy a request may carry (the rest come from place_many's arguments)
POLICY_KEYS = ("scorer", "exclude", "current", "hysteresis")


@dataclass
class BatchResult:
    """Plans by application name, in placement order, and the applications that failed."""

    plans: dict[str, Plan] = field(default_factory=dict)
    errors: dict[str, PlacementError] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "plans": {name: plan.to_dict() for name, plan in self.plans.items()},
            "errors": {name: str(err) for name, err in self.errors.items()},
        }


def place_many(
    requests,
    inventory,
    scorer: str = "weighted",
    exclude=(),
    hysteresis: float = 0.1,
    explain: bool = False,
) -> BatchResult:
    """Place every application of ``requests`` (in that order) on one build of the fleet.

    A request is an Application, or a mapping ``{"app": Application, "scorer", "exclude",
    "current", "hysteresis"}`` whose keys override the arguments for that application (its
    stored policy). ``current`` defaults to the inventory's placement of the application.
    Raises ValueError naming the request for a bad request, before placing anything.
    """
    items = [_request(i, r, scorer, exclude, hysteresis) for i, r in enumerate(requests)]
    twice = sorted(n for n, k in Counter(item["app"].name for item in items).items() if k > 1)
    if twice:
        raise ValueError(f"requests: application(s) {', '.join(twice)} requested more than once")
    inv = inventory if isinstance(inventory, Inventory) else Inventory.from_dict(inventory)
    fleet = Fleet(inv)
    base = fleet.free0.copy()
    result = BatchResult()
    for item in items:
        app = item["app"]
        current = item["current"]
        if current is None:
            current = inv.placements.get(app.name) or {}
        if not np.array_equal(fleet.free0, base):  # earlier plans took room, or an earlier
            fleet.set_capacity(base)  # application was judged without its own replicas
        else:
            fleet.free = base.copy()
        try:
            plan, assignment = place_on(
                fleet, app, item["scorer"], item["exclude"], current, item["hysteresis"], explain
            )
        except PlacementError as exc:
            result.errors[app.name] = exc
            continue
        result.plans[app.name] = plan
        base = _after(fleet, base, app, current, assignment)
    return result


def _after(fleet: Fleet, base, app, current: dict, assignment: dict):
    """The capacity left once ``app`` runs where it is planned: its current replicas given back
    (as place() releases them), its planned ones taken."""
    after = base.copy()
    release_current(fleet, app, current, free=after)
    for svc in app.services:
        nodes = assignment.get(svc.name) or []
        if nodes:
            np.subtract.at(after, np.asarray(nodes), request_vector(svc))
    return after


def _request(index: int, request: Any, scorer: str, exclude, hysteresis) -> dict:
    """One request as {app, scorer, exclude, current, hysteresis}; ValueError naming it."""
    item = {"app": request, "scorer": scorer, "exclude": exclude, "current": None, "hysteresis": hysteresis}
    if isinstance(request, dict):
        unknown = sorted(set(request) - {"app", *POLICY_KEYS})
        if unknown or "app" not in request:
            why = f"unknown key(s) {', '.join(unknown)}" if unknown else "no 'app'"
            raise ValueError(f"requests[{index}]: {why} (expected app, {', '.join(POLICY_KEYS)})")
        item.update(request)
    app = item["app"]
    if not hasattr(app, "services") or not hasattr(app, "name"):
        raise ValueError(f"requests[{index}]: {type(app).__name__} is not an Application")
    try:
        check_request(item["scorer"], item["current"], item["hysteresis"])
    except ValueError as exc:
        raise ValueError(f"requests[{index}] ({app.name}): {exc}") from None
    return item
