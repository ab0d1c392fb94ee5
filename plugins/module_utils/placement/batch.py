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
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import (
    InventoryError,
    PlacementError,
)
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
    # PlacementError, or the ValueError of an application the scorer could not plan at all
    errors: dict[str, ValueError] = field(default_factory=dict)
    # per node and resource, the capacity left after the batch, and the capacity each failed
    # application met (what-if reports read them to say what was missing and what is spare)
    free_left: Any = None
    free_at_error: dict[str, Any] = field(default_factory=dict)
    free_start: Any = None  # the capacity the batch started from
    fallback: str = ""  # why the batch was planned one application at a time ("" if it was not)
    # the scale each plan's scores were normalised by (fleet.Scale; what placement/impact.py reads)
    scales: dict[str, Any] = field(default_factory=dict)

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
    fleet: Fleet | None = None,
) -> BatchResult:
    """Place every application of ``requests`` (in that order) on one build of the fleet.

    A request is an Application, or a mapping ``{"app": Application, "scorer", "exclude",
    "current", "hysteresis"}`` whose keys override the arguments for that application (its
    stored policy). ``current`` defaults to the inventory's placement of the application.
    ``fleet``: an already built fleet of ``inventory`` whose ``free0`` is the capacity to start
    from (what-if scenarios reuse one build); ``inventory`` is then not parsed again.
    Raises ValueError naming the request for a bad request, before placing anything.
    """
    items = [_request(i, r, scorer, exclude, hysteresis) for i, r in enumerate(requests)]
    twice = sorted(n for n, k in Counter(item["app"].name for item in items).items() if k > 1)
    if twice:
        raise ValueError(f"requests: application(s) {', '.join(twice)} requested more than once")
    if fleet is None:
        inv = inventory if isinstance(inventory, Inventory) else Inventory.from_dict(inventory)
        fleet = Fleet(inv)
    inv = fleet.inventory
    base = fleet.free0.copy()
    result = BatchResult(free_start=base)
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
            result.free_at_error[app.name] = base
            continue
        result.plans[app.name] = plan
        result.scales[app.name] = fleet.scale()
        base = _after(fleet, base, app, current, assignment)
    result.free_left = base
    return result


def place_batch(
    items: list[dict], inventory, fleet: Fleet | None = None, explain: bool = False
) -> BatchResult:
    """:func:`place_many` as the controller's heal uses it: each item carries its application's
    own policy; when the whole batch cannot be planned (e.g. the exact scorer's time limit) each
    application is planned on its own from the capacity the batch started from, and one that
    still fails is an error of its own. The capacity left is then the start less what every
    plan takes (each was planned as if alone, so two may share a last slot: the controller
    commits them so too). InventoryError (no usable fleet) is raised: nothing can be judged.
    ``explain``: each plan carries its per-cluster explanation (what-if output; the controller's
    heal does without)."""
    start = None if fleet is None else fleet.free0.copy()  # before place_many moves it
    try:
        return place_many(items, inventory, explain=explain, fleet=fleet)
    except InventoryError:
        raise
    except ValueError as exc:
        out = BatchResult(fallback=str(exc), free_start=start)
        for item in items:
            name = item["app"].name
            if fleet is not None:
                fleet.set_capacity(start)
            try:
                one = place_many([item], inventory, explain=explain, fleet=fleet)
            except InventoryError:
                raise
            except ValueError as err:
                out.errors[name] = err
                continue
            out.plans.update(one.plans)
            out.scales.update(one.scales)
            out.errors.update(one.errors)
            out.free_at_error.update(one.free_at_error)
            if out.free_start is None:
                out.free_start = one.free_start
            taken = one.free_left - one.free_start
            out.free_left = (out.free_start if out.free_left is None else out.free_left) + taken
        if out.free_left is None:
            out.free_left = out.free_start
        if fleet is not None:
            fleet.set_capacity(start)
        return out


def policy_item(
    app, scorer: str | None, hysteresis: float | None, exclude, defaults: tuple[str, float]
) -> dict:
    """One request of a heal: the application with its stored policy, the controller's defaults
    (``defaults`` = (scorer, hysteresis)) where the user chose none. ValueError for a policy no
    scorer can take, so one bad stored policy spoils no batch."""
    item = {
        "app": app,
        "scorer": scorer or defaults[0],
        "hysteresis": defaults[1] if hysteresis is None else hysteresis,
        "exclude": tuple(exclude),
    }
    check_request(item["scorer"], None, item["hysteresis"])
    return item


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
