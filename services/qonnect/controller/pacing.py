"""Which of the detector's triggers the leader acts on now: one writer per spec version, and a
calm failback (issue 21, items 4 and 5).

- A spec version the deploy playbook is applying is the deploy's to place: while the newest
  deploy intent of the application (runners/intent.py, recorded by the deploy module before it
  stores the version) is ``applying`` and fresh, its ``spec-changed`` trigger waits; once the
  deploy recorded the version as ``applied``, the controller simply observes that version
  instead of placing it a second time. A version its user's deploy recorded as ``failed`` is
  not placed by the controller on its own (issue 34.4: it never ran Ready; a later version or a
  rollback moves on). A deploy that never reported within ``intent_ttl``, or one that failed
  before it stored a version, leaves the version to the controller as before.
- QoS-drift moves (the ones that bring applications back onto a recovered cluster) are not made
  for an application whose stored policy the drift check does not apply (another scorer,
  exclusions: the move would be undone by its own policy); the others wait until
  no cluster recovered less than ``stable_seconds`` ago, and are then admitted at most
  ``max_drift_per_minute`` per sliding minute, each logged with its measured gain: after a
  failover the moved applications go back a few at a time, not as a second outage-sized wave.

Pure over its inputs (triggers, time, the leader's memory, a reader of intents), so each rule
is unit-testable; the loop applies it to the detector's output each tick.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.runners import intent
from ansible_collections.qonnect.core.plugins.module_utils.scorers import DEFAULT_SCORER

from qonnect.controller.detector import Trigger

log = logging.getLogger("qonnect.controller")

WINDOW = 60.0  # seconds of the drift rate's sliding window

# intents(app) -> the application's KB events (raises to say "cannot tell now")
Intents = Callable[[str], list[dict[str, Any]]]

_OBJECTIVE = re.compile(r"objective (-?[0-9.]+) -> (-?[0-9.]+)")


def gain_of(reason: str) -> str:
    """The measured gain of a drift trigger, from the objective values the replanner reports."""
    found = _OBJECTIVE.search(reason)
    if not found:
        return "gain not reported"
    before, after = float(found.group(1)), float(found.group(2))
    rel = f" ({(after - before) / abs(before):+.1%})" if before else ""
    return f"objective {before:g} -> {after:g}{rel}"


@dataclass
class Pacer:
    """The leader's pacing state (not replicated: a new leader is only more patient)."""

    max_drift_per_minute: float = 2.0
    intent_ttl: float = 600.0  # an 'applying' intent older than this no longer holds the version
    drift_scorer: str = DEFAULT_SCORER  # the scorer the detector's drift check judges with
    admitted: deque[float] = field(default_factory=deque)  # times of admitted drift moves
    announced: dict[str, str] = field(default_factory=dict)  # app -> why it waits (logged once)

    def pace(
        self,
        triggers: list[Trigger],
        observe: list[tuple[str, int | None]],
        now: float,
        intents: Intents,
        recovered_at: dict[str, float] | None = None,
        stable_seconds: float = 0.0,
        records: dict[str, dict[str, Any]] | None = None,
    ) -> tuple[list[Trigger], list[tuple[str, int | None]]]:
        """The triggers to decide now and the versions to observe (the detector's plus those a
        deploy placed itself). ``records``: the KB's application records by name, which hold
        each one's stored policy."""
        keep: list[Trigger] = []
        observe = list(observe)
        waiting: dict[str, str] = {}
        while self.admitted and now - self.admitted[0] >= WINDOW:
            self.admitted.popleft()
        recovering = sorted(c for c, since in (recovered_at or {}).items() if now - since < stable_seconds)
        for trigger in triggers:
            if trigger.kind == "spec-changed":
                why, placed = self._spec_change(trigger, now, intents)
                if placed:
                    observe.append((trigger.app, trigger.spec_version))
                    log.warning(
                        "%s version %s was placed by its deploy; observed, not placed again",
                        trigger.app,
                        trigger.spec_version,
                    )
                elif why:
                    waiting[trigger.app] = why
                else:
                    keep.append(trigger)
            elif trigger.kind == "qos-drift":
                conflict = self._policy_conflict(trigger.app, intents, (records or {}).get(trigger.app))
                if conflict:
                    waiting[trigger.app] = conflict
                elif recovering:
                    waiting[trigger.app] = (
                        f"QoS-drift move waits: {', '.join(recovering)} recovered less than "
                        f"{stable_seconds:g}s ago"
                    )
                elif len(self.admitted) >= self.max_drift_per_minute:
                    waiting[trigger.app] = (
                        f"QoS-drift move waits: {len(self.admitted)} move(s) admitted in the last "
                        f"{WINDOW:g}s (at most {self.max_drift_per_minute:g} per minute)"
                    )
                else:
                    self.admitted.append(now)
                    log.warning(
                        "QoS-drift move of %s admitted (%d of at most %g this minute): %s",
                        trigger.app,
                        len(self.admitted),
                        self.max_drift_per_minute,
                        gain_of(trigger.reason),
                    )
                    keep.append(trigger)
            else:
                keep.append(trigger)
        for app, why in waiting.items():
            if self.announced.get(app) != why:
                log.warning("%s: %s", app, why)
        self.announced = waiting
        return keep, observe

    def _spec_change(self, trigger: Trigger, now: float, intents: Intents) -> tuple[str | None, bool]:
        """(why the trigger waits or None, whether the deploy placed this version itself)."""
        try:
            newest = intent.newest(intents(trigger.app))
        except Exception as exc:  # any read failure: cannot tell, so wait
            return f"spec change waits: cannot read its deploy intents ({exc})", False
        if newest is None:
            return None, False
        if newest["state"] == intent.APPLIED and newest["version"] == trigger.spec_version:
            return None, True
        if newest["state"] == intent.FAILED and newest["version"] == trigger.spec_version:
            return (
                f"spec version {trigger.spec_version} failed in its user's deploy; the controller "
                "does not place it on its own (deploy a fix, or roll back)",
                False,
            )
        if newest["state"] == intent.APPLYING and now - newest["ts"] < self.intent_ttl:
            return (
                f"spec version {trigger.spec_version} is being applied by a deploy (intent of "
                f"{now - newest['ts']:.0f}s ago); the controller leaves it to that deploy",
                False,
            )
        return None, False

    def _policy_conflict(
        self, app: str, intents: Intents, record: dict[str, Any] | None = None
    ) -> str | None:
        """Why a drift move of ``app`` is not made: the drift check judges with the default
        scorer and no exclusions, so for an application deployed with another scorer or with
        exclusions it would propose moves its own policy undoes (a move every --min-dwell)."""
        try:
            policy = intent.recorded_policy(record, lambda: intents(app))
        except Exception as exc:  # any read failure: cannot tell, so wait
            return f"QoS-drift move waits: cannot read its stored policy ({exc})"
        scorer, exclude = policy.get("scorer"), policy.get("exclude") or []
        if (scorer and scorer != self.drift_scorer) or exclude:
            return (
                f"no QoS-drift move: it was deployed with scorer {scorer or self.drift_scorer} and "
                f"exclusions {', '.join(exclude) or 'none'}, the drift check judges with "
                f"{self.drift_scorer} and none"
            )
        return None

    def waiting(self) -> dict[str, str]:
        """Applications whose trigger waits, and why (for the status)."""
        return dict(self.announced)
