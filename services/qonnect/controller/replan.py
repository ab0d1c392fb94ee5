"""QoS-drift check through the placement engine (the one home of placement logic).

The engine's ``place`` already applies the hysteresis against the current placement: it keeps
the current clusters unless an alternative beats them by more than the hysteresis. So drift is
simply "the engine, given the current placement, would now put some service elsewhere".

The plan an attempt applies is computed here too (``engine_planner``): one ``place_many`` pass
for every application of a batch, each with the user's stored policy; the leader commits it
with the attempt's ``start`` and the migration applies exactly that plan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qonnect.controller.detector import Replanner

log = logging.getLogger(__name__)


def engine_replanner(scorer: str = "weighted") -> Replanner | None:
    """A replanner backed by qonnect.core's placement engine, or None if it is not installed."""
    try:
        from ansible_collections.qonnect.core.plugins.module_utils.placement import (
            InventoryError,
            PlacementError,
            place,
        )
        from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import objective
        from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
    except ImportError as exc:
        log.warning("placement engine unavailable (%s): QoS-drift detection is off", exc)
        return None

    def replan(
        record: dict[str, Any],
        inventory: dict[str, Any],
        current: dict[str, Any],
        exclude: tuple[str, ...],
        hysteresis: float,
    ) -> tuple[dict[str, Any], str] | None:
        try:
            app = Application.from_dict(record["application"])
            plan = place(
                app,
                inventory,
                scorer=scorer,
                exclude=exclude,
                current=current,
                hysteresis=hysteresis,
                explain=False,
            )
            now = objective(app, inventory, {"services": current})
        except (PlacementError, InventoryError) as exc:  # no feasible plan or no usable fleet now:
            log.info("drift check of %s skipped: %s", record.get("name"), exc)  # no drift move this tick
            return None
        if plan.objective < now:  # worse than staying: the current placement lost room (a NotReady
            # node, refused credentials...): the failure rules judge that, with their graces
            log.info(
                "drift check of %s: objective %.4f -> %.4f is no gain",
                record.get("name"),
                now,
                plan.objective,
            )
            return None
        return plan.services, (
            f"objective {now:.4f} -> {plan.objective:.4f} with the engine's "
            f"{scorer} scorer beyond hysteresis {hysteresis:g}"
        )

    return replan


# feasible(app_record, inventory, exclude) -> None when a plan exists, else why not
Feasibility = Callable[[dict[str, Any], dict[str, Any], tuple[str, ...]], "str | None"]


def engine_feasibility(scorer: str = "weighted") -> Feasibility | None:
    """Whether the placement engine finds any plan without the excluded clusters; checked
    before each attempt so an unplaceable service waits, explained, instead of running a
    playbook that can only fail."""
    try:
        from ansible_collections.qonnect.core.plugins.module_utils.placement import place
        from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import (
            InventoryError,
            PlacementError,
        )
        from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
    except ImportError as exc:
        log.warning("placement engine unavailable (%s): no feasibility check before migrations", exc)
        return None

    def feasible(record: dict[str, Any], inventory: dict[str, Any], exclude: tuple[str, ...]) -> str | None:
        try:
            app = Application.from_dict(record["application"])
            place(app, inventory, scorer=scorer, exclude=exclude, explain=False)
        except PlacementError as exc:
            without = f" without {', '.join(exclude)}" if exclude else ""
            return f"{exc.service}: no eligible cluster ({exc.constraint}){without}"
        except InventoryError as exc:  # no usable fleet: let the playbook report it
            log.info("feasibility check of %s skipped: %s", record.get("name"), exc)
        return None

    return feasible


@dataclass(frozen=True)
class PlanRequest:
    """One application of a batch to place: its KB record, the clusters to avoid (the decision's
    and the user's stored exclusions) and the user's stored scorer and hysteresis (None: the
    controller's defaults)."""

    record: dict[str, Any]
    exclude: tuple[str, ...]
    scorer: str | None = None
    hysteresis: float | None = None


@dataclass
class BatchPlan:
    """What the planner found: a services mapping per placed application, and why each other
    one cannot be placed now (an application in neither had no usable fleet to be judged on)."""

    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    unplaceable: dict[str, str] = field(default_factory=dict)


# plan(requests, inventory) -> one plan for all of them, in one pass over the inventory
Planner = Callable[[list[PlanRequest], dict[str, Any]], BatchPlan]


def engine_planner(default_scorer: str = "weighted", default_hysteresis: float = 0.1) -> Planner | None:
    """A planner backed by the engine's ``place_many``: the inventory is built once and every
    application of the batch is placed on it in order, each with its own policy, against the
    capacity the earlier ones took. None if the engine is not installed."""
    try:
        from ansible_collections.qonnect.core.plugins.module_utils.placement.batch import (
            place_batch,
            policy_item,
        )
        from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError
        from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
    except ImportError as exc:
        log.warning("placement engine unavailable (%s): migrations place for themselves", exc)
        return None
    defaults = (default_scorer, default_hysteresis)

    def plan(requests: list[PlanRequest], inventory: dict[str, Any]) -> BatchPlan:
        out = BatchPlan()
        batch: list[tuple[PlanRequest, dict[str, Any]]] = []
        for req in requests:
            name = str(req.record.get("name"))
            try:
                app = Application.from_dict(req.record["application"])
                item = policy_item(app, req.scorer, req.hysteresis, req.exclude, defaults)
            except (KeyError, TypeError, ValueError) as exc:
                out.unplaceable[name] = f"cannot be planned: {exc}"
                continue
            batch.append((req, item))
        if not batch:
            return out
        try:
            result = place_batch([item for _req, item in batch], inventory)
        except InventoryError as exc:  # no usable fleet: nothing is judged; the run reports it
            log.info("batch plan skipped: %s", exc)
            return out
        if result.fallback:
            log.warning(
                "batch plan failed (%s); planned its %d applications one by one", result.fallback, len(batch)
            )
        for req, item in batch:
            _collect(result, req, item, out, why_not)
        return out

    return plan


def why_not(req: PlanRequest, exc: Exception) -> str:
    """Why an application of a batch cannot be placed, as the decision's deferral says it."""
    service = getattr(exc, "service", None)
    if service is None:
        return str(exc)
    without = f" without {', '.join(req.exclude)}" if req.exclude else ""
    return f"{service}: no eligible cluster ({getattr(exc, 'constraint', exc)}){without}"


def _collect(
    result: Any, req: PlanRequest, item: dict[str, Any], out: BatchPlan, why_not: Callable[..., str]
) -> None:
    name = item["app"].name
    if name in result.plans:
        out.services[name] = result.plans[name].services
    elif name in result.errors:
        out.unplaceable[name] = why_not(req, result.errors[name])
