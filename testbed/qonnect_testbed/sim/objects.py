"""Small helpers over Kubernetes objects shared by the simulation controllers."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity as _parse_quantity

RESOURCES = ("cpu", "memory", "ephemeral-storage")


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity as a number; unparsable values count as 0 (the API validates them)."""
    try:
        return _parse_quantity(value)
    except ValueError:
        return 0.0


def format_cpu(cores: float) -> str:
    """CPU as the API writes it: whole cores as "6", fractions in millicores."""
    return str(int(cores)) if float(cores).is_integer() else f"{round(cores * 1000)}m"


def now() -> str:
    """RFC 3339 timestamp with second precision, as in object status."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """MicroTime, as in Lease renewTime."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_requests(pod: dict) -> dict[str, float]:
    """Effective requests: sum over containers, at least the largest init container's."""
    spec = pod.get("spec") or {}
    total = dict.fromkeys(RESOURCES, 0.0)
    for container in spec.get("containers") or []:
        requests = _requests(container)
        for res in RESOURCES:
            total[res] += requests[res]
    for container in spec.get("initContainers") or []:
        requests = _requests(container)
        for res in RESOURCES:
            total[res] = max(total[res], requests[res])
    return total


def _requests(container: Any) -> dict[str, float]:
    resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    # As in the API's defaulting: a limit without a request is also the request.
    return {res: parse_quantity(requests.get(res, limits.get(res, 0))) for res in RESOURCES}


def condition(obj: dict, kind: str) -> dict | None:
    """The status condition of the given type, if any."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def is_true(obj: dict, kind: str) -> bool:
    cond = condition(obj, kind)
    return bool(cond and cond.get("status") == "True")


def set_condition(
    conditions: list[dict],
    kind: str,
    status: str,
    reason: str,
    message: str,
    stamp: str,
    *,
    heartbeat: bool = False,
    probe: bool = False,
    update_time: bool = False,
) -> list[dict]:
    """Conditions with one set; lastTransitionTime moves only when the status changes."""
    out, found = [], False
    for cond in conditions:
        if cond.get("type") != kind:
            out.append(cond)
            continue
        found = True
        new = dict(cond, status=status, reason=reason, message=message)
        if cond.get("status") != status:
            new["lastTransitionTime"] = stamp
        if update_time and (cond.get("reason"), cond.get("message"), cond.get("status")) != (
            reason,
            message,
            status,
        ):
            new["lastUpdateTime"] = stamp
        out.append(new)
    if not found:
        new = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": stamp,
        }
        if update_time:
            new["lastUpdateTime"] = stamp
        out.append(new)
    if heartbeat or probe:
        key = "lastHeartbeatTime" if heartbeat else "lastProbeTime"
        for cond in out:
            if cond.get("type") == kind:
                cond[key] = stamp
    return out


def owner_uid(obj: dict, kind: str) -> str | None:
    """uid of the controlling owner of the given kind."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == kind and ref.get("controller"):
            return ref.get("uid")
    return None


def controller_uid(obj: dict) -> str | None:
    """uid of the controlling owner, whatever its kind."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref.get("uid")
    return None


def key_of(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta["name"]
