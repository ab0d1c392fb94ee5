"""Authorization: RBAC's answer for the emulator's fixed identities.

Every emulated cluster has an admin token (all rights, like system:masters) and tokens with
grants (a Role's rules in one namespace, or a ClusterRole's everywhere):

- ``restricted``, ``system:serviceaccount:default:qonnect-restricted``: a RoleBinding in
  ``default`` grants get/list/watch on pods, services, configmaps and deployments there - the
  same identity the kube engine creates with real RBAC objects (docs/testbed.md, "Restricted
  token");
- ``agent`` and ``deploy``: the ClusterRoles of docs/rbac/ (identities.py), with the rules read
  from those files.

Everything a grant does not allow is 403 Forbidden with the message and details the real
authorizer sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from qonnect_testbed import identities
from qonnect_testbed.store import ApiError

RESTRICTED_USER = "system:serviceaccount:default:qonnect-restricted"


@dataclass(frozen=True)
class Grant:
    """Who a token is and what RBAC lets it do: a Role's rules in ``namespace``, or a
    ClusterRole's rules everywhere (``namespace`` None)."""

    user: str
    rules: tuple[dict[str, Any], ...]
    namespace: str | None = None

    @classmethod
    def cluster_role(cls, role: str) -> Grant:
        """The documented ClusterRole of docs/rbac/<role>-clusterrole.yml, bound cluster-wide."""
        return cls(identities.user(role), tuple(identities.rules(role)))


RESTRICTED = Grant(
    RESTRICTED_USER,
    (
        {
            "apiGroups": [""],
            "resources": ["pods", "services", "configmaps"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
    ),
    namespace="default",
)


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


def _matches(rule: dict[str, Any], info: RequestInfo) -> bool:
    """One PolicyRule against one request, as RBAC's rule resolver reads it."""
    resource = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
    names = rule.get("resourceNames") or []
    return (
        any(g in ("*", info.group) for g in rule.get("apiGroups") or [])
        and any(r in ("*", resource) for r in rule.get("resources") or [])
        and any(v in ("*", info.verb) for v in rule.get("verbs") or [])
        and (not names or info.name in names)
    )


def allows(grant: Grant, info: RequestInfo) -> bool:
    """Whether the grant lets this resource request through."""
    if grant.namespace is not None and info.namespace != grant.namespace:
        return False
    return any(_matches(rule, info) for rule in grant.rules)


def check(grant: Grant, info: RequestInfo | None) -> None:
    """Raise the authorizer's 403 unless the grant allows the request."""
    if info is None:
        return  # system:discovery and system:public-info-viewer allow these to every user
    if not allows(grant, info):
        raise forbidden(info, grant.user)


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
