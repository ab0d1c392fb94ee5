# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The placement module's runner, and the one way a module asks the engine for a plan (the
application module checks a spec places, deploy computes the plan it applies)."""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.app_source import load_app_from_params
from ansible_collections.qonnect.core.plugins.module_utils.args_common import PLAN_ARGSPEC
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule
from ansible_collections.qonnect.core.plugins.module_utils.placement import place
from ansible_collections.qonnect.core.plugins.module_utils.placement.references import check_cluster_names

# The plan options as a user who sets none gets them.
PLAN_DEFAULTS: dict[str, Any] = {name: opts["default"] for name, opts in PLAN_ARGSPEC.items()}


def check_options(inventory: Any, params: dict[str, Any]) -> None:
    """The plan options' cluster names must be the inventory's (a typo in ``exclude`` is an
    error, not a stored policy that excludes nothing). A controller's fenced run is not checked:
    its exclusions are its own decisions' (placement/references.py)."""
    if not params.get("fencing"):
        check_cluster_names(inventory, exclude=params.get("exclude"))


def compute_plan(app: Any, inventory: dict, params: dict[str, Any], explain: bool = True) -> dict:
    """Run the engine with the plan options (PLAN_ARGSPEC); the current placement drives hysteresis."""
    check_options(inventory, params)
    current = (inventory.get("placements") or {}).get(app.name)
    plan = place(
        app,
        inventory,
        scorer=params["scorer"],
        exclude=tuple(params.get("exclude") or ()),
        current=current,
        hysteresis=params["hysteresis"],
        explain=explain,
    )
    return plan.to_dict()


def run(module: QonnectModule) -> dict:
    """Plan the application on the KB's inventory, or on a given one (what-if planning)."""
    params = module.params
    given_inventory = params.get("inventory")
    kb = module.kb if params.get("name") or given_inventory is None else None
    app = load_app_from_params(params, kb)
    inventory = given_inventory if given_inventory is not None else module.kb.inventory()
    return {"changed": False, "plan": compute_plan(app, inventory, params, params["explain"])}
