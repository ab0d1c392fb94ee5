# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy module's argument spec and its rules, in one place: the module (run by Ansible in
its own process) and the action plugin (the same runner in the controller's process) both
validate with it (docs: plugins/modules/deploy.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.args_common import (
    K8S_AUTH_ARGSPEC,
    PLAN_ARGSPEC,
    SOURCE_ARGSPEC,
    STATE_ARGSPEC,
    argspec,
)

FENCING = {
    "term": {"type": "int", "required": True},
    "seq": {"type": "int", "required": True},
}
BATCH_ITEM = {
    "app": {"type": "str", "required": True},
    "decision_id": {"type": "str", "required": True},
    "attempt": {"type": "int"},
    "plan": {"type": "dict"},
    "exclude": {"type": "list", "elements": "str"},
    "scorer": {"type": "str"},
    "hysteresis": {"type": "float"},
    "reason": {"type": "str"},
    "fencing": {"type": "dict", "required": True, "options": FENCING},
}

DEPLOY_ARGSPEC: dict[str, Any] = argspec(
    SOURCE_ARGSPEC,
    STATE_ARGSPEC,
    PLAN_ARGSPEC,
    K8S_AUTH_ARGSPEC,
    plan={"type": "dict"},
    wait={"type": "bool", "default": True},
    wait_timeout={"type": "float", "default": 300.0},
    min_ready_seconds={"type": "float"},
    adopt={"type": "bool", "default": False},
    require_survivable={"type": "bool", "default": False},
    record={"type": "bool", "default": True},
    fencing={"type": "dict", "options": FENCING},
    reason={"type": "str"},
    batch={"type": "list", "elements": "dict", "options": BATCH_ITEM},
    applications={"type": "list", "elements": "raw"},
    batch_workers={"type": "int", "default": 10},
    kubeconfigs={"type": "dict", "no_log": True},
)
DEPLOY_RULES: dict[str, Any] = {
    "mutually_exclusive": [("spec", "src", "name", "batch", "applications")],
    "required_one_of": [("spec", "src", "name", "batch", "applications")],
}
