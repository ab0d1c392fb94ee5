"""Deciding: committing decisions to the replicated log and recording them in the KB.

Nothing runs on an uncommitted decision: a decision is committed first, then written to the KB
(the durable record) before any attempt starts. A new leader whose log lost decisions (every
replica lost its data) re-decides those the KB recorded unfinished. A decision that ends without
success says so in the KB.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

from qonnect.controller import journal, moves
from qonnect.controller.commits import Commits
from qonnect.controller.detector import Trigger
from qonnect.controller.raft import RaftNode
from qonnect.controller.state import Lead
from qonnect.controller.statemachine import Decision
from qonnect.controller.status import Metrics

log = logging.getLogger("qonnect.controller")


class Deciding:
    """The leader's decisions: taken, recorded, re-decided from the KB, ended."""

    def __init__(self, node: RaftNode, kb: KBClient, commits: Commits, lead: Lead, metrics: Metrics) -> None:
        self.node = node
        self.kb = kb
        self.commits = commits
        self.lead = lead
        self.metrics = metrics
        self.recorded: set[str] = set()  # decisions whose KB decision event this replica wrote or saw

    def commit(self, triggers: list[Trigger], observe: list[tuple[str, int | None]], now: float) -> int:
        """Record the observed versions, then commit this pass's decisions; returns how many
        were taken."""
        self.commits.chunks("observe_many", "versions", [[app, version] for app, version in observe])
        return self.decide_all(triggers, now)

    def decide_all(self, triggers: list[Trigger], now: float) -> int:
        """Commit this pass's decisions, up to DECISIONS_PER_ENTRY in one log entry (a failure
        that hits k applications costs one commit, not k); returns how many were taken."""
        results = self.commits.chunks(
            "decide_many",
            "decisions",
            [
                {
                    "app": t.app,
                    "service": t.service,
                    "kind": t.kind,
                    "reason": t.reason,
                    "exclude": list(t.exclude),
                    "key": t.key,
                    "detected_at": t.failed_at,
                    "spec_version": t.spec_version,
                    "pinned": list(t.pinned),
                }
                for t in triggers
            ],
            ts=now,  # decided at the snapshot's time, as the detector judged it
        )
        # no quorum or leadership lost (None): the next pass decides again
        return sum(1 for t, r in zip(triggers, results, strict=True) if r is not None and self._taken(t, r))

    def _taken(self, trigger: Trigger, res: dict[str, Any]) -> bool:
        """Log, count and record one committed decision (False: the log refused it)."""
        if not res.get("ok"):
            log.info("decision on %s not taken: %s", trigger.app, res.get("why"))
            return False
        decision = self.commits.committed(res["id"])
        self.metrics.count_decision(trigger.kind)
        if trigger.failed_at is not None:
            self.metrics.observe("detection_seconds", max(0.0, time.time() - trigger.failed_at))
        log.warning(
            "decision %s (token %s): re-place %s excluding %s because %s",
            res["id"],
            res["token"],
            trigger.app,
            list(trigger.exclude) or "no cluster",
            trigger.reason,
        )
        self.record(decision, fresh=True)
        return True

    def record(self, decision: Decision, fresh: bool = False) -> bool:
        """Write the decision to the KB (once); False if the KB is unreachable. A decision this
        replica did not just take may already be there (written by an earlier leader)."""
        if decision["id"] in self.recorded:
            return True
        try:
            known = not fresh and any(
                e["ref"]["id"] == decision["id"] and e["type"] == journal.DECISION
                for e in journal.decision_story(self.kb, decision["app"], limit=50)
            )
        except KBError as exc:
            log.warning("cannot record decision %s in the KB: %s", decision["id"], exc)
            return False
        if not known and not self._post(
            journal.DECISION, decision, f"decided to re-place {decision['app']}: {decision['reason']}"
        ):
            return False
        self.recorded.add(decision["id"])
        return True

    def _post(self, kind: str, ref: Any, message: str) -> bool:
        """Post a fenced event of this leader's; False (said in the log) when the KB refuses it."""
        try:
            journal.post(self.kb, kind, ref, message, fence=self.lead.token)
        except KBError as exc:
            log.warning("cannot post %s of %s to the KB: %s", kind, ref.get("id"), exc)
            return False
        return True

    def reconcile_lost(self) -> None:
        """Re-decide decisions the KB recorded but the log lost (every replica lost its data)."""
        machine = self.node.machine
        newest = machine.newest_decision_token()  # not last_token: this leader's own entry issued one
        try:
            apps = [a["name"] for a in self.kb.list_applications()]
            lost = journal.unfinished_in_kb(self.kb, newest, apps)
        except KBError as exc:
            log.info("cannot check the KB for lost decisions yet: %s", exc)
            return
        for event in lost:
            ref = event["ref"]
            if event["application"] in machine.inflight:
                continue
            self._redecide(event, ref)
        self.lead.reconciled = True

    def _redecide(self, event: dict[str, Any], r: dict[str, Any]) -> None:
        """Commit a lost decision (``r``: its KB record's ref) again, and mark it superseded."""
        res = self.commits.propose(
            {
                "op": "decide",
                "app": event["application"],
                "kind": event.get("reason") or "recovered",
                "reason": f"recovered from the KB record of decision {r['id']}: {event['message'][:500]}",
                "exclude": list(r.get("exclude") or []),
                "key": f"recovered:{r['id']}",
                "detected_at": event.get("ts"),
            }
        )
        if not res or not res.get("ok"):
            return
        log.warning("decision %s re-committed from the KB record of lost decision %s", res["id"], r["id"])
        self.record(self.commits.committed(res["id"]), fresh=True)
        superseded = {
            "id": r["id"],
            "app": event["application"],
            "kind": event.get("reason") or "",
            "exclude": r["exclude"],
            "token": {"term": r["term"], "seq": r["seq"]},
        }
        self._post(
            journal.SUPERSEDED, superseded, f"every replica lost its log; carried on as decision {res['id']}"
        )

    def end(self, decision: Decision, op: str, why: str) -> None:
        """End a decision by committing ``op`` (``cancel``), and say so in the KB."""
        res = self.commits.propose({"op": op, "id": decision["id"], "detail": why})
        if res and res.get("ok"):
            log.warning("decision %s %s: %s", decision["id"], res.get("status"), why)
            self.gave_up(decision, why)

    def gave_up(self, decision: Decision, why: str) -> None:
        moves.retract_intent(self.kb, decision)
        self._post(journal.GAVE_UP, decision, f"decision ended without success: {why}")
