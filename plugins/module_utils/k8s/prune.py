# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Delete what qonnect applied for an application but the new placement no longer wants."""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import comparable, object_key
from ansible_collections.qonnect.core.plugins.module_utils.k8s.ownership import (
    is_system,
    namespace_created_for,
    owned_by,
)
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, MANAGED_BY

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


def prune(
    client: Any,
    namespace: str,
    application: str,
    keep: set[str],
    kinds: list[tuple[str, str]],
    check_mode: bool,
    identity: str | None = None,
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
            results.append(
                {"key": key, "action": "delete", "changed": True, "before": comparable(obj), "after": None}
            )
    return results


def foreign_in(
    client: Any, namespace: str, application: str, identity: str | None, kinds: list[tuple[str, str]]
) -> list[dict]:
    """Objects in the namespace that are not this application's (nor Kubernetes' own)."""
    out = []
    for api_version, kind in kinds:
        for obj in client.list(api_version, kind, namespace):
            if _gone_or_owned(obj) or is_system(obj) or owned_by(obj, application, identity):
                continue
            out.append(obj)
    return out


def delete_namespace(
    client: Any,
    namespace: str,
    application: str,
    check_mode: bool,
    identity: str | None = None,
    kinds: list[tuple[str, str]] | None = None,
) -> list[dict]:
    """Delete the namespace only when qonnect created it for this application and nothing
    foreign (another application's or a team's objects) remains in it."""
    live = client.get("v1", "Namespace", namespace)
    if not live or not namespace_created_for(live, application):
        return []
    wanted = list(SWEEP_KINDS) + [k for k in (kinds or []) if k not in SWEEP_KINDS]
    if foreign_in(client, namespace, application, identity, wanted):
        return []
    if not check_mode:
        client.delete("v1", "Namespace", namespace)
    return [
        {
            "key": object_key(live),
            "action": "delete",
            "changed": True,
            "before": comparable(live),
            "after": None,
        }
    ]


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


def _gone_or_owned(obj: dict) -> bool:
    """Already being deleted, or owned by another object that takes it along (pods, replica sets)."""
    meta = obj.get("metadata") or {}
    return bool(meta.get("deletionTimestamp") or meta.get("ownerReferences"))


def sweep(
    client: Any,
    application: str,
    kinds: list[tuple[str, str]] | None,
    check_mode: bool,
    identity: str | None = None,
) -> list[dict]:
    """Delete every object labelled with the application in any namespace, then its namespaces.

    Used by removal and by the roll-back of a failed deploy: it needs no record of where things
    were applied, only the qonnect.io/application label, so nothing an interrupted or failed run
    applied can stay behind. A second sweep finds nothing and reports no change. Only what the
    application owns goes; a namespace goes only when qonnect created it for the application
    and nothing foreign remains in it.
    """
    selector = f"{MANAGED_BY}=qonnect,{APP_LABEL}={application}"
    wanted = list(SWEEP_KINDS) + [k for k in (kinds or []) if k not in SWEEP_KINDS]
    results = []
    for api_version, kind in wanted:
        for obj in client.list(api_version, kind, None, selector):
            if _gone_or_owned(obj) or not owned_by(obj, application, identity):
                continue
            meta = obj["metadata"]
            if not check_mode:
                client.delete(api_version, kind, meta["name"], meta.get("namespace"))
            results.append(
                {
                    "key": object_key(obj),
                    "action": "delete",
                    "changed": True,
                    "before": comparable(obj),
                    "after": None,
                }
            )
    for ns in client.list("v1", "Namespace", None, selector):
        if _gone_or_owned(ns) or not namespace_created_for(ns, application):
            continue
        if foreign_in(client, ns["metadata"]["name"], application, identity, wanted):
            continue
        if not check_mode:
            client.delete("v1", "Namespace", ns["metadata"]["name"])
        results.append(
            {
                "key": object_key(ns),
                "action": "delete",
                "changed": True,
                "before": comparable(ns),
                "after": None,
            }
        )
    return results
