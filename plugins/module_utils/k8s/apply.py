# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prepare manifests for a cluster and apply them idempotently with server-side apply.

Every object gets the managed labels, the application namespace and (for workloads) the
planned replica count and node pinning. A hash of the desired object is stored in an
annotation: when it matches and the live object still contains every desired field, nothing is
sent, so a second run makes no writes and reports ``changed=false``.

A controller's migration passes its fencing token: every object it writes is stamped with the
token and the write time (``fencing_stamp``), so a write by a deposed leader can be found in the
cluster's own record (``read_stamp``). The stamp is not part of the hash: an object that is
already up to date is not written again just to restamp it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.ownership import owner_identity
from ansible_collections.qonnect.core.plugins.module_utils.keys import (
    APP_LABEL,
    FENCING_ANNOTATION,
    HASH_ANNOTATION,
    MANAGED_BY,
    NAMESPACE_CREATED_ANNOTATION,
    OWNER_ANNOTATION,
    PREFIX,
    ROLE_LABEL,
    SERVICE_LABEL,
)

HOSTNAME_KEY = "kubernetes.io/hostname"
# On an address stub of a service that runs on several clusters: every instance's address,
# the one the stub names first (for multi-cluster DNS or a mesh that can use them all).
ADDRESSES_ANNOTATION = PREFIX + "addresses"

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")
SCALABLE_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
CLUSTER_SCOPED_KINDS = (
    "Namespace",
    "Node",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
)
# The order objects are applied in, as kubectl and Helm do: what others refer to comes first,
# so no workload is created before its ServiceAccount, ConfigMap or Secret (no FailedCreate).
APPLY_ORDER = (
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
)


def apply_rank(obj: dict) -> int:
    """Position of an object's kind in APPLY_ORDER; kinds not listed (custom resources) go last."""
    kind = obj.get("kind")
    return APPLY_ORDER.index(kind) if kind in APPLY_ORDER else len(APPLY_ORDER)


# Fields a server adds or changes by itself; never part of a comparison or a diff.
_VOLATILE_META = (
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
)


def managed_labels(application: str, service: str | None = None) -> dict[str, str]:
    labels = {MANAGED_BY: "qonnect", APP_LABEL: application}
    if service:
        labels[SERVICE_LABEL] = service
    return labels


def object_key(obj: dict) -> str:
    """A stable identity of an object within one cluster: apiVersion/kind/namespace/name."""
    meta = obj.get("metadata") or {}
    return "{}/{}/{}/{}".format(
        obj.get("apiVersion"), obj.get("kind"), meta.get("namespace") or "", meta.get("name")
    )


def desired_hash(obj: dict) -> str:
    body = copy.deepcopy(obj)
    (body.get("metadata") or {}).get("annotations", {}).pop(HASH_ANNOTATION, None)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


def fencing_stamp(token: dict, now: float | None = None) -> str:
    """The annotation value for a write under a fencing token: term, seq and the write time."""
    written = time.time() if now is None else now
    return json.dumps(
        {"term": int(token["term"]), "seq": int(token["seq"]), "written": round(written, 3)},
        sort_keys=True,
    )


