# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument specs the modules share, each paired with the doc fragment that documents it.

=================  =============================  ======================================
argument spec      doc fragment                   modules
=================  =============================  ======================================
KB_ARGSPEC         qonnect.core.kb                every module
PLAN_ARGSPEC       qonnect.core.plan              placement, deploy
K8S_AUTH_ARGSPEC   qonnect.core.k8s_auth          cluster, deploy (k8s/auth.py resolves it)
SOURCE_ARGSPEC     (each module's own options)    application, placement, deploy
=================  =============================  ======================================

Argument specs only: the KB client is built in module.py, the plan computed in
runners/placement.py. tests/unit/plugins/modules/test_fragments.py holds each spec to its fragment.
"""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import env_fallback
from ansible_collections.qonnect.core.plugins.module_utils.k8s.auth import K8S_AUTH_ARGSPEC
from ansible_collections.qonnect.core.plugins.module_utils.scorers import DEFAULT_SCORER, SCORERS

KB_ARGSPEC: dict[str, dict[str, Any]] = {
    "kb_url": {"type": "str", "fallback": (env_fallback, ["QONNECT_KB_URL"])},
    "kb_token": {"type": "str", "no_log": True, "fallback": (env_fallback, ["QONNECT_KB_TOKEN"])},
    "kb_ca_path": {"type": "path", "fallback": (env_fallback, ["QONNECT_KB_CA_PATH"])},
    # no default and no env_fallback: module.py reads QONNECT_KB_VALIDATE_CERTS with booleans.py,
    # the parser the inventory plugin uses, so "" or "maybe" is an error naming the variable
    "kb_validate_certs": {"type": "bool"},
    "kb_timeout": {"type": "float", "default": 10.0},
}

# How the engine computes a plan (placement, and deploy when it is given no plan).
PLAN_ARGSPEC: dict[str, dict[str, Any]] = {
    "scorer": {"type": "str", "choices": list(SCORERS), "default": DEFAULT_SCORER},
    "exclude": {"type": "list", "elements": "str", "default": []},
    "hysteresis": {"type": "float", "default": 0.1},
}

# Where the application comes from: a spec mapping, a spec file (with QONNECT's tier bundles
# beside it) or its name in the KB. Each module documents these itself: what it does with the
# spec differs (store it, plan it, deploy it).
SOURCE_ARGSPEC: dict[str, dict[str, Any]] = {
    "name": {"type": "str"},
    "spec": {"type": "dict"},
    "src": {"type": "path"},
    "bundles": {"type": "dict"},
}

STATE_ARGSPEC: dict[str, dict[str, Any]] = {
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
}


def argspec(*shared: dict[str, dict[str, Any]], **own: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A module's argument spec: the KB options, the shared specs it takes and its own options
    (copies, so no module changes another's)."""
    spec: dict[str, dict[str, Any]] = {}
    for part in (KB_ARGSPEC, *shared, own):
        spec.update({name: dict(opts) for name, opts in part.items()})
    return spec


__all__ = [
    "K8S_AUTH_ARGSPEC",
    "KB_ARGSPEC",
    "PLAN_ARGSPEC",
    "SOURCE_ARGSPEC",
    "STATE_ARGSPEC",
    "argspec",
]
