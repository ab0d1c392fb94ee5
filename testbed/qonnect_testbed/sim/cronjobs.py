"""The CronJob controller: a Job per scheduled time, as kube-controller-manager makes them.

At each time the five-field schedule (``timeZone`` or UTC; @hourly-style macros) names, the
CronJob gets a Job ``<name>-<minutes since the epoch>`` from its jobTemplate (owned by it,
annotated with the scheduled time), ``status.lastScheduleTime`` and ``status.active``; a Job
that completes sets ``lastSuccessfulTime``. ``concurrencyPolicy`` Forbid skips a time while a
Job runs, Replace deletes the running ones first; ``suspend`` stops it; finished Jobs beyond
``successfulJobsHistoryLimit``/``failedJobsHistoryLimit`` are deleted. Missed times collapse into
the latest one (no ``startingDeadlineSeconds`` accounting, no MissSchedule events).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Iterable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from qonnect_testbed.sim.base import Controller
from qonnect_testbed.sim.objects import is_true
from qonnect_testbed.store import ApiError, Store

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_NAMES = {
    3: {
        m: i + 1
        for i, m in enumerate(
            ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
        )
    },
    4: {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])},
}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_STAMP = "%Y-%m-%dT%H:%M:%SZ"


class Schedule:
    """A standard five-field cron schedule; ValueError if it is not one."""

    def __init__(self, text: str) -> None:
        fields = _MACROS.get(text.strip(), text).split()
        if len(fields) != 5:
            raise ValueError(f"expected exactly 5 fields, found {len(fields)}: {text!r}")
        self.sets = [self._field(f, i) for i, f in enumerate(fields)]
        self.dom_any, self.dow_any = fields[2] in ("*", "?"), fields[4] in ("*", "?")

    @staticmethod
    def _field(text: str, index: int) -> set[int]:
        low, high = _RANGES[index]
        names = _NAMES.get(index, {})

        def value(word: str) -> int:
            return names[word] if word in names else int(word)

        out: set[int] = set()
        for part in text.upper().split(","):
            base, _slash, step_text = part.partition("/")
            step = int(step_text) if step_text else 1
            first, _dash, last = base.partition("-")
            if base in ("*", "?"):
                start, end = low, high
            else:
                start = value(first)
                end = value(last) if last else (high if step_text else start)
            if index == 4 and end == 7:  # 7 is Sunday too
                out.add(0)
                end = 6
                if start == 7:
                    continue
            if not (low <= start <= end <= high) or step < 1:
                raise ValueError(f"{part!r} is out of range {low}-{high}")
            out |= set(range(start, end + 1, step))
        return out

    def _day(self, moment: datetime) -> bool:
        dom, dow = moment.day in self.sets[2], (moment.isoweekday() % 7) in self.sets[4]
        if self.dom_any or self.dow_any:
            return dom and dow
        return dom or dow

    def next_after(self, moment: datetime) -> datetime:
        """The first scheduled minute strictly after moment (in moment's time zone)."""
        t = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
        for _minute in range(200000):
            if t.month not in self.sets[3]:
                t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            elif not self._day(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
            elif t.hour not in self.sets[1]:
                t = t.replace(minute=0) + timedelta(hours=1)
            elif t.minute not in self.sets[0]:
                t += timedelta(minutes=1)
            else:
                return t
        raise ValueError("the schedule names no time in the next years")


def _latest_due(schedule: Schedule, last: datetime, now: datetime) -> datetime | None:
    """The latest scheduled time after last and not after now (missed ones collapse into it),
    looked for in growing windows so that a long-missed minutely schedule costs little."""
    for window in (timedelta(hours=1), timedelta(days=1), timedelta(days=32), timedelta(days=366)):
        due, nxt = None, schedule.next_after(max(last, now - window).astimezone(last.tzinfo))
        while nxt <= now:
            due, nxt = nxt, schedule.next_after(nxt)
        if due is not None or now - window <= last:
            return due
    return None


def _parse(stamp: str) -> datetime:
    return datetime.strptime(stamp, _STAMP).replace(tzinfo=timezone.utc)


class CronJobs(Controller):
    """Keys: (namespace, name) of CronJobs."""

    def __init__(self, store: Store) -> None:
        super().__init__("cronjob")
        self.store = store
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        for key in keys:
            self.guarded(key, lambda k=key: self._sync(*k))

    def _sync(self, namespace: str, name: str) -> None:
        found = self.store.list_refs("cronjobs", namespace, field_selector=f"metadata.name={name}")[0]
        if not found or found[0]["metadata"].get("deletionTimestamp"):
            return
        cron = found[0]
        spec, status = cron.get("spec") or {}, dict(cron.get("status") or {})
        jobs = [
            j
            for j in self.store.list_refs("jobs", namespace)[0]
            if any(
                r.get("uid") == cron["metadata"]["uid"] for r in j["metadata"].get("ownerReferences") or ()
            )
        ]
        running = [j for j in jobs if not (is_true(j, "Complete") or is_true(j, "Failed"))]
        try:
            zone: tzinfo = ZoneInfo(spec["timeZone"]) if spec.get("timeZone") else timezone.utc
            schedule = Schedule(str(spec.get("schedule", "")))
        except (ValueError, ZoneInfoNotFoundError, KeyError):
            return  # a real controller records an event and waits for a fix
        now = datetime.now(timezone.utc)
        last = _parse(status.get("lastScheduleTime") or cron["metadata"]["creationTimestamp"])
        due = _latest_due(schedule, last.astimezone(zone), now)
        nxt = schedule.next_after(max(due or last, now - timedelta(minutes=1)).astimezone(zone))
        if due is not None and not spec.get("suspend"):
            policy = spec.get("concurrencyPolicy", "Allow")
            if policy == "Replace":
                for job in running:
                    self.store.delete("jobs", namespace, job["metadata"]["name"])
                running = []
            if not (policy == "Forbid" and running):
                running.append(self._create_job(cron, due))
                status["lastScheduleTime"] = due.astimezone(timezone.utc).strftime(_STAMP)
        done = [j for j in jobs if is_true(j, "Complete")]
        if done:
            latest = max((j.get("status") or {}).get("completionTime", "") for j in done)
            if latest:
                status["lastSuccessfulTime"] = latest
        status["active"] = [
            {
                "kind": "Job",
                "namespace": namespace,
                "name": j["metadata"]["name"],
                "uid": j["metadata"]["uid"],
                "apiVersion": "batch/v1",
                "resourceVersion": j["metadata"]["resourceVersion"],
            }
            for j in running
        ]
        if not status["active"]:
            status.pop("active")
        self._trim(namespace, done, int(spec.get("successfulJobsHistoryLimit", 3)))
        self._trim(
            namespace, [j for j in jobs if is_true(j, "Failed")], int(spec.get("failedJobsHistoryLimit", 1))
        )
        if status != (cron.get("status") or {}):
            self.store.update("cronjobs", namespace, dict(cron, status=status), subresource="status")
        self._wake_at((namespace, name), (nxt - now).total_seconds())

    def _wake_at(self, key: tuple[str, str], seconds: float) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(
            max(0.05, seconds + 0.05), self.enqueue, key
        )

    def _trim(self, namespace: str, finished: list[dict], keep: int) -> None:
        finished.sort(key=lambda j: (j["metadata"].get("creationTimestamp", ""), j["metadata"]["name"]))
        for job in finished[: max(0, len(finished) - keep)]:
            try:
                self.store.delete("jobs", namespace, job["metadata"]["name"])
            except ApiError:
                pass

    def _create_job(self, cron: dict, due: datetime) -> dict:
        meta = cron["metadata"]
        template = (cron.get("spec") or {}).get("jobTemplate") or {}
        tmeta = template.get("metadata") or {}
        annotations = dict(tmeta.get("annotations") or {})
        annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"] = due.isoformat().replace(
            "+00:00", "Z"
        )
        job = {
            "metadata": {
                "name": f"{meta['name']}-{int(due.timestamp()) // 60}",
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "CronJob",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template.get("spec") or {},
        }
        try:
            return self.store.create("jobs", meta["namespace"], job)
        except ApiError as exc:
            if exc.code != 409:
                raise
            return self.store.get("jobs", meta["namespace"], job["metadata"]["name"])
