"""The Deployment controller: ReplicaSets and pods from the template, rolling updates, status.

Each template revision has its ReplicaSet ``<deployment>-<pod-template-hash>`` (owned by the
Deployment, annotated with its revision) and the pods are owned by their ReplicaSet, as on real
clusters. The emulator folds the ReplicaSet controller into this one: it creates and deletes the
pods itself and keeps each ReplicaSet's replicas and status in line (a ReplicaSet without a
Deployment is stored but not reconciled). Rolling updates honour maxSurge/maxUnavailable;
Recreate removes the old pods first; progressDeadlineSeconds without progress gives
Progressing=False/ProgressDeadlineExceeded. A pod counts as available once it has been Ready for
``minReadySeconds`` (its Ready condition's lastTransitionTime, as the real controller reads it),
for the counts, the Available condition, maxUnavailable and the rollout's completion. Status
follows what ``kubectl rollout status`` reads.
"""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone
from typing import Iterable

from qonnect_testbed.sim.base import Cache, Controller
from qonnect_testbed.sim.objects import condition, is_true, key_of, now, set_condition
from qonnect_testbed.store import ApiError, Store

_SAFE = "bcdfghjklmnpqrstvwxz2456789"
REVISION = "deployment.kubernetes.io/revision"
FAILED_CREATE_RETRY_SECONDS = 1.0


def template_hash(template: dict) -> str:
    """FNV-32a of the template, encoded with the safe alphabet, like controller.ComputeHash."""
    value = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[int(ch) % len(_SAFE)] for ch in str(value))


