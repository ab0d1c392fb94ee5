# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When is a workload ready: the one definition deploy's waiter and the agent both use.

The rules are kubectl's ``rollout status`` (k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go),
read from the object's status alone:

* every kind: ``status.observedGeneration`` has caught up with ``metadata.generation`` (else the
  counts below describe an older spec);
* Deployment: ``updatedReplicas``, ``readyReplicas`` and ``availableReplicas`` reach
  ``spec.replicas`` and no old replica is left (``status.replicas <= updatedReplicas``); the
  ``Progressing=False/ProgressDeadlineExceeded`` condition is Kubernetes saying the rollout failed;
* StatefulSet: ``readyReplicas`` (and ``availableReplicas`` when reported) reach ``spec.replicas``;
  with a RollingUpdate strategy, ``updatedReplicas`` reaches ``replicas - partition`` and, without a
  partition, ``updateRevision == currentRevision``;
* DaemonSet: ``updatedNumberScheduled``, ``numberReady`` and ``numberAvailable`` reach
  ``desiredNumberScheduled`` (DaemonSets have no ``spec.replicas``);
* ReplicaSet: ``readyReplicas`` and ``availableReplicas`` reach ``spec.replicas``.

Counts the API server leaves out (it omits zeros) count as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.keys import GRACE_ANNOTATION

# Kubernetes' default Deployment.spec.progressDeadlineSeconds.
DEFAULT_PROGRESS_DEADLINE = 600.0


@dataclass(frozen=True)
class Readiness:
    """How far one workload is: ``ready``, the counts, and why not (``reason``).

    ``failed`` is set only when Kubernetes itself declared the rollout failed
    (ProgressDeadlineExceeded); everything else that is not ready may still become ready.
    """

    ready: bool
    desired: int
    ready_replicas: int
    reason: str = ""
    failed: str = ""


def _count(status: dict, key: str) -> int:
    try:
        return max(0, int(status.get(key) or 0))
    except (TypeError, ValueError):
        return 0


def _conditions(status: dict) -> list[dict]:
    return [c for c in status.get("conditions") or [] if isinstance(c, dict)]


def _condition_text(cond: dict) -> str:
    return f"{cond.get('type')}: {cond.get('reason', '')} {cond.get('message', '')}".strip()


def progress_deadline_exceeded(obj: dict) -> str:
    """The condition text when a Deployment's controller gave up on the rollout, else ''."""
    for cond in _conditions(obj.get("status") or {}):
        if (
            cond.get("type") == "Progressing"
            and cond.get("reason") == "ProgressDeadlineExceeded"
            and cond.get("status") != "True"
        ):
            return _condition_text(cond)
    return ""


def replica_failure(obj: dict) -> str:
    """The ReplicaFailure condition text (pods could not be created: quota, missing SA...), else ''."""
    for cond in _conditions(obj.get("status") or {}):
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return _condition_text(cond)
    return ""


def _desired_replicas(spec: dict) -> int:
    value = spec.get("replicas")
    try:
        return max(0, int(value)) if value is not None else 1
    except (TypeError, ValueError):
        return 1


def _deployment(spec: dict, status: dict) -> tuple[int, int, list[str]]:
    desired = _desired_replicas(spec)
    updated, ready = _count(status, "updatedReplicas"), _count(status, "readyReplicas")
    available, total = _count(status, "availableReplicas"), _count(status, "replicas")
    waiting = []
    if updated < desired:
        waiting.append(f"{updated} of {desired} replicas updated")
    if total > updated:
        waiting.append(f"{total - updated} old replica(s) pending termination")
    if ready < desired:
        waiting.append(f"{ready} of {desired} replicas ready")
    if available < desired:
        waiting.append(f"{available} of {desired} replicas available")
    return desired, ready, waiting


