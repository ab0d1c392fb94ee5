"""Starting and finishing runs: one playbook run per batch, its outcomes reported.

- Nothing runs on an uncommitted decision: an attempt's 'start' (which issues its fencing token
  and carries the plan it applies) is committed, and written to the KB, before the playbook
  runs; a batch commits the starts of all its attempts in one log entry, and their outcomes in
  another.
- A run is cancelled as soon as this replica stops being leader of the term that started it;
  its outcome goes to the KB even then, and the next leader takes over its decision.
- A new leader that takes over another leader's running attempt first asks the KB whether the
  attempt already succeeded; if so it records that instead of migrating again (exactly once).
- A hedge's run whose cluster came back while it waits is withdrawn (``withdraw``): stopped, its
  Binding kept as the current placement and the decision ended, so the discard follows at once.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

from qonnect.controller import journal, moves
from qonnect.controller.commits import Commits
from qonnect.controller.config import Config
from qonnect.controller.deciding import Deciding
from qonnect.controller.detector import Snapshot
from qonnect.controller.executor import CANCELLED, SUCCEEDED, Executor, Outcome
from qonnect.controller.leadership import Leadership
from qonnect.controller.raft import RaftNode
from qonnect.controller.state import Lead, Wake
from qonnect.controller.statemachine import Decision
from qonnect.controller.status import Metrics

log = logging.getLogger("qonnect.controller")

Runnable = tuple[Decision, dict[str, Any], dict[str, Any] | None]  # (decision, policy, plan)
Started = tuple[Decision, int, dict[str, int]]  # (decision, attempt, token)
Finished = tuple[Decision, int, dict[str, int], Outcome]  # (decision, attempt, token, outcome)


class Runs:
    """This replica's runs: each a thread running one batch through the executor."""

    def __init__(
        self,
        node: RaftNode,
        kb: KBClient,
        executor: Executor,
        cfg: Config,
        commits: Commits,
        lead: Lead,
        deciding: Deciding,
        leadership: Leadership,
        metrics: Metrics,
        wake: Wake,
    ) -> None:
        self.node = node
        self.kb = kb
        self.executor = executor
        self.cfg = cfg
        self.commits = commits
        self.lead = lead
        self.deciding = deciding
        self.leadership = leadership
        self.metrics = metrics
        self.wake = wake  # a finished run wakes the loop to report it at once
        self.threads: dict[str, threading.Thread] = {}  # decision id -> its run (a batch: one thread)
        # decision id -> (the application's placement before its run, when the run began): history
        self.run_from: dict[str, tuple[dict[str, Any], float]] = {}
        self.finished: queue.Queue[Finished] = queue.Queue()
        self.unreported: list[Finished] = []
        self.withdrawn: dict[str, str] = {}  # decision id -> why its run is stopped (not deposed)

    def live(self) -> int:
        """Playbook runs going on (a batch is one run, whatever its size)."""
        return len({id(t) for t in self.threads.values()})

    def withdraw(self, reasons: dict[str, str]) -> None:
        """Stop the runs of these decisions (id -> why) at their next cancel check."""
        for did, why in reasons.items():
            if did in self.threads and did not in self.withdrawn:
                log.warning("decision %s: %s", did, why)
                self.withdrawn[did] = why

    # -- starting ------------------------------------------------------------------------------

    def launch(self, batch: list[Runnable], snapshot: Snapshot) -> None:
        """Commit the start of each attempt of a planned batch and run those that may run now as
        one playbook run (a batch of one is an ordinary single run), in a thread of its own."""
        started = self._begin(batch)
        if not started:
            return
        term = self.node.term()
        ids = [decision["id"] for decision, _attempt, _token in started]

        def still() -> bool:  # a batch stops when every decision of it is withdrawn
            return self.leadership.still_leader(term) and not all(i in self.withdrawn for i in ids)

        def work() -> None:
            if len(started) == 1:
                decision, attempt, token = started[0]
                outcomes = {decision["id"]: self.executor.run(decision, attempt, token, still)}
            else:
                outcomes = self.executor.run_batch(started, still)
            for decision, attempt, token in started:
                self.finished.put((decision, attempt, token, outcomes[decision["id"]]))
            self.wake.event.set()

        name = f"run-{started[0][0]['id']}" + (f"+{len(started) - 1}" if len(started) > 1 else "")
        thread = threading.Thread(target=work, name=name, daemon=True)
        placed = snapshot.inventory.get("placements") or {}
        for decision, _attempt, _token in started:
            self.threads[decision["id"]] = thread
            self.run_from[decision["id"]] = (dict(placed.get(decision["app"]) or {}), time.time())
        thread.start()

    def _begin(self, batch: list[Runnable]) -> list[Started]:
        """The committed 'start' of each (decision, policy, plan) of a batch, all in one log
        entry (attempt, token, the policy and the plan it applies), and the KB's start events:
        the (decision, attempt, token) of those that may run now."""
        results = self.commits.chunks(
            "many",
            "commands",
            [
                {
                    "op": "start",
                    "id": decision["id"],
                    "max_attempts": self.cfg.max_attempts,
                    **({"policy": policy} if policy else {}),
                    **({"plan": plan} if plan is not None else {}),
                }
                for decision, policy, plan in batch
            ],
        )
        started = []
        for (decision, policy, plan), res in zip(batch, results, strict=True):
            if not res or not res.get("ok"):
                if res:
                    log.info("decision %s: start refused: %s", decision["id"], res.get("why"))
                if res and res.get("status") == "failed":
                    self.deciding.gave_up(decision, str(res.get("why")))
                continue
            attempt, token = res["attempt"], res["token"]
            snapshot = Decision(**self.commits.committed(decision["id"]))  # a copy
            _log_start(decision, snapshot, attempt, policy, plan)
            try:
                journal.post(
                    self.kb,
                    journal.STARTED,
                    snapshot,
                    journal.started_text(snapshot, attempt, self.node.node_id),
                    attempt,
                    token,
                )
            except KBError as exc:
                log.warning(
                    "decision %s: cannot record the start in the KB (%s); retrying later", decision["id"], exc
                )
                self.finish_all(
                    [(snapshot, attempt, Outcome("failed", f"KB unreachable before start: {exc}", "", None))]
                )
                continue
            started.append((snapshot, attempt, token))
        return started

    # -- finishing -----------------------------------------------------------------------------

    def collect_finished(self) -> None:
        """Report the outcome of every run that ended (to the KB, then in the log); outcomes
        that could not commit are reported again on the next pass while this replica leads."""
        pending = self.unreported
        self.unreported = []
        while True:
            try:
                pending.append(self.finished.get_nowait())
            except queue.Empty:
                break
        for i, item in enumerate(pending):
            pending[i] = self._report(item)
        for decision, _attempt, _token, outcome in pending:
            why = self.withdrawn.pop(decision["id"], None)
            if why is not None and outcome.result == CANCELLED and self.node.is_leader():
                moves.adopt_intent(self.kb, decision)
                self.deciding.end(decision, "cancel", why)
        # a cancelled run was deposed (or withdrawn, ended above): the next leader takes over
        ended = [item for item in pending if item[3].result != CANCELLED]
        committed = self.finish_all(
            [(decision, attempt, outcome) for decision, attempt, _token, outcome in ended]
        )
        if self.node.is_leader():
            self.unreported += [item for item, done in zip(ended, committed, strict=True) if not done]

    def _report(self, item: Finished) -> Finished:
        """Tell the KB one run's outcome (superseded if a newer version was stored meanwhile),
        and its moves; returns the item with the outcome as reported."""
        decision, attempt, token, outcome = item
        self.threads.pop(decision["id"], None)
        if outcome.result == CANCELLED and decision["id"] in self.withdrawn:
            outcome = dataclasses.replace(outcome, detail=self.withdrawn[decision["id"]])
            item = (decision, attempt, token, outcome)
        self.metrics.count_migration(outcome.result)
        etype = {SUCCEEDED: journal.SUCCEEDED, CANCELLED: journal.CANCELLED}.get(
            outcome.result, journal.FAILED
        )
        newer = moves.superseding_version(self.kb, decision) if outcome.result != CANCELLED else None
        if newer is not None:  # a newer version was stored meanwhile (issue 34.4): not ours
            etype = journal.MIGRATION_SUPERSEDED
            outcome = moves.superseded(outcome, newer, decision)
            item = (decision, attempt, token, outcome)
        log.warning(
            "decision %s attempt %d %s: %s (artifacts %s)",
            decision["id"],
            attempt,
            outcome.result,
            outcome.detail,
            outcome.artifacts,
        )
        try:  # the truth goes to the KB even if this replica is no longer leader
            journal.post(
                self.kb,
                etype,
                decision,
                f"attempt {attempt} by {self.node.node_id} {outcome.result}: "
                f"{outcome.detail}; artifacts {outcome.artifacts}",
                attempt,
                token,
            )
        except KBError as exc:
            log.warning("cannot report decision %s outcome to the KB: %s", decision["id"], exc)
        before, began = self.run_from.pop(decision["id"], ({}, None))
        if outcome.result != CANCELLED:
            label = moves.SUPERSEDED if newer is not None else outcome.result
            moves.record(self.kb, decision, token, label, outcome.detail, before, began)
        return item

    def finish_all(self, ended: list[tuple[Decision, int, Outcome]]) -> list[bool]:
        """Commit the outcome of each (decision, attempt, outcome), all in one log entry (a
        batch of k applications reports with one commit); per item, whether it was committed."""
        now = time.time()
        results = self.commits.chunks(
            "many",
            "commands",
            [
                {
                    "op": "finish",
                    "id": decision["id"],
                    "attempt": attempt,
                    "result": SUCCEEDED if outcome.result == SUCCEEDED else "failed",
                    "detail": outcome.detail,
                    "artifacts": outcome.artifacts,
                    "retry": outcome.result != SUCCEEDED
                    and attempt < self.cfg.max_attempts
                    and not moves.is_superseded(outcome),
                    "not_before": now + self.cfg.backoff * 2 ** (attempt - 1),
                }
                for decision, attempt, outcome in ended
            ],
        )
        for (decision, attempt, outcome), res in zip(ended, results, strict=True):
            if res is None:
                continue
            detected = decision.get("detected_at")
            if outcome.result == SUCCEEDED and detected:
                self.metrics.observe("recovery_seconds", max(0.0, now - detected))
            if res.get("ok") and res.get("status") == "failed" and not moves.is_superseded(outcome):
                self.deciding.gave_up(decision, f"gave up after {attempt} attempts: {outcome.detail}")
        return [res is not None for res in results]

    def completed_before(self, decision: Decision) -> bool:
        """The previous leader's attempt finished (per the KB): record success instead of rerunning."""
        try:
            done = journal.done_in_kb(self.kb, decision)
        except KBError as exc:
            log.warning(
                "decision %s: cannot check the KB record (%s); not taking over yet", decision["id"], exc
            )
            return True
        if not done:
            return False
        res = self.commits.propose(
            {
                "op": "finish",
                "id": decision["id"],
                "attempt": decision["attempts"],
                "result": SUCCEEDED,
                "detail": f"completed by the previous leader: {done}",
                "artifacts": decision.get("artifacts"),
            }
        )
        if res and res.get("ok"):
            log.warning(
                "decision %s: completed by the previous leader (%s); not migrating again",
                decision["id"],
                done,
            )
            try:
                journal.post(
                    self.kb,
                    journal.SUCCEEDED,
                    decision,
                    f"confirmed after leader change: {done}",
                    decision["attempts"],
                    decision["attempt_token"],
                    fence=self.lead.token,
                )
            except KBError as exc:
                log.info("could not post confirmation for %s: %s", decision["id"], exc)
        return True


def _log_start(
    decision: Decision,
    snapshot: Decision,
    attempt: int,
    policy: dict[str, Any],
    plan: dict[str, Any] | None,
) -> None:
    """Say which stored policy an attempt heals with and which plan it applies."""
    if policy:
        log.warning(
            "decision %s: %s heals with its stored policy %s", decision["id"], snapshot["app"], policy
        )
    if plan is not None:
        log.warning(
            "decision %s attempt %d: committed plan for %s: %s",
            decision["id"],
            attempt,
            snapshot["app"],
            "; ".join(
                f"{svc} -> " + ", ".join(f"{e['cluster']}x{e.get('replicas', 1)}" for e in entries)
                for svc, entries in sorted(plan.items())
            ),
        )
