"""The Job controller: a Job's pods run to completion and the Job records it.

It creates up to ``parallelism`` pods at a time (owned by the Job, labelled as the Job registry's
selector asks) until ``completions`` pods Succeeded, then sets completionTime and the
SuccessCriteriaMet and Complete conditions, as the real controller does since v1.31; more failed
pods than ``backoffLimit`` end it Failed (BackoffLimitExceeded). The pods' containers finish
because the simulated kubelet runs restartPolicy Never/OnFailure pods to completion
(qonnect_testbed/faults.py). Not simulated: Indexed completion, pod failure policies,
activeDeadlineSeconds, ttlSecondsAfterFinished, suspend. CronJobs are stored only.
"""

from __future__ import annotations

from typing import Iterable

from qonnect_testbed.sim.base import Cache, Controller
from qonnect_testbed.sim.objects import is_true, now, set_condition
from qonnect_testbed.store import Store


class Jobs(Controller):
    """Keeps each Job's pods and status in line with its spec."""

    def __init__(self, store: Store, cache: Cache) -> None:
        super().__init__("job")
        self.store = store
        self.cache = cache

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            self.guarded(key, lambda k=key: self._sync(*k))

    def _sync(self, namespace: str, name: str) -> None:
        found, _rv, _more = self.store.list_refs("jobs", namespace, field_selector=f"metadata.name={name}")
        if not found:
            return
        job = found[0]
        meta, spec = job["metadata"], job.get("spec") or {}
        status = dict(job.get("status") or {})
        if meta.get("deletionTimestamp") or is_true(job, "Complete") or is_true(job, "Failed"):
            return
        pods = self.cache.owned(meta["uid"])
        phase = [(p.get("status") or {}).get("phase") for p in pods]
        succeeded, failed = phase.count("Succeeded"), phase.count("Failed")
        active = [
            p
            for p, ph in zip(pods, phase, strict=True)
            if ph not in ("Succeeded", "Failed") and not p["metadata"].get("deletionTimestamp")
        ]
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        stamp = now()
        conditions = list(status.get("conditions") or [])
        done = succeeded >= int(completions) if completions is not None else succeeded > 0 and not active
        if done:
            conditions = set_condition(
                conditions,
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                stamp,
            )
            conditions = set_condition(
                conditions,
                "Complete",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                stamp,
            )
            status["completionTime"] = stamp
        elif failed > int(spec.get("backoffLimit", 6)):
            message = "Job has reached the specified backoff limit"
            conditions = set_condition(
                conditions, "FailureTarget", "True", "BackoffLimitExceeded", message, stamp
            )
            conditions = set_condition(conditions, "Failed", "True", "BackoffLimitExceeded", message, stamp)
        else:
            remaining = (int(completions) - succeeded) if completions is not None else parallelism
            for _missing in range(max(0, min(parallelism, remaining) - len(active))):
                active.append(self._create_pod(job))
        for c in conditions:
            c.setdefault("lastProbeTime", stamp)
        status.update(
            startTime=status.get("startTime") or stamp,
            active=0 if done else len(active),
            ready=0 if done else sum(1 for p in active if is_true(p, "Ready")),
            succeeded=succeeded,
            failed=failed,
            terminating=0,
            uncountedTerminatedPods={},
        )
        for field in ("active", "succeeded", "failed"):
            if not status[field]:
                status.pop(field)
        if conditions:
            status["conditions"] = conditions
        if status != (job.get("status") or {}):
            self.store.update("jobs", namespace, dict(job, status=status), subresource="status")

    def _create_pod(self, job: dict) -> dict:
        meta = job["metadata"]
        template = (job.get("spec") or {}).get("template") or {}
        pod_meta = dict(template.get("metadata") or {})
        pod_meta.update(
            generateName=f"{meta['name']}-",
            ownerReferences=[
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        )
        pod_meta.pop("name", None)
        return self.store.create(
            "pods", meta["namespace"], {"metadata": pod_meta, "spec": template.get("spec") or {}}
        )
