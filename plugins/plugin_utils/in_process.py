# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module's runner in the controller's own process, for a task that runs on the controller.

Ansible starts every module, and every item of a ``loop``, as a new Python process; the deploy
module spends most of its time on an unchanged application importing the Kubernetes client,
numpy and Ansible's module library (about 0.45 s of 0.55 s). A task that runs on the
controller anyway (``connection: local``, the Python that runs Ansible) can call the same
runner with the same argument spec in the task's worker process, which imports each library
once for all of a loop's items.

What a module does is kept: the options validated by the module's argument spec and rules
(Ansible's ``ArgumentSpecValidator``, as ``AnsibleModule`` does), ``no_log`` values masked in
the result and its ``invocation.module_args`` (``redact.no_log_values``, as the module narrows
them), every error reported through the one mapping (``errors.fail_fields``) and the result
shaped by ``module.reported``. Not kept: AnsibleModule's record of its arguments in the
target's syslog, which is a managed host's audit trail, not the controller's.
"""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible_collections.qonnect.core.plugins.module_utils.errors import fail_fields
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule, Runner, reported
from ansible_collections.qonnect.core.plugins.module_utils.redact import no_log_values


class ControllerModule(QonnectModule):
    """A :class:`QonnectModule` whose options were validated here instead of by AnsibleModule;
    warnings are collected for the result rather than printed."""

    def __init__(self, params: dict[str, Any], check_mode: bool, diff: bool) -> None:  # pylint: disable=super-init-not-called
        self._params = params
        self._check_mode = check_mode
        self._diff = diff
        self._kb: Any = None
        self.warnings: list[str] = []

    @property
    def params(self) -> dict[str, Any]:
        return self._params

    @property
    def check_mode(self) -> bool:
        return self._check_mode

    @property
    def diff(self) -> bool:
        return self._diff

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)


def _plain(value: Any) -> Any:
    """What the module's JSON would carry for a value JSON has no type for."""
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return str(value)


def run_in_controller(
    name: str,
    runner: Runner,
    argument_spec: dict[str, Any],
    args: dict[str, Any],
    check_mode: bool,
    diff: bool,
    **rules: Any,
) -> dict[str, Any]:
    """The task result of ``runner`` on ``args``, as module ``name`` would return it."""
    args = json.loads(json.dumps(args, default=_plain))  # what the module would be given
    validation = ArgumentSpecValidator(copy.deepcopy(argument_spec), **rules).validate(args)
    if validation.error_messages:
        msg = validation.errors.msg
        if isinstance(validation.errors[0], UnsupportedError):
            msg = f"Unsupported parameters for ({name}) module: {msg}"
        return {"failed": True, "changed": False, "msg": msg}
    params = validation.validated_parameters
    hidden = no_log_values(argument_spec, params, set(validation._no_log_values))
    module = ControllerModule(params, check_mode, diff)
    try:
        warnings, result = reported(runner(module), diff)
    except Exception as exc:  # every layer's error, one mapping, as run_module does
        warnings, result = [], {"failed": True, **fail_fields(exc)}
    warnings = module.warnings + warnings
    if warnings:
        result["warnings"] = warnings
    result.setdefault("changed", False)
    # what -vvv, ansible-runner's events and AWX show of a module run, masked below as there
    result.setdefault("invocation", {"module_args": params})
    return remove_values(json.loads(json.dumps(result, default=_plain)), hidden)
