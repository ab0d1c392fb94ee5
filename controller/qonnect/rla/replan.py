"""QoS-drift check through the placement engine (the one home of placement logic).

The engine's ``place`` already applies the hysteresis against the current placement: it keeps
the current clusters unless an alternative beats them by more than the hysteresis. So drift is
simply "the engine, given the current placement, would now put some service elsewhere".
"""

from __future__ import annotations

import logging
from typing import Any

from qonnect.rla.detector import Replanner

log = logging.getLogger(__name__)


def engine_replanner(scorer: str = "weighted") -> Replanner | None:
    """A replanner backed by qonnect.core's placement engine, or None if it is not installed."""
    from qonnect._collection import ensure_importable

    try:
        ensure_importable()
        from ansible_collections.qonnect.core.plugins.module_utils.placement import place
        from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import objective
        from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
    except ImportError as exc:
        log.warning("placement engine unavailable (%s): QoS-drift detection is off", exc)
        return None

    def replan(record: dict[str, Any], inventory: dict[str, Any], current: dict[str, Any],
               exclude: tuple[str, ...], hysteresis: float) -> tuple[dict[str, Any], str] | None:
        try:
            app = Application.from_dict(record["application"])
            plan = place(app, inventory, scorer=scorer, exclude=exclude, current=current,
                         hysteresis=hysteresis, explain=False)
            now = objective(app, inventory, {"services": current})
        except Exception as exc:  # no feasible plan, unknown cluster, ...: no drift move this tick
            log.info("drift check of %s skipped: %s", record.get("name"), exc)
            return None
        return plan.services, (f"objective {now:.4f} -> {plan.objective:.4f} with the engine's "
                               f"{scorer} scorer beyond hysteresis {hysteresis:g}")

    return replan
