# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a workload is not ready: the one answer deploy's waiter and the agent give (issue 34).

The reasons ``kubectl describe`` shows for the pods of the workload's current revision (a
Deployment's newest ReplicaSet, a StatefulSet's updateRevision, a DaemonSet's template
generation), never an old revision's pods, which keep serving while the new ones fail: a
container waiting in ImagePullBackOff, ErrImagePull or CrashLoopBackOff (with its last exit code),
a pod the scheduler could not place (its message), and the ReplicaSet's ReplicaFailure condition
(e.g. exceeded quota: no pod at all). When readiness itself is judged: k8s/readiness.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import (
    _conditions,
    _count,
    pods_of,
    readiness,
    replica_failure,
)

# Container waiting reasons that show a pod in trouble (many clear by themselves on real clusters:
# a flaky registry, a ConfigMap not created yet, a crash while a dependency starts) ...
PROBLEM_WAITING = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
# ... and those no retry can fix.
PERMANENT_WAITING = frozenset({"InvalidImageName", "ErrImageNeverPull"})
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
DS_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
MORE_SHOWN = 3  # the text names this many problems; the structured list has all of them


@dataclass(frozen=True)
class PodReason:
    """One pod's (or one ReplicaSet's) own reason, as ``kubectl describe`` shows it.

    ``reason`` is Kubernetes' word (ImagePullBackOff, CrashLoopBackOff, Unschedulable,
    FailedCreate ...), ``message`` the kubelet's, scheduler's or controller's text.
    """

    reason: str
    message: str
    pod: str = ""
    container: str = ""
    image: str = ""
    exit_code: int | None = None
    restarts: int = 0
    replicaset: str = ""
    condition: str = ""  # ReplicaFailure: the ReplicaSet (or its Deployment) could not make pods
    permanent: bool = False

    def text(self) -> str:
        """``<reason>: <message> (pod P, container C, image I)``; exit code and restarts of a crash."""
        head = f"{self.condition}: " if self.condition else ""
        detail = self.message
        if self.exit_code is not None:
            crash = f"last exit code {self.exit_code}, restarted {self.restarts} times"
            detail = f"{crash}: {detail}" if detail else crash
        where = (
            [f"pod {self.pod}"] if self.pod else [f"ReplicaSet {self.replicaset}"] if self.replicaset else []
        )
        if self.container:
            where.append(f"container {self.container}")
        if self.image and self.image not in detail:
            where.append(f"image {self.image}")
        suffix = f" ({', '.join(where)})" if where else ""
        return f"{head}{self.reason}: {detail}{suffix}" if detail else f"{head}{self.reason}{suffix}"

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"reason": self.reason, "message": self.message}
        for key in ("pod", "container", "image", "replicaset", "condition"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.exit_code is not None:
            out.update(exit_code=self.exit_code, restarts=self.restarts)
        return out


@dataclass(frozen=True)
class WhyNotReady:
    """The reasons of a workload's current pods (``reasons``) and the one-line ``text`` naming
    them first, then what the workload's own counts still wait for."""

    text: str
    reasons: tuple[PodReason, ...] = ()

    def to_dict(self) -> dict:
        return {"reason": self.text, "pods": [r.to_dict() for r in self.reasons]}


def _uid(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _owned_by(child: dict, owner: dict, kind: str) -> bool:
    """``child`` names ``owner`` in its ownerReferences (by uid; by kind and name when the owner
    object carries no uid)."""
    uid, name = _uid(owner), (owner.get("metadata") or {}).get("name")
    for ref in (child.get("metadata") or {}).get("ownerReferences") or []:
        if uid and ref.get("uid") == uid:
            return True
        if not uid and ref.get("kind") == kind and ref.get("name") == name:
            return True
    return False


def _revision(obj: dict) -> int:
    try:
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION) or 0)
    except (TypeError, ValueError):
        return 0


def current_replicaset(obj: dict, replicasets: list[dict]) -> dict | None:
    """A Deployment's ReplicaSet of its current revision (the deployment controller's
    ``deployment.kubernetes.io/revision`` on both; else the newest one it owns), or None."""
    namespace = (obj.get("metadata") or {}).get("namespace")
    owned = [
        rs
        for rs in replicasets
        if _owned_by(rs, obj, "Deployment")
        and (rs.get("metadata") or {}).get("namespace", namespace) == namespace
    ]
    if not owned:
        return None
    wanted = _revision(obj)
    same = [rs for rs in owned if wanted and _revision(rs) == wanted]
    return (same or sorted(owned, key=_revision))[-1]


def _runs_template(obj: dict, pod: dict) -> bool:
    """The pod runs the workload template's containers (names and images): the best guess at
    its revision when the ReplicaSets or revision labels are not known."""
    template = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    images = {c.get("name"): c.get("image") for c in template if isinstance(c, dict)}
    containers = ((pod.get("spec") or {}).get("containers")) or []
    return not images or all(images.get(c.get("name")) == c.get("image") for c in containers)


