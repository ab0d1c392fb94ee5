"""API discovery documents: legacy (/api, /apis, /api/v1, /apis/G/V) and aggregated (v2, v2beta1).

kubectl >= 1.26 asks for the aggregated form through its Accept header and falls back to the
legacy documents when the server answers plain JSON; the Python client uses the legacy form.
"""

from __future__ import annotations

from qonnect_testbed.store import RESOURCES, ResourceType

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "binding": ["create"],
}
SUBRESOURCE_KINDS = {"scale": ("autoscaling", "v1", "Scale"), "binding": ("", "v1", "Binding")}
AGGREGATED_VERSIONS = ("v2", "v2beta1")


def group_versions() -> dict[str, list[ResourceType]]:
    """Served resources by group/version ("v1" for the core group), core first."""
    out: dict[str, list[ResourceType]] = {}
    for rt in sorted(RESOURCES.values(), key=lambda r: (r.group != "", r.group, r.plural)):
        out.setdefault(rt.group_version, []).append(rt)
    return out


def api_versions(server_address: str) -> dict:
    """GET /api."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group_list() -> dict:
    """GET /apis (legacy)."""
    groups = []
    for gv in group_versions():
        if "/" not in gv:
            continue
        group, version = gv.split("/")
        entry = {"groupVersion": gv, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str) -> dict | None:
    """GET /apis/GROUP, or None if the group is not served."""
    for gv in group_versions():
        if gv.startswith(f"{group}/"):
            entry = {"groupVersion": gv, "version": gv.split("/")[1]}
            return {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": group,
                "versions": [entry],
                "preferredVersion": entry,
            }
    return None


def api_resource_list(group_version: str) -> dict | None:
    """GET /api/v1 or /apis/G/V, or None if not served."""
    types = group_versions().get(group_version)
    if types is None:
        return None
    resources: list[dict] = []
    for rt in types:
        entry = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS if rt.plural != "namespaces" else [v for v in VERBS if v != "deletecollection"],
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in rt.subresources:
            sub_entry = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": SUBRESOURCE_VERBS[sub],
            }
            if sub in SUBRESOURCE_KINDS:
                group, version, kind = SUBRESOURCE_KINDS[sub]
                sub_entry.update(kind=kind, version=version)
                if group:
                    sub_entry["group"] = group
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def aggregated(core: bool, api_version: str) -> dict:
    """GET /api (core=True) or /apis as an APIGroupDiscoveryList of apidiscovery.k8s.io/<api_version>."""
    items = []
    for gv, types in group_versions().items():
        if ("/" not in gv) != core:
            continue
        group, _slash, version = gv.rpartition("/")
        resources = []
        for rt in types:
            entry: dict = {
                "resource": rt.plural,
                "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                "scope": "Namespaced" if rt.namespaced else "Cluster",
                "singularResource": rt.singular,
                "verbs": VERBS
                if rt.plural != "namespaces"
                else [v for v in VERBS if v != "deletecollection"],
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            subs = []
            for sub in rt.subresources:
                sgroup, sversion, skind = SUBRESOURCE_KINDS.get(sub, (rt.group, rt.version, rt.kind))
                subs.append(
                    {
                        "subresource": sub,
                        "responseKind": {"group": sgroup, "version": sversion, "kind": skind},
                        "verbs": SUBRESOURCE_VERBS[sub],
                    }
                )
            if subs:
                entry["subresources"] = subs
            resources.append(entry)
        items.append(
            {
                "metadata": {"name": group} if group else {},
                "versions": [{"version": version, "resources": resources, "freshness": "Current"}],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{api_version}",
        "metadata": {},
        "items": items,
    }


def wanted_aggregated_version(accept: str) -> str | None:
    """The first aggregated discovery version the Accept header asks for (in its order), if any."""
    for part in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in part.split(";")[1:] if "=" in p)
        if params.get("g") == "apidiscovery.k8s.io" and params.get("as") == "APIGroupDiscoveryList":
            if params.get("v") in AGGREGATED_VERSIONS:
                return params["v"]
        elif part.split(";")[0].strip() in ("application/json", "*/*", "application/*"):
            return None
    return None
