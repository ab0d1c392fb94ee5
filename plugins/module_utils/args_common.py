# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KB connection argspec (matching doc fragment qonnect.core.kb) and a client factory.

One place defines how a module reaches the KB so every module accepts the same options and
environment variables.
"""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import env_fallback
from ansible_collections.qonnect.core.plugins.module_utils.scorers import DEFAULT_SCORER, SCORERS

KB_ARGSPEC: dict[str, dict[str, Any]] = {
    "kb_url": {"type": "str", "fallback": (env_fallback, ["QONNECT_KB_URL"])},
    "kb_token": {"type": "str", "no_log": True, "fallback": (env_fallback, ["QONNECT_KB_TOKEN"])},
    "kb_ca_path": {"type": "path", "fallback": (env_fallback, ["QONNECT_KB_CA_PATH"])},
    # no default: a default would win over the environment variable (fallbacks fill only unset options)
    "kb_validate_certs": {"type": "bool", "fallback": (env_fallback, ["QONNECT_KB_VALIDATE_CERTS"])},
    "kb_timeout": {"type": "float", "default": 10.0},
}


def kb_argspec(**extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return the KB options merged with a module's own options."""
    spec = {name: dict(opts) for name, opts in KB_ARGSPEC.items()}
    spec.update(extra)
    return spec


def kb_client_from_params(params: dict[str, Any]):
    """Build a KBClient from module params; raises ValueError naming a missing option."""
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

    url = params.get("kb_url")
    if not url:
        raise ValueError("kb_url: required (or set the QONNECT_KB_URL environment variable)")
    return KBClient(
        url,
        params.get("kb_token"),
        ca_path=params.get("kb_ca_path"),
        validate_certs=params.get("kb_validate_certs") is not False,
        timeout=params.get("kb_timeout") or 10.0,
    )


PLAN_ARGSPEC = {
    "name": {"type": "str"},
    "spec": {"type": "dict"},
    "src": {"type": "path"},
    "scorer": {"type": "str", "choices": list(SCORERS), "default": DEFAULT_SCORER},
    "exclude": {"type": "list", "elements": "str", "default": []},
    "hysteresis": {"type": "float", "default": 0.1},
}


def compute_plan(app, inventory: dict, params: dict, explain: bool = True) -> dict:
    """Run the engine with the module's options; the current placement drives hysteresis."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement import place

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
