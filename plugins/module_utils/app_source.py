# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a module's application comes from (a spec file, a spec mapping or the KB) and how a
spec is stored in the KB with its manifests inline, shared by the application, placement and
deploy modules."""

from __future__ import annotations

import copy
import os
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    QONNECT_API_VERSION,
    QONNECT_BUNDLES,
    Application,
    QosSpecError,
    load_application,
)

try:
    import yaml

    HAS_YAML = True
except ImportError:
    HAS_YAML = False


def read_source(params: dict[str, Any]) -> tuple[dict, str]:
    """The raw spec of `spec` or `src`, and the folder its manifest paths are relative to."""
    if params.get("spec") is not None:
        return params["spec"], os.getcwd()
    if not HAS_YAML:
        raise ValueError("src: reading a spec file needs PyYAML (pip install PyYAML)")
    try:
        with open(params["src"], encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except OSError as exc:
        raise QosSpecError([f"{params['src']}: cannot read the spec: {exc.strerror or exc}"]) from None
    except yaml.YAMLError as exc:
        raise QosSpecError([f"{params['src']}: not valid YAML: {exc}"]) from None
    return raw, os.path.dirname(os.path.abspath(params["src"]))


def inline(raw: dict, app: Application) -> dict:
    """The raw spec with every manifest reference replaced by the manifests themselves."""
    out = copy.deepcopy(raw)
    if out.get("apiVersion") == QONNECT_API_VERSION:
        for key, tier in QONNECT_BUNDLES:
            holder = out["spec"] if isinstance(out.get("spec"), dict) and key in out["spec"] else out
            if key in holder:
                holder[key] = app.service(f"{tier}-svc").manifests
        return out
    for index, service in enumerate(app.services):  # the loader keeps the services' order
        out["spec"]["services"][index]["manifests"] = service.manifests
    return out


def load_given(params: dict[str, Any]) -> tuple[Application, dict]:
    """Validate the spec of `spec`/`src` (every error at once); returns it with inline manifests."""
    raw, base_dir = read_source(params)
    app = load_application(raw, base_dir=base_dir, source=params.get("src") or "spec")
    return app, inline(raw, app)


def stored_application(kb: Any, name: str) -> dict | None:
    """The KB's record of an application, None when it has none."""
    try:
        return kb.get_application(name)
    except KBError as exc:
        if exc.status == 404:
            return None
        raise


def store(kb: Any, app: Application, body: dict, check_mode: bool) -> dict:
    """Store the spec unless the KB already holds the same application: {changed, version, diff}."""
    existing = stored_application(kb, app.name)
    before = (existing or {}).get("application")
    after = app.to_dict()
    result = {"changed": before != after, "version": (existing or {}).get("version")}
    if result["changed"]:
        result["diff"] = {"before": before or {}, "after": after}
        if not check_mode:
            result["version"] = (kb.put_application(app.name, body) or {}).get("version")
    return result


def load_app_from_params(params: dict[str, Any], kb: Any = None, name_key: str = "name") -> Application:
    """The Application given by `spec`, `src` or `params[name_key]` (stored in the KB)."""
    if params.get("src") or params.get("spec") is not None:
        return load_given(params)[0]
    name = params.get(name_key)
    if not name or kb is None:
        raise ValueError(f"one of spec, src or {name_key} (an application stored in the KB) is required")
    return Application.from_dict(kb.get_application(name)["application"])
