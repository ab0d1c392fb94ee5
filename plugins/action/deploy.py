# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of qonnect.core.deploy: on the controller, the deploy runs in the task's own
process (plugin_utils/in_process.py), so the items of a ``loop`` share one import of the
Kubernetes client; anywhere else, and whenever that process cannot stand in for the module's,
Ansible runs the module as usual.

Set ``qonnect_in_process: false`` (a variable) to always run the module.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.release import __version__ as ansible_version
from ansible.utils.display import Display

display = Display()
MODULE = "qonnect.core.deploy"
# ansible-core 2.19 merges module_defaults into the task's arguments before the action runs;
# earlier releases merge them only when the module is executed
FINAL_ARGS = tuple(int(p) for p in ansible_version.split(".")[:2]) >= (2, 19)


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        why = self.module_process_needed(task_vars)
        if why:
            display.vvv(f"{MODULE}: the module runs in a process of its own: {why}")
            result.update(self._execute_module(module_name=MODULE, task_vars=task_vars))
            return result
        display.vvv(f"{MODULE}: runs in the task's process (on the controller)")
        # imported here: only a run that stays in this process pays for the runner's imports
        from ansible_collections.qonnect.core.plugins.module_utils.deploy_args import (
            DEPLOY_ARGSPEC,
            DEPLOY_RULES,
        )
        from ansible_collections.qonnect.core.plugins.module_utils.runners.deploy import (
            run,
        )
        from ansible_collections.qonnect.core.plugins.plugin_utils.in_process import (
            run_in_controller,
        )

        result.update(
            run_in_controller(
                MODULE,
                run,
                DEPLOY_ARGSPEC,
                dict(self._task.args),
                bool(self._task.check_mode),
                bool(self._task.diff),
                **DEPLOY_RULES,
            )
        )
        return result

    def module_process_needed(self, task_vars: dict[str, Any]) -> str:
        """Why this task must run the module in its own process ("" when it need not)."""
        why = {
            "ansible-core before 2.19": not FINAL_ARGS,
            "qonnect_in_process is false": not boolean(
                task_vars.get("qonnect_in_process", True), strict=False
            ),
            "not a local connection": getattr(self._connection, "transport", "") != "local",
            "become": bool(self._play_context.become),
            "async": bool(self._task.async_val),
            "the task sets an environment": _sets(self._task.environment),
            "another Python interpreter": not self._same_python(task_vars.get("ansible_python_interpreter")),
        }
        return ", ".join(reason for reason, applies in why.items() if applies)

    @staticmethod
    def _same_python(interpreter: Any) -> bool:
        """The interpreter the module would run under is this one (its path as given: a venv's
        python is a link to the system's, with other packages)."""
        if interpreter is None or interpreter == "{{ ansible_playbook_python }}":
            return True
        return isinstance(interpreter, str) and os.path.abspath(interpreter) == os.path.abspath(
            sys.executable
        )


def _sets(environment: Any) -> bool:
    """Whether a task's ``environment`` (a mapping, or the list of its play's and its own) sets
    anything: the module's process would have it, this one has not."""
    if isinstance(environment, (list, tuple)):
        return any(_sets(part) for part in environment)
    return bool(environment)
