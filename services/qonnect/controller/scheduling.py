"""Scheduling: which open decisions start an attempt now, in which batch, and which wait.

- At most --max-concurrent-runs playbook runs at once, each of up to --batch-size applications;
  the rest wait for a run slot in decision order (said once in the log, and in the status).
- Before each attempt the exclusions are re-read from current health (never frozen), and a
  cluster-down decision whose application runs on no down cluster any more ends.
- A running attempt of a previous leader is taken over only after its lease (leadership.py),
  and only if the KB does not say it already succeeded (runs.py).
- An application the batch plan cannot place waits in an explained state, checked again with
  exponential backoff (``defer``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

from qonnect.controller import hedging, journal
from qonnect.controller.commits import Commits
from qonnect.controller.config import Config
from qonnect.controller.deciding import Deciding
from qonnect.controller.detector import Snapshot
from qonnect.controller.leadership import Leadership
from qonnect.controller.planning import DEFER, FREE, HOLD, PLANNED, SKIP, Plans
from qonnect.controller.raft import RaftNode
from qonnect.controller.runs import Runnable, Runs
from qonnect.controller.settling import exclusions_now
from qonnect.controller.state import Lead
from qonnect.controller.statemachine import PENDING, RETRY, RUNNING, TERMINAL, Decision

log = logging.getLogger("qonnect.controller")


class Scheduler:
    """Drives the open decisions of the replicated log towards runs."""

    def __init__(
        self,
        node: RaftNode,
        kb: KBClient,
        cfg: Config,
        commits: Commits,
        lead: Lead,
        leadership: Leadership,
        deciding: Deciding,
        plans: Plans,
        runs: Runs,
    ) -> None:
        self.node = node
        self.kb = kb
        self.cfg = cfg
        self.commits = commits
        self.lead = lead
        self.leadership = leadership
        self.deciding = deciding
        self.plans = plans
        self.runs = runs
        self.waiting_slot: list[str] = []  # decisions waiting for a run slot, in order
        self.announced_wait: set[str] = set()

    def drive_open(self, snapshot: Snapshot, apps: set[str] | None = None) -> None:
        """Start what may start, within --max-concurrent-runs playbook runs of up to
        --batch-size applications each; the rest wait in decision order (logged, in status).
        ``apps``: the applications the KB holds (a decision on any other one is cancelled)."""
        machine = self.node.machine
        now = time.time()
        room = self._free_runs() * max(1, self.cfg.batch_size)
        ready: list[Decision] = []
        waiting: list[Decision] = []
        for decision in machine.open_decisions():
            did = decision["id"]
            if did in self.runs.threads:
                continue
            if apps is not None and decision["app"] not in apps:
                self.deciding.end(decision, "cancel", f"application {decision['app']} was deleted")
                continue
            if self._starts(decision, snapshot, now, len(ready) >= room, waiting):
                ready.append(machine.get(did) or decision)
        size = max(1, self.cfg.batch_size)
        for i in range(0, len(ready), size):
            self.start(ready[i : i + size], snapshot)
        self._queued(waiting)

    def _starts(
        self,
        decision: Decision,
        snapshot: Snapshot,
        now: float,
        full: bool,
        waiting: list[Decision],
    ) -> bool:
        """Whether an open decision starts an attempt in this pass (``full``: this pass's runs
        have no room left; a decision due then waits for a slot, in ``waiting``)."""
        status = decision["status"]
        if status == RUNNING:
            return self._take_over(decision, snapshot, full, waiting)
        if status == PENDING or (status == RETRY and now >= decision["not_before"]):
            if full:
                waiting.append(decision)
                return False
            if self.prepare(decision, snapshot):
                return True
            if status == RETRY:
                self.gone(decision, snapshot)
            return False
        if status == RETRY:
            self.gone(decision, snapshot)  # a waiting decision ends as soon as its trigger is gone
        return False

    def _take_over(self, decision: Decision, snapshot: Snapshot, full: bool, waiting: list[Decision]) -> bool:
        """Whether a running attempt of another leader is taken over now (``full``: no room in
        this pass's runs; it then waits for a slot, in ``waiting``)."""
        if not self.leadership.may_take_over(decision):
            return False
        if full:
            waiting.append(decision)
            return False
        if self.runs.completed_before(decision):
            return False
        log.warning(
            "decision %s: taking over attempt %d of %s (its leader is gone)",
            decision["id"],
            decision["attempts"],
            decision["owner"],
        )
        return self.prepare(decision, snapshot)

    def _free_runs(self) -> int:
        """Playbook runs that may start now (a batch is one run, whatever its size)."""
        return max(0, self.cfg.max_concurrent_runs - self.runs.live())

    def _queued(self, waiting: list[Decision]) -> None:
        """Say (once per decision, and in the status) which decisions wait for a run slot."""
        self.waiting_slot = [d["id"] for d in waiting]
        for pos, decision in enumerate(waiting, 1):
            if decision["id"] not in self.announced_wait:
                self.announced_wait.add(decision["id"])
                log.warning(
                    "decision %s: %s waits for a run slot (position %d of %d; %d run(s) of at most "
                    "%d at once, --max-concurrent-runs)",
                    decision["id"],
                    decision["app"],
                    pos,
                    len(waiting),
                    self.runs.live(),
                    self.cfg.max_concurrent_runs,
                )
        self.announced_wait &= set(self.waiting_slot)

    def gone(self, decision: Decision, snapshot: Snapshot) -> bool:
        """End a retried cluster-down decision whose application runs on no down cluster any more,
        a hedge whose cluster is no longer suspect, and a hedge's discard whose cluster is suspect
        again (hedging.py), before their attempt."""
        if decision["kind"] in (hedging.HEDGE, hedging.DISCARD) and decision["attempts"] == 0:
            return self._hedge_gone(decision, snapshot)
        if decision["kind"] != "cluster-down" or decision["attempts"] + decision.get("deferrals", 0) == 0:
            return False
        _must, _unstable, on_down = exclusions_now(
            snapshot, self.lead.memory, self.cfg.settings, decision["app"], decision.get("pinned") or []
        )
        if on_down:
            return False
        self.deciding.end(
            decision,
            "cancel",
            f"no longer needed: {decision['app']} runs on no down cluster "
            f"now ({', '.join(decision['exclude']) or 'none'} back or left)",
        )
        return True

    def withdrawn_hedges(self, snapshot: Snapshot) -> dict[str, str]:
        """Running hedges whose cluster is no longer suspect, with why: their run is stopped and
        the discard follows at once. A standby on a slow member would otherwise hold the
        application until the run's wait ends, and its copies with it."""
        machine = self.node.machine
        out: dict[str, str] = {}
        for did in list(self.runs.threads):
            decision = machine.decisions.get(did)
            if decision is None or decision["kind"] != hedging.HEDGE or decision["status"] in TERMINAL:
                continue
            if not self._on_suspect(decision, snapshot):
                out[did] = (
                    f"hedge withdrawn: {', '.join(decision['exclude']) or 'its cluster'} came back before "
                    "its standby copies were Ready; they are removed next"
                )
        return out

    def _on_suspect(self, decision: Decision, snapshot: Snapshot) -> bool:
        """Whether the decision's application is on a suspect cluster now: what keeps a hedge
        (and a discard's opposite) needed, whether it is still waiting or already running."""
        _must, _unstable, on_down = exclusions_now(
            snapshot, self.lead.memory, self.cfg.settings, decision["app"], decision.get("pinned") or []
        )
        return bool(on_down)

    def _hedge_gone(self, decision: Decision, snapshot: Snapshot) -> bool:
        hedge = decision["kind"] == hedging.HEDGE
        if self._on_suspect(decision, snapshot) == hedge:
            return False
        why = "its cluster is no longer suspect" if hedge else "a cluster of it is suspect again"
        self.deciding.end(decision, "cancel", f"no longer needed: {why}")
        return True

    def prepare(self, decision: Decision, snapshot: Snapshot) -> bool:
        """Before an attempt: re-read health (exclusions as they are now) and drop a decision whose
        trigger is gone. Whether anything can be placed is the batch plan's to judge (``Plans.plan``:
        a decision nothing fits waits, explained, with backoff)."""
        did, app = decision["id"], decision["app"]
        if self.gone(decision, snapshot):
            return False
        must, unstable, _on_down = exclusions_now(
            snapshot, self.lead.memory, self.cfg.settings, app, decision.get("pinned") or []
        )
        avoid = must | unstable  # the batch plan relaxes ``unstable`` if only they fit (healing first)
        exclude, was = sorted(avoid), list(decision["exclude"])
        if exclude != was:
            res = self.commits.propose({"op": "retarget", "id": did, "exclude": exclude})
            if not res or not res.get("ok"):
                return False
            log.warning(
                "decision %s: exclusions re-read from current health: %s -> %s",
                did,
                ", ".join(was) or "none",
                ", ".join(exclude) or "none",
            )
        if self.plans.planner is None:
            self.lead.deferred_why.pop(did, None)
        return True

    def start(self, decisions: list[Decision], snapshot: Snapshot) -> None:
        """Plan the batch once (every application, each with the user's stored policy, in one
        pass over this snapshot's inventory), commit each decision's attempt with its plan, and
        run them as one playbook run: a batch of one is an ordinary single run. A decision whose
        application cannot be placed waits (defer) instead."""
        items: list[tuple[Decision, dict[str, Any]]] = []
        records = {a.get("name"): a for a in snapshot.applications}
        for decision in decisions:
            if not self.deciding.record(decision):
                continue  # the durable record comes first
            policy = self.plans.policy(decision["app"], records.get(decision["app"]))
            if policy is None:
                continue  # the KB cannot say how the user wants it placed: try again next tick
            items.append((decision, policy))
        verdicts = self.plans.plan(items, snapshot)
        runnable: list[Runnable] = []
        for decision, policy in items:
            verdict, detail = verdicts.get(decision["id"], (FREE, None))
            if verdict == DEFER:
                self.defer(decision, str(detail))
            elif verdict == SKIP:
                self.deciding.end(decision, "cancel", str(detail))
            elif verdict != HOLD:
                runnable.append((decision, policy, detail if verdict == PLANNED else None))
        self.runs.launch(runnable, snapshot)

    def defer(self, decision: Decision, why: str) -> None:
        """No attempt now: nothing can be placed. The decision waits, explained (once per reason,
        in the log and the KB), and is checked again with exponential backoff."""
        did, app = decision["id"], decision["app"]
        current = self.node.machine.get(did) or decision
        wait = min(self.cfg.defer_max, self.cfg.backoff * 2 ** int(current.get("deferrals", 0)))
        detail = f"unplaceable: {why}; next check in {wait:.0f}s"
        res = self.commits.propose(
            {"op": "defer", "id": did, "detail": detail, "not_before": time.time() + wait}
        )
        if res and res.get("ok") and self.lead.deferred_why.get(did) != why:
            self.lead.deferred_why[did] = why
            log.warning("decision %s: %s waits: %s", did, app, detail)
            try:
                journal.post(
                    self.kb,
                    journal.DEFERRED,
                    self.node.machine.get(did) or decision,
                    f"{app} waits: {why}; checked again with exponential backoff",
                    fence=self.lead.token,
                )
            except KBError as exc:
                log.info("cannot record that %s waits: %s", did, exc)