def current_pods(obj: dict, pods: list[dict], replicasets: list[dict] | None = None) -> list[dict]:
    """The live pods of the workload's current revision, sorted by name.

    Deployment: the pods of its current ReplicaSet (``replicasets`` given: ownerReferences or
    the ReplicaSet's pod-template-hash; else the pods running the template's images).
    StatefulSet: ``controller-revision-hash`` = ``status.updateRevision``. DaemonSet:
    ``pod-template-generation`` = its template generation. ReplicaSet: its own pods.
    """
    kind = obj.get("kind") or "Deployment"
    namespace = (obj.get("metadata") or {}).get("namespace")
    if namespace is not None:  # the agent passes every pod of the cluster: the cheap test first
        pods = [p for p in pods if (p.get("metadata") or {}).get("namespace", namespace) == namespace]
    mine = pods_of(obj, pods)
    if kind == "Deployment":
        rs = current_replicaset(obj, replicasets or [])
        if rs is not None:
            hash_ = ((rs.get("metadata") or {}).get("labels") or {}).get("pod-template-hash")
            mine = [
                p
                for p in mine
                if _owned_by(p, rs, "ReplicaSet") or (hash_ and _labels(p).get("pod-template-hash") == hash_)
            ]
        else:
            mine = [p for p in mine if _runs_template(obj, p)]
    elif kind == "StatefulSet":
        revision = (obj.get("status") or {}).get("updateRevision")
        if revision:
            mine = [p for p in mine if _labels(p).get("controller-revision-hash") == revision]
    elif kind == "DaemonSet":
        meta = obj.get("metadata") or {}
        generation = str(
            (meta.get("annotations") or {}).get(DS_GENERATION_ANNOTATION) or meta.get("generation") or ""
        )
        if generation and any("pod-template-generation" in _labels(p) for p in mine):
            mine = [p for p in mine if _labels(p).get("pod-template-generation") == generation]
        else:
            mine = [p for p in mine if _runs_template(obj, p)]
    elif kind == "ReplicaSet":
        mine = [p for p in mine if not _uid(obj) or _owned_by(p, obj, "ReplicaSet")]
    return sorted(mine, key=lambda p: (p.get("metadata") or {}).get("name", ""))


def pod_reason(pod: dict) -> PodReason | None:
    """Why one pod does not run: the scheduler's Unschedulable, then the first container (init
    containers first) waiting for a problem reason or exited with an error; None otherwise."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    name = meta.get("name", "")
    for cond in _conditions(status):
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return PodReason("Unschedulable", cond.get("message") or "no node fits the pod", pod=name)
    images = {
        c.get("name"): c.get("image")
        for c in ((pod.get("spec") or {}).get("initContainers") or [])
        + ((pod.get("spec") or {}).get("containers") or [])
        if isinstance(c, dict)
    }
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = c.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        last = (c.get("lastState") or {}).get("terminated") or {}
        image = c.get("image") or images.get(c.get("name")) or ""
        if waiting.get("reason") in PROBLEM_WAITING:
            crash = waiting["reason"] == "CrashLoopBackOff" and last
            return PodReason(
                waiting["reason"],
                waiting.get("message") or "",
                pod=name,
                container=c.get("name") or "",
                image=image if "Image" in waiting["reason"] else "",
                exit_code=_count(last, "exitCode") if crash else None,
                restarts=_count(c, "restartCount"),
                permanent=waiting["reason"] in PERMANENT_WAITING,
            )
        if terminated and _count(terminated, "exitCode") != 0 and _count(c, "restartCount") > 0:
            return PodReason(
                terminated.get("reason") or "Error",
                terminated.get("message") or "",
                pod=name,
                container=c.get("name") or "",
                exit_code=_count(terminated, "exitCode"),
                restarts=_count(c, "restartCount"),
            )
    return None


def _failed_create(owner: dict, name: str = "") -> PodReason | None:
    for cond in _conditions(owner.get("status") or {}):
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return PodReason(
                cond.get("reason") or "FailedCreate",
                cond.get("message") or "",
                replicaset=name,
                condition="ReplicaFailure",
            )
    return None


def _labels(pod: dict) -> dict:
    return (pod.get("metadata") or {}).get("labels") or {}


def why_not_ready(
    obj: dict,
    pods: list[dict],
    replicasets: list[dict] | None = None,
    kind: str | None = None,
    fits_nowhere: Callable[[dict], bool] | None = None,
) -> WhyNotReady:
    """Why a workload is not ready: its current revision's own reasons first (see above), then
    what its counts still wait for (``readiness(obj).reason``). A workload whose counts say
    ready may still have reasons (a new pod crash-looping between its Ready moments); with
    none, the text is ''.

    ``replicasets``: the namespace's ReplicaSets (a Deployment's current one is found among
    them); None when they were not read (the pods running the template's images count then).
    ``fits_nowhere(pod)``: an Unschedulable pod it holds too big for every node is a permanent
    reason (the agent knows the nodes).
    """
    obj = obj if not kind or obj.get("kind") == kind else {**obj, "kind": kind}
    state = readiness(obj)
    found: list[PodReason] = []
    rs = current_replicaset(obj, replicasets or []) if obj.get("kind", "Deployment") == "Deployment" else None
    if obj.get("kind") == "ReplicaSet":
        rs = obj
    failure = None
    if rs is not None:
        failure = _failed_create(rs, (rs.get("metadata") or {}).get("name", ""))
    if failure is None and obj.get("kind", "Deployment") == "Deployment" and rs is None:
        failure = _failed_create(obj)  # the deployment controller's copy of it
    if failure is not None:
        found.append(failure)
    for pod in current_pods(obj, pods, replicasets):
        problem = pod_reason(pod)
        if problem is not None and problem.reason == "Unschedulable" and fits_nowhere and fits_nowhere(pod):
            note = "the pod requests more than any node of the cluster has"
            problem = replace(problem, message=f"{problem.message} ({note})", permanent=True)
        if problem is not None:
            found.append(problem)
    counts = state.reason
    own = replica_failure(obj)
    if failure is not None and own:  # named above, from the ReplicaSet itself
        counts = "; ".join(part for part in counts.split("; ") if part != own)
    shown = [r.text() for r in found[:MORE_SHOWN]]
    if len(found) > MORE_SHOWN:
        shown.append(f"and {len(found) - MORE_SHOWN} more")
    text = "; ".join(shown + ([counts] if counts else []))
    return WhyNotReady(text or ("" if state.ready else "not ready"), tuple(found))
