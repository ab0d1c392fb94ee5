"""Authorization of the restricted identity: RBAC's answer for one fixed, namespaced Role.

Every emulated cluster has two bearer tokens: the admin token (all rights, like
system:masters) and a restricted one for ``system:serviceaccount:default:qonnect-restricted``,
which a RoleBinding in ``default`` grants get/list/watch on pods, services, configmaps and
deployments there - the same identity the kube engine creates with real RBAC objects
(docs/testbed.md, "Restricted token"). Everything else is 403 Forbidden with the message and
details the real authorizer sends.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from qonnect_testbed.store import ApiError

RESTRICTED_USER = "system:serviceaccount:default:qonnect-restricted"
RESTRICTED_NAMESPACE = "default"
RESTRICTED_RESOURCES = frozenset(
    (("", "pods"), ("", "services"), ("", "configmaps"), ("apps", "deployments"))
)
RESTRICTED_VERBS = frozenset(("get", "list", "watch"))


@dataclass(frozen=True)
class RequestInfo:
    """What RBAC looks at: verb, API group, resource, subresource, namespace, name."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str


def request_info(request: web.Request) -> RequestInfo | None:
    """The resource request a path names, or None for non-resource paths (discovery, openapi)."""
    parts = [p for p in request.path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    if resource == "namespaces" and name and not namespace:
        namespace = name
    method = request.method
    if method == "GET":
        verb = "get" if name else "watch" if request.query.get("watch") in ("true", "1") else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return RequestInfo(verb, group, resource, sub, namespace, name)


def check_restricted(info: RequestInfo | None) -> None:
    """Raise the authorizer's 403 unless the restricted Role allows the request."""
    if info is None:
        return  # system:discovery and system:public-info-viewer allow these to every user
    if (
        info.namespace == RESTRICTED_NAMESPACE
        and info.verb in RESTRICTED_VERBS
        and not info.subresource
        and (info.group, info.resource) in RESTRICTED_RESOURCES
    ):
        return
    raise forbidden(info, RESTRICTED_USER)


def forbidden(info: RequestInfo, user: str) -> ApiError:
    """403 as RBAC words it (the resource qualified by its group, the scope spelled out)."""
    qualified = f"{info.resource}.{info.group}" if info.group else info.resource
    resource = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
    subject = f'{qualified} "{info.name}"' if info.name else qualified
    scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    details: dict = {}
    if info.name:
        details["name"] = info.name
    if info.group:
        details["group"] = info.group
    details["kind"] = info.resource
    return ApiError(
        403,
        "Forbidden",
        f'{subject} is forbidden: User "{user}" cannot {info.verb} resource '
        f'"{resource}" in API group "{info.group}" {scope}',
        details,
    )
