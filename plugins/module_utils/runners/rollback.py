# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The application module's rollback (option ``rollback_to``): an older version's spec stored
again as the newest version, through the KB's ``/rollback`` (the operation the controller and
``qonnect rollback`` use); the controller then places it like any new version.

Idempotent: when the current version already holds that version's spec (a rollback done
before), nothing changes. Check mode reads only; the diff is the normalised application before
and after.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.app_source import stored_application
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule


def roll_back(module: QonnectModule, kb: Any) -> dict:
    params = module.params
    name, to = params.get("name"), params["rollback_to"]
    if not name:
        raise InputError("name", "required with rollback_to")
    current = stored_application(kb, name)
    if current is None:
        raise InputError("name", f"application {name!r} is not stored in the Knowledge Base")
    version = current["version"]
    if not 1 <= to <= version:
        raise InputError("rollback_to", f"{name} has versions 1 to {version}; version {to} is not stored")
    target = next((v for v in kb.application_versions(name) if v["version"] == to), None)
    if target is None:
        raise InputError("rollback_to", f"version {to} of {name} is not stored in the Knowledge Base")
    result: dict[str, Any] = {"version": version}
    if target["application"] == current["application"]:
        return dict(result, changed=False)  # the current version already is that spec
    result["changed"] = True
    result["diff"] = {
        "before_header": f"{name} version {version}",
        "after_header": f"{name} version {to}'s spec",
        "before": current["application"],
        "after": target["application"],
    }
    reason = f"rolled back by the application module from version {version} to version {to}"
    result["rollback"] = {"failing": version, "restores": to, "reason": reason}
    if module.check_mode:
        return result
    done = kb.roll_back(name, version, to, reason)
    return dict(result, version=done["version"], changed=done["changed"], rollback=done["rollback"])
