"""Committing to the replicated decision log: one command, or many in entries of a bounded size.

Nothing the leader does waits on an uncommitted entry: a proposal that does not commit (no
quorum, leadership lost) answers None, says why in the status, and the caller tries again on a
later pass.
"""

from __future__ import annotations

import logging
from typing import Any

from qonnect.controller.raft import ProposalError, RaftNode
from qonnect.controller.state import Why
from qonnect.controller.statemachine import Decision

log = logging.getLogger("qonnect.controller")

# decisions (or observed versions) committed in one Raft entry: a pass over a fleet-wide
# failure commits once per this many applications (each item is about 0.5 KB)
DECISIONS_PER_ENTRY = 100


class Commits:
    """The leader's proposals to its Raft node."""

    def __init__(self, node: RaftNode, timeout: float, why: Why) -> None:
        self.node = node
        self.timeout = timeout  # --commit-timeout
        self.why = why

    def propose(self, cmd: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.node.propose(cmd, self.timeout)
        except ProposalError as exc:
            log.warning("could not commit %s: %s", cmd.get("op"), exc)
            self.why.text = f"no decisions: commit failed ({exc})"
            return None

    def chunks(self, op: str, field: str, items: list[Any], **entry: Any) -> list[dict[str, Any] | None]:
        """Commit ``items`` as ``{op, field: items, **entry}`` entries of up to
        DECISIONS_PER_ENTRY each (decide_many, observe_many, many): per item its result, None
        where its entry did not commit (no quorum, leadership lost: the caller tries again on a
        later pass; nothing more is proposed after it)."""
        results: list[dict[str, Any] | None] = []
        for first in range(0, len(items), DECISIONS_PER_ENTRY):
            chunk = items[first : first + DECISIONS_PER_ENTRY]
            res = self.propose({"op": op, field: chunk, **entry})
            if not res or not res.get("ok"):
                return results + [None] * (len(items) - first)
            got = res.get("results")  # observe_many answers for the whole entry
            results += got if isinstance(got, list) and len(got) == len(chunk) else [res] * len(chunk)
        return results

    def committed(self, decision_id: str) -> Decision:
        """A decision this replica has just committed and applied (only ended decisions are
        ever trimmed from the log, so it is there)."""
        decision = self.node.machine.get(decision_id)
        if decision is None:
            raise LookupError(f"decision {decision_id} was committed but is not in the replicated log")
        return decision
