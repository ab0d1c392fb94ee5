"""The ResourceQuota admission plugin for pods, and the quota controller's status.used.

A pod whose creation would take a namespace's usage above any ResourceQuota's hard limit is
refused with the real server's 403 ("exceeded quota: NAME, requested: ..., used: ...,
limited: ..."), so a ReplicaSet that cannot make its pods shows ReplicaFailure with that text.
Counted, as upstream: pods that are not terminal (Succeeded/Failed) nor being deleted; the
tracked names are pods/count/pods and requests.*/limits.* of cpu, memory and ephemeral-storage
(bare cpu and memory mean requests). Usage is computed from the stored pods at admission time.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Iterable

from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity_decimal

from qonnect_testbed.quantities import canonical
from qonnect_testbed.store.errors import ApiError

_COMPUTE = ("cpu", "memory", "ephemeral-storage")


def _amount(value: object) -> tuple[Decimal, bool]:
    text = str(value)
    try:
        return parse_quantity_decimal(text), text.endswith("i")
    except ValueError:
        return Decimal(0), False


def pod_usage(pod: dict) -> dict[str, tuple[Decimal, bool]]:
    """What one pod charges to a quota: name -> (amount, printed in binary units)."""
    usage: dict[str, tuple[Decimal, bool]] = {"pods": (Decimal(1), False), "count/pods": (Decimal(1), False)}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = (container or {}).get("resources") or {}
        for kind in ("requests", "limits"):
            for res, value in (resources.get(kind) or {}).items():
                if res not in _COMPUTE:
                    continue
                amount, binary = _amount(value)
                for name in (f"{kind}.{res}",) + ((res,) if kind == "requests" else ()):
                    before = usage.get(name, (Decimal(0), binary))
                    usage[name] = (before[0] + amount, before[1] or binary)
    return usage


def counts(pod: dict) -> bool:
    """Whether a stored pod uses quota (not terminal, not being deleted)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def used(pods: Iterable[dict], names: Iterable[str]) -> dict[str, tuple[Decimal, bool]]:
    total: dict[str, tuple[Decimal, bool]] = {n: (Decimal(0), False) for n in names}
    for pod in pods:
        if not counts(pod):
            continue
        for name, (amount, binary) in pod_usage(pod).items():
            if name in total:
                total[name] = (total[name][0] + amount, total[name][1] or binary)
    return total


def show(amount: Decimal, binary: bool) -> str:
    """A quantity as resource.Quantity prints it (binary units when the inputs were binary)."""
    if binary and amount == amount.to_integral_value() and int(amount) % 1024 == 0 and amount:
        return canonical(f"{int(amount) // 1024}Ki")
    return canonical(str(amount))


def status_of(quota: dict, pods: Iterable[dict]) -> dict:
    """The quota controller's status: hard (the spec's) and used (of the tracked names)."""
    hard = dict((quota.get("spec") or {}).get("hard") or {})
    usage = used(pods, hard)
    return {"hard": hard, "used": {n: show(*usage[n]) for n in hard}}


def admit(pod: dict, quotas: Iterable[dict], pods: list[dict]) -> None:
    """403 Forbidden, as the ResourceQuota admission plugin words it, if pod exceeds a quota."""
    request = pod_usage(pod)
    meta = pod["metadata"]
    shown = meta.get("name") or meta.get("generateName") or ""
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        hard = (quota.get("spec") or {}).get("hard") or {}
        tracked = [n for n in hard if n in request]
        if not tracked:
            continue
        current = used(pods, tracked)
        exceeded = sorted(n for n in tracked if current[n][0] + request[n][0] > _amount(hard[n])[0])
        if not exceeded:
            continue
        requested = ",".join(f"{n}={show(*request[n])}" for n in exceeded)
        in_use = ",".join(f"{n}={show(*current[n])}" for n in exceeded)
        limited = ",".join(f"{n}={canonical(hard[n])}" for n in exceeded)
        raise ApiError(
            403,
            "Forbidden",
            f'pods "{shown}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, '
            f"requested: {requested}, used: {in_use}, limited: {limited}",
            {"name": shown, "kind": "pods"},
        )
