# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Delete what qonnect applied for an application but the new placement no longer wants.

Every deletion is for one application identity (``<namespace>/<app>``, k8s/ownership.py):
another namespace's application of the same name, another application in the same namespace
and a team's objects are never touched, and a namespace is deleted only when nothing foreign
remains in it (``foreign_in``).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import comparable, object_key
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.ownership import (
    identity_namespace,
    is_system,
    namespace_created_for,
    owned_by,
)
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, MANAGED_BY

Kind = tuple[str, str]

# Kinds pruned when found with the managed labels; workloads go first so traffic drains last.
DEFAULT_PRUNE_KINDS = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "ServiceAccount"),
)

# Kinds an application commonly has beyond the defaults; a sweep looks for these too (a kind
# the cluster does not serve simply lists empty).
SWEEP_KINDS = (
    *DEFAULT_PRUNE_KINDS,
    ("networking.k8s.io/v1", "Ingress"),
    ("batch/v1", "CronJob"),
    ("batch/v1", "Job"),
    ("v1", "PersistentVolumeClaim"),
    ("policy/v1", "PodDisruptionBudget"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
)

# Further namespaced kinds people create by hand or with other tools (a bare Pod, RBAC, network
# policies, quotas): deleting a namespace would delete them, so removal looks for them too.
# ReplicaSets are listed so a Deployment's Pods are judged through it.
FOREIGN_KINDS = (
    ("v1", "Pod"),
    ("apps/v1", "ReplicaSet"),
    ("v1", "ReplicationController"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "ResourceQuota"),
    ("v1", "LimitRange"),
)

# Kinds the cluster itself writes about other objects: never a sign that someone else uses
# the namespace (an Event of our own Pod has no labels).
GENERATED_KINDS = frozenset(
    {"Event", "Endpoints", "EndpointSlice", "ControllerRevision", "PodMetrics", "Binding"}
)


def merged(*groups: Any) -> list[Kind]:
    """The kinds of every group once, in order of first appearance."""
    out: list[Kind] = []
    for group in groups:
        out.extend(k for k in group or () if k not in out)
    return out


def prune(
    client: Any,
    namespace: str,
    application: str,
    keep: set[str],
    kinds: list[Kind],
    check_mode: bool,
    identity: str,
) -> list[dict]:
    """Delete managed objects of `application` in `namespace` whose key is not in `keep` (only
    those it owns: another application's object with the same labels stays)."""
    selector = f"{MANAGED_BY}=qonnect,{APP_LABEL}={application}"
    results = []
    for api_version, kind in kinds:
        for obj in client.list(api_version, kind, namespace, selector):
            key = object_key(obj)
            if key in keep or not owned_by(obj, application, identity):
                continue
            if not check_mode:
                client.delete(api_version, kind, obj["metadata"]["name"], namespace)
            results.append(_deleted(obj))
    return results


def _deleted(obj: dict) -> dict:
    """The outcome of deleting one object (for the result and the diff); its uid lets a
    namespace check tell the dependents it takes along (``deleted_uids``)."""
    return {
        "key": object_key(obj),
        "action": "delete",
        "changed": True,
        "before": comparable(obj),
        "after": None,
        "uid": (obj.get("metadata") or {}).get("uid"),
    }


def deleted_uids(outcomes: list[dict]) -> set[str]:
    """The uids of the objects these outcomes deleted."""
    return {o["uid"] for o in outcomes if o.get("action") == "delete" and o.get("uid")}


def _unlistable(api_version: str, kind: str, namespace: str, exc: K8sError) -> dict:
    """A stand-in for what a kind qonnect may not list holds: unknown, so counted as foreign."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"namespace": namespace, "name": f"(cannot list: {exc.message})"},
    }


def served_namespaced_kinds(client: Any) -> list[Kind]:
    """Every namespaced, listable kind the cluster serves, when the client can tell (a
    ClusterClient through discovery); none otherwise. Generated kinds are left out."""
    discover = getattr(client, "namespaced_kinds", None)
    if not callable(discover):
        return []
    try:
        return [k for k in discover() if k[1] not in GENERATED_KINDS]
    except K8sError:
        return []  # discovery failed: the fixed kinds are still checked


def namespace_content(client: Any, namespace: str, required: list[Kind]) -> list[dict]:
    """Every object of the namespace of the given kinds and of every kind the cluster serves.

    A required kind qonnect may not list becomes a stand-in object (its content is unknown, so
    the namespace must stay); a further served kind it may not list is skipped (the documented
    least-privilege role does not grant them, docs/rbac/deploy-clusterrole.yml).
    """
    out: list[dict] = []
    for api_version, kind in merged(required, served_namespaced_kinds(client)):
        try:
            listed = client.list(api_version, kind, namespace)
        except K8sError as exc:
            if exc.status != 403:
                raise
            if (api_version, kind) in required:
                out.append(_unlistable(api_version, kind, namespace, exc))
            continue
        out.extend(o for o in listed if _lives_in(o, namespace, kind))
    return out


def _lives_in(obj: dict, namespace: str, kind: str) -> bool:
    """An object of that kind in the namespace: a cluster-scoped kind lists cluster-wide, and a
    generated kind may come through another resource (a server's ``EventList``)."""
    in_namespace = (obj.get("metadata") or {}).get("namespace") == namespace
    return in_namespace and obj.get("kind", kind) == kind and kind not in GENERATED_KINDS


def _dependent(obj: dict, uids: set[str]) -> bool:
    """Owned by another object of the namespace, or by one just deleted (a Deployment's
    ReplicaSets and Pods, a Job's Pods): its owner is judged instead, and takes it along."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") in uids for ref in refs)


def foreign_in(
    client: Any,
    namespace: str,
    application: str,
    identity: str,
    kinds: list[Kind],
    gone: set[str] | frozenset[str] = frozenset(),
) -> list[dict]:
    """Objects in the namespace that are not this identity's (nor Kubernetes' own, nor
    dependents of another object there or of one in ``gone``, uids just deleted): any of them
    keeps the namespace.

    Looks at the sweep kinds, FOREIGN_KINDS, the application's kinds and every namespaced kind
    the cluster serves when the client can list them (see ``namespace_content``).
    """
    content = namespace_content(client, namespace, merged(SWEEP_KINDS, FOREIGN_KINDS, kinds))
    uids = set(gone) | {uid for uid in ((o.get("metadata") or {}).get("uid") for o in content) if uid}
    return [
        obj
        for obj in content
        if not (obj.get("metadata") or {}).get("deletionTimestamp")
        and not is_system(obj)
        and not _dependent(obj, uids)
        and not owned_by(obj, application, identity)
    ]


def delete_namespace(
    client: Any,
    namespace: str,
    application: str,
    check_mode: bool,
    identity: str,
    kinds: list[Kind] | None = None,
    gone: set[str] | frozenset[str] = frozenset(),
) -> list[dict]:
    """Delete the namespace only when qonnect created it for this application identity, it is
    not already going, and nothing foreign (another application's or a team's objects)
    remains in it (``gone``: uids of objects just deleted, whose dependents go along)."""
    live = client.get("v1", "Namespace", namespace)
    if not live or (live.get("metadata") or {}).get("deletionTimestamp"):
        return []
    if not namespace_created_for(live, application, identity):
        return []
    if foreign_in(client, namespace, application, identity, list(kinds or []), gone):
        return []
    if not check_mode:
        client.delete("v1", "Namespace", namespace)
    return [_deleted(live)]


def _gone_or_dependent(obj: dict) -> bool:
    """Already being deleted, or owned by another object that takes it along (pods, replica sets)."""
    meta = obj.get("metadata") or {}
    return bool(meta.get("deletionTimestamp") or meta.get("ownerReferences"))


def sweep(
    client: Any,
    application: str,
    kinds: list[Kind] | None,
    check_mode: bool,
    identity: str,
) -> list[dict]:
    """Delete every object the application identity owns in any namespace, then its namespace.

    Used by removal and by the roll-back of a failed deploy: it needs no record of where things
    were applied, only the qonnect.io/application label and the owner identity, so nothing an
    interrupted or failed run applied can stay behind. A second sweep finds nothing and reports
    no change. Only what this identity owns goes (not the same-named application of another
    namespace); its namespace goes only when qonnect created it for this identity and nothing
    foreign remains in it.
    """
    selector = f"{MANAGED_BY}=qonnect,{APP_LABEL}={application}"
    wanted = merged(SWEEP_KINDS, kinds)
    results = []
    for api_version, kind in wanted:
        for obj in client.list(api_version, kind, None, selector):
            if _gone_or_dependent(obj) or not owned_by(obj, application, identity):
                continue
            meta = obj["metadata"]
            if not check_mode:
                client.delete(api_version, kind, meta["name"], meta.get("namespace"))
            results.append(_deleted(obj))
    home = identity_namespace(identity)
    gone = deleted_uids(results)
    results.extend(delete_namespace(client, home, application, check_mode, identity, wanted, gone))
    return results
