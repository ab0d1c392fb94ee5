"""API discovery documents: legacy (/api, /apis, /api/v1, /apis/G/V) and aggregated (v2, v2beta1).

kubectl >= 1.26 asks for the aggregated form through its Accept header and falls back to the
legacy documents when the server answers plain JSON; the Python client uses the legacy form.
"""

from __future__ import annotations

from typing import Iterable

from qonnect_testbed.store import RESOURCES, ResourceType

AGGREGATED_VERSIONS = ("v2", "v2beta1")


def group_versions(types: Iterable[ResourceType] | None = None) -> dict[str, list[ResourceType]]:
    """Served resources by group/version ("v1" for the core group), core first; ``types`` are a
    store's (built-ins plus the custom resources of its CRDs), the built-ins if None."""
    out: dict[str, list[ResourceType]] = {}
    chosen = RESOURCES.values() if types is None else types
    for rt in sorted(chosen, key=lambda r: (r.group != "", r.group, r.plural)):
        out.setdefault(rt.group_version, []).append(rt)
    return out


def api_versions(server_address: str) -> dict:
    """GET /api."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group_list(types: Iterable[ResourceType] | None = None) -> dict:
    """GET /apis (legacy)."""
    groups = []
    for gv in group_versions(types):
        if "/" not in gv:
            continue
        group, version = gv.split("/")
        entry = {"groupVersion": gv, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str, types: Iterable[ResourceType] | None = None) -> dict | None:
    """GET /apis/GROUP, or None if the group is not served."""
    for gv in group_versions(types):
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


def api_resource_list(group_version: str, served: Iterable[ResourceType] | None = None) -> dict | None:
    """GET /api/v1 or /apis/G/V, or None if not served."""
    types = group_versions(served).get(group_version)
    if types is None:
        return None
    resources: list[dict] = []
    for rt in types:
        entry = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub, group, version, kind, verbs in rt.subresource_info:
            sub_entry = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": kind,
                "verbs": list(verbs),
            }
            if (group, version) != (rt.group, rt.version):
                sub_entry["version"] = version
                if group:
                    sub_entry["group"] = group
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def aggregated(core: bool, api_version: str, served: Iterable[ResourceType] | None = None) -> dict:
    """GET /api (core=True) or /apis as an APIGroupDiscoveryList of apidiscovery.k8s.io/<api_version>."""
    items = []
    for gv, types in group_versions(served).items():
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
                "verbs": list(rt.verbs),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            subs = []
            for sub, sgroup, sversion, skind, verbs in rt.subresource_info:
                subs.append(
                    {
                        "subresource": sub,
                        "responseKind": {"group": sgroup, "version": sversion, "kind": skind},
                        "verbs": list(verbs),
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
