"""Leadership and fencing: when this replica may act as the leader, and when it may take over
another leader's running attempt.

- Only the leader acts, and only after committing a 'leader' entry in its term: that proves a
  majority accepted it and that its state machine holds every earlier decision.
- By construction, not by timing: a new leader raises the KB's fence to the token of its leader
  entry before it acts, so every older token (placements, controller events, and the fence check
  the migration makes before each cluster-changing step) is refused from then on.
- A run is cancelled as soon as this replica stops being leader of the term that started it
  (``still_leader``), and a new leader takes over another leader's running attempt only after
  that leader's lease ran out (``may_take_over``: it has stepped down and cancelled by then).
"""

from __future__ import annotations

import logging
import threading
import time

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

from qonnect.controller import journal
from qonnect.controller.detector import Memory
from qonnect.controller.raft import ProposalError, RaftNode
from qonnect.controller.state import KBContact, Lead, Wake, Why
from qonnect.controller.statemachine import Decision

log = logging.getLogger("qonnect.controller")


class Leadership:
    """Takes and drops this replica's lead (``Lead``) and answers whether it still holds it."""

    def __init__(
        self,
        node: RaftNode,
        kb: KBClient,
        lead: Lead,
        contact: KBContact,
        why: Why,
        wake: Wake,
        stop: threading.Event,
        commit_timeout: float,
        stable_seconds: float,
        lease_wait: float,
    ) -> None:
        self.node = node
        self.kb = kb
        self.lead = lead
        self.contact = contact
        self.why = why
        self.wake = wake
        self.stop = stop
        self.commit_timeout = commit_timeout
        self.stable_seconds = stable_seconds  # the detector's stabilisation window
        # a deposed leader stops within leader_fallback (+ a tick and the runner's cancel poll)
        self.lease_wait = lease_wait

    def take_lead(self, term: int) -> bool:
        """Commit a 'leader' entry (proves a majority, brings the state machine up to date), then
        raise the KB's fence to its token before acting: older leaders' writes are refused."""
        try:  # tokens must stay above what the KB holds, even if every replica lost its log
            floor = journal.kb_floor(
                self.kb.request("GET", "/api/v1/placements")["placements"], journal.fence(self.kb)[0]
            )
        except KBError as exc:
            self.contact.heard(False, exc)
            self.why.text = f"elected leader of term {term}, but no decisions: cannot read the KB ({exc})"
            return False
        try:
            res = self.node.propose({"op": "leader", "kb_floor": floor}, self.commit_timeout)
        except ProposalError as exc:
            self.why.text = (
                f"elected leader of term {term} but no decisions: {exc} (no majority acknowledges it)"
            )
            return False
        if not res.get("ok"):
            self.why.text = f"leader entry refused: {res.get('why')}"
            return False
        token = res["token"]
        try:
            fence = journal.raise_fence(self.kb, token)
        except KBError as exc:
            self.why.text = (
                f"elected leader of term {term}, but no decisions: cannot raise the KB fence ({exc})"
            )
            log.warning("leader of term %d: cannot raise the KB fence to %s: %s", term, token, exc)
            return False
        if (fence["term"], fence["seq"]) != (token["term"], token["seq"]):
            self.why.text = f"leader entry's token {token} is older than the KB fence {fence}"
            return False
        log.warning("became leader of term %d; KB fence raised to %s/%s", term, token["term"], token["seq"])
        lead = self.lead
        lead.term, lead.since, lead.reconciled = term, time.monotonic(), False
        lead.token = dict(token)
        lead.memory = Memory()
        try:  # what recovered when, as the previous leaders saw it: the same stabilisation window
            journal.seed_memory(
                lead.memory,
                journal.recovered_in_kb(self.kb, time.time(), self.stable_seconds),
            )
        except KBError as exc:
            log.warning("leader of term %d: cannot read recent recoveries from the KB: %s", term, exc)
        lead.deferred_why = {}
        return True

    def follow(self) -> None:
        """This replica is not the leader (any more)."""
        if self.lead.term is not None:
            log.warning("no longer leader of term %d", self.lead.term)
        self.lead.term = None

    def still_leader(self, term: int) -> bool:
        return self.node.is_leader() and self.node.term() == term and not self.stop.is_set()

    def may_take_over(self, decision: Decision) -> bool:
        """A running attempt may be taken over: not our own, and its leader's lease is over."""
        if decision["owner"] == self.node.node_id and decision["attempt_term"] == self.node.term():
            return False  # our own run: its outcome is being reported
        waited = time.monotonic() - self.lead.since
        if waited < self.lease_wait:
            # take over the moment the lease ends, not up to a tick later
            self.wake.at = self.lead.since + self.lease_wait
            log.info(
                "decision %s: waiting %.1fs for the previous leader's lease before taking over",
                decision["id"],
                self.lease_wait - waited,
            )
            return False
        return True


def follower_why(node: RaftNode) -> str:
    """Why a follower makes no decisions: no quorum, an election, or another replica leads."""
    peers = node.peer_status()
    total = len(peers) + 1
    reach = 1 + sum(peers.values())
    need = total // 2 + 1
    leader = node.leader()
    if reach < need:
        gone = ", ".join(p for p, ok in sorted(peers.items()) if not ok)
        return (
            f"no decisions: no quorum - this replica reaches {reach} of {total} replicas "
            f"(unreachable: {gone}); a decision must be committed by a majority of {need}"
        )
    if leader is None:
        return "no decisions yet: election in progress"
    return f"follower: {leader} is the leader and makes the decisions"
