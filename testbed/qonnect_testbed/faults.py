"""Pod faults and start delays of the simulated kubelets: one definition for both engines.

A deploy spec asks for a fault through the image reference under the reserved registry host
``qonnect.test`` (docs/testbed.md, "Faults"), so product tests need to change nothing but
``image:``; the emulator's kubelet and the kube engine's simulated kubelet both read it here:

- ``qonnect.test/pull-fail/<name>``: every pull fails (ErrImagePull, then ImagePullBackOff).
- ``qonnect.test/pull-flaky-<N>s/<name>``: pulls fail for N s after binding, then it starts.
- ``qonnect.test/crash/<name>``: the container exits 1 a second after each start (CrashLoopBackOff).
- ``qonnect.test/slow-<N>s/<name>``: the pull takes N s more (ContainerCreating meanwhile).

Containers of a pod whose restartPolicy is Never or OnFailure (a Job's) exit 0
COMPLETE_AFTER_SECONDS after they start, and the pod Succeeds: run-to-completion work finishes.

Start delays per image come from the profile's ``start_delays`` rules (fnmatch on the image,
first match wins, uniform jitter), else from ``--start-delay``.
"""

from __future__ import annotations

import fnmatch
import random
import re
from dataclasses import dataclass
from typing import Any, Iterable

REGISTRY = "qonnect.test"
KINDS = ("pull-fail", "pull-flaky", "crash", "slow")
_FAULT = re.compile(rf"^{re.escape(REGISTRY)}/(pull-fail|crash|(pull-flaky|slow)-([0-9]+(?:\.[0-9]+)?)s)/")
CRASH_RUN_SECONDS = 1.0  # how long a crashing container runs before it exits 1
COMPLETE_AFTER_SECONDS = 1.0  # how long a run-to-completion container runs before it exits 0
BACKOFF_INITIAL = 10.0  # kubelet's image-pull and crash-loop back-off: 10 s doubling ...
BACKOFF_MAX = 300.0  # ... up to 5 min


@dataclass(frozen=True)
class Fault:
    """What the kubelet does wrong for an image: kind (one of KINDS) and its seconds (if any)."""

    kind: str
    seconds: float = 0.0


def fault_of(image: str) -> Fault | None:
    """The fault an image reference asks for, or None for an ordinary image."""
    match = _FAULT.match(str(image or ""))
    if match is None:
        return None
    if match.group(2):
        return Fault(match.group(2), float(match.group(3)))
    return Fault(match.group(1))


def runs_to_completion(pod: dict) -> bool:
    """Whether a pod's containers finish (restartPolicy Never or OnFailure) rather than serve."""
    return (pod.get("spec") or {}).get("restartPolicy") in ("Never", "OnFailure")


def backoff(failures: int) -> float:
    """Seconds the kubelet waits after the n-th consecutive failure (pull or crash), n >= 1."""
    return min(BACKOFF_INITIAL * 2 ** max(0, failures - 1), BACKOFF_MAX)


class StartDelays:
    """Seconds from binding to Running per image: profile rules with jitter, else the default."""

    def __init__(
        self, rules: Iterable[dict[str, Any]], default: float, rng: random.Random | None = None
    ) -> None:
        self.rules = [(str(r["image"]), float(r.get("seconds", 0)), float(r.get("jitter", 0))) for r in rules]
        self.default = float(default)
        self._rng = rng or random.Random()

    @classmethod
    def from_profile(
        cls, data: dict[str, Any], default: float, rng: random.Random | None = None
    ) -> StartDelays:
        """From a profile as fleet.load returns it (its ``start_delays`` list, validated)."""
        from qonnect_testbed.fleet import parse_start_delays

        return cls(parse_start_delays(data.get("start_delays")), default, rng)

    def delay(self, image: str) -> float:
        """The start delay of one container image, jitter applied (never negative)."""
        extra = 0.0
        fault = fault_of(image)
        if fault is not None and fault.kind == "slow":
            extra = fault.seconds
        for pattern, seconds, jitter in self.rules:
            if fnmatch.fnmatchcase(image, pattern):
                return max(0.0, seconds + self._rng.uniform(-jitter, jitter)) + extra
        return self.default + extra

    def pod_delay(self, images: Iterable[str]) -> float:
        """A pod starts when its slowest container image is there."""
        return max((self.delay(i) for i in images), default=self.default)
