"""OpenAPI v2 and v3 documents for the served kinds, generated from kubernetes-validate's schemas.

kubectl reads /openapi/v3 to find the fieldValidation parameter on PATCH operations (server-side
validation) and the patch strategies of lists (strategic merge on apply); the schemas carry
x-kubernetes-group-version-kind, -patch-strategy and -patch-merge-key from upstream.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from qonnect_testbed.apiserver.discovery import group_versions
from qonnect_testbed.apiserver.openapi_proto import encode_document
from qonnect_testbed.apiserver.schema import definitions, kind_definition
from qonnect_testbed.store import ResourceType

_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_EXTRA_DEFS = (
    _META + "Status",
    _META + "DeleteOptions",
    _META + "Patch",
    _META + "WatchEvent",
    _META + "APIResourceList",
)
_SCALE = "io.k8s.api.autoscaling.v1.Scale"


def _convert(schema: Any, ref_prefix: str, v3: bool) -> Any:
    """JSON-schema $defs (nullable type lists, #/$defs refs) to OpenAPI's dialect."""
    if isinstance(schema, list):
        return [_convert(s, ref_prefix, v3) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "oneOf" in schema:  # IntOrString and Quantity
        types = {
            t
            for s in schema["oneOf"]
            for t in ([s.get("type")] if isinstance(s.get("type"), str) else s.get("type", []))
        }
        fmt = "int-or-string" if "integer" in types else "quantity"
        out: dict[str, Any] = {"type": "string", "format": fmt}
        if fmt == "int-or-string" and v3:
            out = {"x-kubernetes-int-or-string": True}
        if "description" in schema:
            out["description"] = schema["description"]
        return out
    out = {}
    for key, value in schema.items():
        if key == "$ref":
            continue
        if key == "type" and isinstance(value, list):
            real = [t for t in value if t != "null"]
            if real:
                out["type"] = real[0]
            continue
        if key == "properties":
            out[key] = {k: _convert(v, ref_prefix, v3) for k, v in value.items()}
        else:
            out[key] = _convert(value, ref_prefix, v3)
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = ref_prefix + ref.split("/")[-1]
        if v3 and out:
            return {"allOf": [{"$ref": target}], **out}
        return {"$ref": target, **({"description": out["description"]} if "description" in out else {})}
    return out


def _closure(version: str, roots: list[str]) -> list[str]:
    defs = definitions(version)
    seen: set[str] = set()
    todo = [r for r in roots if r in defs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        text = json.dumps(defs[name])
        for part in text.split('"#/$defs/')[1:]:
            todo.append(part.split('"', 1)[0])
    return sorted(seen)


def _kinds(version: str, types: list[ResourceType]) -> dict[str, str]:
    return {rt.plural: kind_definition(version, rt.group, rt.version, rt.kind) or "" for rt in types}


_QUERY = {
    "dryRun": ("string", "When present, modifications are not persisted. Valid value: All."),
    "fieldManager": ("string", "Name of the actor making the change."),
    "fieldValidation": ("string", "How unknown or duplicate fields are handled: Ignore, Warn or Strict."),
    "force": ("boolean", "Force Apply requests, re-acquiring conflicting fields."),
    "labelSelector": ("string", "Restrict the list by labels."),
    "fieldSelector": ("string", "Restrict the list by fields."),
    "limit": ("integer", "Maximum number of items to return."),
    "continue": ("string", "Continue token from a previous list."),
    "watch": ("boolean", "Watch for changes instead of listing."),
    "resourceVersion": ("string", "Resource version to list or watch from."),
    "timeoutSeconds": ("integer", "Timeout of a list or watch call."),
    "propagationPolicy": ("string", "Orphan, Background or Foreground."),
    "gracePeriodSeconds": ("integer", "Seconds before the object is deleted."),
}
_ACTIONS: dict[str, tuple[str, ...]] = {
    "get": (),
    "list": (
        "labelSelector",
        "fieldSelector",
        "limit",
        "continue",
        "watch",
        "resourceVersion",
        "timeoutSeconds",
    ),
    "post": ("dryRun", "fieldManager", "fieldValidation"),
    "put": ("dryRun", "fieldManager", "fieldValidation"),
    "patch": ("dryRun", "fieldManager", "fieldValidation", "force"),
    "delete": ("dryRun", "propagationPolicy", "gracePeriodSeconds"),
    "deletecollection": ("dryRun", "labelSelector", "fieldSelector", "propagationPolicy"),
}
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


def _operation(
    rt: ResourceType, action: str, response: str, body: str | None, scope: str, v3: bool, prefix: str
) -> dict:
    params = _ACTIONS[action]
    gvk = {"group": rt.group, "version": rt.version, "kind": "Scale" if response == _SCALE else rt.kind}
    if response == _SCALE:
        gvk["group"], gvk["version"] = "autoscaling", "v1"
    op: dict[str, Any] = {
        "operationId": f"{action}{scope}{rt.kind}",
        "tags": [rt.group_version.replace("/", "_").replace(".", "")],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [
            {
                "name": n,
                "in": "query",
                "description": d,
                **({"schema": {"type": t, "uniqueItems": True}} if v3 else {"type": t, "uniqueItems": True}),
            }
            for n, (t, d) in ((n, _QUERY[n]) for n in params)
        ],
    }
    ref = {"$ref": prefix + response}
    if v3:
        op["responses"] = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        if body:
            types = _PATCH_TYPES if action == "patch" else ("application/json", "application/yaml")
            op["requestBody"] = {
                "required": True,
                "content": {t: {"schema": {"$ref": prefix + body}} for t in types},
            }
    else:
        op["responses"] = {"200": {"description": "OK", "schema": ref}}
        op["produces"] = ["application/json", "application/yaml"]
        op["consumes"] = list(_PATCH_TYPES) if action == "patch" else ["*/*"]
        if body:
            op["parameters"].append(
                {"name": "body", "in": "body", "required": True, "schema": {"$ref": prefix + body}}
            )
    return op


def _paths(version: str, types: list[ResourceType], v3: bool, prefix: str) -> dict:
    kinds = _kinds(version, types)
    paths: dict[str, dict] = {}
    for rt in types:
        kind_def = kinds[rt.plural]
        if not kind_def:
            continue
        root = "/api/v1" if not rt.group else f"/apis/{rt.group_version}"
        scope = "Namespaced" if rt.namespaced else ""
        coll = f"{root}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{root}/{rt.plural}"
        list_def = kind_def + "List"
        string_type = {"schema": {"type": "string"}} if v3 else {"type": "string"}
        path_params = (
            [{"name": "namespace", "in": "path", "required": True, **string_type}] if rt.namespaced else []
        )
        name_param = {"name": "name", "in": "path", "required": True, **string_type}
        paths[coll] = {
            "get": _operation(rt, "list", list_def, None, scope, v3, prefix),
            "post": _operation(rt, "post", kind_def, kind_def, scope, v3, prefix),
            "delete": _operation(rt, "deletecollection", _META + "Status", None, scope, v3, prefix),
            "parameters": path_params,
        }
        item = {
            "get": _operation(rt, "get", kind_def, None, scope, v3, prefix),
            "put": _operation(rt, "put", kind_def, kind_def, scope, v3, prefix),
            "patch": _operation(rt, "patch", kind_def, _META + "Patch", scope, v3, prefix),
            "delete": _operation(rt, "delete", _META + "Status", None, scope, v3, prefix),
            "parameters": [*path_params, name_param],
        }
        paths[f"{coll}/{{name}}"] = item
        if rt.namespaced:
            paths[f"{root}/{rt.plural}"] = {
                "get": _operation(rt, "list", list_def, None, "ForAllNamespaces", v3, prefix)
            }
        for sub in rt.subresources:
            if sub == "binding":
                continue
            response = _SCALE if sub == "scale" else kind_def
            paths[f"{coll}/{{name}}/{sub}"] = {
                "get": _operation(rt, "get", response, None, scope + sub.title(), v3, prefix),
                "put": _operation(rt, "put", response, response, scope + sub.title(), v3, prefix),
                "patch": _operation(rt, "patch", response, _META + "Patch", scope + sub.title(), v3, prefix),
                "parameters": [*path_params, name_param],
            }
    return paths


def _roots(version: str, types: list[ResourceType]) -> list[str]:
    roots = list(_EXTRA_DEFS)
    for name in _kinds(version, types).values():
        if name:
            roots += [name, name + "List"]
    if any("scale" in rt.subresources for rt in types):
        roots.append(_SCALE)
    return roots


@functools.lru_cache(maxsize=8)
def v2_document(version: str) -> bytes:
    """GET /openapi/v2 as JSON."""
    types = [rt for gv in group_versions().values() for rt in gv]
    defs = definitions(version)
    prefix = "#/definitions/"
    doc = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": _paths(version, types, False, prefix),
        "definitions": {
            n: _convert(defs[n], prefix, False) for n in _closure(version, _roots(version, types))
        },
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    }
    return json.dumps(doc).encode()


@functools.lru_cache(maxsize=16)
def v3_document(version: str, group_version: str) -> bytes | None:
    """GET /openapi/v3/api/v1 or /openapi/v3/apis/G/V as JSON, or None if not served."""
    types = group_versions().get(group_version)
    if types is None:
        return None
    defs = definitions(version)
    prefix = "#/components/schemas/"
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": _paths(version, types, True, prefix),
        "components": {
            "schemas": {
                n: _convert(defs[n], prefix, True) for n in _closure(version, _roots(version, types))
            },
            "securitySchemes": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        },
    }
    return json.dumps(doc).encode()


def v3_path(group_version: str) -> str:
    return "api/v1" if group_version == "v1" else f"apis/{group_version}"


@functools.lru_cache(maxsize=8)
def v3_index(version: str) -> dict:
    """GET /openapi/v3: one entry per group/version with a hash-pinned URL, as real servers send."""
    paths = {}
    for gv in group_versions():
        digest = hashlib.sha512(v3_document(version, gv) or b"").hexdigest()[:128].upper()
        paths[v3_path(gv)] = {"serverRelativeURL": f"/openapi/v3/{v3_path(gv)}?hash={digest}"}
    return {"paths": paths}


@functools.lru_cache(maxsize=8)
def v2_protobuf(version: str) -> bytes:
    """GET /openapi/v2 as gnostic protobuf (what kubectl 1.27 and 1.28 ask for)."""
    return encode_document(json.loads(v2_document(version)))
