"""What a kubelet would report for one container, as a pure function of the time since binding.

The simulated kubelet asks this module for each container's state at a given moment and for
when it next changes, so a pod's whole history (pull back-off, crash loop with growing back-off,
a transient failure that clears) follows from its image and start time, with no hidden state to
lose across a kubelet restart. The back-off is the kubelet's (faults.backoff): 10 s, doubling, capped at 300 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from qonnect_testbed.faults import COMPLETE_AFTER_SECONDS, CRASH_RUN_SECONDS, backoff

ERR_PULL_SECONDS = 1.0  # ErrImagePull is shown this long before ImagePullBackOff


@dataclass
class ContainerView:
    """One container's status at a moment, and when it changes next (inf: never)."""

    state: dict[str, Any]
    ready: bool = False
    started: bool = False
    restart_count: int = 0
    last_state: dict[str, Any] = field(default_factory=dict)
    next_change: float = math.inf
    reason: str = ""  # the event the change to this view records ("" = none)
    message: str = ""


def _attempts(first: float, until: float) -> list[float]:
    """Pull (or start) attempt times from first onward, with back-off, up to ``until``."""
    times, t, n = [], first, 0
    while t <= until:
        times.append(t)
        n += 1
        t = t + ERR_PULL_SECONDS + backoff(n)
    return times


def _next_attempt(first: float, after: float) -> float:
    t, n = first, 0
    while t <= after:
        n += 1
        t = t + ERR_PULL_SECONDS + backoff(n)
    return t


def view(
    kind: str | None, seconds: float, delay: float, elapsed: float, image: str, stamp: Any
) -> ContainerView:
    """The container's view ``elapsed`` seconds after binding.

    kind: None (normal, or "slow": its seconds are in the delay), "pull-fail", "pull-flaky",
    "crash" (qonnect_testbed.faults), "complete" (a run-to-completion pod's container: exits 0); seconds: the fault's N; delay: the image's start delay
    (faults.StartDelays); stamp(t) formats the moment t as RFC 3339.
    """
    creating = ContainerView(state={"waiting": {"reason": "ContainerCreating"}})
    if elapsed < delay:
        creating.next_change = delay
        return creating
    if kind in ("pull-fail", "pull-flaky"):
        attempts = _attempts(delay, elapsed)
        last = attempts[-1]
        if kind == "pull-flaky":
            good = next((a for a in attempts if a >= seconds), None)
            if good is not None:
                return _running(good, stamp, image)
        nxt = _next_attempt(delay, elapsed)
        msg = (
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull '
            f'and unpack image "{image}": not found'
        )
        if elapsed < last + ERR_PULL_SECONDS:
            return ContainerView(
                state={"waiting": {"reason": "ErrImagePull", "message": msg}},
                next_change=last + ERR_PULL_SECONDS,
                reason="Failed",
                message=msg,
            )
        return ContainerView(
            state={"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}},
            next_change=nxt,
            reason="BackOff",
            message=f'Back-off pulling image "{image}"',
        )
    if kind == "crash":
        return _crash(delay, elapsed, stamp)
    if kind == "complete":
        end = delay + COMPLETE_AFTER_SECONDS
        if elapsed < end:
            view = _running(delay, stamp, image)
            view.next_change = end
            return view
        done = {"exitCode": 0, "reason": "Completed", "startedAt": stamp(delay), "finishedAt": stamp(end)}
        return ContainerView(state={"terminated": done}, started=False)
    return _running(delay, stamp, image)


def _running(since: float, stamp: Any, image: str) -> ContainerView:
    return ContainerView(
        state={"running": {"startedAt": stamp(since)}},
        ready=True,
        started=True,
        reason="Started",
        message="Started container",
    )


def _crash(delay: float, elapsed: float, stamp: Any) -> ContainerView:
    """Runs CRASH_RUN_SECONDS, exits 1, waits the back-off, runs again ..."""
    start, restarts = delay, 0
    last: dict[str, Any] = {}
    while True:
        end = start + CRASH_RUN_SECONDS
        if elapsed < end:
            return ContainerView(
                state={"running": {"startedAt": stamp(start)}},
                ready=True,
                started=True,
                restart_count=restarts,
                last_state=last,
                next_change=end,
                reason="Started",
                message="Started container",
            )
        following = end + backoff(restarts + 1)
        if elapsed < following:
            terminated = {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": stamp(start),
                    "finishedAt": stamp(end),
                }
            }
            return ContainerView(
                state={
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {int(backoff(restarts + 1))}s restarting failed container",
                    }
                },
                restart_count=restarts + 1,
                last_state=terminated,
                next_change=following,
                reason="BackOff",
                message="Back-off restarting failed container",
            )
        last = {
            "terminated": {
                "exitCode": 1,
                "reason": "Error",
                "startedAt": stamp(start),
                "finishedAt": stamp(end),
            }
        }
        start, restarts = following, restarts + 1
