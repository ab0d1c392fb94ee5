"""Detection and notices: what one snapshot of the KB asks the leader to decide.

The rules are triggers.py's (pure); this module runs them with the leader's memory, tells the KB
what they saw without moving anything (notices, once per episode), reports a spec version that
fails on enough clusters (and rolls it back) instead of moving it, and applies pacing.py's rules
to the triggers that remain. Committing what is left is deciding.py's.
"""

from __future__ import annotations

import logging

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent

from qonnect.controller import hedging, journal, rollback
from qonnect.controller.config import Config
from qonnect.controller.detector import Replanner, Snapshot, Trigger
from qonnect.controller.pacing import Pacer
from qonnect.controller.state import Lead
from qonnect.controller.statemachine import DecisionLog
from qonnect.controller.triggers import VERSION_FAILING, detect

log = logging.getLogger("qonnect.controller")

Observed = list[tuple[str, int | None]]  # (app, spec version) to record as observed, without moving


class Detection:
    """One detection pass per leader tick."""

    def __init__(self, kb: KBClient, lead: Lead, cfg: Config, replan: Replanner | None) -> None:
        self.kb = kb
        self.lead = lead
        self.cfg = cfg
        self.replan = replan  # the QoS-drift judge (None: no drift is judged)
        self.pacer = Pacer(cfg.max_drift_moves_per_minute, cfg.intent_ttl)

    def triggers(self, snapshot: Snapshot, machine: DecisionLog) -> tuple[list[Trigger], Observed]:
        """The triggers to decide on for this snapshot, and the versions to record as observed."""
        triggers, observe = detect(snapshot, machine, self.lead.memory, self.cfg.settings, self.replan)
        # standby copies while a cluster is only suspect, or their removal once it is back
        triggers += hedging.triggers(
            snapshot, machine, self.lead.memory, self.cfg.settings, {t.app for t in triggers}
        )
        self.post_notices()
        self.report_failing([t for t in triggers if t.kind == VERSION_FAILING])
        triggers = [t for t in triggers if t.kind != VERSION_FAILING]
        return self.pace(triggers, observe, snapshot)

    def post_notices(self) -> None:
        """Tell the KB what the detector saw without moving anything (once per episode)."""
        memory = self.lead.memory
        notices, memory.notices = memory.notices, []
        for notice in notices:
            log.warning("cluster %s: %s: %s", notice.cluster, notice.kind, notice.text)
            try:
                journal.post_notice(self.kb, notice, self.lead.token)
            except KBError as exc:
                log.info("cannot record %s of %s: %s", notice.kind, notice.cluster, exc)

    def report_failing(self, triggers: list[Trigger]) -> None:
        """A version that failed on enough clusters is reported once (per leader), never moved,
        and rolled back to the last version that did not fail (unless --no-rollback)."""
        memory = self.lead.memory
        for trigger in triggers:
            key = (trigger.app, trigger.spec_version, trigger.service)
            if key in memory.failing_reported:
                continue
            log.warning("not moving %s: %s", trigger.app, trigger.reason)
            try:
                journal.post_version_failing(self.kb, trigger, self.lead.token)
            except KBError as exc:
                log.info("cannot record the failing version of %s: %s", trigger.app, exc)
                continue
            memory.failing_reported.add(key)
            if self.cfg.rollback and (trigger.app, trigger.spec_version) not in memory.rollback_tried:
                memory.rollback_tried.add((trigger.app, trigger.spec_version))
                self.roll_back(trigger)

    def roll_back(self, trigger: Trigger) -> None:
        """Store the last version that did not fail again as the newest one (fenced); the next
        ticks place it as a new version. Tried once per failing version and leader."""
        try:
            target, why = rollback.restore_target(
                self.kb.application_versions(trigger.app), trigger.spec_version
            )
            if target is None:
                log.warning("not rolling %s back: %s", trigger.app, why)
                return
            stored = self.kb.roll_back(
                trigger.app, int(trigger.spec_version or 0), target, trigger.reason[:8000], self.lead.token
            )
        except KBError as exc:
            log.warning("cannot roll %s back from version %s: %s", trigger.app, trigger.spec_version, exc)
            return
        log.warning(
            "rolled %s back: version %s fails; version %s's spec stored as version %s (%s)",
            trigger.app,
            trigger.spec_version,
            target,
            stored["version"],
            why,
        )
        try:
            journal.post_rolled_back(self.kb, trigger, target, int(stored["version"]), self.lead.token)
        except KBError as exc:
            log.info("cannot record the rollback of %s: %s", trigger.app, exc)

    def pace(
        self, triggers: list[Trigger], observe: Observed, snapshot: Snapshot
    ) -> tuple[list[Trigger], Observed]:
        """pacing.py's rules over the detector's triggers: a spec version a deploy is applying
        is left to it, and QoS-drift (failback) moves are admitted at a bounded rate."""
        return self.pacer.pace(
            triggers,
            observe,
            snapshot.now,
            lambda app: self.kb.list_events(application=app, limit=intent.LOOKBACK),
            self.lead.memory.recovered_at,
            self.cfg.settings.stable_seconds,
            {str(a.get("name")): a for a in snapshot.applications},
        )
