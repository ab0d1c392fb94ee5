# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until the workloads qonnect applied on a cluster are ready (make-before-break gate)."""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import (
    Readiness,
    ReadyWindow,
    readiness,
    workload_ready,
)
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, MANAGED_BY

__all__ = ["not_ready_reason", "wait_ready", "workload_ready"]


def not_ready_reason(obj: dict) -> str:
    """Why a workload is not ready, for the deploy result (see k8s/readiness.py)."""
    return readiness(obj).reason or "not ready"


def _mark(
    pending: dict[tuple[str, str], str],
    failed: set[tuple[str, str]],
    key: tuple[str, str],
    state: Readiness,
    settle: bool = False,
) -> None:
    """Record one workload's state (``settle``: ready, but its pods' window is still to check)."""
    if state.ready and not settle:
        del pending[key]
        failed.discard(key)
        return
    pending[key] = state.reason or ("minimum ready time: pods not yet seen" if settle else "not ready")
    if state.failed:
        failed.add(key)
    else:
        failed.discard(key)


def wait_ready(
    client: Any,
    namespace: str,
    application: str,
    names: list[tuple[str, str]],
    timeout: float,
    interval: float = 0.1,
    min_ready: float = 0.0,
) -> list[str]:
    """Poll until every (kind, name) workload is ready; returns the names still not ready.

    One list call per kind per poll keeps the load on the API server flat however many
    workloads the application has. ``min_ready`` > 0: a rolled-out workload without its own
    ``minReadySeconds`` is ready only once every pod of it has been Ready that long with no
    restart (readiness.ReadyWindow; one pod list per poll while any workload is in that
    window), and a new pod crash-looping while any workload still rolls out (its own
    ``minReadySeconds`` or not) fails that rollout at once.
    """
    if not names:
        return []
    selector = f"{MANAGED_BY}=qonnect,{APP_LABEL}={application}"
    kinds = sorted({kind for kind, _name in names})
    deadline = time.monotonic() + timeout
    pending: dict[tuple[str, str], str] = {n: "not found" for n in names}
    failed: set[tuple[str, str]] = set()
    window = ReadyWindow(min_ready)
    while True:
        settling: list[tuple[tuple[str, str], dict]] = []  # rolled out, in the minimum-ready window
        rolling: list[tuple[tuple[str, str], dict]] = []  # still rolling out
        for kind in kinds:
            for obj in client.list("apps/v1", kind, namespace, selector):
                key = (kind, obj["metadata"]["name"])
                if key not in pending:
                    continue
                state = readiness(obj, kind)
                if state.ready and window.applies(obj):
                    settling.append((key, obj))
                elif not state.ready and not state.failed and window.seconds > 0:
                    rolling.append((key, obj))  # a crash loop of its new pods fails it at once
                _mark(pending, failed, key, state, settle=state.ready and window.applies(obj))
        if settling or rolling:
            pods = client.list("v1", "Pod", namespace)
            now, clock = time.time(), time.monotonic()
            for key, obj in rolling:
                crash = window.crash_loop(obj, pods)
                if crash:
                    _mark(pending, failed, key, Readiness(False, 0, 0, crash, crash))
            for key, obj in settling:
                _mark(pending, failed, key, window.check(obj, pods, now, clock))
        # Kubernetes declared a rollout failed (ProgressDeadlineExceeded), or a new pod crash-loops:
        # waiting longer is moot
        if not pending or time.monotonic() >= deadline or set(pending) <= failed:
            break
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, 0.5)
    return [f"{kind}/{name}: {reason}" for (kind, name), reason in sorted(pending.items())]
