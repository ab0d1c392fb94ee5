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
from datetime import datetime, timezone
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


# -- a minimum time Ready (the default when a workload sets no minReadySeconds) -----------------
#
# A rollout whose pods crash-loop looks done for a moment: each start is briefly Ready, and
# without ``minReadySeconds`` Kubernetes counts such a pod available at once. Deploy's waiter
# therefore also asks, for a workload without its own ``minReadySeconds``, that every pod of the
# new revision has been Ready continuously for ``min_ready`` seconds with no restart since.
# "Since" is the later of the pod's Ready condition ``lastTransitionTime`` and every container's
# ``state.running.startedAt`` (a restart that did not flip Ready still counts), read against this
# host's clock as the Deployment controller reads it against its own; the waiter's own sight of
# the pod (same restart count, Ready at every poll) counts too, so a host clock behind the
# cluster's only makes the wait as long as the window.

# A container of a new pod waiting in CrashLoopBackOff after this many restarts fails the
# rollout at once (one restart at start-up, e.g. a dependency not up yet, is forgiven).
CRASH_LOOP_RESTARTS = 2


def own_min_ready_seconds(obj: dict) -> float:
    """The workload's own ``spec.minReadySeconds`` (0 when unset or invalid)."""
    try:
        return max(0.0, float((obj.get("spec") or {}).get("minReadySeconds") or 0))
    except (TypeError, ValueError):
        return 0.0


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp of the API (``2026-12-04T22:38:31Z``, fractions allowed) as epoch
    seconds, or None."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    if "." in text:  # fractions: at most microseconds for fromisoformat on Python 3.10
        head, rest = text.split(".", 1)
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{(rest[:digits] + '000000')[:6]}{rest[digits:]}"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def selector_matches(selector: Any, labels: dict) -> bool:
    """True when a label selector (``matchLabels`` and ``matchExpressions``) selects ``labels``;
    an empty or missing selector selects nothing (the API refuses those for workloads)."""
    if not isinstance(selector, dict):
        return False
    match = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for expr in expressions:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pods_of(obj: dict, pods: list[dict]) -> list[dict]:
    """The live pods of a workload: selected by its selector, not being deleted, not finished.

    Called once the workload itself is rolled out (no old replica left), so these are the new
    revision's pods.
    """
    selector = (obj.get("spec") or {}).get("selector")
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if selector_matches(selector, meta.get("labels") or {}):
            out.append(pod)
    return out


def restarts(pod: dict) -> int:
    """The pod's restarts, all containers together."""
    return sum(_count(c, "restartCount") for c in (pod.get("status") or {}).get("containerStatuses") or [])


def _crash_loop(pod: dict) -> str:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == "CrashLoopBackOff" and _count(c, "restartCount") >= CRASH_LOOP_RESTARTS:
            last = ((c.get("lastState") or {}).get("terminated")) or {}
            exit_text = (
                f", last exit code {last.get('exitCode')} ({last.get('reason') or 'Error'})" if last else ""
            )
            return f"container {c.get('name')} CrashLoopBackOff (restarted {_count(c, 'restartCount')} times{exit_text})"
    return ""


def _latest(value: Any) -> float | None:
    """The latest moment a timestamp may stand for: the API writes these conditions' times in
    whole seconds, so ``...:10Z`` is any moment of that second; taking its end keeps the window
    at least as long as asked (a crash loop's one-second Ready never passes as two)."""
    moment = parse_time(value)
    if moment is None or "." in str(value):
        return moment
    return moment + 1.0


def ready_since(pod: dict) -> float | None:
    """When the pod last became Ready with its containers running as now (epoch seconds), or
    None when it is not Ready now."""
    status = pod.get("status") or {}
    ready = next((c for c in _conditions(status) if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return None
    moments = [_latest(ready.get("lastTransitionTime"))]
    for c in status.get("containerStatuses") or []:
        running = (c.get("state") or {}).get("running")
        if not c.get("ready") or not isinstance(running, dict):
            return None
        moments.append(_latest(running.get("startedAt")))
    known = [m for m in moments if m is not None]
    return max(known) if known else None


class ReadyWindow:
    """Tracks, across polls, how long each pod has been Ready with no restart (see above).

    ``check(obj, pods, now, clock)`` says whether every pod of a rolled-out workload has been
    Ready for ``seconds``: ``now`` is the wall clock (compared with the API's timestamps),
    ``clock`` a monotonic one (the waiter's own sight of each pod).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = max(0.0, float(seconds))
        self._seen: dict[str, tuple[int, float]] = {}  # pod uid -> (restarts, first seen Ready)

    def applies(self, obj: dict) -> bool:
        """The window applies to workloads that set no minReadySeconds of their own."""
        return self.seconds > 0 and own_min_ready_seconds(obj) == 0

    def crash_loop(self, obj: dict, pods: list[dict]) -> str:
        """Why a workload still rolling out fails: a pod of it that runs the template's images
        (the new revision) crash-loops; '' when none does."""
        template = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        images = {c.get("name"): c.get("image") for c in template if isinstance(c, dict)}
        for pod in pods_of(obj, pods):
            containers = ((pod.get("spec") or {}).get("containers")) or []
            if images and any(images.get(c.get("name")) != c.get("image") for c in containers):
                continue  # an older revision's pod
            crash = _crash_loop(pod)
            if crash:
                return f"crash-looping: pod {(pod.get('metadata') or {}).get('name', '?')}: {crash}"
        return ""

    def check(self, obj: dict, pods: list[dict], now: float, clock: float) -> Readiness:
        desired = readiness(obj).desired
        mine = pods_of(obj, pods)
        if not mine and desired == 0:
            return Readiness(True, 0, 0)
        waiting: list[str] = []
        failed: list[str] = []
        settled = 0
        for pod in sorted(mine, key=lambda p: (p.get("metadata") or {}).get("name", "")):
            meta = pod.get("metadata") or {}
            name, uid = meta.get("name", "?"), meta.get("uid") or meta.get("name", "?")
            count = restarts(pod)
            crash = _crash_loop(pod)
            if crash:
                failed.append(f"pod {name}: {crash}")
                self._seen.pop(uid, None)
                continue
            since = ready_since(pod)
            if since is None:
                self._seen.pop(uid, None)
                waiting.append(f"pod {name} not Ready" + (f" (restarted {count} times)" if count else ""))
                continue
            seen = self._seen.get(uid)
            if seen is None or seen[0] != count:
                seen = self._seen[uid] = (count, clock)
            held = max(now - since, clock - seen[1])
            if held >= self.seconds:
                settled += 1
            else:
                waiting.append(f"pod {name} Ready for {max(0.0, held):.1f}s of {self.seconds:g}s")
        if failed:
            reason = "crash-looping: " + "; ".join(failed)
            return Readiness(False, desired, settled, reason, reason)
        if waiting or not mine:
            reason = "; ".join(waiting) or "no pod of the workload found"
            return Readiness(False, desired, settled, f"minimum ready time: {reason}")
        return Readiness(True, desired, settled)
