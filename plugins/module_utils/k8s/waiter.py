# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until the workloads qonnect applied on a cluster are ready (make-before-break gate)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import (
    Readiness,
    ReadyWindow,
    readiness,
    workload_ready,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.reasons import PodReason, why_not_ready
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, MANAGED_BY

CRASH_PREFIX = "crash-looping:"  # how readiness.ReadyWindow names a crash loop it failed

__all__ = ["NotReady", "wait_ready", "wait_workloads", "workload_ready"]


@dataclass(frozen=True)
class NotReady:
    """A workload still not ready when the wait ended: why (the pods' own reasons first, see
    k8s/reasons.py) and those reasons one by one."""

    kind: str
    name: str
    reason: str
    pods: tuple[PodReason, ...] = field(default=())

    def line(self) -> str:
        return f"{self.kind}/{self.name}: {self.reason}"

    def to_dict(self) -> dict:
        return {
            "workload": f"{self.kind}/{self.name}",
            "reason": self.reason,
            "pods": [p.to_dict() for p in self.pods],
        }


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
    """``wait_workloads`` as lines: ``<kind>/<name>: <why>`` of each workload still not ready."""
    return [
        n.line() for n in wait_workloads(client, namespace, application, names, timeout, interval, min_ready)
    ]


def _explain(
    client: Any,
    namespace: str,
    selector: str,
    pending: dict[tuple[str, str], str],
    seen: dict[tuple[str, str], dict],
    pods: list[dict] | None,
) -> list[NotReady]:
    """Each pending workload with its pods' own reasons, read once when the wait ends (the
    current ReplicaSets' pods: k8s/reasons.py, the agent's answer too)."""
    out = []
    replicasets: list[dict] | None = None
    try:
        if any(key[0] == "Deployment" and key in seen for key in pending):
            replicasets = client.list("apps/v1", "ReplicaSet", namespace, selector)
        if pods is None and seen:
            pods = client.list("v1", "Pod", namespace)
    except K8sError:  # the cluster went away at the end: what the waiter saw is the answer
        return [NotReady(kind, name, reason) for (kind, name), reason in sorted(pending.items())]
    for key, reason in sorted(pending.items()):
        obj = seen.get(key)
        why = why_not_ready(obj, pods or [], replicasets, key[0]) if obj is not None else None
        if obj is None or why is None or not why.reasons:
            out.append(NotReady(key[0], key[1], reason))
            continue
        if reason.startswith(CRASH_PREFIX):  # the window failed it: say so, with the pods' reasons
            named = f"{CRASH_PREFIX} {why.text}"
        elif reason in why.text or reason == readiness(obj, key[0]).reason:
            named = why.text  # the counts, named after the pods' reasons
        else:  # e.g. the minimum-ready window still running
            named = f"{why.text}; {reason}"
        out.append(NotReady(key[0], key[1], named, why.reasons))
    return out


def wait_workloads(
    client: Any,
    namespace: str,
    application: str,
    names: list[tuple[str, str]],
    timeout: float,
    interval: float = 0.1,
    min_ready: float = 0.0,
    on_poll: Callable[[list[str]], None] | None = None,
) -> list[NotReady]:
    """Poll until every (kind, name) workload is ready; returns those still not ready, each with
    why (read when the wait ends, see ``_explain``).

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
    seen: dict[tuple[str, str], dict] = {}  # the newest object of each workload
    while True:
        pods: list[dict] | None = None
        settling: list[tuple[tuple[str, str], dict]] = []  # rolled out, in the minimum-ready window
        rolling: list[tuple[tuple[str, str], dict]] = []  # still rolling out
        for kind in kinds:
            for obj in client.list("apps/v1", kind, namespace, selector):
                key = (kind, obj["metadata"]["name"])
                if key not in pending:
                    continue
                seen[key] = obj
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
        if on_poll is not None:  # progress (the deploy runner's hook): "<kind>/<name>: <why>"
            on_poll([f"{k}/{n}: {why}" for (k, n), why in sorted(pending.items())])
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, 0.5)
    if not pending:
        return []
    return _explain(client, namespace, selector, pending, seen, pods)
