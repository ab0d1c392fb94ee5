# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a service asks of a cluster: the pod specs in its manifests and their resource requests.

Shared by the model (a stored service's requests are recomputed from its manifests) and the
manifest checks (which report the quantities this module skips).
"""

from __future__ import annotations

import math
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.qos.limits import MAX_QUANTITY
from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity

RESOURCES = ("cpu", "memory", "ephemeral_storage")
# Kinds whose pod template's requests count towards a service's footprint.
POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController")


def finite_quantity(value: Any) -> float:
    """A quantity that a cluster can hold: ValueError also for .inf, NaN and '1e400'."""
    number = parse_quantity(value)
    if not math.isfinite(number) or abs(number) >= MAX_QUANTITY:
        raise ValueError(value)
    return number


def sum_requests(manifests: list[dict]) -> dict:
    """Per-replica requests of a service: one pod of every workload in its manifests.

    Follows Kubernetes' effective request: max(sum of containers, largest init container),
    and a container's limits stand in for missing requests (as the API server defaults them).
    Malformed parts count as nothing here: validation reports them.
    """
    total = dict.fromkeys(RESOURCES, 0.0)
    for manifest in manifests:
        pod = pod_spec(manifest)
        if not pod:
            continue
        app = dict.fromkeys(RESOURCES, 0.0)
        init = dict.fromkeys(RESOURCES, 0.0)
        for key, acc, combine in (("containers", app, _add), ("initContainers", init, max)):
            for container in _as_list(pod.get(key)):
                res = _as_dict(_as_dict(container).get("resources"))
                req = {**_as_dict(res.get("limits")), **_as_dict(res.get("requests"))}
                for name in RESOURCES:
                    raw = req.get(name.replace("_", "-"))
                    if raw is not None:
                        try:
                            acc[name] = combine(acc[name], finite_quantity(raw))
                        except ValueError:
                            pass  # reported by validation
        for name in RESOURCES:
            total[name] += max(app[name], init[name])
    total["cpu"] = round(total["cpu"], 6)
    total["memory"] = round(total["memory"]) if math.isfinite(total["memory"]) else 0
    total["ephemeral_storage"] = (
        round(total["ephemeral_storage"]) if math.isfinite(total["ephemeral_storage"]) else 0
    )
    return total


def _add(a: float, b: float) -> float:
    return a + b


def _as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


def pod_spec(manifest: Any) -> dict | None:
    """The pod spec inside a manifest, None when it has none or a part of the way is not a mapping."""
    if not isinstance(manifest, dict):
        return None
    kind = manifest.get("kind")
    spec = _as_dict(manifest.get("spec"))
    if kind == "Pod":
        return spec
    if kind in POD_TEMPLATE_KINDS:
        return _as_dict(_as_dict(spec.get("template")).get("spec")) or None
    if kind == "CronJob":
        job = _as_dict(_as_dict(spec.get("jobTemplate")).get("spec"))
        return _as_dict(_as_dict(job.get("template")).get("spec")) or None
    return None


def pod_path(kind: str | None) -> str:
    """Where a manifest of this kind keeps its pod spec (for error paths)."""
    if kind == "Pod":
        return "spec"
    if kind == "CronJob":
        return "spec.jobTemplate.spec.template.spec"
    return "spec.template.spec"
