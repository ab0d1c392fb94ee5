"""Status-only controllers: HorizontalPodAutoscalers and PodDisruptionBudgets.

The emulator has no metrics API, so an HPA never scales: its status reports the target's
replicas (currentReplicas), the replicas it would keep (desiredReplicas: the current ones within
min/max) and the conditions a real HPA shows without metrics (AbleToScale True, ScalingActive
False). A PDB's status counts the Ready pods its selector matches and how many may be disrupted,
as the disruption controller does.
"""

from __future__ import annotations

import math
from typing import Iterable

from qonnect_testbed.sim.base import Controller
from qonnect_testbed.sim.objects import is_true, now, set_condition
from qonnect_testbed.store import Store, selectors

_SCALED = {"Deployment": "deployments", "StatefulSet": "statefulsets", "ReplicaSet": "replicasets"}


def _selector_string(selector: dict) -> str:
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, values = expr.get("operator"), ",".join(expr.get("values") or [])
        if op in ("In", "NotIn"):
            parts.append(f"{expr['key']} {op.lower()} ({values})")
        elif op == "Exists":
            parts.append(expr["key"])
        elif op == "DoesNotExist":
            parts.append(f"!{expr['key']}")
    return ",".join(parts)


class StatusOnly(Controller):
    """Keys: ("horizontalpodautoscalers" | "poddisruptionbudgets", namespace, name)."""

    def __init__(self, store: Store) -> None:
        super().__init__("status-only")
        self.store = store

    def namespace_changed(self, namespace: str) -> None:
        """Pods or workloads of a namespace changed: its HPAs and PDBs look again."""
        for resource in ("horizontalpodautoscalers", "poddisruptionbudgets"):
            for obj in self.store.list_refs(resource, namespace)[0]:
                self.enqueue((resource, namespace, obj["metadata"]["name"]))

    def process(self, keys: Iterable[tuple[str, str, str]]) -> None:
        for key in keys:
            action = self._hpa if key[0] == "horizontalpodautoscalers" else self._pdb
            self.guarded(key, lambda k=key, a=action: a(k[1], k[2]))

    def _get(self, resource: str, namespace: str, name: str) -> dict | None:
        found = self.store.list_refs(resource, namespace, field_selector=f"metadata.name={name}")[0]
        return found[0] if found and not found[0]["metadata"].get("deletionTimestamp") else None

    def _hpa(self, namespace: str, name: str) -> None:
        hpa = self._get("horizontalpodautoscalers", namespace, name)
        if hpa is None:
            return
        spec = hpa.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        target = (
            self._get(_SCALED.get(ref.get("kind", ""), ""), namespace, ref.get("name", ""))
            if ref.get("kind") in _SCALED
            else None
        )
        status = dict(hpa.get("status") or {})
        stamp = now()
        conditions = list(status.get("conditions") or [])
        if target is None:
            conditions = set_condition(
                conditions,
                "AbleToScale",
                "False",
                "FailedGetScale",
                f"the HPA controller was unable to get the target's current scale: {ref.get('kind', '')}"
                f'.{ref.get("apiVersion", "").split("/")[0]} "{ref.get("name", "")}" not found',
                stamp,
            )
        else:
            current = int((target.get("status") or {}).get("replicas", 0))
            low, high = int(spec.get("minReplicas", 1)), int(spec.get("maxReplicas", current))
            status.update(currentReplicas=current, desiredReplicas=min(max(current, low), high))
            conditions = set_condition(
                conditions,
                "AbleToScale",
                "True",
                "SucceededGetScale",
                "the HPA controller was able to get the target's current scale",
                stamp,
            )
            conditions = set_condition(
                conditions,
                "ScalingActive",
                "False",
                "FailedGetResourceMetric",
                "the HPA was unable to compute the replica count: the emulator serves no metrics API",
                stamp,
            )
        status["conditions"] = conditions
        if _untimed(status) != _untimed(hpa.get("status") or {}):
            self.store.update(
                "horizontalpodautoscalers", namespace, dict(hpa, status=status), subresource="status"
            )

    def _pdb(self, namespace: str, name: str) -> None:
        pdb = self._get("poddisruptionbudgets", namespace, name)
        if pdb is None:
            return
        spec = pdb.get("spec") or {}
        match = selectors.matcher("pods", _selector_string(spec.get("selector") or {}) or None, None)
        pods = [
            p
            for p in self.store.list_refs("pods", namespace)[0]
            if match(p)
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        expected = len(pods)
        healthy = sum(1 for p in pods if is_true(p, "Ready"))
        desired = _desired(spec, expected)
        allowed = max(0, healthy - desired)
        stamp = now()
        conditions = set_condition(
            list((pdb.get("status") or {}).get("conditions") or []),
            "DisruptionAllowed",
            "True" if allowed else "False",
            "SufficientPods" if allowed else "InsufficientPods",
            "",
            stamp,
        )
        status = {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": conditions,
        }
        if _untimed(status) != _untimed(pdb.get("status") or {}):
            self.store.update(
                "poddisruptionbudgets", namespace, dict(pdb, status=status), subresource="status"
            )


def _desired(spec: dict, expected: int) -> int:
    """desiredHealthy from minAvailable or maxUnavailable (percentages round up, as upstream)."""

    def amount(value: object) -> int:
        if isinstance(value, str) and value.endswith("%"):
            return math.ceil(int(value[:-1]) * expected / 100)
        return int(value)  # type: ignore[call-overload]

    if spec.get("minAvailable") is not None:
        return amount(spec["minAvailable"])
    if spec.get("maxUnavailable") is not None:
        return max(0, expected - amount(spec["maxUnavailable"]))
    return expected


def _untimed(status: dict) -> dict:
    return dict(status, conditions=[dict(c, lastTransitionTime=None) for c in status.get("conditions") or []])
