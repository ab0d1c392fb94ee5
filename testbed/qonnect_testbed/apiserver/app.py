"""The aiohttp application: routing of Kubernetes REST paths onto the Store."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

import yaml
from aiohttp import web

from qonnect_testbed.apiserver import discovery, openapi
from qonnect_testbed.apiserver.apply import record_update, server_side_apply
from qonnect_testbed.apiserver.authz import Grant
from qonnect_testbed.apiserver.errors import auth_middleware, error_middleware
from qonnect_testbed.apiserver.openapi_proto import MEDIA_TYPES
from qonnect_testbed.apiserver.patch import json_patch, merge_patch, strategic_merge
from qonnect_testbed.apiserver.protobuf import decode_object
from qonnect_testbed.apiserver.schema import Node
from qonnect_testbed.apiserver.tables import table, wants_table
from qonnect_testbed.apiserver.watch import serve_watch
from qonnect_testbed.store import ApiError, ResourceType, Store, json_copy

STORE_KEY: web.AppKey[Store] = web.AppKey("store", Store)
VERSION_KEY: web.AppKey[str] = web.AppKey("version", str)
MAX_BODY = 8 * 1024 * 1024
_APPLY = "application/apply-patch+yaml"


def make_app(
    store: Store,
    token: str,
    *,
    middlewares: Iterable = (),
    version: str = "v1.30.0",
    grants: Mapping[str, Grant] | None = None,
) -> web.Application:
    """An API server for store; every request but health and /version needs the bearer token
    (the admin ``token``, or one of ``grants``: token -> what RBAC lets it do)."""
    if not re.fullmatch(r"v1\.\d+\.\d+", version):
        raise ValueError(f"version: expected a Kubernetes version like 'v1.30.0', got {version!r}")
    if not token:
        raise ValueError("token: expected a non-empty bearer token")
    app = web.Application(
        middlewares=[*middlewares, error_middleware, auth_middleware(token, grants)],
        client_max_size=MAX_BODY,
    )
    app[STORE_KEY] = store
    app[VERSION_KEY] = version
    app.router.add_route("*", "/{tail:.*}", _dispatch)
    return app


def _json(obj: Any, status: int = 200, content_type: str = "application/json") -> web.Response:
    return web.Response(body=json.dumps(obj).encode(), status=status, headers={"Content-Type": content_type})


async def _dispatch(request: web.Request) -> web.StreamResponse:  # noqa: C901 - over the budget before it was set; split when next changed
    path = "/" + request.match_info["tail"].strip("/")
    store, version = request.app[STORE_KEY], request.app[VERSION_KEY]
    if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/", "/readyz/")):
        return web.Response(text="ok")
    if request.method != "GET" and not path.startswith(("/api/", "/apis/")):
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {path}")
    if path == "/version":
        return _json(_version_info(version))
    if path in ("/api", "/apis"):
        return _discovery_root(request, path == "/api", store)
    if path == "/openapi/v2":
        if any(t in request.headers.get("Accept", "") for t in MEDIA_TYPES):
            return web.Response(
                body=openapi.v2_protobuf(version), headers={"Content-Type": "application/octet-stream"}
            )
        _require_json(request, "/openapi/v2")
        return web.Response(body=openapi.v2_document(version), headers={"Content-Type": "application/json"})
    if path == "/openapi/v3":
        return _json(openapi.v3_index(version))
    if path.startswith("/openapi/v3/"):
        _require_json(request, path)
        gv = path[len("/openapi/v3/") :]
        gv = (
            gv[len("api/") :]
            if gv.startswith("api/")
            else gv[len("apis/") :]
            if gv.startswith("apis/")
            else ""
        )
        doc = openapi.v3_document(version, gv) if gv else None
        if doc is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return web.Response(body=doc, headers={"Content-Type": "application/json"})
    parts = path.split("/")[1:]
    if parts[0] == "api" and len(parts) >= 2 and parts[1] == "v1":
        gv, rest = "v1", parts[2:]
    elif parts[0] == "apis" and len(parts) == 2:
        group = discovery.api_group(parts[1], store.types.values())
        if group is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return _json(group)
    elif parts[0] == "apis" and len(parts) >= 3:
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    if not rest:
        doc = discovery.api_resource_list(gv, store.types.values())
        if doc is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return _json(doc)
    rt, namespace, name, sub = _resolve(gv, rest, path, store)
    return await _resource(request, store, version, rt, namespace, name, sub)


def _version_info(version: str) -> dict:
    major, minor = version.lstrip("v").split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": version,
        "gitCommit": "qonnect-testbed",
        "gitTreeState": "clean",
        "buildDate": "2024-04-17T00:00:00Z",
        "goVersion": "go1.22.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _discovery_root(request: web.Request, core: bool, store: Store) -> web.Response:
    wanted = discovery.wanted_aggregated_version(request.headers.get("Accept", ""))
    if wanted:
        ctype = f"application/json;g=apidiscovery.k8s.io;v={wanted};as=APIGroupDiscoveryList"
        return _json(discovery.aggregated(core, wanted, store.types.values()), content_type=ctype)
    if core:
        return _json(discovery.api_versions(request.host))
    return _json(discovery.api_group_list(store.types.values()))


def _require_json(request: web.Request, path: str) -> None:
    accept = request.headers.get("Accept", "")
    if accept and not any(
        t.split(";")[0].strip() in ("application/json", "*/*", "application/*") for t in accept.split(",")
    ):
        raise ApiError(
            406, "NotAcceptable", f"only application/json is served for {path}; asked for {accept}"
        )


def _resolve(
    gv: str, rest: list[str], path: str, store: Store
) -> tuple[ResourceType, str | None, str | None, str | None]:
    types = {rt.plural: rt for rt in discovery.group_versions(store.types.values()).get(gv, [])}
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in types and types[rest[2]].namespaced:
        namespace, rest = rest[1], rest[2:]
    rt = types.get(rest[0])
    if rt is None or len(rest) > 3:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in rt.subresources:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    if namespace is None and rt.namespaced and name is not None:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    return rt, namespace, name, sub


def _dry_run(request: web.Request, options: dict | None = None) -> bool:
    values = request.query.getall("dryRun", []) + list((options or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise ApiError(
                400, "BadRequest", f'dryRun: Unsupported value: "{value}": supported values: "All"'
            )
    return bool(values)


def _field_manager(request: web.Request, required: bool = False) -> str:
    manager = request.query.get("fieldManager")
    if manager:
        if len(manager) > 128:
            raise ApiError(422, "Invalid", "fieldManager: Too long: may not be longer than 128 characters")
        return manager
    if required:
        raise ApiError(400, "BadRequest", "PATCH /apply requires the fieldManager query parameter")
    agent = request.headers.get("User-Agent", "unknown")
    return agent.split("/", 1)[0] or "unknown"


async def _body(request: web.Request) -> Any:
    if request.content_type == "application/vnd.kubernetes.protobuf":
        return decode_object(await request.read())
    if "protobuf" in request.content_type or "cbor" in request.content_type:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json, application/yaml (got {request.content_type!r})",
        )
    raw = await request.read()
    if not raw:
        raise ApiError(400, "BadRequest", "the request body is empty; expected a JSON object")
    try:
        if "yaml" in request.content_type:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise ApiError(400, "BadRequest", f"the request body is not valid JSON/YAML: {exc}") from None


def _list_kind(rt: ResourceType) -> str:
    return rt.kind + "List"


async def _resource(  # noqa: C901 - over the budget before it was set; split when next changed
    request: web.Request,
    store: Store,
    version: str,
    rt: ResourceType,
    namespace: str | None,
    name: str | None,
    sub: str | None,
) -> web.StreamResponse:
    method = request.method
    accept = request.headers.get("Accept", "")
    include = request.query.get("includeObject", "Metadata")
    if name is None:
        if method == "GET":
            if request.query.get("watch") in ("true", "1"):
                return await serve_watch(
                    request, store, rt, namespace, as_table=wants_table(accept), include=include
                )
            return _list(request, store, rt, namespace, wants_table(accept), include)
        if method == "POST" and (namespace or not rt.namespaced):
            body = await _body(request)
            new = store.create(rt.key, namespace, body, dry_run=True)
            record_update(None, new, _schema(version, rt), _field_manager(request), rt.api_version)
            if _dry_run(request):
                return _json(new, 201)
            return _json(store.create(rt.key, namespace, new), 201)
        if method == "DELETE":
            return _delete_collection(request, store, rt, namespace)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection of {rt.plural}")
    if sub == "scale":
        return await _scale(request, store, version, rt, namespace, name)
    if sub == "binding":
        return await _binding(request, store, namespace, name)
    if method == "GET":
        obj = store.get_ref(rt.key, namespace, name)
        if wants_table(accept):
            return _json(table(rt.plural, [obj], obj["metadata"]["resourceVersion"], include))
        return web.Response(body=store.encoded(rt.key, obj), headers={"Content-Type": "application/json"})
    if method == "PUT":
        body = await _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object whose metadata is an object")
        if (body.get("metadata") or {}).get("name") not in (None, name):
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        body.setdefault("metadata", {})["name"] = name
        old = store.get_ref(rt.key, namespace, name)
        if sub is None:
            record_update(old, body, _schema(version, rt), _field_manager(request), rt.api_version)
        return _json(store.update(rt.key, namespace, body, subresource=sub, dry_run=_dry_run(request)))
    if method == "PATCH":
        return await _patch(request, store, version, rt, namespace, name, sub)
    if method == "DELETE" and sub is None:
        return await _delete(request, store, rt, namespace, name)
    raise ApiError(
        405, "MethodNotAllowed", f"{method} is not supported on {rt.plural}{'/' + sub if sub else ''}"
    )


def _schema(version: str, rt: ResourceType) -> Node:
    return Node.for_kind(version, rt.group, rt.version, rt.kind)


def _list(
    request: web.Request, store: Store, rt: ResourceType, namespace: str | None, as_table: bool, include: str
) -> web.Response:
    query = request.query
    try:
        limit = int(query.get("limit") or 0)
    except ValueError:
        raise ApiError(400, "BadRequest", "limit: expected a non-negative integer") from None
    items, rv, more = store.list_refs(
        rt.key,
        namespace,
        query.get("labelSelector"),
        query.get("fieldSelector"),
        limit=limit if limit > 0 else None,
        continue_token=query.get("continue"),
    )
    if as_table:
        return _json(table(rt.plural, items, rv, include, *(more or (None, None))))
    meta: dict[str, Any] = {"resourceVersion": rv}
    if more:
        meta["continue"], meta["remainingItemCount"] = more
    head = json.dumps({"kind": _list_kind(rt), "apiVersion": rt.api_version, "metadata": meta})
    body = b"".join(
        (head[:-1].encode(), b',"items":[', b",".join(store.encoded(rt.key, o) for o in items), b"]}")
    )
    return web.Response(body=body, headers={"Content-Type": "application/json"})


async def _delete_options(request: web.Request) -> dict:
    if not request.can_read_body:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        options = json.loads(raw)
    except ValueError:
        raise ApiError(400, "BadRequest", "the DeleteOptions body is not valid JSON") from None
    if not isinstance(options, dict):
        raise ApiError(400, "BadRequest", "the DeleteOptions body must be a JSON object")
    return options


def _propagation(request: web.Request, options: dict) -> str:
    policy = request.query.get("propagationPolicy") or options.get("propagationPolicy")
    if options.get("orphanDependents") is True or request.query.get("orphanDependents") == "true":
        policy = policy or "Orphan"
    policy = policy or "Background"
    if policy not in ("Orphan", "Background", "Foreground"):
        raise ApiError(
            400,
            "BadRequest",
            f'propagationPolicy: Unsupported value: "{policy}": supported values: "Orphan", "Background", "Foreground"',
        )
    return policy


RETURNS_DELETED_OBJECT = ("pods", "namespaces", "persistentvolumes", "persistentvolumeclaims")


async def _delete(
    request: web.Request, store: Store, rt: ResourceType, namespace: str | None, name: str
) -> web.Response:
    options = await _delete_options(request)
    pre = options.get("preconditions") or {}
    deleted = store.delete(
        rt.key,
        namespace,
        name,
        propagation=_propagation(request, options),
        dry_run=_dry_run(request, options),
        precondition_uid=pre.get("uid"),
        precondition_rv=pre.get("resourceVersion"),
    )
    meta = deleted["metadata"]
    # real servers answer with the object when it is only marked (finalizers keep it) and for the
    # kinds whose storage returns the deleted object; with a Status for the rest
    if rt.plural in RETURNS_DELETED_OBJECT or (meta.get("deletionTimestamp") and meta.get("finalizers")):
        return _json(deleted)
    return _json(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": meta["uid"]},
        }
    )


def _delete_collection(
    request: web.Request, store: Store, rt: ResourceType, namespace: str | None
) -> web.Response:
    query = request.query
    items, _rv, _continuation = store.list_refs(
        rt.key, namespace, query.get("labelSelector"), query.get("fieldSelector")
    )
    dry = _dry_run(request)
    policy = _propagation(request, {})
    deleted = [
        store.delete(
            rt.key, o["metadata"].get("namespace"), o["metadata"]["name"], propagation=policy, dry_run=dry
        )
        for o in list(items)
    ]
    return _json(
        {
            "kind": _list_kind(rt),
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(store.resource_version)},
            "items": deleted,
        }
    )


def _apply_patch(content_type: str, live: dict, patch: Any, node: Node) -> dict:
    if content_type == "application/json-patch+json":
        return json_patch(live, patch)
    if not isinstance(patch, dict):
        raise ApiError(400, "BadRequest", f"a {content_type} body must be a JSON object")
    if content_type == "application/merge-patch+json":
        return merge_patch(live, patch)
    if content_type == "application/strategic-merge-patch+json":
        return strategic_merge(live, patch, node)
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
        f"application/strategic-merge-patch+json (got {content_type!r})",
    )


async def _patch(
    request: web.Request,
    store: Store,
    version: str,
    rt: ResourceType,
    namespace: str | None,
    name: str,
    sub: str | None,
) -> web.Response:
    ctype = request.content_type
    body = await _body(request)
    dry = _dry_run(request)
    node = _schema(version, rt)
    if ctype == _APPLY:
        return _server_side_apply(request, store, rt, namespace, name, sub, body, node, dry)
    live = store.get_ref(rt.key, namespace, name)
    new = _apply_patch(ctype, live, body, node)
    if sub is None:
        record_update(live, new, node, _field_manager(request), rt.api_version)
    return _json(store.update(rt.key, namespace, new, subresource=sub, dry_run=dry))


def _server_side_apply(
    request: web.Request,
    store: Store,
    rt: ResourceType,
    namespace: str | None,
    name: str,
    sub: str | None,
    applied: Any,
    node: Node,
    dry: bool,
) -> web.Response:
    manager = _field_manager(request, required=True)
    if not isinstance(applied, dict):
        raise ApiError(400, "BadRequest", "an apply patch must be a YAML or JSON object")
    for field, expected in (("apiVersion", rt.api_version), ("kind", rt.kind)):
        if applied.get(field) != expected:
            raise ApiError(
                400,
                "BadRequest",
                f"{field}: expected {expected!r} in the applied configuration, got {applied.get(field)!r}",
            )
    meta = applied.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != name:
        raise ApiError(
            400, "BadRequest", "metadata.name: the applied configuration must name the object of the URL"
        )
    force = request.query.get("force") in ("true", "1")
    try:
        live = store.get_ref(rt.key, namespace, name)
    except ApiError as err:
        if err.code != 404 or sub is not None:
            raise
        live = None
    if sub == "status":
        merged = json_copy(live)
        merged["status"] = merge_patch(live.get("status") or {}, applied.get("status") or {})
        return _json(store.update(rt.key, namespace, merged, subresource="status", dry_run=dry))
    merged = server_side_apply(live, applied, node, manager, force, rt.api_version)
    if live is None:
        return _json(store.create(rt.key, namespace, merged, dry_run=dry), 201)
    return _json(store.update(rt.key, namespace, merged, dry_run=dry))


def _scale_of(deploy: dict) -> dict:
    meta = deploy["metadata"]
    selector = (deploy.get("spec", {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": deploy.get("spec", {}).get("replicas", 0)},
        "status": {
            "replicas": deploy.get("status", {}).get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in selector.items()),
        },
    }


async def _scale(
    request: web.Request, store: Store, version: str, rt: ResourceType, namespace: str | None, name: str
) -> web.Response:
    live = store.get_ref(rt.key, namespace, name)
    scale = _scale_of(live)
    if request.method == "GET":
        return _json(scale)
    if request.method not in ("PUT", "PATCH"):
        raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on {rt.plural}/scale")
    body = await _body(request)
    if request.method == "PUT":
        new_scale = body
    else:
        new_scale = _apply_patch(
            request.content_type, scale, body, Node.for_kind(version, "autoscaling", "v1", "Scale")
        )
    replicas = (new_scale.get("spec") or {}).get("replicas") if isinstance(new_scale, dict) else None
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise ApiError(
            422,
            "Invalid",
            f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: must be a non-negative integer',
        )
    new = json_copy(live)
    new["spec"]["replicas"] = replicas
    new["metadata"]["resourceVersion"] = (new_scale.get("metadata") or {}).get("resourceVersion") or live[
        "metadata"
    ]["resourceVersion"]
    record_update(live, new, _schema(version, rt), _field_manager(request), rt.api_version, "scale")
    return _json(_scale_of(store.update(rt.key, namespace, new, dry_run=_dry_run(request))))


async def _binding(request: web.Request, store: Store, namespace: str | None, name: str) -> web.Response:
    if request.method != "POST":
        raise ApiError(405, "MethodNotAllowed", "only POST is supported on pods/binding")
    body = await _body(request)
    target = (body.get("target") or {}) if isinstance(body, dict) else {}
    node = target.get("name")
    if not node:
        raise ApiError(422, "Invalid", f'Binding "{name}" is invalid: target.name: Required value')
    pod = store.get_ref("pods", namespace, name)
    if pod.get("spec", {}).get("nodeName"):
        assigned = pod["spec"]["nodeName"]
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "{assigned}"',
        )
    new = json_copy(pod)
    new["spec"]["nodeName"] = node
    if not _dry_run(request):
        store.update("pods", namespace, new)
    return _json(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
    )
