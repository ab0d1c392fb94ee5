"""QoS-drift check through the placement engine (the one home of placement logic).

The engine's ``place`` already applies the hysteresis against the current placement: it keeps
the current clusters unless an alternative beats them by more than the hysteresis. So drift is
simply "the engine, given the current placement, would now put some service elsewhere".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
