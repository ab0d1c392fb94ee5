# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until the workloads qonnect applied on a cluster are ready (make-before-break gate)."""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import APP_LABEL, MANAGED_BY


def workload_ready(obj: dict) -> bool:
    """A Deployment/StatefulSet is ready when the newest spec rolled out and all replicas are ready."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    meta = obj.get("metadata") or {}
    wanted = spec.get("replicas", 1)
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        return False
    if obj.get("kind") == "Deployment" and (status.get("updatedReplicas") or 0) < wanted:
        return False
    return (status.get("readyReplicas") or 0) >= wanted and (status.get("replicas") or 0) <= max(
        wanted, status.get("readyReplicas") or 0
    )


def not_ready_reason(obj: dict) -> str:
    """The most telling condition message of a workload that is not ready."""
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" or cond.get("reason") == "ProgressDeadlineExceeded":
            return f"{cond.get('type')}: {cond.get('reason', '')} {cond.get('message', '')}".strip()
    return "{} of {} replicas ready".format(
        status.get("readyReplicas") or 0, (obj.get("spec") or {}).get("replicas", 1)
    )


def wait_ready(
    client: Any,
    namespace: str,
    application: str,
    names: list[tuple[str, str]],
    timeout: float,
    interval: float = 0.1,
) -> list[str]:
    """Poll until every (kind, name) workload is ready; returns the names still not ready.

    One list call per kind per poll keeps the load on the API server flat however many
    workloads the application has.
    """
    if not names:
        return []
    selector = f"{MANAGED_BY}=qonnect,{APP_LABEL}={application}"
    kinds = sorted({kind for kind, _name in names})
    deadline = time.monotonic() + timeout
    pending: dict[tuple[str, str], str] = {n: "not found" for n in names}
    while True:
        for kind in kinds:
            for obj in client.list("apps/v1", kind, namespace, selector):
                key = (kind, obj["metadata"]["name"])
                if key not in pending:
                    continue
                if workload_ready(obj):
                    del pending[key]
                else:
                    pending[key] = not_ready_reason(obj)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, 0.5)
    return [f"{kind}/{name}: {reason}" for (kind, name), reason in sorted(pending.items())]
