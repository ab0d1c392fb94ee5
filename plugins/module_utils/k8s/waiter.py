# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until the workloads qonnect applied on a cluster are ready (make-before-break gate)."""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import (
    readiness,
    workload_ready,
)
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, MANAGED_BY

__all__ = ["not_ready_reason", "wait_ready", "workload_ready"]


def not_ready_reason(obj: dict) -> str:
    """Why a workload is not ready, for the deploy result (see k8s/readiness.py)."""
    return readiness(obj).reason or "not ready"


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
    failed: set[tuple[str, str]] = set()
    while True:
        for kind in kinds:
            for obj in client.list("apps/v1", kind, namespace, selector):
                key = (kind, obj["metadata"]["name"])
                if key not in pending:
                    continue
                state = readiness(obj, kind)
                if state.ready:
                    del pending[key]
                    failed.discard(key)
                else:
                    pending[key] = state.reason or "not ready"
                    if state.failed:
                        failed.add(key)
                    else:
                        failed.discard(key)
        # Kubernetes declared a rollout failed (ProgressDeadlineExceeded): waiting longer is moot
        if not pending or time.monotonic() >= deadline or set(pending) <= failed:
            break
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, 0.5)
    return [f"{kind}/{name}: {reason}" for (kind, name), reason in sorted(pending.items())]
