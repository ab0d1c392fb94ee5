# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The application module's runner: store, update or remove a QoS spec in the KB."""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.app_source import (
    load_given,
    store,
    stored_application,
)
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule
from ansible_collections.qonnect.core.plugins.module_utils.placement import PlacementError
from ansible_collections.qonnect.core.plugins.module_utils.runners.placement import (
    PLAN_DEFAULTS,
    compute_plan,
)
from ansible_collections.qonnect.core.plugins.module_utils.runners.rollback import roll_back


def summary(app: Any) -> dict:
    return {
        "name": app.name,
        "namespace": app.namespace,
        "objective": dict(app.objective),
        "services": [s.name for s in app.services],
    }


def remove(module: QonnectModule, kb: Any) -> dict:
    name = module.params.get("name")
    if not name:
        raise InputError("name", "required when state is absent")
    existing = stored_application(kb, name)
    if existing is None:
        return {"changed": False}
    if not module.check_mode:
        kb.delete_application(name)
    return {"changed": True, "diff": {"before": existing.get("application") or {}, "after": {}}}


def run(module: QonnectModule) -> dict:
    params, kb = module.params, module.kb
    if params["state"] == "absent":
        return remove(module, kb)
    if params.get("rollback_to") is not None:
        return roll_back(module, kb)
    app, body = load_given(params, kb)
    if params.get("name") and params["name"] != app.name:
        raise InputError("name", f"{params['name']!r} differs from the spec's metadata.name {app.name!r}")
    if params["check_placement"]:  # a spec becomes current only once it places (issue 13.5)
        try:
            compute_plan(app, kb.inventory(), PLAN_DEFAULTS, False)
        except PlacementError as exc:
            raise exc.with_context(lead="not stored: the spec cannot be placed") from None
    result = store(kb, app, body, module.check_mode)
    result["application"] = summary(app)
    return result
