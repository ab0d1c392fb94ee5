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
    read_spec,
)
from ansible_collections.qonnect.core.plugins.module_utils.spec_yaml import (
    SpecYamlError,
    read_bounded,
)


def _bundles(params: dict[str, Any]) -> dict[str, str]:
    """The `bundles` option with relative paths made absolute (against the working directory)."""
    raw = params.get("bundles") or {}
    return {
        str(k): os.path.abspath(os.path.expanduser(v)) if isinstance(v, str) else v for k, v in raw.items()
    }


def read_source(params: dict[str, Any]) -> tuple[Any, str, str]:
    """The raw spec of `spec` or `src` (dict or bounded text), its folder and its name."""
    if params.get("spec") is not None:
        return params["spec"], os.getcwd(), "spec"
    try:
        text = read_bounded(params["src"], what="spec")
    except SpecYamlError as exc:
        raise QosSpecError(exc.errors) from None
    return text, os.path.dirname(os.path.abspath(params["src"])), params["src"]


def inline(raw: dict, app: Application) -> dict:
    """The raw spec with every manifest reference (and given bundle) replaced by the manifests."""
    out = copy.deepcopy(raw)
    if out.get("apiVersion") == QONNECT_API_VERSION:
        if not isinstance(out.get("spec"), dict):
            out["spec"] = {}
        for key, tier in QONNECT_BUNDLES:
            holder = out if key in out and key not in out["spec"] else out["spec"]
            try:
                holder[key] = app.service(f"{tier}-svc").manifests
            except KeyError:
                continue
        return out
    for index, service in enumerate(app.services):  # the loader keeps the services' order
        raw_service = out["spec"]["services"][index]
        raw_service["manifests"] = service.manifests
        if service.kube_version:  # the charts' kubeVersion outlives their inlined output
            constraints = raw_service.get("constraints")
            if not isinstance(constraints, dict):
                constraints = raw_service["constraints"] = {}
            constraints["kubeVersion"] = list(service.kube_version)
    return out


def render_clusters(params: dict[str, Any], kb: Any = None) -> Any:
    """The clusters Helm charts are rendered for: a given `inventory`'s, else the KB's (asked
    only when the spec has a chart), else none (Helm's defaults)."""
    given = params.get("inventory")
    if isinstance(given, dict):
        return given.get("clusters") or []
    if kb is not None:
        return lambda: kb.inventory().get("clusters") or []
    return None


def load_given(params: dict[str, Any], kb: Any = None) -> tuple[Application, dict]:
    """Validate the spec of `spec`/`src` (every error at once); returns it with inline manifests
    (charts rendered for the clusters of the KB or the given inventory: render_clusters)."""
    raw, base_dir, source = read_source(params)
    app = load_application(
        raw,
        base_dir=base_dir,
        source=source,
        bundles=_bundles(params),
        clusters=render_clusters(params, kb),
    )
    data = read_spec(raw, source)[0]
    return app, inline(data, app)


def stored_application(kb: Any, name: str) -> dict | None:
    """The KB's record of an application, None when it has none."""
    try:
        return kb.get_application(name)
    except KBError as exc:
        if exc.status == 404:
            return None
        raise


MISSING: Any = object()  # ``store(existing=...)`` not given: the KB is asked


def store(kb: Any, app: Application, body: dict, check_mode: bool, existing: Any = MISSING) -> dict:
    """Store the spec unless the KB already holds the same application: {changed, version, diff}.
    ``existing``: the KB's record of it (None: it has none) when the caller read it already."""
    if existing is MISSING:
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
        return load_given(params, kb)[0]
    name = params.get(name_key)
    if not name or kb is None:
        raise ValueError(f"one of spec, src or {name_key} (an application stored in the KB) is required")
    return Application.from_dict(kb.get_application(name)["application"])