def read_stamp(obj: dict) -> dict | None:
    """The fencing stamp of a live object ({term, seq, written}), None when it has none or an
    unreadable one (an object a user's deploy wrote, or edited by hand)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(FENCING_ANNOTATION)
    try:
        stamp = json.loads(raw) if raw else None
        return {k: stamp[k] for k in ("term", "seq", "written")} if isinstance(stamp, dict) else None
    except (ValueError, KeyError, TypeError):
        return None


def stamped(desired: dict, fencing: dict | None) -> dict:
    """The object as it is sent: with the fencing stamp when a token is given."""
    if not fencing:
        return desired
    out = copy.deepcopy(desired)
    out["metadata"].setdefault("annotations", {})[FENCING_ANNOTATION] = fencing_stamp(fencing)
    return out


def _pin_to_nodes(pod_spec: dict, nodes: list[str]) -> None:
    """Add a required node affinity on kubernetes.io/hostname In nodes (ANDed with any term)."""
    expression = {"key": HOSTNAME_KEY, "operator": "In", "values": sorted(nodes)}
    node_affinity = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") != HOSTNAME_KEY]
        term["matchExpressions"] = [*exprs, expression]
    required["nodeSelectorTerms"] = terms


def unshared(value: Any) -> Any:
    """A deep copy in which no two places share one dict or list. A YAML anchor (``&a`` ...
    ``*a``) makes one mapping appear twice, and ``copy.deepcopy`` keeps that sharing: adding
    the managed labels to a template's labels would then change a selector aliased to them, so
    a manifest read from a file would render unlike the same manifest stored in the KB."""
    if isinstance(value, dict):
        return {k: unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unshared(v) for v in value]
    return value


def autoscaled(manifests: list[dict]) -> set[tuple[str, str]]:
    """(kind, name) of the workloads a HorizontalPodAutoscaler among ``manifests`` scales: their
    replica count is the autoscaler's, so qonnect leaves ``spec.replicas`` to it (applying a count
    would take the field from the HPA controller on every deploy and undo its scaling)."""
    found = set()
    for manifest in manifests:
        if isinstance(manifest, dict) and manifest.get("kind") == "HorizontalPodAutoscaler":
            ref = (manifest.get("spec") or {}).get("scaleTargetRef") or {}
            if isinstance(ref, dict) and ref.get("kind") and ref.get("name"):
                found.add((str(ref["kind"]), str(ref["name"])))
    return found


def prepare(
    manifest: dict,
    application: str,
    service: str,
    namespace: str,
    replicas: int | None = None,
    nodes: list[str] | None = None,
) -> dict:
    """A copy of one manifest made ready for one cluster, with the hash annotation set."""
    if not isinstance(manifest, dict) or not manifest.get("apiVersion") or not manifest.get("kind"):
        raise ValueError(f"service {service}: a manifest lacks apiVersion or kind")
    obj = unshared(manifest)
    obj.pop("status", None)
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        raise ValueError(f"service {service}: a {obj['kind']} manifest lacks metadata.name")
    for key in _VOLATILE_META:
        meta.pop(key, None)
    if obj["kind"] not in CLUSTER_SCOPED_KINDS:
        meta["namespace"] = namespace
    meta.setdefault("labels", {}).update(managed_labels(application, service))
    meta.setdefault("annotations", {})[OWNER_ANNOTATION] = owner_identity(application, namespace)
    if obj["kind"] in WORKLOAD_KINDS:
        spec = obj.setdefault("spec", {})
        template = spec.setdefault("template", {})
        template.setdefault("metadata", {}).setdefault("labels", {}).update(
            managed_labels(application, service)
        )
        if replicas is not None and obj["kind"] in SCALABLE_KINDS:
            spec["replicas"] = int(replicas)
        if nodes:
            _pin_to_nodes(template.setdefault("spec", {}), list(nodes))
    meta.setdefault("annotations", {})[HASH_ANNOTATION] = desired_hash(obj)
    return obj


def namespace_object(namespace: str, application: str, given: list[dict] | None = None) -> dict:
    """The application's namespace, merged with the Namespace manifests the application gives
    (their labels and annotations; the spec loader checked that they name this namespace)."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for manifest in given or []:
        meta = manifest.get("metadata") or {}
        labels.update(meta.get("labels") or {})
        annotations.update(meta.get("annotations") or {})
    labels.update(managed_labels(application))
    annotations.pop(HASH_ANNOTATION, None)
    annotations[OWNER_ANNOTATION] = owner_identity(application, namespace)
    annotations[NAMESPACE_CREATED_ANNOTATION] = application
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "labels": labels, "annotations": annotations},
    }
    obj["metadata"]["annotations"][HASH_ANNOTATION] = desired_hash(obj)
    return obj


def address_stub(
    name: str, namespace: str, application: str, service: str, target: str, *others: str
) -> dict:
    """An ExternalName Service making `name` resolve to a cluster that runs the service;
    ``others``: the addresses of its other instances, listed in an annotation."""
    labels = managed_labels(application, service)
    labels[ROLE_LABEL] = "address"
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {OWNER_ANNOTATION: owner_identity(application, namespace)},
        },
        "spec": {"type": "ExternalName", "externalName": target},
    }
    if others:
        obj["metadata"]["annotations"][ADDRESSES_ANNOTATION] = ",".join((target, *others))
    obj["metadata"]["annotations"][HASH_ANNOTATION] = desired_hash(obj)
    return obj


