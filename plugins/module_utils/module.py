# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every qonnect.core module runs: ``run_module(runner, argument_spec)``.

A module file holds its documentation, its argument spec and one call to :func:`run_module`;
what it does is a *runner* in ``module_utils/runners/`` (a function of a :class:`QonnectModule`
returning the result). Set-up, the KB client, error reporting (errors.fail_fields), warnings,
diff mode and a failed result are handled here once, so the modules cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.qonnect.core.plugins.module_utils.booleans import option_or_env
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError, fail_fields
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient
from ansible_collections.qonnect.core.plugins.module_utils.redact import no_log_values


def kb_client_from_params(params: dict[str, Any]) -> KBClient:
    """A KB client from the KB options (doc fragment qonnect.core.kb)."""
    url = params.get("kb_url")
    if not url:
        raise InputError("kb_url", "required (or set the QONNECT_KB_URL environment variable)")
    return KBClient(
        url,
        params.get("kb_token"),
        ca_path=params.get("kb_ca_path"),
        validate_certs=option_or_env(
            params.get("kb_validate_certs"), "kb_validate_certs", "QONNECT_KB_VALIDATE_CERTS", True
        ),
        timeout=params.get("kb_timeout") or 10.0,
    )


class QonnectModule:
    """The AnsibleModule of a qonnect.core module with what a runner uses: its params, check
    and diff mode, and one KB client built on first use (a run that needs no KB makes none)."""

    def __init__(self, argument_spec: dict[str, Any], **kwargs: Any) -> None:
        kwargs.setdefault("supports_check_mode", True)
        self._module = AnsibleModule(argument_spec=argument_spec, **kwargs)
        # kubeconfig options: mask their credentials, not every cluster name in them (redact.py)
        self._module.no_log_values = no_log_values(
            argument_spec, self._module.params, self._module.no_log_values
        )
        self._kb: Any = None

    @property
    def params(self) -> dict[str, Any]:
        return self._module.params

    @property
    def check_mode(self) -> bool:
        return bool(self._module.check_mode)

    @property
    def diff(self) -> bool:
        return bool(self._module._diff)

    @property
    def kb(self) -> Any:
        if self._kb is None:
            self._kb = kb_client_from_params(self.params)
        return self._kb

    def warn(self, warning: str) -> None:
        self._module.warn(warning)

    def exit_json(self, **result: Any) -> None:
        self._module.exit_json(**result)

    def fail_json(self, msg: str, **result: Any) -> None:
        self._module.fail_json(msg=msg, **result)

    def report(self, result: dict[str, Any]) -> None:
        """Exit with a runner's result as :func:`reported` shapes it, its warnings as warnings."""
        warnings, result = reported(result, self.diff)
        for warning in warnings:
            self.warn(warning)
        if result.get("failed"):
            self.fail_json(**result)
        else:
            self.exit_json(**result)


def reported(result: dict[str, Any], diff: bool) -> tuple[list[str], dict[str, Any]]:
    """A runner's result as a task reports it, wherever the runner ran: its warnings apart, its
    diff only in diff mode, and a result with ``failed`` set (e.g. a deploy some cluster
    refused) as a failure whose ``msg`` is the result's ``message``."""
    result = dict(result)
    warnings = list(result.pop("warnings", None) or [])
    if not diff or result.get("diff") is None:
        result.pop("diff", None)
    if result.get("failed"):
        result["msg"] = result.pop("msg", None) or result.get("message") or "failed"
    return warnings, result


Runner = Callable[[QonnectModule], dict]


def run_module(runner: Runner, argument_spec: dict[str, Any], **kwargs: Any) -> None:
    """Run a module: parse its arguments (AnsibleModule ``kwargs`` such as mutually_exclusive),
    call its runner and report the result, or any error through the one mapping."""
    module = QonnectModule(argument_spec, **kwargs)
    try:
        result = runner(module)
    except Exception as exc:  # every layer's error, one mapping: errors.fail_fields
        module.fail_json(**fail_fields(exc))
    else:
        module.report(result)
