# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Delete what qonnect applied for an application but the new placement no longer wants."""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import (
    APP_LABEL,
    MANAGED_BY,
    comparable,
    object_key,
)

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
) -> list[dict]:
    """Delete managed objects of `application` in `namespace` whose key is not in `keep`."""
    selector = f"{MANAGED_BY}=qonnect,{APP_LABEL}={application}"
    results = []
    for api_version, kind in kinds:
        for obj in client.list(api_version, kind, namespace, selector):
            key = object_key(obj)
            if key in keep:
                continue
            if not check_mode:
                client.delete(api_version, kind, obj["metadata"]["name"], namespace)
            results.append(
                {"key": key, "action": "delete", "changed": True, "before": comparable(obj), "after": None}
            )
    return results


def delete_namespace(client: Any, namespace: str, application: str, check_mode: bool) -> list[dict]:
    """Delete the namespace only when qonnect created it for this application."""
    live = client.get("v1", "Namespace", namespace)
    labels = ((live or {}).get("metadata") or {}).get("labels") or {}
    if not live or labels.get(MANAGED_BY) != "qonnect" or labels.get(APP_LABEL) != application:
        return []
    if not check_mode:
        client.delete("v1", "Namespace", namespace)
    return [{"key": object_key(live), "action": "delete", "changed": True,
             "before": comparable(live), "after": None}]