def _statefulset(spec: dict, status: dict) -> tuple[int, int, list[str]]:
    desired = _desired_replicas(spec)
    ready, updated = _count(status, "readyReplicas"), _count(status, "updatedReplicas")
    waiting = []
    if ready < desired:
        waiting.append(f"{ready} of {desired} replicas ready")
    if "availableReplicas" in status and _count(status, "availableReplicas") < desired:
        waiting.append(f"{_count(status, 'availableReplicas')} of {desired} replicas available")
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        partition = _count(strategy.get("rollingUpdate") or {}, "partition")
        if partition:
            if updated < desired - partition:
                waiting.append(f"{updated} of {desired - partition} replicas updated (partition {partition})")
        else:
            if updated < desired:
                waiting.append(f"{updated} of {desired} replicas updated")
            if status.get("updateRevision") != status.get("currentRevision"):
                waiting.append(
                    f"revision {status.get('updateRevision')} not yet current "
                    f"(current {status.get('currentRevision')})"
                )
    return desired, ready, waiting


def _daemonset(spec: dict, status: dict) -> tuple[int, int, list[str]]:
    desired = _count(status, "desiredNumberScheduled")
    ready = _count(status, "numberReady")
    waiting = []
    for key, what in (
        ("updatedNumberScheduled", "updated"),
        ("numberReady", "ready"),
        ("numberAvailable", "available"),
    ):
        if _count(status, key) < desired:
            waiting.append(f"{_count(status, key)} of {desired} pods {what}")
    return desired, ready, waiting


def _replicaset(spec: dict, status: dict) -> tuple[int, int, list[str]]:
    desired = _desired_replicas(spec)
    ready = _count(status, "readyReplicas")
    waiting = []
    if ready < desired:
        waiting.append(f"{ready} of {desired} replicas ready")
    if _count(status, "availableReplicas") < desired:
        waiting.append(f"{_count(status, 'availableReplicas')} of {desired} replicas available")
    return desired, ready, waiting


_RULES = {
    "Deployment": _deployment,
    "StatefulSet": _statefulset,
    "DaemonSet": _daemonset,
    "ReplicaSet": _replicaset,
}


def readiness(obj: dict, kind: str | None = None) -> Readiness:
    """The readiness of one workload object (``kind`` defaults to the object's own)."""
    kind = kind or obj.get("kind") or "Deployment"
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    meta = obj.get("metadata") or {}
    rule = _RULES.get(kind, _deployment)
    desired, ready, waiting = rule(spec, status)
    generation, observed = _count(meta, "generation"), _count(status, "observedGeneration")
    if observed < generation:
        waiting.insert(0, f"generation {generation} not yet observed (observed {observed})")
    failed = progress_deadline_exceeded(obj) if kind == "Deployment" else ""
    if failed:
        return Readiness(False, desired, ready, failed, failed)
    if waiting:
        problem = replica_failure(obj)
        reason = "; ".join(([problem] if problem else []) + waiting)
        return Readiness(False, desired, ready, reason)
    return Readiness(True, desired, ready)


def workload_ready(obj: dict) -> bool:
    """True when the workload's newest spec is rolled out and every replica is ready."""
    return readiness(obj).ready


def progress_deadline_seconds(obj: dict) -> float:
    """The Deployment's progressDeadlineSeconds (Kubernetes' default 600 s when unset)."""
    value: Any = (obj.get("spec") or {}).get("progressDeadlineSeconds")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return DEFAULT_PROGRESS_DEADLINE
    return seconds if seconds > 0 else DEFAULT_PROGRESS_DEADLINE


# The application's grace (seconds) before a workload that is not ready is reported Failed and
# moved: spec.failureGraceSeconds (qos.Application.failure_grace_seconds), which deploy writes
# onto each workload as GRACE_ANNOTATION for the agent to read. Without it: the Deployment's
# progressDeadlineSeconds (600 s by default).


GRACE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")


def with_grace(manifest: dict, seconds: float | None) -> dict:
    """A copy of a workload manifest carrying the grace annotation (unchanged when no grace is
    set, the manifest is no workload, or it already has its own annotation)."""
    if seconds is None or not isinstance(manifest, dict) or manifest.get("kind") not in GRACE_KINDS:
        return manifest
    meta = manifest.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    if GRACE_ANNOTATION in annotations:
        return manifest
    return {
        **manifest,
        "metadata": {**meta, "annotations": {**annotations, GRACE_ANNOTATION: f"{seconds:g}"}},
    }
