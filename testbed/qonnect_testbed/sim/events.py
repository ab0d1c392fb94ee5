"""Events as the scheduler, kubelet and node controller record them (for describe and demos)."""

from __future__ import annotations

import uuid

from qonnect_testbed.sim.objects import now
from qonnect_testbed.store import ApiError, Store


def record(
    store: Store,
    obj: dict,
    reason: str,
    message: str,
    *,
    component: str,
    kind_type: str = "Normal",
    host: str | None = None,
) -> None:
    """Create a core/v1 Event about obj; a failure to record never disturbs the caller."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    stamp = now()
    event = {
        "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {
            "kind": obj.get("kind"),
            "apiVersion": obj.get("apiVersion"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "type": kind_type,
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "eventTime": None,
        "source": {"component": component, **({"host": host} if host else {})},
        "reportingComponent": component,
        "reportingInstance": host or "",
    }
    try:
        store.create("events", namespace, event)
    except ApiError:
        pass  # e.g. the namespace is being deleted: the event has nowhere to go