def _resolve(value: object, replicas: int, round_up: bool) -> int:
    """An int-or-percent of replicas, as intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            scaled = float(value[:-1]) * replicas / 100
        except ValueError:
            return 0
        return math.ceil(scaled) if round_up else math.floor(scaled)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0


def _surge_unavailable(spec: dict, replicas: int) -> tuple[int, int]:
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, replicas
    rolling = strategy.get("rollingUpdate") or {}
    surge = _resolve(rolling.get("maxSurge", "25%"), replicas, True)
    unavailable = _resolve(rolling.get("maxUnavailable", "25%"), replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def available_in(pod: dict, min_ready: int, wall: float) -> float | None:
    """Seconds until a Ready pod counts as available (0: it does), None when it is not Ready."""
    cond = condition(pod, "Ready")
    if not cond or cond.get("status") != "True":
        return None
    if min_ready <= 0:
        return 0.0
    try:
        since = datetime.strptime(str(cond.get("lastTransitionTime")), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return 0.0
    return max(0.0, since.replace(tzinfo=timezone.utc).timestamp() + min_ready - wall)


def _removal_order(pods: list[dict]) -> list[dict]:
    """Unscheduled first, then not ready, then the newest (as the ReplicaSet controller)."""
    newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    return sorted(
        newest_first, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), is_true(p, "Ready"))
    )


class Deployments(Controller):
    """Keeps each Deployment's pods and status in line with its spec."""

    def __init__(self, store: Store, cache: Cache) -> None:
        super().__init__("deployment")
        self.store = store
        self.cache = cache
        self._progress: dict[str, tuple[tuple, float]] = {}  # uid -> (status counts, when they last changed)
        self._failures: dict[str, str | None] = {}  # ReplicaSet uid -> why its last pod creation failed

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            deployment = self.cache.deployments.get(key)
            if deployment is not None:
                self.guarded(key, lambda d=deployment: self._sync(d))
        live = {d["metadata"]["uid"] for d in self.cache.deployments.values()}
        for uid in [u for u in self._progress if u not in live]:
            del self._progress[uid]

    def _replicasets(self, deployment: dict) -> list[dict]:
        return self.cache.children("replicasets", deployment["metadata"]["uid"])

    def _pods(self, deployment: dict) -> list[dict]:
        return [p for rs in self._replicasets(deployment) for p in self.cache.owned(rs["metadata"]["uid"])]

    def _ensure_replicaset(self, deployment: dict, current: str, replicas: int, surge: int) -> dict:
        """The ReplicaSet of the current template, created (next revision) or brought up to it."""
        meta = deployment["metadata"]
        others = self._replicasets(deployment)
        revisions = [int((rs["metadata"].get("annotations") or {}).get(REVISION, "0") or 0) for rs in others]
        mine = next(
            (rs for rs in others if rs["metadata"].get("labels", {}).get("pod-template-hash") == current),
            None,
        )
        if mine is not None:
            rev = int((mine["metadata"].get("annotations") or {}).get(REVISION, "0") or 0)
            if rev < max(revisions, default=0):  # a rollback to an old template: it is the newest again
                new = json.loads(json.dumps(mine))
                new["metadata"]["annotations"][REVISION] = str(max(revisions) + 1)
                mine = self.store.update("replicasets", meta["namespace"], new)
            return mine
        template = json.loads(json.dumps(deployment["spec"].get("template") or {}))
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = current
        selector = json.loads(json.dumps(deployment["spec"].get("selector") or {}))
        selector.setdefault("matchLabels", {})["pod-template-hash"] = current
        return self.store.create(
            "replicasets",
            meta["namespace"],
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{meta['name']}-{current}",
                    "labels": dict(template["metadata"]["labels"]),
                    "annotations": {
                        REVISION: str(max(revisions, default=0) + 1),
                        "deployment.kubernetes.io/desired-replicas": str(replicas),
                        "deployment.kubernetes.io/max-replicas": str(replicas + surge),
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "replicas": 0,
                    "minReadySeconds": deployment["spec"].get("minReadySeconds", 0),
                    "selector": selector,
                    "template": template,
                },
            },
        )

    def _sync(self, deployment: dict) -> None:
        spec = deployment.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        current = template_hash(spec.get("template") or {})
        surge, unavailable = _surge_unavailable(spec, replicas)
        new_rs = self._ensure_replicaset(deployment, current, replicas, surge)
        revision = (new_rs["metadata"].get("annotations") or {}).get(REVISION)
        if revision and (deployment["metadata"].get("annotations") or {}).get(REVISION) != revision:
            annotated = json.loads(json.dumps(deployment))
            annotated["metadata"].setdefault("annotations", {})[REVISION] = revision
            deployment = self.store.update("deployments", deployment["metadata"]["namespace"], annotated)
        pods = self._pods(deployment)
        new: list[dict] = []
        old: list[dict] = []
        for pod in pods:
            (new if pod["metadata"].get("labels", {}).get("pod-template-hash") == current else old).append(
                pod
            )
        min_ready = int(spec.get("minReadySeconds") or 0)
        ready = self._available(deployment, pods, min_ready)
        namespace = deployment["metadata"]["namespace"]
        if old and (spec.get("strategy") or {}).get("type") == "Recreate":
            for pod in old:
                self.store.delete("pods", namespace, pod["metadata"]["name"])
            old = []
        room = replicas + surge - len(new) - len(old)
        failure = None
        for _pod in range(max(0, min(replicas - len(new), room))):
            try:
                self._create(deployment, current, new_rs)
            except ApiError as exc:  # e.g. its ServiceAccount is missing: ReplicaFailure, retried
                if exc.code != 403:
                    raise
                failure = exc.message
                self.enqueue_later(key_of(deployment), FAILED_CREATE_RETRY_SECONDS)
                break
        self._failures[new_rs["metadata"]["uid"]] = failure
        if len(new) > replicas:
            for pod in _removal_order(new)[: len(new) - replicas]:
                self.store.delete("pods", namespace, pod["metadata"]["name"])
        if old:
            # Old pods that are not available cost no availability; available ones go only while
            # enough pods stay available.
            can_remove = ready - (replicas - unavailable)
            wall = time.time()
            for pod in _removal_order(old):
                if available_in(pod, min_ready, wall) == 0.0:
                    if can_remove <= 0:
                        continue
                    can_remove -= 1
                self.store.delete("pods", namespace, pod["metadata"]["name"])
        self._replicaset_status(deployment, new_rs, replicas)
        self._status(deployment, current, replicas, unavailable, new_rs)

    def _available(self, deployment: dict, pods: list[dict], min_ready: int) -> int:
        """The pods Ready for ``min_ready`` seconds; the Deployment is looked at again when the
        next Ready pod reaches that age."""
        wall = time.time()
        waits = [w for w in (available_in(p, min_ready, wall) for p in pods) if w is not None]
        later = [w for w in waits if w > 0]
        if later:
            self.enqueue_later(key_of(deployment), min(later) + 0.05)
        return sum(1 for w in waits if w == 0.0)

    def _replicaset_status(self, deployment: dict, new_rs: dict, replicas: int) -> None:
        """Each ReplicaSet's replicas are the pods kept for it; its status counts them."""
        limit = int((deployment.get("spec") or {}).get("revisionHistoryLimit", 10))
        old_empty = []
        for rs in self._replicasets(deployment):
            pods = self.cache.owned(rs["metadata"]["uid"])
            is_new = rs["metadata"]["uid"] == new_rs["metadata"]["uid"]
            want = replicas if is_new else len(pods)
            if not is_new and not pods:
                old_empty.append(rs)
            ready = sum(1 for p in pods if is_true(p, "Ready"))
            min_ready = int((rs.get("spec") or {}).get("minReadySeconds") or 0)
            status = {
                "replicas": len(pods),
                "fullyLabeledReplicas": len(pods),
                "readyReplicas": ready,
                "availableReplicas": self._available(deployment, pods, min_ready),
                "observedGeneration": rs["metadata"].get("generation", 1),
            }
            status = {k: v for k, v in status.items() if v or k == "replicas"}
            failure = self._failures.get(rs["metadata"]["uid"])
            if failure:
                before = next(
                    (
                        c
                        for c in (rs.get("status") or {}).get("conditions") or []
                        if c.get("type") == "ReplicaFailure"
                    ),
                    {},
                )
                status["conditions"] = [
                    {
                        "type": "ReplicaFailure",
                        "status": "True",
                        "reason": "FailedCreate",
                        "message": failure,
                        "lastTransitionTime": before.get("lastTransitionTime") or now(),
                    }
                ]
            if (rs.get("spec") or {}).get("replicas") != want:
                rs = self.store.update(
                    "replicasets", rs["metadata"]["namespace"], dict(rs, spec=dict(rs["spec"], replicas=want))
                )
                status["observedGeneration"] = rs["metadata"].get("generation", 1)
            if rs.get("status") != status:
                self.store.update(
                    "replicasets", rs["metadata"]["namespace"], dict(rs, status=status), subresource="status"
                )
        old_empty.sort(key=lambda r: int((r["metadata"].get("annotations") or {}).get(REVISION, "0") or 0))
        for rs in old_empty[: max(0, len(old_empty) - limit)]:
            self.store.delete("replicasets", rs["metadata"]["namespace"], rs["metadata"]["name"])

    def _create(self, deployment: dict, current: str, rs: dict) -> None:
        meta = deployment["metadata"]
        template = deployment["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{rs['metadata']['name']}-",
                "labels": {**(tmeta.get("labels") or {}), "pod-template-hash": current},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": rs["metadata"]["name"],
                        "uid": rs["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": json.loads(json.dumps(template.get("spec") or {})),
        }
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmeta["annotations"])
        self.store.create("pods", meta["namespace"], pod)

    def _status(self, deployment: dict, current: str, replicas: int, unavailable: int, new_rs: dict) -> None:
        pods = self._pods(deployment)
        updated = [p for p in pods if p["metadata"].get("labels", {}).get("pod-template-hash") == current]
        ready = sum(1 for p in pods if is_true(p, "Ready"))
        min_ready = int((deployment.get("spec") or {}).get("minReadySeconds") or 0)
        available = self._available(deployment, pods, min_ready)
        updated_available = self._available(deployment, updated, min_ready)
        status = dict(deployment.get("status") or {})
        counts = {
            "replicas": len(pods),
            "updatedReplicas": len(updated),
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": max(0, replicas - available),
        }
        for field, value in counts.items():  # zero counts are omitted, as real servers do
            if value:
                status[field] = value
            else:
                status.pop(field, None)
        status["observedGeneration"] = deployment["metadata"].get("generation", 1)
        stamp = now()
        conds = status.get("conditions") or []
        if available >= replicas - unavailable:
            conds = set_condition(
                conds,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                stamp,
                update_time=True,
            )
        else:
            conds = set_condition(
                conds,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                stamp,
                update_time=True,
            )
        name = new_rs["metadata"]["name"]
        uid = deployment["metadata"]["uid"]
        clock = time.monotonic()
        signature = (len(pods), len(updated), ready, available, current, replicas)
        seen = self._progress.get(uid)
        if seen is None or seen[0] != signature:  # progress: the counts moved
            seen = self._progress[uid] = (signature, clock)
        deadline = (deployment.get("spec") or {}).get("progressDeadlineSeconds")
        if len(updated) == replicas == len(pods) and updated_available == replicas:
            conds = set_condition(
                conds,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{name}" has successfully progressed.',
                stamp,
                update_time=True,
            )
        elif isinstance(deadline, int) and clock - seen[1] >= deadline:
            conds = set_condition(
                conds,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f'ReplicaSet "{name}" has timed out progressing.',
                stamp,
                update_time=True,
            )
        else:
            conds = set_condition(
                conds,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                f'ReplicaSet "{name}" is progressing.',
                stamp,
                update_time=True,
            )
            if isinstance(deadline, int):
                self.enqueue_later(key_of(deployment), seen[1] + deadline - clock + 0.05)
        failure = self._failures.get(new_rs["metadata"]["uid"])
        if failure:
            conds = set_condition(
                conds, "ReplicaFailure", "True", "FailedCreate", failure, stamp, update_time=True
            )
        else:
            conds = [c for c in conds if c.get("type") != "ReplicaFailure"]
        status["conditions"] = sorted(conds, key=lambda c: c["type"] != "Available")
        if status != (deployment.get("status") or {}):
            self.store.update(
                "deployments",
                deployment["metadata"]["namespace"],
                dict(deployment, status=status),
                subresource="status",
            )