def is_stub(obj: dict | None) -> bool:
    return obj is not None and (obj.get("spec") or {}).get("type") == "ExternalName"


def contains(live: Any, desired: Any) -> bool:
    """True when every field of `desired` has the same value in `live` (server defaults ignored)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(contains(live.get(k), v) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(contains(a, b) for a, b in zip(live, desired, strict=True))
        )
    if isinstance(desired, (int, float)) and isinstance(live, (int, float)) and not isinstance(desired, bool):
        return float(live) == float(desired)
    return live == desired


def up_to_date(live: dict | None, desired: dict) -> bool:
    """Nothing to send: the live object carries our hash and every desired field."""
    if not live:
        return False
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    if annotations.get(HASH_ANNOTATION) != desired["metadata"]["annotations"][HASH_ANNOTATION]:
        return False
    return contains(live, desired)


def comparable(obj: dict | None) -> dict | None:
    """The object without status and server-maintained metadata, for diffs and comparisons.

    Secret values are masked so they never reach a diff or a log; a change to them still shows
    because the hash annotation changes with them.
    """
    if obj is None:
        return None
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata") or {}
    for key in _VOLATILE_META:
        meta.pop(key, None)
    (meta.get("annotations") or {}).pop(FENCING_ANNOTATION, None)  # who wrote it, not what
    if out.get("kind") == "Secret":
        for field in ("data", "stringData"):
            if isinstance(out.get(field), dict):
                out[field] = {k: "<hidden>" for k in out[field]}
        (meta.get("annotations") or {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return out


def dry_run_create(client: Any, desired: dict) -> dict:
    """The object as the server would create it (its defaults filled in), without writing.

    A namespace that does not exist yet (the first deploy to a cluster) makes the server refuse
    the dry run, so it is tried in ``default`` and the namespace put back; the desired object
    itself is the last resort.
    """
    try:
        return client.apply(desired, dry_run=True)
    except Exception:  # any refusal of a dry run: try elsewhere, or show the desired object
        namespace = (desired.get("metadata") or {}).get("namespace")
        if not namespace or namespace == "default":
            return desired
    elsewhere = copy.deepcopy(desired)
    elsewhere["metadata"]["namespace"] = "default"
    try:
        result = client.apply(elsewhere, dry_run=True)
    except Exception:  # e.g. a cluster that refuses dry runs: show the desired object
        return desired
    result.setdefault("metadata", {})["namespace"] = namespace
    return result


def apply_one(
    client: Any, desired: dict, live: dict | None, check_mode: bool, fencing: dict | None = None
) -> dict:
    """Apply one object; returns {key, action, changed, before, after}.

    `live` is the current object (None when absent). Check mode uses a server dry-run, for an
    object that would be created too (falling back to the desired object when the server
    cannot dry-run it, e.g. its namespace does not exist yet). With a fencing token, what is
    written carries its stamp (see the module docstring).
    """
    key = object_key(desired)
    if up_to_date(live, desired):
        return {"key": key, "action": "unchanged", "changed": False}
    if check_mode and live is None:
        # A server dry-run shows the object as it would be created (with server defaults), so a
        # diff of the real run afterwards matches; without its namespace yet, the object itself.
        return {
            "key": key,
            "action": "create",
            "changed": True,
            "before": None,
            "after": comparable(dry_run_create(client, desired)),
        }
    if is_stub(live) != is_stub(desired) and live is not None and desired["kind"] == "Service":
        # A Service switching between ExternalName and a real one cannot be merged cleanly.
        if check_mode:
            return {
                "key": key,
                "action": "replace",
                "changed": True,
                "before": comparable(live),
                "after": comparable(desired),
            }
        meta = desired["metadata"]
        client.delete("v1", "Service", meta["name"], meta.get("namespace"))
        live = None
    result = client.apply(stamped(desired, fencing), dry_run=check_mode)
    before, after = comparable(live), comparable(result)
    changed = before != after
    action = "create" if live is None else ("update" if changed else "unchanged")
    out = {"key": key, "action": action, "changed": changed}
    if changed:
        out.update(before=before, after=after)
    return out
