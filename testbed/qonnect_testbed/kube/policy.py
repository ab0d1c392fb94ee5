"""The pod fault policy of the real engine: faults by image and start delays from the profile.

Both engines read the same triggers (image references under ``qonnect.test/``) and the same
``start_delays`` rules of the profile; their parsing lives in qonnect_testbed.faults, and this
adapter only gives the simulated kubelet the two questions it asks per image.
"""

from __future__ import annotations

from typing import Any

from qonnect_testbed import faults


class ProfilePolicy:
    """fault(image) -> (kind or None, seconds); delay(image) -> start delay with jitter."""

    def __init__(self, profile: dict[str, Any], default_delay: float) -> None:
        self._delays = faults.StartDelays.from_profile(profile, default_delay)

    def fault(self, image: str) -> tuple[str | None, float]:
        found = faults.fault_of(image)
        if found is None or found.kind == "slow":  # a slow pull is part of the start delay
            return None, 0.0
        return found.kind, float(found.seconds)

    def delay(self, image: str) -> float:
        return float(self._delays.delay(image))
